"""The extractive answer (DESIGN §7): the value, cell or sentence that best answers, copied and cited.

Nothing is generated. A value answer is a value fact as the notebook printed it, with up to two alternatives
from other cells or notebooks ("also found"); a "where" answer names the notebook, the section and the cell; a
term answer is the defining sentence of a markdown cell. When no value is close enough to the question, the
answer says so and points at the best cell instead of printing a number that is probably wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbrecall.answer.places import best_cell_answer, where_answer
from nbrecall.answer.question import Question, read_question
from nbrecall.answer.sentences import term_answer
from nbrecall.answer.types import Answer, Citation, FoundValue
from nbrecall.answer.values import RankedFact, ValueWeights, rank_values
from nbrecall.index.store import SearchFilters
from nbrecall.search.retrieve import SearchResult
from nbrecall.search.terms import match, term_set

if TYPE_CHECKING:
    from nbrecall.service import Archive

ALTERNATIVES = 2
# Below this share of its terms found in the first notebooks, a question's words cannot choose within them.
MIN_COVERAGE = 0.34
# Below this, no value is given: the best candidate shares no term with the question and its description is not
# close to it either (see `_confident`).
MIN_SIMILARITY = 0.3


def no_match(question: str) -> Answer:
    return Answer(question, "Nothing in the indexed notebooks matches this question.", [], "extractive",
                  "no matching notebook", kind="")


def _found(cand: RankedFact) -> FoundValue:
    f = cand.fact
    citation = Citation(cand.notebook, f.cell, f.cell_id, cand.nb_sha)
    return FoundValue(f.value, f.label, f.statement(), f.unit, citation, cand.year, f.stale, cand.score)


def _meta(value: FoundValue) -> str:
    bits = [str(value.year)] if value.year else []
    if value.stale:
        bits.append("stale outputs")
    return f" ({', '.join(bits)})" if bits else ""


def pick_values(ranked: list[RankedFact], most: int = 1 + ALTERNATIVES) -> list[RankedFact]:
    """The best fact, then the best facts of other cells (one per cell: two values of one printout are one
    place to look, and the alternatives are there for when the first place is the wrong one)."""
    picked: list[RankedFact] = []
    cells: set[tuple[str, int]] = set()
    for cand in ranked:
        where = (cand.nb_sha, cand.fact.cell)
        if where in cells:
            continue
        cells.add(where)
        picked.append(cand)
        if len(picked) >= most:
            break
    return picked


def _confident(question: Question, best: RankedFact) -> bool:
    """A value is worth giving when its name or place shares a term with the question, or its description is
    close to the question's meaning; else the best candidate is just the least bad of unrelated numbers."""
    s = best.signals
    return s.get("label", 0.0) > 0 or s.get("context", 0.0) > 0 or s.get("similarity", 0.0) >= MIN_SIMILARITY


def value_answer(question: Question, result: SearchResult, archive: Archive, filters: SearchFilters | None,
                 weights: ValueWeights | None = None, ranked: list[RankedFact] | None = None) -> Answer | None:
    """The best value and its alternatives; None when no candidate is close enough (`ranked`: the candidates
    already ranked, for a caller that scores them itself)."""
    if ranked is None:
        ranked = rank_values(question, result, archive, filters, weights)
    if not ranked:
        return None
    picked = pick_values(ranked)
    if not _confident(question, picked[0]):
        return None
    values = [_found(c) for c in picked]
    best = values[0]
    lines = [f"{best.shown} — {best.citation.label()}{_meta(best)}"]
    if len(values) > 1:
        lines.append("Also found:")
        lines.extend(f"  {v.shown} — {v.citation.label()}{_meta(v)}" for v in values[1:])
    notice = "the value comes from outputs that could not be re-rendered (stale)" if best.stale else None
    citations = list(dict.fromkeys(v.citation for v in values))
    return Answer(question.text, "\n".join(lines), citations, "extractive", notice, values, question.kind)


def coverage(question: Question, result: SearchResult, archive: Archive, top: int = 3) -> float:
    """The share of the question's terms that occur in the first notebooks (1.0 for a question without terms).

    0 means vector search found neighbours that share no word with the question (nothing matches); a low share
    means the notebooks do not speak the question's words (another language, other names): then the words cannot
    pick a value or a sentence, and the answer is retrieval's best cell."""
    if not question.terms:
        return 1.0
    found: set[str] = set()
    for nb in result.notebooks[:top]:
        cells = archive.manifest.cells(nb.nb_sha)
        vocabulary = term_set(" ".join(f"{c.source}\n{c.outputs}" for c in cells) + " " + nb.notebook)
        found.update(t for t in question.terms if match(t, vocabulary))
    return len(found) / len(set(question.terms))


def extractive_answer(question: str, result: SearchResult, archive: Archive,
                      filters: SearchFilters | None = None, weights: ValueWeights | None = None) -> Answer:
    """Answer `question` from the retrieved notebooks by copying the best value, cell or sentence."""
    if not result.notebooks or not result.notebooks[0].hits:
        return no_match(question)
    q = read_question(question)
    shared = coverage(q, result, archive)
    if shared == 0:
        return no_match(question)  # vector search always finds neighbours; none of them shares a word
    if shared < MIN_COVERAGE:
        found = best_cell_answer(q, result, archive)
        found.notice = ("few words of the question occur in these notebooks (another language or other names?): "
                        "the cell retrieval found closest is shown")
        return found
    if q.kind == "where":
        return where_answer(q, result, archive)
    if q.kind == "term":
        found = term_answer(q, result, archive)
        if found is not None:
            return found
        fallback = where_answer(q, result, archive)
        fallback.notice = "no defining sentence found; the closest cell is shown"
        return fallback
    value = value_answer(q, result, archive, filters, weights)
    if q.kind == "value":
        if value is not None:
            return value
        fallback = where_answer(q, result, archive)
        fallback.notice = "no printed value answers this question closely enough; the closest cell is shown"
        return fallback
    # A question with no interrogative ("final RMSE of the tuned model", a pasted error): a value when one
    # matches, else the defining sentence, else the cell.
    if value is not None:
        return value
    found = term_answer(q, result, archive)
    return found if found is not None else where_answer(q, result, archive)
