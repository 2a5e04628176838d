"""Which value answers a value question: value facts ranked by signals that carry from one archive to the next.

Candidates are the facts of the notebooks retrieval ranked first, plus facts the store finds on their own (a fact
is a chunk of kind `fact`: keyword and vector search see it like any chunk), gathered by `candidates.gather`. Each
gets these signals, all in 0..1:

- `similarity`: cosine of the question and the fact's description (label, value, unit, heading, the sentence
  above) with the bundled embedder: vectors stored at index time, read through the store's own vector search;
- `keyword`: the fact's BM25 score against the question, relative to the best fact's;
- `notebook`: its notebook's retrieval score relative to the first notebook's (0 outside the result);
- `cell`: the best score of the chunks retrieval found on the fact's cell, relative to its notebook's best;
- `label`: how much of the question the fact's name (label, the variables that printed it, the unit and what the
  value is of, `21.88 roods of wheat`, and what the notebook says those variables are: `glossary`) covers, terms
  weighted by rarity among the candidates, times how much of that name the question covers;
- `context`: the same coverage for where the fact is (heading path, the sentence above, the code line);
- structure and kind: the last of a repeated label in a cell is a loop's result (`final`); a count is an
  integer, a share a fraction or a percentage; a value the question itself gives is an input, not the answer;
- form (`_form`), for a value whose name holds some of the question: a number with three or more significant
  digits (or a spread or range led by one: `0.170+/-0.002`, `0.182, 0.218`) is computed, not a round setting; an
  exact zero is a counter's start; a cell's shown result and a labelled printout are what the author chose to show.
  Their weights are fitted (`bench/answer_fit.py`).

The weights are `ValueWeights`; `bench/answer_ablation.py` measures each signal's part on both development sets.
The answers then take the best candidates in a learned order (`rerank.py`) that combines these signals with others.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from nbrecall.answer.candidates import RankedFact, gather
from nbrecall.answer.question import Question, extreme_named
from nbrecall.index.terms import Weights, match, term_set
from nbrecall.notebook.facts import Fact
from nbrecall.notebook.printed import NUMBER, leading_number, to_number
from nbrecall.records import SearchFilters
from nbrecall.search.retrieve import NotebookResult, SearchResult

if TYPE_CHECKING:
    from nbrecall.service import Archive


@dataclass
class ValueWeights:
    """How the signals add up (see the module docstring); a weight of 0 turns a signal off (the ablation).

    Off by default (0.0): keyword, final, kind, unit, position, spread. Each was measured on both development sets
    (bench/README.md, issue 13) and none raised a figure on either; turned off together they raised value@1 on
    both (eval 0.800 → 0.867, eval2 0.614 → 0.636). They stay settable for an archive where they do help.
    `shown_first` joined them on 3 Dec (session 7): with the glossary it raised no figure on either set, and off it
    raised eval's all-kinds cell@1 by one question (bench/README.md).
    """

    similarity: float = 1.0
    keyword: float = 0.0
    notebook: float = 0.6
    cell: float = 0.6
    cell_similarity: float = 1.0  # the question against the cell's own chunks (its code, output, markdown)
    label: float = 1.0
    subject: float = 0.5  # the fact's name holds what the question asks about (its first noun phrase)
    context: float = 0.4
    final: float = 0.0  # added for the last fact of its label in a cell, taken from the others
    kind: float = 0.0  # added when the value is of the kind the question names (a count, a share)
    given: float = 0.5  # taken away when the value is a number the question gives
    extreme: float = 0.3  # added for the max (min) of its series when the question asks for the most (least)
    excluded: float = 0.6  # taken away, times the share of the question's excluded terms the fact's place holds
    input: float = 0.3  # taken away from a constant the code sets (a value the notebook used but never showed)
    unit: float = 0.0  # added when the question names the unit written with the value ("in pcm", "liters per hour")
    position: float = 0.0  # earlier question terms weigh more in the name match (the subject comes first)
    spread: float = 0.0  # a cell next to one retrieval found gets this share of its score, per cell of distance
    inputs: float = 0.5  # times the share of the question's numbers that the fact's cell sets or passes
    outside: float = 0.8  # multiplies the score of a fact whose notebook retrieval did not rank
    # The value's form, whatever the question (`_form`): what a notebook prints as a result looks different from
    # the settings and counters around it, in any archive. Fitted, not set by hand: `bench/answer_fit.py --loss
    # softmax` over the two development sets and three held-out sets, each set's gain checked with weights fitted
    # on the others only (bench/README.md, session 13).
    computed: float = 0.37  # added for a number with three or more significant digits (not a round setting)
    zero: float = 0.24  # taken away from an exact zero (a counter's or an accumulator's start)
    result: float = 0.22  # added for the shown value of a cell's last expression
    printed: float = 0.09  # added for a value the code prints with its label (`label: value`)
    shown_first: float = 0.0  # 1: a constant the code sets never beats a value its own cell shows (0: off)
    glossary: float = 1.0  # 1: a fact's name includes what its notebook says its variables are (0: off)
    # Below this share of `ceiling()`, the best value is offered under the closest cell instead of given as the
    # answer (0: off). On both development sets 8 of 59 value questions have a best value under 45% of it, and 6
    # of those 8 are wrong; every share from 47% to 51% makes three eval first citations right (an error, a column
    # and a value question) and changes none on eval2; from 52% eval2 loses (bench/README.md, session 8).
    min_share: float = 0.5
    # 1: a question without an interrogative that names the unit printed with the best value is answered with that
    # value, not with the closest cell (`compose._value_fits`; 0: off). On eval2 two first citations become the
    # value's cell (v004, v007); eval and every other question are unchanged (bench/README.md, session 10).
    named_unit: float = 1.0

    def ceiling(self) -> float:
        """The score of a value with every signal that each candidate gets at its best (1): what a score is
        measured against when it is judged too low to answer (`min_share`)."""
        return (self.similarity + self.keyword + self.notebook + self.cell + self.cell_similarity + self.label
                + self.subject + self.context + self.computed + max(self.result, self.printed))


# The terms `score` records for each candidate (`RankedFact.terms`), each multiplied by the `ValueWeights` field of
# its name: the linear part of the score, which `bench/answer_fit.py` fits.
TERMS = ("similarity", "keyword", "notebook", "cell", "cell_similarity", "label", "subject", "context", "final",
         "kind", "given", "extreme", "excluded", "inputs", "unit", "input", "computed", "zero", "result", "printed")


_DIGITS = re.compile(r"\d[\d,]*(?:\.\d*)?")


def _significant_digits(value: str) -> int:
    """The significant digits of the first number in `value` ("0.00612" → 3, "1,284.6" → 5, "5e-3" → 1, "1000" →
    1: an integer's trailing zeros are not counted)."""
    found = _DIGITS.search(value)
    if not found:
        return 0
    number = found.group().replace(",", "")
    digits = number.replace(".", "").lstrip("0")
    return len(digits if "." in number else digits.rstrip("0"))


def _form(fact: Fact, named: bool) -> dict[str, float]:
    """Signals of the value's form (see `ValueWeights.computed` and after), for a value whose name holds some of
    the question (`named`): the form tells a result from the settings and rows around it among values that name
    what is asked; it does not lift a value that names none of it (0 for every signal)."""
    return {"computed": float(named and leading_number(fact.value) is not None and fact.origin != "table"
                              and _significant_digits(fact.value) >= 3),
            "zero": -float(named and fact.number == 0.0),
            "result": float(named and fact.origin == "result"),
            "printed": float(named and fact.origin == "line")}


def _extreme(question: Question, fact: Fact, mark: str | None) -> float:
    """1 when the question asks for an extreme and the value is it: its label names that extreme (`Maximum value in
    the domain` for "peak stress"), or it is that extreme of its series (`mark`, `_extremes`) and its label names
    no other."""
    if not question.extreme:
        return 0.0
    named = extreme_named(fact.label)
    return float(named == question.extreme or (named is None and mark == question.extreme))


def _after_value(fact: Fact) -> str:
    """What the printout says after the value itself: its unit and what it is a quantity of (`21.88 roods of
    wheat`); part of the value's name, as its label is."""
    at = fact.shown.rfind(fact.value)
    return fact.shown[at + len(fact.value):] if at >= 0 else ""


def _is_count(fact: Fact) -> bool:
    return fact.number is not None and float(fact.number).is_integer() and "." not in fact.value


def _is_share(fact: Fact) -> bool:
    return fact.value.endswith("%") or (fact.number is not None and 0.0 <= abs(fact.number) <= 1.0
                                        and "." in fact.value)


def _extremes(cands: list[RankedFact]) -> dict[int, str]:
    """For each series (the entries of one Series, one table column, one repeated label in a cell), which facts
    are its max and min: `id(fact)` → "max" | "min"."""
    series: dict[tuple[str, int, str], list[RankedFact]] = {}
    for cand in cands:
        f = cand.fact
        if f.number is None or f.origin not in ("entry", "table", "line"):
            continue
        # a table's column, an entry's Series, a printed label without the loop block that names each printout
        key = "" if f.origin == "entry" else f.label.rsplit(" · ", 1)[-1]
        series.setdefault((cand.nb_sha, f.cell, key), []).append(cand)
    marks: dict[int, str] = {}
    for members in series.values():
        if len(members) < 3:
            continue
        top = max(members, key=lambda c: c.fact.number or 0.0)
        low = min(members, key=lambda c: c.fact.number or 0.0)
        marks[id(top.fact)] = "max"
        marks[id(low.fact)] = "min"
    return marks


def _cell_signal(nb: NotebookResult | None, cell: int, spread: float) -> float:
    """How much retrieval found the question at `cell`: the best score of the chunks that covered it, relative to
    the notebook's best; a cell that no chunk covered gets `spread` of its nearest covered neighbour per step
    (a value printed just after the cell retrieval found belongs to the same piece of work)."""
    if nb is None or not nb.cell_scores:
        return 0.0
    top = max(nb.cell_scores.values()) or 1.0
    best = nb.cell_scores.get(cell, 0.0)
    for distance in (1, 2):
        near = max(nb.cell_scores.get(cell - distance, 0.0), nb.cell_scores.get(cell + distance, 0.0))
        best = max(best, near * spread**distance)
    return best / top


@lru_cache(maxsize=4096)
def _numbers_in(source: str) -> frozenset[float]:
    return frozenset(n for n in (to_number(m.group()) for m in NUMBER.finditer(source)) if n is not None)


def _inputs_found(question: Question, source: str) -> float:
    """The share of the numbers the question mentions ("100 US gpm", "up 400 ft", "70% efficient") that the
    cell's code contains: the value asked for is computed from the numbers the question gives."""
    if not question.mentions or not source:
        return 0.0
    written = _numbers_in(source)
    found = sum(1 for mention in question.mentions if any(math.isclose(n, v, rel_tol=1e-9) for n in mention
                                                          for v in written))
    return found / len(question.mentions)


def _exclusions(question: Question, cands: list[RankedFact]) -> list[float]:
    """For each candidate, the share of the question's excluded terms ("rather than ISO", "not the lognormal
    fit") its name or its own cell's code holds (the code line alone outside the first notebooks, whose sources
    are not read): evidence against it. The prose around it does not count: it names the alternative it sets the
    cell against as often as the method it uses ("outside the range of the ISO formula, we turn to …")."""
    if not question.excluded:
        return [0.0] * len(cands)
    out = []
    for cand in cands:
        f = cand.fact
        vocabulary = term_set(f"{f.label} {f.names} {f.code} {cand.source}")
        out.append(sum(1 for t in question.excluded if match(t, vocabulary) >= 0.7) / len(question.excluded))
    return out


def _parents(cands: list[RankedFact]) -> dict[int, RankedFact]:
    """For each entry of a dict, Series or constructor repr, the fact of the whole repr it is part of (the same
    cell's fact whose value holds it)."""
    wholes: dict[tuple[str, int], list[RankedFact]] = {}
    for cand in cands:
        if cand.fact.origin in ("result", "line"):
            wholes.setdefault((cand.nb_sha, cand.fact.cell), []).append(cand)
    parents: dict[int, RankedFact] = {}
    for cand in cands:
        if cand.fact.origin == "entry":
            for whole in wholes.get((cand.nb_sha, cand.fact.cell), []):
                if cand.fact.shown in whole.fact.value and len(whole.fact.value) > len(cand.fact.shown):
                    parents[id(cand)] = whole
                    break
    return parents


def _shown_before_inputs(cands: list[RankedFact]) -> None:
    """A constant the code sets (`pump_efficiency = 0.707`) is placed just below the best value its own cell shows
    (`The cost is $84033.24`), unless its name holds more of what the question asks about: the author printed what
    the cell computes, and the constants it starts from are what it is computed from. In place."""
    shown: dict[tuple[str, int], RankedFact] = {}
    for cand in cands:
        if cand.fact.origin != "input":
            key = (cand.nb_sha, cand.fact.cell)
            if key not in shown or cand.score > shown[key].score:
                shown[key] = cand
    for cand in cands:
        best = shown.get((cand.nb_sha, cand.fact.cell)) if cand.fact.origin == "input" else None
        if best is not None and cand.score > best.score and cand.signals["subject"] <= best.signals["subject"]:
            cand.score = best.score - 1e-6


def score(question: Question, cands: list[RankedFact], result: SearchResult,
          weights: ValueWeights | None = None) -> list[RankedFact]:
    """Score every candidate (in place) and return them best first."""
    w = weights or ValueWeights()
    if not cands:
        return []
    names = [term_set(f"{c.fact.label} {c.fact.names} {c.fact.unit} {_after_value(c.fact)} "
                      f"{f'{c.meaning} {c.inputs_meaning}' if w.glossary else ''}") for c in cands]
    places = [term_set(f"{c.fact.heading} {c.fact.sentence} {c.fact.code} {c.source}") for c in cands]
    units = [term_set(c.fact.unit + " " + " ".join(re.findall(r"\[([^\]]{1,20})\]", c.fact.label))) for c in cands]
    # rarity among the candidates' names: what tells values apart
    by_name = Weights(question.terms, names, position=w.position)
    by_place = Weights(question.terms, [n | p for n, p in zip(names, places, strict=True)])
    by_subject = Weights(question.subject, names) if question.subject else None
    best_nb = result.notebooks[0].score if result.notebooks else 1.0
    by_sha: dict[str, NotebookResult] = {nb.nb_sha: nb for nb in result.notebooks}
    marks = _extremes(cands) if question.extreme else {}
    excluded = _exclusions(question, cands)
    best_keyword = max((c.signals["keyword_raw"] for c in cands), default=0.0) or 1.0
    asked_units = {t for t in question.terms if any(match(t, u) >= 0.7 for u in units)}
    for cand, name, place, unit, against in zip(cands, names, places, units, excluded, strict=True):
        s = cand.signals
        fact = cand.fact
        nb = by_sha.get(cand.nb_sha)
        s["keyword"] = s["keyword_raw"] / best_keyword
        s["notebook"] = max(0.0, min(1.0, nb.score / best_nb)) if nb is not None and best_nb > 0 else 0.0
        s["cell"] = _cell_signal(nb, fact.cell, w.spread)
        recall = by_name.recall(name)
        s["label"] = 0.5 * recall + 0.5 * by_name.precision(name) if recall > 0 else 0.0
        s["context"] = by_place.recall(place | name) if question.terms else 0.0
        s["subject"] = by_subject.recall(name) if by_subject is not None else 0.0
        s["inputs"] = _inputs_found(question, cand.source)
        terms = cand.terms = {  # each term's weight is the `ValueWeights` field of its name
            "similarity": s["similarity"], "keyword": s["keyword"], "notebook": s["notebook"], "cell": s["cell"],
            "cell_similarity": s.get("cell_similarity", 0.0), "label": s["label"], "subject": s["subject"],
            "context": s["context"],
            "final": 1.0 if fact.final else -1.0,
            "kind": float(question.asks == "count" and _is_count(fact) or question.asks == "share" and _is_share(fact)),
            "given": -float(fact.number is not None
                            and any(math.isclose(fact.number, n, rel_tol=1e-9) for n in question.numbers)),
            "extreme": _extreme(question, fact, marks.get(id(fact))),
            "excluded": -against,
            "inputs": s["inputs"],
            "unit": float(bool(asked_units) and any(match(t, unit) >= 0.7 for t in asked_units)),
            "input": -float(fact.origin == "input"),
            **_form(fact, s["label"] > 0 or s["subject"] > 0),
        }
        total = sum(getattr(w, key) * value for key, value in terms.items())
        if cand.outside():
            total *= w.outside
        cand.score = total
    for cand_id, whole in _parents(cands).items():  # an entry never beats its dict unless its name says more
        entry = next(c for c in cands if id(c) == cand_id)
        if entry.signals["label"] <= whole.signals["label"]:
            entry.score = min(entry.score, whole.score - 1e-6)
    if w.shown_first:
        _shown_before_inputs(cands)
    # equal scores: the last printout of a repeated label in a cell (a loop's or a solver's result) before the first
    return sorted(cands, key=lambda c: (-c.score, c.rank if c.rank is not None else 99, c.fact.cell,
                                        not c.fact.final, c.fact.position))


def rank_values(question: Question, result: SearchResult, archive: Archive, filters: SearchFilters | None = None,
                weights: ValueWeights | None = None) -> list[RankedFact]:
    """Candidate facts for `question`, best first."""
    return score(question, gather(question, result, archive, filters), result, weights)
