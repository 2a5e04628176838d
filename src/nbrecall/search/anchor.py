"""Which cell of a multi-cell chunk a hit points at: the one that shares most query words (retrieval and the
family step, which looks for what another version's best cell holds, both choose it this way)."""

from __future__ import annotations

from typing import Any

from nbrecall.index.terms import query_terms
from nbrecall.records import CellRecord


def _cell_overlap(cell: CellRecord, terms: set[str]) -> int:
    words = query_terms(cell.source + "\n" + cell.outputs)
    return len(terms & words)


def pick_anchor(row: dict[str, Any], cells: dict[int, CellRecord], terms: set[str]) -> tuple[int, list[int]]:
    """Within a multi-cell chunk, point at the cell that shares most query words; that cell comes first."""
    covered = list(row["cells"])
    anchor = row["anchor"]
    if len(covered) > 1 and cells:
        scored = [
            (_cell_overlap(cells[i], terms), cells[i].cell_type == "code", -abs(i - anchor), i)
            for i in covered
            if i in cells
        ]
        if scored:
            anchor = max(scored)[3]
    ordered = [anchor] + sorted((i for i in covered if i != anchor), key=lambda i: abs(i - anchor))
    return anchor, ordered
