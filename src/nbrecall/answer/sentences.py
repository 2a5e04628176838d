"""What a term means, as a notebook explains it: the defining sentence of a markdown cell.

Sentences of the markdown cells retrieval pointed at (and of the whole first notebook) are scored by how much of
the question's subject they hold (terms weighted by rarity), whether they read as a definition (`X is …`,
`**X** — …`: the grammar of defining, not words of any one subject) and where retrieval found the question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nbrecall.answer.question import Question
from nbrecall.answer.types import Answer, Citation
from nbrecall.index.terms import Weights, term_set, terms
from nbrecall.notebook.headings import heading_paths
from nbrecall.records import CellRecord
from nbrecall.search.retrieve import NotebookResult, SearchResult

if TYPE_CHECKING:
    from nbrecall.service import Archive

_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z*_`(\[\"'$\\])")
_DEFINING = re.compile(
    r"\b(?:is|are|means|meaning|refers?\s+to|stands?\s+for|defined\s+as|denotes|describes|is\s+called|"
    r"ist|sind|bezeichnet|versteht\s+man)\b|\*\*[^*]+\*\*\s*(?:[—–:-]|\()|^\s*[-*]\s*\*\*",
    re.I,
)
_ANAPHORA = re.compile(r"^(?:it|its|this|these|that|those|they|their|such|here|there)\b", re.I)
# The words of asking what a term means; the rest of a term question is its subject.
_ASKING_TERM = frozenset(terms("mean means meaning define defined definition stand stands refer refers explain "
                               "term called word bedeutet bedeutung"))


def sentences(markdown: str) -> list[str]:
    """Sentences and bullet items of a markdown cell (headings, images and code fences left out)."""
    out: list[str] = []
    in_fence = False
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            text = " ".join(s.strip() for s in paragraph)
            out.extend(s.strip() for s in _SPLIT.split(text) if len(s.strip()) > 2)
            paragraph.clear()

    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
            flush()
            continue
        if in_fence:
            continue
        if not stripped or stripped.startswith("#") or stripped.startswith("!["):
            flush()
            continue
        if re.match(r"^(?:[-*+]|\d+[.)])\s+", stripped):
            flush()
        paragraph.append(stripped)
    flush()
    return out


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis marking the cut: what an answer quotes stays one line."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_sentence(markdown: str) -> str:
    return next(iter(sentences(markdown)), "")


@dataclass
class _Sentence:
    nb: NotebookResult
    rank: int
    cell: CellRecord
    position: int
    text: str
    heading: str
    score: float = 0.0


def _candidates(result: SearchResult, archive: Archive, top: int = 3) -> list[_Sentence]:
    found: list[_Sentence] = []
    for rank, nb in enumerate(result.notebooks[:top]):
        cells = archive.manifest.cells(nb.nb_sha)
        headings = heading_paths((c.idx, c.cell_type == "markdown", c.source) for c in cells)
        wanted = set(nb.cell_scores) | {c.idx for c in nb.neighbourhood}
        for cell in cells:
            if cell.cell_type != "markdown" or (rank > 0 and cell.idx not in wanted):
                continue
            for k, text in enumerate(sentences(cell.source)):
                found.append(_Sentence(nb, rank, cell, k, text, headings.get(cell.idx, "")))
    return found


def _own_heading(cell: CellRecord) -> str:
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
    return first.lstrip("#").strip() if first.startswith("#") else ""


def term_answer(question: Question, result: SearchResult, archive: Archive) -> Answer | None:
    """The sentence that best defines the question's subject, with what it needs around it: under a heading that
    names the subject, the section's first sentences; a sentence opening with "It/This…" with the one before."""
    cands = _candidates(result, archive)
    if not cands:
        return None
    subject_terms = [t for t in question.terms if t not in _ASKING_TERM] or question.terms
    vocab = [term_set(s.text) for s in cands]
    subject = Weights(subject_terms, vocab)
    rest = Weights([t for t in question.terms if t not in subject_terms], vocab)
    best_nb = result.notebooks[0].score or 1.0
    for s, words in zip(cands, vocab, strict=True):
        score = subject.recall(words) + 0.4 * rest.recall(words) + 0.3 * subject.recall(term_set(s.heading))
        if score <= 0:
            continue
        if _DEFINING.search(s.text):
            score *= 1.3
        if subject.recall(term_set(s.text[:60])) > 0:
            score *= 1.15
        if len(s.text) < 25:
            score *= 0.7
        top_cell = max(s.nb.cell_scores.values(), default=0.0) or 1.0
        score *= 1.0 + 0.3 * s.nb.cell_scores.get(s.cell.idx, 0.0) / top_cell
        score *= 0.55 + 0.45 * max(0.0, min(1.0, s.nb.score / best_nb))
        s.score = score
    ranked = sorted(cands, key=lambda s: (-s.score, s.rank, s.cell.idx, s.position))
    best = ranked[0]
    if best.score <= 0:
        return None
    same = {s.position: s for s in cands if s.cell is best.cell}
    follow = ""
    heading = _own_heading(best.cell)
    if heading and subject.recall(term_set(heading)) >= 0.8 and 0 in same:
        shown, follow = same[0].text, same[1].text if 1 in same else ""
    elif _ANAPHORA.match(best.text) and best.position - 1 in same:
        shown, follow = same[best.position - 1].text, best.text
    else:
        shown = best.text
        if len(best.text) < 90 and best.position + 1 in same:
            follow = same[best.position + 1].text
    text = shown + (f" {follow}" if follow else "")
    if len(text) > 600:
        text = text[:599] + "…"
    citation = Citation(best.nb.notebook, best.cell.idx, best.cell.cell_id, best.nb.nb_sha)
    return Answer(question.text, f"{text} — {citation.label()}", [citation], "extractive", kind=question.kind)
