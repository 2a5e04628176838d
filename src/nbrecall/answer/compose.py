"""The extractive answer (architecture §9): the value, cell or sentence that best answers, copied and cited.

Nothing is generated. A value answer is a value fact as the notebook printed it, with up to two alternatives
from other cells or notebooks, each holding another value ("also found"); a "where" answer names the notebook, the
section and the cell that retrieval found; a term answer is the defining sentence of a markdown cell.

Which of these a question gets: its grammar says so when it has an interrogative (`question.py`); a question without
one ("final RMSE of the tuned model", "bootstrap test for a difference in means") gets a value when the evidence
points at one: the value's confidence is at least "possible" and the question was typed as keywords, not put as a
question; retrieval's best match is a printed scalar output; the value sits in the cell retrieval found first; its
name holds what the question asks about (its first noun phrase) or much of the question; or the question names the
unit printed with it. Else it gets retrieval's cell, with the best printed values listed under it (`with_values`).
Measured on both development sets (`bench/answer_ablation.py`, bench/README.md): retrieval's first cell is the right
one to cite for "where", error, column and figure questions more often than any cell chosen afterwards by word
overlap.

Honesty: a value answer carries the estimated chance that its first value is the one asked for (`confidence.py`) and
says it is uncertain below one half, naming the values closest to it in its own printout (`beside_values`: an
uncertain value is at times wrong by such a neighbour); a value whose name shares no word with what is asked is
given with a notice to check it; for a question whose grammar does not ask for a value, a best value
that scores under half of what the signals can give (`ValueWeights.min_share`) is offered under the closest cell, not
given as the answer (unless the question matched a printed value itself, when the value leads with its notice); a
question that asks for a value gets it first however low it scores, with its confidence saying how far to trust it:
over the development sets the low value's cell was right more often than the closest cell for such questions
(bench/README.md, session 25); when no candidate shares anything with the question, no value is given and the
closest cell is pointed at.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbrecall.answer.candidates import RankedFact, same_value
from nbrecall.answer.confidence import UNCERTAIN_BELOW, level, value_confidence
from nbrecall.answer.places import where_answer
from nbrecall.answer.question import Question, read_question
from nbrecall.answer.rerank import ordered_values
from nbrecall.answer.sentences import clip, term_answer
from nbrecall.answer.types import Answer, Citation, FoundValue
from nbrecall.answer.values import ValueWeights
from nbrecall.index.terms import match, term_set
from nbrecall.notebook.printed import leading_number
from nbrecall.records import Hit, SearchFilters
from nbrecall.search.retrieve import SearchResult

if TYPE_CHECKING:
    from nbrecall.service import Archive

ALTERNATIVES = 2
# How many of the values closest to an uncertain first value in its own printout are named beside it, and how far
# down the answers' order they are looked for.
BESIDE = 2
BESIDE_DEPTH = 10
# Below this share of its terms found in the first notebooks, a question's words cannot choose within them.
MIN_COVERAGE = 0.34
# A question without an interrogative gets a value when the best one's name covers this much of its subject or
# of the whole question (`values.score`: the `subject` and `label` signals), or sits in retrieval's first chunk.
VALUE_EVIDENCE = 0.5
# When no notebook found mentions any word of what is asked about (the question's subject), a value is given only
# if its name is still close in meaning to the question (cosine of the bundled embedder's vectors): a paraphrase
# ("share" for a printed fraction) stays answered, a thing the archive does not hold ("lifeboats") gets the closest
# cell and a notice instead of some other number. On both development sets the best value's similarity is below
# this for 9 of 10 wrong first values and 1 of 10 right ones.
ABSENT_SUBJECT_SIMILARITY = 0.3


def no_match(question: str) -> Answer:
    return Answer(question, "Nothing in the indexed notebooks matches this question.", [], "extractive",
                  "no matching notebook", kind="")


def _found(cand: RankedFact) -> FoundValue:
    f = cand.fact
    citation = Citation(cand.notebook, f.cell, f.cell_id, cand.nb_sha)
    shown = f.statement()
    said = cand.meaning if cand.meaning not in shown else ""  # a constant's comment is in its printout already
    return FoundValue(f.value, f.label, shown, f.unit, citation, cand.year, f.stale, cand.score, said)


def _meta(value: FoundValue) -> str:
    """` (2017, stale outputs)`, then what the notebook says the value's variables are (`glossary`): a symbol
    (`qs`, `Ku`) is checked by its meaning, which the printout does not show."""
    bits = [str(value.year)] if value.year else []
    if value.stale:
        bits.append("stale outputs")
    meta = f" ({', '.join(bits)})" if bits else ""
    return meta + (f" · the notebook says: “{value.meaning}”" if value.meaning else "")


def pick_values(ranked: list[RankedFact], most: int = 1 + ALTERNATIVES, *,
                distinct_values: bool = True) -> list[RankedFact]:
    """The best fact, then the best facts of other cells holding other values (one per cell: two values of one
    printout are one place to look; one per value: the same number printed again elsewhere is the same answer).
    The alternatives are there for when the first answer is the wrong one. `distinct_values=False`: one per cell
    only (the LLM context's cells, which are read whole)."""
    picked: list[RankedFact] = []
    cells: set[tuple[str, int]] = set()
    values: set[str] = set()
    for cand in ranked:
        where = (cand.nb_sha, cand.fact.cell)
        value = same_value(cand.fact.value) if distinct_values else ""
        if where in cells or value in values:
            continue
        cells.add(where)
        if distinct_values:
            values.add(value)
        picked.append(cand)
        if len(picked) >= most:
            break
    return picked


def beside_values(ranked: list[RankedFact], most: int = BESIDE, depth: int = BESIDE_DEPTH) -> list[RankedFact]:
    """The next candidates in the answers' order (within the first `depth`) printed in the first one's own cell and
    holding other values, at most `most`. An uncertain first value is at times wrong by a neighbour of the same
    printout (`Profit · 5` for `Profit · 4`), which the alternatives, one per cell, never show: these are named
    beside it so that the reader can compare them in place (bench/README.md, session 21)."""
    if not ranked:
        return []
    first = ranked[0]
    seen = {same_value(first.fact.value)}
    out: list[RankedFact] = []
    for cand in ranked[1:depth]:
        value = same_value(cand.fact.value)
        if (cand.nb_sha, cand.fact.cell) != (first.nb_sha, first.fact.cell) or value in seen:
            continue
        seen.add(value)
        out.append(cand)
        if len(out) >= most:
            break
    return out


def beside_line(beside: list[FoundValue], lead: str) -> str:
    """The line naming the values printed beside the first value in its cell (`beside_values`); `lead` says what
    they are beside, as the answer's layout words it ("Beside it", "Beside the first")."""
    return f"{lead} in the same cell: " + "; ".join(v.shown for v in beside)


def _first_hit(result: SearchResult) -> Hit | None:
    """Retrieval's first chunk: the first hit of its first notebook (None when nothing was found)."""
    return result.notebooks[0].hits[0] if result.notebooks and result.notebooks[0].hits else None


def _first_hit_kind(result: SearchResult) -> str:
    """The chunk kind of retrieval's first hit (`scalar`, `error`, `code`, …; "" when nothing was found): what the
    question matched as printed."""
    hit = _first_hit(result)
    return hit.kind if hit is not None else ""


def _in_first_hit(result: SearchResult, cand: RankedFact) -> bool:
    """Whether the fact's cell is one of the cells of retrieval's first chunk."""
    hit = _first_hit(result)
    return hit is not None and cand.nb_sha == result.notebooks[0].nb_sha and cand.fact.cell in hit.cells


def _shares_anything(cand: RankedFact) -> bool:
    s = cand.signals
    return any(s.get(k, 0.0) > 0 for k in ("subject", "label", "context"))


def asked_about(question: Question) -> str:
    """The words of what is asked about, as an answer quotes them back: each once, clipped (a question can be a
    pasted log of thousands of words)."""
    return clip(" ".join(dict.fromkeys(question.subject)), 80)


def value_answer(question: Question, result: SearchResult, archive: Archive, filters: SearchFilters | None,
                 weights: ValueWeights | None = None, ranked: list[RankedFact] | None = None) -> Answer | None:
    """The best value and its alternatives; None when no candidate shares anything with the question and none
    is in the cell retrieval found (`ranked`: the candidates already ranked, for a caller that scores them)."""
    if ranked is None:
        ranked = ordered_values(question, result, archive, filters, weights)
    if not ranked:
        return None
    picked = pick_values(ranked)
    best = picked[0]
    if not _shares_anything(best) and not _in_first_hit(result, best):
        return None
    values = [_found(c) for c in picked]
    first = values[0]
    lines = [f"{first.shown} — {first.citation.label()}{_meta(first)}"]
    if len(values) > 1:
        lines.append("Also found:")
        lines.extend(f"  {v.shown} — {v.citation.label()}{_meta(v)}" for v in values[1:])
    notices = []
    if question.subject and best.signals.get("subject", 0.0) == 0:
        notices.append(f"the value's name does not say “{asked_about(question)}”: check the cell before you use it")
    if first.stale:
        notices.append("the value comes from outputs that could not be re-rendered (stale)")
    confidence = value_confidence(ranked, weights)
    beside: list[FoundValue] = []
    if level(confidence) == "uncertain":
        beside = [_found(c) for c in beside_values(ranked)]
        notices.append(f"uncertain (an estimated {confidence:.0%} chance that this is the value asked for: it "
                       "scores low, or close to another value): check the cell"
                       + (", the values beside it" if beside else "")
                       + (" and the values under Also found" if len(values) > 1 else ""))
    if beside:
        lines.insert(1, beside_line(beside, "Beside it"))
    citations = list(dict.fromkeys(v.citation for v in values))
    return Answer(question.text, "\n".join(lines), citations, "extractive", "; ".join(notices) or None, values,
                  question.kind, places=[v.citation for v in values], confidence=confidence, beside=beside)


def _value_fits(question: Question, result: SearchResult, answer: Answer | None,
                ranked: list[RankedFact] | None, weights: ValueWeights | None = None) -> bool:
    """For a question without an interrogative: does the evidence point at a value rather than at a place? It
    does when the value sits in retrieval's first chunk, when its name covers enough of the question or of its
    subject, or when the question names the unit printed with it ("… in standard cubic feet per hour" for `Q_std:
    922210.2 foot ** 3 / hour`; `ValueWeights.named_unit`): a unit is asked of a quantity, not of a place."""
    if answer is None or not answer.values or not ranked:
        return False
    best = next(c for c in ranked if (c.nb_sha, c.fact.cell) == (answer.values[0].citation.nb_sha,
                                                                   answer.values[0].citation.cell))
    s = best.signals
    named_unit = bool((weights or ValueWeights()).named_unit) and best.terms.get("unit", 0.0) > 0
    return (_in_first_hit(result, best) or s.get("subject", 0.0) >= VALUE_EVIDENCE
            or s.get("label", 0.0) >= VALUE_EVIDENCE or named_unit)


def found_terms(question: Question, result: SearchResult, archive: Archive, top: int = 3) -> set[str]:
    """The question's terms that occur anywhere in the first notebooks (sources, outputs, paths)."""
    found: set[str] = set()
    for nb in result.notebooks[:top]:
        cells = archive.manifest.cells(nb.nb_sha)
        vocabulary = term_set(" ".join(f"{c.source}\n{c.outputs}" for c in cells) + " " + nb.notebook)
        found.update(t for t in question.terms if match(t, vocabulary))
    return found


def place_answer(question: Question, result: SearchResult, archive: Archive, notice: str | None = None) -> Answer:
    """Retrieval's first cell, named like a "where" answer."""
    found = where_answer(question, result, archive)
    found.notice = notice
    return found


def extractive_answer(question: str, result: SearchResult, archive: Archive,
                      filters: SearchFilters | None = None, weights: ValueWeights | None = None,
                      ranked: list[RankedFact] | None = None) -> Answer:
    """Answer `question` from the retrieved notebooks by copying the best value, cell or sentence (`ranked`: the
    value facts already ranked for it)."""
    if not result.notebooks or not result.notebooks[0].hits:
        return no_match(question)
    q = read_question(question)
    if q.lookup:  # a number pasted alone: where it is printed, not a value for it
        return number_answer(q, result, archive, filters, weights, ranked)
    found = found_terms(q, result, archive)
    if q.terms and not found:
        return no_match(question)  # vector search always finds neighbours; none of them shares a word
    if q.terms and len(found) / len(set(q.terms)) < MIN_COVERAGE:
        # the notebooks do not speak the question's words (another language, other names): the words cannot
        # pick a value or a sentence; retrieval's best cell is the answer
        return place_answer(q, result, archive, "few words of the question occur in these notebooks (another "
                            "language or other names?): the cell retrieval found closest is shown")
    if q.kind == "where":
        return place_answer(q, result, archive)
    if q.kind == "term":
        term = term_answer(q, result, archive)
        return term if term is not None else place_answer(
            q, result, archive, "no defining sentence found; the closest cell is shown")
    if ranked is None:
        ranked = ordered_values(q, result, archive, filters, weights)
    # The gates judge the archive's best match, the candidate the score ranks first, in either order: the learned
    # order (`rerank`) only chooses which value comes first
    top = max(ranked, key=lambda c: c.score) if ranked else None
    if q.subject and not any(t in found for t in q.subject) and top is not None and \
            top.signals.get("similarity", 0.0) < ABSENT_SUBJECT_SIMILARITY:
        return place_answer(q, result, archive, f"no notebook found mentions “{asked_about(q)}” and no "
                            "printed value is close in meaning: no value is given; the closest cell is shown")
    value = value_answer(q, result, archive, filters, weights, ranked)
    w = weights or ValueWeights()
    if q.kind == "general" and (q.error or _matched_an_error(result)):
        return with_values(place_answer(q, result, archive), value)
    if value is not None and (_keywords_for_a_value(q, value) or _matched_a_printed_value(result)):
        return value
    if q.kind != "value" and value is not None and top is not None and top.score < w.min_share * w.ceiling():
        # a question whose grammar does not ask for a value, and no value scores well: the closest cell first
        return with_values(place_answer(q, result, archive), value)
    if q.kind == "value":
        return value if value is not None else place_answer(
            q, result, archive, "no printed value answers this question closely enough; the closest cell is shown")
    if value is not None and _value_fits(q, result, value, ranked, w):
        return value
    return with_values(place_answer(q, result, archive), value)


def shows_number(value: str, readings: list[tuple[float, int]]) -> int:
    """How a printed value shows a number typed alone (`Question.lookup`): 2 exactly, 1 rounded to the decimals
    it was typed with (`3802.7` for `3803`: a report prints rounded figures), 0 not at all."""
    number = leading_number(value)
    if number is None:
        return 0
    if any(number == r for r, _ in readings):
        return 2
    return 1 if any(abs(round(number, d) - r) <= 1e-9 * max(1.0, abs(r)) for r, d in readings) else 0


def number_answer(question: Question, result: SearchResult, archive: Archive, filters: SearchFilters | None = None,
                  weights: ValueWeights | None = None, ranked: list[RankedFact] | None = None) -> Answer:
    """For a number typed alone: the printed values of the found notebooks that show it, exact ones first, then in
    retrieval's order, one per cell (a number printed in three cells is three places to look); retrieval's cell
    when none does. Ranking these as answers to a question would weigh them against the number itself (a number
    the question gives is an input, not its answer: `values.score`), so they keep retrieval's order."""
    if ranked is None:
        ranked = ordered_values(question, result, archive, filters, weights)
    shown = [(shows_number(c.fact.value, question.lookup), position, c) for position, c in enumerate(ranked)]
    showing = sorted((s for s in shown if s[0]), key=lambda s: (-s[0], s[2].rank is None, s[2].rank or 0, s[1]))
    how = {id(c): how for how, _position, c in showing}
    picked = pick_values([c for _how, _position, c in showing], 1 + ALTERNATIVES, distinct_values=False)
    if not picked:
        return place_answer(question, result, archive, f"no printed value of the notebooks found shows "
                            f"{clip(question.text, 40)}: the closest cell is shown")
    values = [_found(c) for c in picked]
    lines = [f"{v.shown} — {v.citation.label()}{_meta(v)}" for v in values]
    if len(lines) > 1:
        lines.insert(1, "Also shown in:")
        lines[2:] = [f"  {line}" for line in lines[2:]]
    rounded = "" if all(how[id(c)] == 2 for c in picked) else "; some show it rounded to the decimals typed"
    citations = list(dict.fromkeys(v.citation for v in values))
    return Answer(question.text, "\n".join(lines), citations, "extractive",
                  f"a number alone: the cells that print it{rounded}", values, question.kind, places=citations)


def _keywords_for_a_value(question: Question, value: Answer) -> bool:
    """Keywords typed without a question ("peak discharge at the urban gauge"), whose best value is at least a
    possible answer by its own confidence (`confidence.UNCERTAIN_BELOW`): the value, not the closest cell,
    comes first. Keywords read as `general` name a value more often than a figure, a column or an error, and the
    confidence tells when the value is worth showing first; a question put as one ("how is the Kutta condition
    enforced?") asks for an explanation or a place, which the evidence decides as before (bench/README.md,
    session 18)."""
    return (question.kind == "general" and not question.asked and value.confidence is not None
            and value.confidence >= UNCERTAIN_BELOW)


def _matched_a_printed_value(result: SearchResult) -> bool:
    """Retrieval's best match is a printed scalar output (a chunk of kind `scalar`): the question matched a value as
    printed, so a value answer leads even when its value is not trusted (its notice says so). Over the place-first
    answers of both development sets, A–E and M, the value's cell was right 11 times and retrieval's cell 5 times
    when the first hit was a scalar (bench/README.md, session 20)."""
    return _first_hit_kind(result) == "scalar"


def _matched_an_error(result: SearchResult) -> bool:
    """Retrieval's best match is an error output (a chunk of kind `error`): the question is the error as printed
    (a traceback's last line pasted in), and the cell that raised it answers, whatever value scores well for its
    words; the values are still listed under it (bench/README.md, session 24). A question that quotes an exception
    class (`Question.error`) is answered the same way wherever retrieval's best match sits."""
    return _first_hit_kind(result) == "error"


def with_values(place: Answer, value: Answer | None) -> Answer:
    """A place answer to a question without an interrogative, followed by the printed values that score best for
    it (when any shares a word with the question): the evidence did not say the question asks for a value, so the
    cell comes first, and the values are offered under it rather than dropped. A value printed elsewhere is
    often what was asked ("annual electricity cost for the 700 gpm pump"), and the reader sees it at once. The
    places offered are the cited cell, then the values' cells, each once."""
    if value is None or not value.values:
        return place
    lines = [place.text, "Printed values that may answer it:"]
    lines.extend(f"  {v.shown} — {v.citation.label()}{_meta(v)}" for v in value.values)
    if value.beside:
        lines.append("  " + beside_line(value.beside, "Beside the first"))
    citations = list(dict.fromkeys([*place.citations, *value.citations]))
    return Answer(place.question, "\n".join(lines), citations, place.mode, place.notice, value.values, place.kind,
                  places=list(dict.fromkeys([*place.places[:1], *value.places])), confidence=value.confidence,
                  beside=value.beside)
