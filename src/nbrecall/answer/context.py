"""The LLM context of a question (architecture §9): the top notebooks' neighbourhoods in the LLM-addressable form.

Each notebook block starts with ``# Notebook: PATH · year · project`` and holds its cells under the headers of the
conversion (``## Cell [8] · type:code · In[5] · id:…``), sources fenced, outputs as text. The whole context stays
inside a cl100k token budget: best notebook first, whole cells dropped when they do not fit; a source is cut only
when one cell alone is larger than the budget, and then says ``[… truncated for the context budget …]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from nbrecall.answer.types import Citation
from nbrecall.convert.markdown import cell_header, fenced
from nbrecall.convert.tokens import count_llm_tokens
from nbrecall.records import CellRecord
from nbrecall.search.retrieve import NotebookResult, SearchResult

TRUNCATED = "[… truncated for the context budget …]"
DEFAULT_BUDGET = 3000
_MIN_PARTIAL = 120  # tokens: below this a cut-down cell says too little to be worth sending


@dataclass
class ContextCell:
    """A cell that is in the context, with the notebook it belongs to."""

    notebook: str
    nb_sha: str
    cell: int
    cell_id: str
    cell_type: str
    truncated: bool = False

    def citation(self) -> Citation:
        return Citation(self.notebook, self.cell, self.cell_id, self.nb_sha)


@dataclass
class Context:
    """The text sent to the model, the cells it holds (the only citable ones) and its size."""

    text: str
    cells: list[ContextCell] = field(default_factory=list)
    tokens: int = 0
    budget: int = DEFAULT_BUDGET
    dropped: int = 0  # candidate cells left out for the budget
    redacted: list[str] = field(default_factory=list)  # kinds of credentials replaced in `text` (`answer.redact`)

    def citable(self) -> dict[tuple[str, int], ContextCell]:
        return {(c.notebook, c.cell): c for c in self.cells}

    @property
    def notebooks(self) -> list[str]:
        seen: dict[str, None] = {}
        for c in self.cells:
            seen.setdefault(c.notebook, None)
        return list(seen)


def notebook_heading(nb: NotebookResult) -> str:
    """`# Notebook: PATH · 2017 · project 17-042` (year and project only when known)."""
    parts = [f"# Notebook: {nb.notebook}"]
    hit = nb.hits[0] if nb.hits else None
    if hit is not None and hit.year:
        parts.append(str(hit.year))
    if hit is not None and hit.project:
        parts.append(f"project {hit.project}")
    if hit is not None and hit.deprecated:
        parts.append("DEPRECATED")
    if hit is not None and hit.stale:
        parts.append("stale")
    return " · ".join(parts)


def record_header(cell: CellRecord) -> str:
    """The addressable header of the conversion (`cell_header`), for a manifest cell record."""
    view = SimpleNamespace(
        index=cell.idx,
        cell_type=cell.cell_type,
        is_code=cell.cell_type == "code",
        execution_count=cell.execution_count,
        id=cell.cell_id,
    )
    return cell_header(view)  # type: ignore[arg-type]


def render_cell(cell: CellRecord, source: str | None = None, outputs: str | None = None) -> str:
    """One cell in the LLM-addressable form: header, source (fenced unless markdown), outputs fenced as text."""
    source = cell.source if source is None else source
    outputs = cell.outputs if outputs is None else outputs
    parts = [record_header(cell)]
    if cell.cell_type == "markdown":
        parts.append(source.strip() or "*(empty)*")
    elif cell.cell_type == "code":
        parts.append(fenced(source, "python") if source.strip() else "*(empty code cell)*")
    else:
        parts.append(fenced(source, "text"))
    if outputs.strip():
        parts.append("*output:*\n" + fenced(outputs.rstrip("\n"), "text"))
    return "\n".join(parts)


def _cut_to(text: str, tokens: int) -> str:
    """The longest head of `text` (whole lines when possible) of at most `tokens` tokens."""
    if count_llm_tokens(text) <= tokens:
        return text
    low, high = 0, len(text)
    while low < high:  # binary search on characters: token counts grow with length
        mid = (low + high + 1) // 2
        if count_llm_tokens(text[:mid]) <= tokens:
            low = mid
        else:
            high = mid - 1
    head = text[:low]
    newline = head.rfind("\n")
    return head[: newline + 1] if newline > len(head) // 2 else head


def render_cell_within(cell: CellRecord, tokens: int) -> tuple[str, bool]:
    """Render `cell` in at most `tokens` tokens: outputs are cut first, then the source, each marked."""
    full = render_cell(cell)
    if count_llm_tokens(full) <= tokens:
        return full, False
    marker_cost = count_llm_tokens(TRUNCATED) + 4
    without_outputs = render_cell(cell, outputs="")
    room = tokens - count_llm_tokens(without_outputs) - marker_cost - 12
    if cell.outputs.strip() and room > 0:
        kept = _cut_to(cell.outputs, room).rstrip("\n")
        text = render_cell(cell, outputs=f"{kept}\n{TRUNCATED}")
        if count_llm_tokens(text) <= tokens:
            return text, True
    room = tokens - count_llm_tokens(render_cell(cell, source="", outputs="")) - 2 * marker_cost - 8
    kept = _cut_to(cell.source, max(room, 0)).rstrip("\n")
    outputs = TRUNCATED if cell.outputs.strip() else ""
    text = render_cell(cell, source=f"{kept}\n{TRUNCATED}", outputs=outputs)
    while count_llm_tokens(text) > tokens and kept:
        kept = kept[: int(len(kept) * 0.9)]
        text = render_cell(cell, source=f"{kept}\n{TRUNCATED}", outputs=outputs)
    return text, True


def _candidates(result: SearchResult, max_notebooks: int) -> list[tuple[NotebookResult, CellRecord]]:
    """Cells in the order they earn a place: each top notebook's neighbourhood (its matching cell first, then the
    heading above and the cells after), best notebook first."""
    picked: list[tuple[NotebookResult, CellRecord]] = []
    for nb in result.notebooks[:max_notebooks]:
        anchor = nb.hits[0].cell if nb.hits else None
        cells = sorted(nb.neighbourhood, key=lambda c: (c.idx != anchor, c.idx))  # the matching cell first
        picked.extend((nb, cell) for cell in cells)
    return picked


@dataclass
class ContextValue:
    """A value fact for the context's value list: as printed, and the cell it is in."""

    shown: str
    notebook: str
    nb_sha: str
    cell: int
    cell_id: str
    heading: str = ""

    def place(self) -> str:
        """`Cell n (section)`: the section is the last part of the heading path; the whole path on every line
        would leave room for fewer values (measured: bench/README.md, issue 13)."""
        section = self.heading.rsplit(" › ", 1)[-1].strip()
        return f"Cell {self.cell}" + (f" ({section})" if section else "")


VALUES_HEADING = "# Values printed in these notebooks (best match first; cite each as [PATH › Cell n])"
VALUES_SHARE = 0.2  # of the budget, at most, for the value list: the cells are what the model reads
VALUES_PER_CELL = 4  # values of one cell on its line, at most


def _render_values(lines: list[list[ContextValue]]) -> str:
    """The value list: under each notebook's path (written once: a path can cost more tokens than three values),
    one line per cell; notebooks in the order of their best value, a notebook's cells in the order of theirs."""
    by_notebook: dict[str, list[list[ContextValue]]] = {}
    for group in lines:
        by_notebook.setdefault(group[0].notebook, []).append(group)
    rows = [VALUES_HEADING]
    for notebook, groups in by_notebook.items():
        rows.append(f"## {notebook}")
        rows.extend(f"- {group[0].place()}: " + "; ".join(v.shown for v in group) for group in groups)
    return "\n".join(rows)


def _values_block(values: list[ContextValue], budget: int) -> tuple[str, list[ContextValue]]:
    """As many of `values` as fit in `budget` tokens (`_render_values`), the cells in the order of their best value:
    a cell's citation and heading are written once, so the values that share a printout with the best one (the
    cost beside the efficiency it was computed with) cost a few tokens each."""
    groups: dict[tuple[str, int], list[ContextValue]] = {}
    for value in values:
        members = groups.setdefault((value.nb_sha, value.cell), [])
        if len(members) < VALUES_PER_CELL:
            members.append(value)
    kept: list[list[ContextValue]] = []
    for group in groups.values():
        for n in range(len(group), 0, -1):  # the whole line if it fits, else its best values
            if count_llm_tokens(_render_values([*kept, group[:n]])) <= budget:
                kept.append(group[:n])
                break
        else:
            break
    listed = [v for group in kept for v in group]
    return (_render_values(kept), listed) if kept else ("", [])


def _fill_with_values(block: str, listed: list[ContextValue], values: list[ContextValue], budget: int,
                      cells: Context) -> tuple[str, list[ContextValue]]:
    """The value list grown into the tokens the cells (`cells`, already chosen) leave unused of `budget`: a
    notebook's neighbourhoods are often shorter than their share, the cells keep every token they had, and a value
    further down the ranking, whose cell no neighbourhood reaches, gets a line. Measured on both development sets
    and the held-out sets (bench/README.md, issue 13, session 12)."""
    room = budget - cells.tokens - 2 if cells.text else budget
    if len(listed) >= len(values) or room <= count_llm_tokens(block):
        return block, listed
    more, more_listed = _values_block(values, room)
    whole = f"{more}\n\n{cells.text}" if cells.text else more
    if len(more_listed) <= len(listed) or count_llm_tokens(whole) > budget:
        return block, listed
    return more, more_listed


def _not_twice(block: str, values: list[ContextValue], budget: int,
               cells: Context) -> tuple[str, list[ContextValue]] | None:
    """The value list built again without the values of cells the context sends whole (the model reads them
    there), except the best value's cell, whose line is the list's pointer to the likely answer, into all the room
    the cells leave: the tokens a repeated line took go to values whose cells are not sent. None when no value's
    cell is sent (`_fill_with_values` then grows the list as it is)."""
    if not values or not cells.cells:
        return None
    sent = {(c.notebook, c.cell) for c in cells.cells}
    first = (values[0].notebook, values[0].cell)
    rest = [v for v in values if (v.notebook, v.cell) == first or (v.notebook, v.cell) not in sent]
    if len(rest) == len(values):
        return None
    room = max(budget - cells.tokens - 2, count_llm_tokens(block))
    more, more_listed = _values_block(rest, room)
    whole = f"{more}\n\n{cells.text}" if more else cells.text
    if not more or count_llm_tokens(whole) > budget:
        return None
    return more, more_listed


def _of_first_cells(values: list[ContextValue], most: int | None) -> list[ContextValue]:
    """The values of the first `most` cells (in the order of each cell's best value); all when `most` is None."""
    if most is None:
        return values
    cells: set[tuple[str, int]] = set()
    kept = []
    for value in values:
        key = (value.nb_sha, value.cell)
        if key not in cells:
            if len(cells) >= most:
                continue
            cells.add(key)
        kept.append(value)
    return kept


def build_context(
    result: SearchResult,
    budget_tokens: int = DEFAULT_BUDGET,
    max_notebooks: int = 3,
    extra: dict[str, list[CellRecord]] | None = None,
    values: list[ContextValue] | None = None,
    share_cells: int | None = None,
) -> Context:
    """The context for `result`, inside `budget_tokens` cl100k tokens.

    `extra` maps a notebook sha to more cells of that notebook (e.g. other matching cells) that are added, in
    order, after every neighbourhood has had its place, while the budget allows. `values` (the value facts ranked
    for the question) come first, one line each, in at most `VALUES_SHARE` of the budget, and in what the cells
    leave unused (`_fill_with_values`): a value often sits in a cell that no neighbourhood reaches, and its line is
    a tenth of the cell's cost. Their cells are citable. `share_cells`: only the values of that many best cells
    take the share; the others can only fill what the cells leave. Once the cells are chosen, the list leaves out
    the values of cells sent whole, but the best value's (`_not_twice`).
    """
    block, listed = _values_block(_of_first_cells(values or [], share_cells), int(budget_tokens * VALUES_SHARE))
    if block:
        inner = build_context(result, budget_tokens - count_llm_tokens(block) - 2, max_notebooks, extra)
        rebuilt = _not_twice(block, values or [], budget_tokens, inner)
        block, listed = rebuilt or _fill_with_values(block, listed, values or [], budget_tokens, inner)
        text = f"{block}\n\n{inner.text}" if inner.text else block
        in_context = list(inner.cells)
        seen = {(c.notebook, c.cell) for c in in_context}
        for v in listed:
            if (v.notebook, v.cell) not in seen:
                seen.add((v.notebook, v.cell))
                in_context.append(ContextCell(v.notebook, v.nb_sha, v.cell, v.cell_id, "value"))
        return Context(text, in_context, count_llm_tokens(text), budget_tokens, inner.dropped)
    candidates = _candidates(result, max_notebooks)
    if extra:
        by_sha = {nb.nb_sha: nb for nb in result.notebooks[:max_notebooks]}
        have = {(nb.nb_sha, c.idx) for nb, c in candidates}
        for sha, more in extra.items():
            if sha in by_sha:
                candidates.extend((by_sha[sha], c) for c in more if (sha, c.idx) not in have)
    headings = {nb.nb_sha: notebook_heading(nb) for nb, _ in candidates}
    used = 0
    chosen: dict[str, dict[int, tuple[str, ContextCell]]] = {}
    order: list[str] = []
    dropped = 0
    for nb, cell in candidates:
        block_cost = 0 if nb.nb_sha in chosen else count_llm_tokens(headings[nb.nb_sha]) + 2
        room = budget_tokens - used - block_cost - 2
        text = render_cell(cell)
        cost = count_llm_tokens(text) + 2
        truncated = False
        if cost > room:
            alone_too_big = count_llm_tokens(text) + block_cost > budget_tokens
            if not (alone_too_big and room >= min(_MIN_PARTIAL, budget_tokens // 2)):
                dropped += 1
                continue
            text, truncated = render_cell_within(cell, room)
            cost = count_llm_tokens(text) + 2
        if nb.nb_sha not in chosen:
            chosen[nb.nb_sha] = {}
            order.append(nb.nb_sha)
        used += cost + block_cost
        entry = ContextCell(nb.notebook, nb.nb_sha, cell.idx, cell.cell_id, cell.cell_type, truncated)
        chosen[nb.nb_sha][cell.idx] = (text, entry)
    text, cells = _assemble(order, headings, chosen)
    tokens = count_llm_tokens(text)
    while tokens > budget_tokens and cells:  # joins can tokenize a little differently: drop from the end
        last = cells[-1]
        del chosen[last.nb_sha][last.cell]
        if not chosen[last.nb_sha]:
            order.remove(last.nb_sha)
        dropped += 1
        text, cells = _assemble(order, headings, chosen)
        tokens = count_llm_tokens(text)
    return Context(text, cells, tokens, budget_tokens, dropped)


def _assemble(
    order: list[str], headings: dict[str, str], chosen: dict[str, dict[int, tuple[str, ContextCell]]]
) -> tuple[str, list[ContextCell]]:
    blocks: list[str] = []
    cells: list[ContextCell] = []
    for sha in order:
        parts = [headings[sha]]
        for idx in sorted(chosen[sha]):
            text, entry = chosen[sha][idx]
            parts.append(text)
            cells.append(entry)
        blocks.append("\n\n".join(parts))
    return "\n\n".join(blocks), cells
