"""Compare a notebook's stored outputs with a fresh run's, cell by cell, by content before rendering.

Per code cell: `same`, `changed` (outputs differ), `failed` (the fresh run raised where the original did not, hit
a limit, or never reached the cell) or `new` (the original had no output, the fresh run has some). Every cell
that is not exactly the same also gets a class (`change`), so that drift means something:

- `values`: the same text with other numbers (beyond the tolerance);  `text`: other text;  `figure`: a figure
  that looks different;  `error`: another exception (or one that appeared or went away);
- `format`: the same content in another rendering (a LaTeX result drawn as another PNG, sympy's pretty printer
  wrapping at another width, `np.float64(0.0)` for `0.0`, a plot at another size or DPI): status `same`;
- `random`: a values/figure/text change in a cell whose result depends on random numbers drawn without a seed
  (in it or in a cell it uses): status `changed`, but it does not make the notebook `changed`.

Per notebook: `fresh` (no cell changed or failed), `changed` (ran to the end, some cells differ) or `stale` with a
reason: `missing file`, `import error: <module>`, `timeout`, `memory`, `kernel died`, `no network`,
`python 2 syntax`, `error: <ExceptionName>`, `sandbox unavailable`, `kernel not available: <language>`, ...

Normalisation before comparing (both sides): terminal escapes removed, `\\r` redraws collapsed, `0x…` addresses,
uuids, date-times, timing lines (`%time`, `%timeit`, progress-bar clocks) and cell file names
(`<ipython-input-3-…>`) replaced by placeholders, trailing spaces dropped, runs of spaces collapsed; execution
counts, metadata and tracebacks ignored (errors compare by `ename: evalue`); stderr streams are ignored unless
asked (warnings are not results); numbers compare with a relative tolerance (1e-6 by default).

A rich output compares by content: when both sides carry a semantic representation (`text/latex`,
`text/markdown`, `application/json`, an HTML table, `text/plain` that is not an object repr) that decides, never
the image drawn from it; matplotlib SVG figures compare by the data they plot (`svgplot.py`), other figures
perceptually (`images.py`: scale-normalised SSIM). Object
reprs (`<… at 0x…>`, `<Axes: …>`, matplotlib `Text(…)`) compare equal to each other: they name objects, not
results. Text that differs only in rendering is `format`: pretty-printed pictures are unwrapped (sympy's `↪`
screens), numpy 2 scalar reprs unwrapped, `[…]`/`(…)` and line breaks ignored, and, unless the notebook sets a
display precision itself, a number printed with fewer digits matches one it rounds (`0.333333` ~ `0.33333333`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from nbrecall.notebook.model import Notebook
from nbrecall.render.outcome import Execution, classify, classify_error
from nbrecall.render.output_items import OutputItem, cell_verdict, comparable, diff_text, outputs_equal
from nbrecall.render.source_signals import sets_display_precision, unseeded_random_cells
from nbrecall.render.text_compare import CompareOptions, normalise_text

CELL_STATUSES = ("same", "changed", "failed", "new")
NOTEBOOK_STATUSES = ("fresh", "changed", "stale")
CHANGE_CLASSES = ("values", "text", "figure", "error", "random", "format")
RESULT_CLASSES = ("values", "text", "figure", "error")  # what makes a notebook `changed` and lights a badge


@dataclass
class CellComparison:
    """One code cell: its status and a short detail (the fresh error, or a diff of normalised text)."""

    index: int
    id: str
    status: str
    detail: str = ""
    change: str = ""  # one of CHANGE_CLASSES when not exactly the same; "" for same, failed, new


@dataclass
class RenderResult:
    """The outcome of re-rendering one notebook; `to_dict` / `from_dict` give the stored JSON form."""

    path: str
    sha256: str
    status: str
    reason: str = ""
    cells: list[CellComparison] = field(default_factory=list)
    paths: dict[str, Any] = field(default_factory=dict)  # PathScan.to_dict()
    execution: dict[str, Any] = field(default_factory=dict)  # outcome.describe()
    notes: list[str] = field(default_factory=list)
    rendered_at: str = ""
    environment: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(CELL_STATUSES, 0)
        for c in self.cells:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    def changes(self) -> dict[str, int]:
        """Cells by change class (`format` cells are `same`, `random` ones `changed`)."""
        out = dict.fromkeys(CHANGE_CLASSES, 0)
        for c in self.cells:
            if c.change:
                out[c.change] = out.get(c.change, 0) + 1
        return out

    def result_changed(self) -> int:
        """How many cells changed in their result (values, text, figure, error)."""
        return sum(1 for c in self.cells if c.status == "changed" and c.change in RESULT_CLASSES + ("",))

    def cell(self, cell_id: str) -> CellComparison | None:
        return next((c for c in self.cells if c.id == cell_id), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["counts"] = self.counts()
        data["changes"] = self.changes()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RenderResult:
        data = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        data["cells"] = [CellComparison(**c) for c in data.get("cells", [])]
        return cls(**data)


# ---------------------------------------------------------------------------------------------------------------
# Comparing a notebook


def compare_notebook(
    original: Notebook, fresh: Notebook, execution: Execution, options: CompareOptions | None = None
) -> RenderResult:
    """Per-cell and notebook status of `fresh` (the executed copy, read back) against `original`.

    Cells are matched by position (the executed copy is built from the original, so ids and order agree).
    A fresh error where the original had none fails the cell (the notebook is stale); another error where the
    original had one too is a change of class `error`.
    """
    options = options or CompareOptions()
    if options.precision_tolerant and sets_display_precision(original):
        options = dataclasses.replace(options, precision_tolerant=False)
    random_cells: set[int] | None = None
    errors = {e.index: e for e in execution.errors}
    stopped = set(execution.not_run)
    cells: list[CellComparison] = []
    first_failed: int | None = None
    for cell in original.code_cells:
        fresh_cell = fresh.cells[cell.index] if cell.index < len(fresh.cells) else None
        if not cell.source.strip():
            continue
        orig_items = comparable(cell.outputs, options)
        new_items = comparable(fresh_cell.outputs, options) if fresh_cell is not None else []
        error = errors.get(cell.index)
        change = ""
        if cell.index in stopped or fresh_cell is None:
            status, detail = "failed", "not run (the run stopped earlier)"
        elif error is not None and _fails(error, orig_items):
            status, detail = "failed", f"{error.ename}: {error.evalue}"[:500]
        elif outputs_equal(orig_items, new_items, options):
            status, detail = "same", ""
        elif not orig_items:
            status, detail = "new", ""
        else:
            change, notes = cell_verdict(orig_items, new_items, options)
            if change == "same":
                status, detail, change = "same", "", ""
            elif change == "format":
                status, detail = "same", _detail(notes, orig_items, new_items, 8)
            else:
                if change in ("values", "figure", "text"):
                    if random_cells is None:
                        random_cells = unseeded_random_cells(original)
                    if cell.index in random_cells:
                        change = "random"
                        notes = ["draws random numbers without a seed: its result cannot reproduce", *notes]
                status, detail = "changed", _detail(notes, orig_items, new_items)
        if status == "failed" and first_failed is None:
            first_failed = cell.index
        cells.append(CellComparison(cell.index, cell.id, status, detail, change))
    if first_failed is not None:
        status = "stale"
        reason = _reason_at(first_failed, original, execution)
    elif execution.kernel_died or execution.notebook_timeout:
        status, reason = "stale", classify(execution) or "kernel died"
    elif any(c.status == "changed" and c.change != "random" for c in cells):
        status, reason = "changed", ""
    else:
        status, reason = "fresh", ""
    return RenderResult(path=original.path, sha256=original.sha256, status=status, reason=reason, cells=cells)


_ENVIRONMENT_REASONS = ("import error", "missing file", "memory", "timeout", "no network")


def _fails(error: Any, original: list[OutputItem]) -> bool:
    """A fresh error fails its cell unless the original had an error there too; then only when it is a
    problem of the render environment (a missing module or file, a limit) and not the original's own error."""
    before = [i.text for i in original if i.kind == "error"]
    if not before:
        return True
    text = normalise_text(f"{error.ename}: {error.evalue}")
    return text not in before and classify_error(error.ename, error.evalue).startswith(_ENVIRONMENT_REASONS)


def _detail(notes: list[str], original: list[OutputItem], fresh: list[OutputItem], max_lines: int = 24) -> str:
    head = "; ".join(dict.fromkeys(notes))
    diff = diff_text(original, fresh, max_lines)
    return f"{head}\n{diff}" if head and diff else head or diff


def _reason_at(index: int, original: Notebook, execution: Execution) -> str:
    error = next((e for e in execution.errors if e.index == index), None)
    if error is None:
        return classify(execution) or ("timeout" if execution.notebook_timeout else "kernel died")
    if error.ename == "DeadKernelError":
        later = Execution(notebook=None, errors=[], kernel_died=True, exit_code=execution.exit_code,
                          stderr=execution.stderr)
        return classify(later)
    if error.ename == "SyntaxError" and (_python2(original) or "Missing parentheses in call to" in error.evalue):
        return "python 2 syntax"
    return classify_error(error.ename, error.evalue, error.library)


def _python2(nb: Notebook) -> bool:
    return nb.kernel_name == "python2" or nb.language_version.startswith("2.")


def stale_result(nb_path: str, sha256: str, reason: str, notes: list[str] | None = None) -> RenderResult:
    """A notebook that could not be run at all (sandbox unavailable, unreadable, another language)."""
    return RenderResult(path=nb_path, sha256=sha256, status="stale", reason=reason, notes=list(notes or []))
