"""Where something is done: the cell of the best notebook that does what the question describes.

Retrieval already knows where in the notebook the question was found (`NotebookResult.cell_scores`: every cell
its chunks covered, with their best score); the cell's own words and those just above it (heading, markdown: where
people say in their words what the code does) break ties between the cells of one chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nbrecall.answer.question import Question
from nbrecall.answer.sentences import first_sentence
from nbrecall.answer.types import Answer, Citation
from nbrecall.ingest.manifest import CellRecord
from nbrecall.search.retrieve import NotebookResult, SearchResult
from nbrecall.search.terms import Weights, term_set

if TYPE_CHECKING:
    from nbrecall.service import Archive


@dataclass
class PlaceWeights:
    retrieval: float = 1.0  # the cell's best chunk score, relative to the notebook's best
    own: float = 1.0  # question terms in the cell's source
    around: float = 0.8  # question terms in the heading and markdown just above
    anchor: float = 1.0  # retrieval's own anchor cells (its first hits), by position


def heading_paths(cells: list[CellRecord]) -> dict[int, str]:
    """For every cell, the heading path above it (`Title › Section`), from markdown `#` lines."""
    stack: list[tuple[int, str]] = []
    result: dict[int, str] = {}
    for cell in cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                m = re.match(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$", line)
                if m:
                    level = len(m.group(1))
                    stack = [(lv, t) for lv, t in stack if lv < level] + [(level, m.group(2).strip())]
        result[cell.idx] = " › ".join(text for _, text in stack)
    return result


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


def best_cell(question: Question, nb: NotebookResult, cells: list[CellRecord],
              weights: PlaceWeights | None = None) -> CellRecord | None:
    """The code cell of `nb` that best matches the question (a markdown cell when the notebook has no code)."""
    w = weights or PlaceWeights()
    by_idx = {c.idx: c for c in cells}
    headings = heading_paths(cells)
    code = [c for c in cells if c.cell_type == "code" and c.source.strip()] or [
        c for c in cells if c.source.strip()]
    if not code:
        return None
    own = {c.idx: term_set(c.source) for c in code}
    around = {}
    for c in code:
        above = markdown_above(by_idx, c.idx)
        around[c.idx] = term_set(f"{headings.get(c.idx, '')}\n{above.source if above else ''}")
    rarity = Weights(question.terms, [own[c.idx] | around[c.idx] for c in code])
    top = max(nb.cell_scores.values(), default=0.0) or 1.0
    anchors: dict[int, int] = {}
    for position, hit in enumerate(nb.hits):
        for i in (hit.cell, hit.cell + 1):
            anchors.setdefault(i, position)
    best: tuple[float, int] | None = None
    chosen = None
    for c in code:
        score = w.retrieval * nb.cell_scores.get(c.idx, 0.0) / top
        score += w.own * rarity.recall(own[c.idx]) + w.around * rarity.recall(around[c.idx] - own[c.idx])
        if c.idx in anchors:
            score *= 1.0 + w.anchor / (1 + anchors[c.idx])
        key = (score, -c.idx)
        if best is None or key > best:
            best, chosen = key, c
    return chosen


def best_cell_answer(question: Question, result: SearchResult, archive: Archive) -> Answer:
    """Retrieval's own best cell (the first hit's anchor), named like a "where" answer."""
    return where_answer(question, result, archive, anchor_only=True)


def where_answer(question: Question, result: SearchResult, archive: Archive,
                 weights: PlaceWeights | None = None, anchor_only: bool = False) -> Answer:
    """The notebook, the section and the cell (and the markdown explaining it), then other places."""
    nb = result.notebooks[0]
    cells = archive.manifest.cells(nb.nb_sha)
    by_idx = {c.idx: c for c in cells}
    main = None if anchor_only else best_cell(question, nb, cells, weights)
    main = main or by_idx.get(nb.hits[0].cell)
    if main is None:
        return Answer(question.text, "Nothing in the indexed notebooks matches this question.", [], "extractive",
                      "no matching notebook", kind=question.kind)
    headings = heading_paths(cells)
    citation = Citation(nb.notebook, main.idx, main.cell_id, nb.nb_sha)
    hit = nb.hits[0]
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
