"""Where something is done: the cell retrieval found first, named by notebook, section and the markdown above.

Measured on both development sets (bench/README.md, issue 13): retrieval's own anchor cell (the first hit's,
chosen inside its chunk by the question's words) is the right cell to cite more often than any cell chosen
again afterwards, by word overlap with the cell and the markdown above it, by the cells' own vectors or by both.
One structural exception (`cited_hit`): a cell that does the work (code, or what it printed) inside a run of
cells retrieval also found is cited before an isolated prose cell (an introduction, an aside, a quiz) that
scores a little higher on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbrecall.answer.question import Question
from nbrecall.answer.sentences import first_sentence
from nbrecall.answer.types import Answer, Citation
from nbrecall.notebook.headings import heading_paths as cell_heading_paths
from nbrecall.records import FACT_KIND, CellRecord, Hit
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
            return s if len(s) <= 120 else s[:119] + "…"
    return ""


# Prose-only chunks: the kind of first hit `cited_hit` may look past, and may never put first (a definition is
# prose, and between two prose cells the neighbours' support says nothing about which one answers).
PROSE_KIND = "text"


def cited_hit(nb: NotebookResult, region: float) -> Hit:
    """The hit an answer cites in a notebook: retrieval's first, unless that is a prose-only chunk and a hit that
    holds code or outputs scores higher once every hit gets `region` × the mean of `cell_scores` (retrieval's
    best score on each cell) of the cells just before and just after it (0: retrieval's first, always).

    Why: a notebook's introduction, a problem statement or a quiz restates the words of many questions about
    the notebook, and standing alone it often outscores the cell that does the work; the work sits inside a run
    of cells retrieval also found (the markdown that explains it, the code, its printout). The neighbours' scores
    are retrieval's own, so the rule reads structure and scores, not wording. A first hit that holds code or
    outputs is the work already, and stays; fact hits (scored on their own table's BM25 scale) and the cells of
    another version listed under the notebook take no part.
    Measured on both development sets (bench/README.md, issue 13, session 11): every `region` from 0.2 to 1.0
    moves the same three eval2 citations to a right cell and none of eval's away from one."""
    first = nb.hits[0]
    if region <= 0 or first.kind != PROSE_KIND:
        return first
    scores = nb.cell_scores

    def supported(hit: Hit) -> float:
        low, high = min(hit.cells, default=hit.cell), max(hit.cells, default=hit.cell)
        return hit.score + region * (scores.get(low - 1, 0.0) + scores.get(high + 1, 0.0)) / 2

    # the notebook's own content hits: not facts, nor another version's cells listed under it (`version_of`)
    own = [h for h in nb.hits if h.kind != FACT_KIND and h.version_of is None]
    best = max(own, key=supported, default=first)
    return best if best.kind != PROSE_KIND and supported(best) > supported(first) else first


def where_answer(question: Question, result: SearchResult, archive: Archive, region: float) -> Answer:
    """The notebook, the section and the cell retrieval found first (`cited_hit`: with `region`, the best
    supported cell that does the work), the markdown explaining it, then the other notebooks that matched nearly
    as well."""
    nb = result.notebooks[0]
    cells = archive.manifest.cells(nb.nb_sha)
    by_idx = {c.idx: c for c in cells}
    hit = cited_hit(nb, region)
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
            clipped = sentence if len(sentence) <= 240 else sentence[:239] + "…"
            lines.append(f"Explained in Cell {explained.idx}: “{clipped}” {c2.label()}")
    others = []
    for other in result.notebooks[1:3]:
        if other.hits and other.score >= 0.6 * nb.score:
            h = other.hits[0]
            c3 = Citation(other.notebook, h.cell, h.cell_id, other.nb_sha)
            cited.append(c3)
            others.append(c3.label() + (f" ({h.heading})" if h.heading else ""))
    if others:
        lines.append("See also: " + "; ".join(others))
    return Answer(question.text, "\n".join(lines), cited, "extractive", kind=question.kind)
