"""What treating imports as ambient does to dependency hints, on the corpus notebooks with the most cells.

Why: a notebook imports numpy in cell 1 and uses `np` in nearly every cell, so with imports counted as
definitions nearly every cell gets an edge back to the import cell, and every cell that uses a name imported
further down gets a warning. `analyse(nb)` (the default, used by `nbrecall convert`) lists imported names once
as ambient; `analyse(nb, imports_as_edges=True)` counts them like any other definition. This prints cells,
dependency edges (cell pairs, and the names they carry) and dependency warnings for both, for the N notebooks
with the most cells.

Run from the repo root:  .venv/bin/python bench/deps_imports.py [--corpus ../shared/corpus] [--n 5]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from nbrecall.notebook.analysis import Analysis, analyse
from nbrecall.notebook.model import Notebook
from nbrecall.notebook.read import NotebookUnreadable, read_notebook_bytes


def _load(corpus: Path) -> list[Notebook]:
    notebooks = []
    for path in sorted(corpus.rglob("*.ipynb")):
        try:
            notebooks.append(read_notebook_bytes(path.read_bytes(), path.relative_to(corpus).as_posix()))
        except NotebookUnreadable:
            continue
    return notebooks


def _figures(analysis: Analysis) -> tuple[int, int, int, int]:
    names = sum(len(e.names) for e in analysis.edges)
    return len(analysis.edges), names, len(analysis.warnings), len(analysis.ambient)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("../shared/corpus"))
    parser.add_argument("--n", type=int, default=5)
    args = parser.parse_args()
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}", file=sys.stderr)
        return 2
    notebooks = _load(args.corpus)
    chosen = sorted(notebooks, key=lambda nb: (-len(nb.cells), nb.path))[: args.n]
    print(f"{len(notebooks)} readable notebooks in {args.corpus}; the {len(chosen)} with most cells")
    print("edges = (defining cell, using cell) pairs; names = names carried by those edges; "
          "warn = dependency warnings")
    print()
    head = (f"{'cells':>5} {'code':>5} | {'edges':>5} {'names':>6} {'warn':>5} | "
            f"{'edges':>5} {'names':>6} {'warn':>5} {'ambient':>7} | notebook")
    print(f"{'':11} | {'imports as edges':^18} | {'imports ambient (default)':^26} |")
    print(head)
    print("-" * len(head))
    totals = [0] * 9
    for nb in chosen:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # compile() warns on invalid escapes in old notebook code
            as_edges = _figures(analyse(nb, imports_as_edges=True))
            ambient = _figures(analyse(nb))
        code = len(nb.code_cells)
        row = [len(nb.cells), code, *as_edges[:3], *ambient]
        totals = [t + v for t, v in zip(totals, row, strict=True)]
        print(f"{row[0]:>5} {row[1]:>5} | {row[2]:>5} {row[3]:>6} {row[4]:>5} | "
              f"{row[5]:>5} {row[6]:>6} {row[7]:>5} {row[8]:>7} | {nb.path}")
    print("-" * len(head))
    print(f"{totals[0]:>5} {totals[1]:>5} | {totals[2]:>5} {totals[3]:>6} {totals[4]:>5} | "
          f"{totals[5]:>5} {totals[6]:>6} {totals[7]:>5} {'':>7} | total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
