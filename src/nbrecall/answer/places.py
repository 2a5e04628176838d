"""Where something is done: the cell retrieval found first, named by notebook, section and the markdown above.

Measured on both development sets (bench/README.md, issue 13): retrieval's own anchor cell (the first hit's,
chosen inside its chunk by the question's words) is the right cell to cite more often than any cell chosen
again afterwards, by word overlap with the cell and the markdown above it, by the cells' own vectors or by both.
Retrieval itself puts a cell that does the work (code, or what it printed) inside a run of cells it also found
before an isolated prose cell (an introduction, an aside, a quiz) that scores a little higher on its own
(`search.retrieve.work_first`), so the cell cited here is the one search lists first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbrecall.answer.question import Question
from nbrecall.answer.sentences import clip, first_sentence
from nbrecall.answer.types import Answer, Citation
from nbrecall.notebook.headings import heading_paths as cell_heading_paths
from nbrecall.records import CellRecord
from nbrecall.search.retrieve import NotebookResult, SearchResult

if TYPE_CHECKING:
    from nbrecall.service import Archive


def heading_paths(cells: list[CellRecord]) -> dict[int, str]:
    """For every cell, the heading path above it (`Title › Section`, `notebook.headings.heading_paths`)."""
    return cell_heading_paths((cell.idx, cell.cell_type == "markdown", cell.source) for cell in cells)


def markdown_above(cells: dict[int, CellRecord], idx: int) -> CellRecord | None:
    """The markdown cell just above `idx` (one code-less cell back at most)."""
    for i in (idx - 1, idx - 2):
        cell = cells.get(i)
        if cell is None:
            return None
        if cell.cell_type == "markdown":
            return cell
        if cell.source.strip():
            return None
    return None


def _code_line(cell: CellRecord) -> str:
    """The first meaningful line of a cell (not an import, magic, comment or blank line)."""
    for line in cell.source.splitlines():
        s = line.strip()
        if s and not s.startswith(("#", "%", "!", "import ", "from ")):
            return clip(s, 120)
    return ""


# Other cells of the cited notebook offered under the first: where the first cell is not the one asked for (a plot
# of the result, the notebook's introduction), the work is most often among the next cells retrieval found there
# (measured on 167 "where" questions of the development and held-out sets: bench/README.md, session 16).
OTHER_PLACES = 2


def other_places(nb: NotebookResult, cited: set[int], most: int = OTHER_PLACES) -> list[int]:
    """The next cells retrieval found in the notebook, in its order, not yet cited (fact hits, scored on their own
    table's scale, and cells of another version listed under the notebook take no part)."""
    found: list[int] = []
    for hit in nb.hits:
        if not hit.on_own_cell() or hit.cell in cited or hit.cell in found:
            continue
        found.append(hit.cell)
        if len(found) >= most:
            break
    return found


def _place_line(cell: CellRecord) -> str:
    """How another place is named: its first line of code, or the first sentence of its markdown."""
    if cell.cell_type == "code":
        line = _code_line(cell)
        return f"Cell {cell.idx}: `{line}`" if line else f"Cell {cell.idx}"
    sentence = first_sentence(cell.source)
    clipped = clip(sentence, 120)
    return f"Cell {cell.idx}: “{clipped}”" if clipped else f"Cell {cell.idx}"


def where_answer(question: Question, result: SearchResult, archive: Archive) -> Answer:
    """The notebook, the section and the cell retrieval found first (the cell that does the work before an
    isolated prose cell: `search.retrieve.work_first`), the markdown explaining it, up to two other cells of the
    notebook that retrieval found next (`other_places`), then the other notebooks that matched nearly as well."""
    nb = result.notebooks[0]
    cells = archive.manifest.cells(nb.nb_sha)
    by_idx = {c.idx: c for c in cells}
    hit = nb.hits[0]
    main = by_idx.get(hit.cell)
    if main is None:
        return Answer(question.text, "Nothing in the indexed notebooks matches this question.", [], "extractive",
                      "no matching notebook", kind=question.kind)
    headings = heading_paths(cells)
    citation = Citation(nb.notebook, main.idx, main.cell_id, nb.nb_sha)
    meta = [str(hit.year)] if hit.year else []
    if hit.project:
        meta.append(hit.project)
    where = f"In {nb.notebook}" + (f" ({', '.join(meta)})" if meta else "")
    if headings.get(main.idx):
        where += f", section “{headings[main.idx]}”"
    text = f"{where}, Cell {main.idx}"
    line = _code_line(main) if main.cell_type == "code" else ""
    if line:
        text += f": `{line}`"
    lines = [f"{text} {citation.label()}"]
    cited = [citation]
    explained = markdown_above(by_idx, main.idx)
    if explained is not None:
        sentence = first_sentence(explained.source)
        c2 = Citation(nb.notebook, explained.idx, explained.cell_id, nb.nb_sha)
        cited.append(c2)
        if sentence:
            clipped = clip(sentence, 240)
            lines.append(f"Explained in Cell {explained.idx}: “{clipped}” {c2.label()}")
    places = [citation]
    also = []
    for idx in other_places(nb, {c.cell for c in cited}):
        cell = by_idx.get(idx)
        if cell is not None:
            c_also = Citation(nb.notebook, cell.idx, cell.cell_id, nb.nb_sha)
            places.append(c_also)
            also.append(f"{_place_line(cell)} {c_also.label()}")
    if also:
        lines.append("Also in this notebook: " + "; ".join(also))
        cited.extend(places[1:])
    others = []
    for other in result.notebooks[1:3]:
        if other.hits and other.score >= 0.6 * nb.score:
            h = other.hits[0]
            c3 = Citation(other.notebook, h.cell, h.cell_id, other.nb_sha)
            cited.append(c3)
            others.append(c3.label() + (f" ({h.heading})" if h.heading else ""))
    if others:
        lines.append("See also: " + "; ".join(others))
    return Answer(question.text, "\n".join(lines), cited, "extractive", kind=question.kind, places=places)
