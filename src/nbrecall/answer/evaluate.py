"""Answer evaluation over a query set with cell-level truth (`nbrecall eval --answers`).

For every query the extractive answer is made as `nbrecall ask --extractive` makes it. Measured, overall and per
query kind:
- `value@1`: value questions whose expected value (the query's `answer`, as printed) is in the first value given
  (`holds_value`: as a whole number, not the first digits of a longer one);
- `value@3`: … in the first value or one of the two alternatives;
- `cell@1`: questions of every kind whose first citation is a right cell: one of the query's cells in its
  notebook, or the same cell of a copy listed under `also` (`copy_cells`, as cell@10c counts it);
- `cell@1 strict`: … one of the query's cells in its own notebook only;
- `cell@3`: … a right cell among the first three places the answer offers (a value answer's values' cells; a place
  answer's cell and the two other cells of its notebook it names), as `value@3` counts values;
- `context`: value questions whose expected value is in the context an LLM would be sent (`llm_context`), when
  asked for.

And, per confidence level of the value answers (`by_confidence`), how many there are and how many hold the value:
whether the answer's own estimate (`confidence.py`) holds on this archive's questions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from nbrecall.answer.confidence import level
from nbrecall.answer.types import Answer, Citation
from nbrecall.search.evaluate import Query

AnswerFn = Callable[[str], tuple[Answer, str | None]]  # question → (answer, LLM context text or None)


@dataclass
class AnswerOutcome:
    query: Query
    answer: Answer
    value_first: bool | None  # None: not a value question
    value_top3: bool | None
    cell_first: bool  # the first citation is a right cell (of the query's notebook or the same cell of a copy)
    in_context: bool | None
    strict_cell_first: bool = False  # … a right cell of the query's own notebook
    cell_top3: bool = False  # a right cell among the first three places offered (`Answer.places`)


def holds_value(expected: str, text: str) -> bool:
    """Whether `text` shows the value `expected` as printed: a number counts only whole, so `0.950` is not held by
    `0.95035` nor `1.5` by `1.5e-3` or `11.5` (a plain substring test counted those as right answers)."""
    if not expected:
        return False
    before = r"(?<![\d.])" if expected[0].isdigit() else ""
    after = r"(?!\d|\.\d|[eE][-+]?\d)" if expected[-1].isdigit() else ""
    return re.search(before + re.escape(expected) + after, text) is not None


def _norm(path: str) -> str:
    return path.replace("\\", "/").lstrip("./")


def _shown(answer: Answer) -> list[str]:
    """The values an answer gives, in order; an answer without values counts by its first line."""
    if answer.values:
        return [v.shown for v in answer.values]
    return [answer.text.splitlines()[0]] if answer.text else []


def judge_answer(query: Query, answer: Answer, context: str | None = None) -> AnswerOutcome:
    first = answer.citations[0] if answer.citations else None
    copies = {_norm(nb): set(cells) for nb, cells in query.copy_cells.items()}

    def own(citation: Citation) -> bool:  # one of the query's cells in its own notebook
        return _norm(citation.notebook) == _norm(query.notebook) and citation.cell in query.cells

    def right(citation: Citation) -> bool:  # … or the same cell of a copy
        return own(citation) or citation.cell in copies.get(_norm(citation.notebook), ())

    strict = first is not None and own(first)
    cell_first = first is not None and right(first)
    places = answer.places or answer.citations[:1]
    cell_top3 = cell_first or any(right(c) for c in places[:3])
    value_first = value_top3 = in_context = None
    if query.kind == "value" and query.answer:
        shown = _shown(answer)
        value_first = bool(shown) and holds_value(query.answer, shown[0])
        value_top3 = any(holds_value(query.answer, s) for s in shown[:3])
        if context is not None:
            in_context = holds_value(query.answer, context)
    return AnswerOutcome(query, answer, value_first, value_top3, cell_first, in_context, strict, cell_top3)


def answer_metrics(outcomes: Iterable[AnswerOutcome]) -> dict[str, float]:
    items = list(outcomes)
    values = [o for o in items if o.value_first is not None]
    contexts = [o for o in values if o.in_context is not None]
    n = len(items) or 1
    table = {"n": float(len(items)), "cell@1": sum(o.cell_first for o in items) / n,
             "cell@1 strict": sum(o.strict_cell_first for o in items) / n,
             "cell@3": sum(o.cell_top3 for o in items) / n}
    if values:
        table["n values"] = float(len(values))
        table["value@1"] = sum(bool(o.value_first) for o in values) / len(values)
        table["value@3"] = sum(bool(o.value_top3) for o in values) / len(values)
    if contexts:
        table["context"] = sum(bool(o.in_context) for o in contexts) / len(contexts)
    return table


def by_confidence(outcomes: Iterable[AnswerOutcome]) -> dict[str, tuple[int, int]]:
    """Value answers per confidence level (`uncertain`, `possible`, `likely`): (how many, how many hold the value).
    Answers without a confidence (no value given) are left out."""
    levels = {band: (0, 0) for band in ("uncertain", "possible", "likely")}
    for o in outcomes:
        if o.value_first is None or o.answer.confidence is None:
            continue
        band = level(o.answer.confidence)
        n, right = levels[band]
        levels[band] = (n + 1, right + bool(o.value_first))
    return levels


def evaluate_answers(queries: list[Query], ask: AnswerFn) -> tuple[dict[str, dict[str, float]], list[AnswerOutcome]]:
    """Answer every query; metrics overall (key "all") and per kind, and the outcomes."""
    outcomes = []
    for q in queries:
        answer, context = ask(q.query)
        outcomes.append(judge_answer(q, answer, context))
    table = {"all": answer_metrics(outcomes)}
    for kind in sorted({q.kind for q in queries}):
        table[kind] = answer_metrics(o for o in outcomes if o.query.kind == kind)
    return table, outcomes
