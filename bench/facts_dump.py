"""Every value fact of the notebooks under the given folders, one JSON line each, as the indexer extracts them.

Why: a change to the fact reader (`notebook/facts.py`, `printed.py`, `reprs.py`, `printing.py`) is either meant
to change facts, and the diff of two dumps shows which, or meant not to (a refactor), and the two dumps must be
byte-identical. The notebooks are read, analysed and rendered by the same functions `ingest/build.py` calls
(without re-rendered outputs: the notebooks' own outputs), in path order.

    PYTHONPATH=<checkout A>/src .venv/bin/python bench/facts_dump.py /tmp/a.jsonl ../shared/eval2/corpus
    PYTHONPATH=<checkout B>/src .venv/bin/python bench/facts_dump.py /tmp/b.jsonl ../shared/eval2/corpus
    cmp /tmp/a.jsonl /tmp/b.jsonl
"""

from __future__ import annotations

import argparse
import json
import warnings
from dataclasses import asdict
from pathlib import Path

from nbrecall.config import load_settings
from nbrecall.ingest.chunk import heading_paths, render_cells
from nbrecall.notebook.analysis import analyse
from nbrecall.notebook.facts import extract_facts
from nbrecall.notebook.outputs import OutputLimits
from nbrecall.notebook.read import NotebookUnreadable, read_notebook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the JSON-lines file to write")
    parser.add_argument("roots", type=Path, nargs="+", help="folders whose .ipynb files are read")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # nbformat's validation warnings: the indexer reads these notebooks too
    limits = OutputLimits(max_chars=load_settings(None, env={}).chunk.max_output_chars)
    n = unreadable = 0
    with args.out.open("w", encoding="utf-8") as out:
        for root in args.roots:
            for path in sorted(root.rglob("*.ipynb")):
                try:
                    nb = read_notebook(path, display_path=str(path))
                except NotebookUnreadable as exc:
                    out.write(json.dumps({"notebook": str(path), "unreadable": str(exc)}) + "\n")
                    unreadable += 1
                    continue
                analysis = analyse(nb)
                rendered = render_cells(nb, limits, analysis.trees)
                for fact in extract_facts(nb, rendered, headings=heading_paths(nb), trees=analysis.trees):
                    out.write(json.dumps({"notebook": str(path), **asdict(fact)}, sort_keys=True) + "\n")
                    n += 1
    print(f"{n} facts, {unreadable} notebooks unreadable → {args.out}")


if __name__ == "__main__":
    main()
