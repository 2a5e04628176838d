"""Re-rendering (architecture §11): run notebooks again in a sandbox and say which outputs still reproduce.

- `sandbox.execute_notebook(nb, SandboxSpec)` → `Execution`: nbclient + IPython kernel inside bubblewrap.
- `paths.parse_rules`, `paths.scan_notebook`: Windows/UNC/POSIX path rules and the static path report.
- `compare.compare_notebook(original, fresh, execution)` → `RenderResult` (per-cell and notebook status).
- `run.render_notebook`, `run.render_many`, `run.write_render` / `load_render` / `load_fresh_notebook`:
  the stage as a whole and its stored form `<out>/<sha256>.json` + `.ipynb`.
- `report.write_report`: the drift report.
"""

from nbrecall.render.compare import CELL_STATUSES, NOTEBOOK_STATUSES, CellComparison, RenderResult

__all__ = ["CELL_STATUSES", "NOTEBOOK_STATUSES", "CellComparison", "RenderResult"]
