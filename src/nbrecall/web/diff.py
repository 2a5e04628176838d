"""What differs between two versions of a notebook, cell by cell (the viewer's `/nb/<a>/diff/<b>`).

nbdime decides which cells of the two versions correspond (its notebook diff matches cells by content, so an
inserted or deleted cell does not make every later cell look changed); within a changed pair, the lines of its
source and of its outputs are compared with difflib. Both sides are what the index holds (sources and the filtered
output text of `Manifest.cells`), so the diff needs no file and shows what search sees. Everything is shown as
escaped text: nothing of either notebook is rendered as HTML. Runs in a render process within its budget
(`web.heavy`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from nbrecall.records import CellRecord

MAX_LINES = 4000  # diff lines shown on one page; the rest is counted


@dataclass
class CellPair:
    """One row of the diff: a cell of each side (None where it was added or removed)."""

    status: str  # "same", "changed", "added", "removed"
    a: CellRecord | None = None
    b: CellRecord | None = None
    source: list[tuple[str, str]] = field(default_factory=list)  # (" ", "-", "+", line)
    outputs: list[tuple[str, str]] = field(default_factory=list)

    @property
    def old(self) -> CellRecord:
        """The left cell, of a row that has one (every status but "added")."""
        if self.a is None:
            raise ValueError(f"a diff row '{self.status}' without a left cell")
        return self.a

    @property
    def new(self) -> CellRecord:
        """The right cell, of a row that has one (every status but "removed")."""
        if self.b is None:
            raise ValueError(f"a diff row '{self.status}' without a right cell")
        return self.b


def _as_notebook(cells: list[CellRecord], side: str, keep: bool) -> Any:
    """A notebook of the indexed cells, with their ids (`keep`) or ids of this side's own."""
    from nbformat import v4

    ids = [str(c.cell_id or "") for c in cells]
    nb = v4.new_notebook()
    for i, cell in enumerate(cells):
        if cell.cell_type == "code":
            outputs = [v4.new_output("stream", name="stdout", text=cell.outputs)] if cell.outputs else []
            new = v4.new_code_cell(cell.source, outputs=outputs)
        elif cell.cell_type == "markdown":
            new = v4.new_markdown_cell(cell.source)
        else:
            new = v4.new_raw_cell(cell.source)
        new["id"] = ids[i] if keep else f"{side}{i}"
        nb.cells.append(new)
    return nb


def _lines(a: str, b: str) -> list[tuple[str, str]]:
    left, right = a.splitlines(), b.splitlines()
    out: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, left, right, autojunk=False).get_opcodes():
        if tag == "equal":
            out.extend((" ", line) for line in left[i1:i2])
        else:
            out.extend(("-", line) for line in left[i1:i2])
            out.extend(("+", line) for line in right[j1:j2])
    return out


def pair_cells(a: list[CellRecord], b: list[CellRecord]) -> list[CellPair]:
    """The cells of `a` and `b` in order, paired as nbdime's notebook diff pairs them."""
    from nbdime import diff_notebooks

    # A re-saved version keeps its cells' ids: nbdime then pairs cells by id. Two copies saved apart have ids of
    # their own: then no id is kept, and nbdime pairs cells by content.
    ids_a, ids_b = [c.cell_id for c in a], [c.cell_id for c in b]
    unique = all(ids_a + ids_b) and len(set(ids_a)) == len(ids_a) and len(set(ids_b)) == len(ids_b)
    keep = unique and len(set(ids_a) & set(ids_b)) * 2 >= min(len(ids_a), len(ids_b))
    diff = diff_notebooks(_as_notebook(a, "a", keep), _as_notebook(b, "b", keep))
    ops: list[dict[str, Any]] = next((d["diff"] for d in diff if d["op"] == "patch" and d["key"] == "cells"), [])
    added: dict[int, list[Any]] = {}  # nbdime's added cells: only counted, the rows take them from `b`
    removed: set[int] = set()
    patched: dict[int, list[dict[str, Any]]] = {}
    for op in ops:
        key = int(op["key"])
        if op["op"] == "addrange":
            added.setdefault(key, []).extend(op["valuelist"])
        elif op["op"] == "removerange":
            removed.update(range(key, key + int(op["length"])))
        elif op["op"] == "patch":
            patched[key] = op["diff"]
    rows: list[CellPair] = []
    j = 0
    for i in range(len(a) + 1):
        for _ in added.get(i, []):
            rows.append(CellPair("added", b=b[j]))
            j += 1
        if i == len(a):
            break
        if i in removed:
            rows.append(CellPair("removed", a=a[i]))
            continue
        left, right = a[i], b[j]
        j += 1
        changed = {d["key"] for d in patched.get(i, [])} & {"source", "outputs", "cell_type"}  # not ids
        if not changed and left.cell_type == right.cell_type:
            rows.append(CellPair("same", a=left, b=right))
            continue
        rows.append(_changed(left, right))
    return _replacements(rows)


def _changed(left: CellRecord, right: CellRecord) -> CellPair:
    return CellPair("changed", a=left, b=right, source=_lines(left.source, right.source),
                    outputs=_lines(left.outputs, right.outputs) if left.outputs != right.outputs else [])


def _replacements(rows: list[CellPair]) -> list[CellPair]:
    """A cell removed where one of its type was added (nbdime found them too different to pair, a short cell
    whose one line changed) is shown as that cell changed, line by line."""
    out: list[CellPair] = []
    for row in rows:
        last = out[-1] if out else None
        if last is not None and {last.status, row.status} == {"added", "removed"}:
            old, new = (last.old, row.new) if last.status == "removed" else (row.old, last.new)
            if old.cell_type == new.cell_type:
                out[-1] = _changed(old, new)
                continue
        out.append(row)
    return out


def render_diff(a: list[CellRecord], b: list[CellRecord]) -> dict[str, Any]:
    """The diff as escaped HTML and its counts (`same`, `changed`, `added`, `removed` cells)."""
    rows = pair_cells(a, b)
    counts = {status: sum(1 for r in rows if r.status == status) for status in ("changed", "added", "removed", "same")}
    parts: list[str] = []
    budget = MAX_LINES
    truncated = False
    same_run: list[CellPair] = []

    def flush() -> None:
        if same_run:
            first, last = same_run[0], same_run[-1]
            where = f"[{first.old.idx}]" if len(same_run) == 1 else f"[{first.old.idx}]–[{last.old.idx}]"
            parts.append(f'<p class="diff-same">{len(same_run)} unchanged cell{"s" if len(same_run) > 1 else ""} '
                         f'{escape(where)}</p>')
            same_run.clear()

    for row in rows:
        if row.status == "same":
            same_run.append(row)
            continue
        flush()
        left = f"[{row.a.idx}]" if row.a is not None else "—"
        right = f"[{row.b.idx}]" if row.b is not None else "—"
        kind = (row.new if row.b is not None else row.old).cell_type
        parts.append(f'<section class="diff-cell diff-{row.status}"><div class="diff-head">'
                     f'<span class="badge diff-{row.status}">{row.status}</span> cell {escape(left)} → '
                     f'{escape(right)} <span class="meta">{escape(kind)}</span></div>')
        if row.status == "changed":
            blocks = [("source", row.source), ("outputs", row.outputs)]
        else:
            cell = row.new if row.status == "added" else row.old
            mark = "+" if row.status == "added" else "-"
            blocks = [("source", [(mark, line) for line in cell.source.splitlines()]),
                      ("outputs", [(mark, line) for line in cell.outputs.splitlines()])]
        for label, lines in blocks:
            if not lines:
                continue
            shown = lines[: max(0, budget)]
            budget -= len(shown)
            truncated = truncated or len(shown) < len(lines)
            body = "\n".join(_line(mark, text) for mark, text in shown)
            more = f'\n<span class="diff-more">… {len(lines) - len(shown)} more lines</span>' if len(
                shown) < len(lines) else ""
            parts.append(f'<div class="diff-label">{label}</div><pre class="diff-lines">{body}{more}</pre>')
        parts.append("</section>")
    flush()
    return {"html": "".join(parts), "counts": counts, "truncated": truncated}


def _line(mark: str, text: str) -> str:
    css = {"+": "diff-add", "-": "diff-del"}.get(mark, "diff-ctx")
    return f'<span class="{css}">{escape(mark)} {escape(text)}</span>'


def safe(html: str) -> Markup:
    """The worker's diff HTML for the template: built only from escaped text and fixed tags (above)."""
    return Markup(html)
