"""The value answer's confidence: what it reads, and what the answer says with it."""

from __future__ import annotations

from typing import Any, cast

import pytest

from nbrecall.answer.candidates import RankedFact, same_value
from nbrecall.answer.compose import value_answer
from nbrecall.answer.confidence import (
    LEARNED,
    LEARNED_ALONE,
    ConfidenceModel,
    evidence,
    model_for,
    value_confidence,
)
from nbrecall.answer.confidence import level as confidence_level
from nbrecall.answer.question import read_question
from nbrecall.answer.types import Answer, AnswerEvent
from nbrecall.answer.values import ValueWeights
from nbrecall.notebook.facts import Fact
from nbrecall.search.retrieve import Hit, NotebookResult, SearchResult

SHA = "c" * 40


def _cand(cell: int, value: str, label: str, score: float) -> RankedFact:
    fact = Fact(cell, f"c{cell}", value, label, f"{label} = {value}", origin="result")
    cand = RankedFact(fact, "stability.ipynb", SHA, 2019, 0, signals={"label": 1.0, "subject": 1.0})
    cand.score = score
    return cand


def _result() -> SearchResult:
    hit = Hit("stability.ipynb", "share", 9, [9], "c9", "text", 1.0, "", "", nb_sha=SHA)
    return SearchResult("q", [NotebookResult(SHA, "stability.ipynb", "share", 1.0, [hit])])


def test_the_probability_rises_with_the_share_and_with_the_margin() -> None:
    model = ConfidenceModel()
    shares = [model.probability(s, 0.2) for s in (0.3, 0.5, 0.7, 0.9)]
    margins = [model.probability(0.6, m) for m in (0.0, 0.3, 0.8, 1.5)]
    assert shares == sorted(shares) and len(set(shares)) == 4
    assert margins == sorted(margins) and len(set(margins)) == 4
    assert all(0.0 < p < 1.0 for p in shares + margins)


@pytest.mark.parametrize(("probability", "level"), [(0.2, "uncertain"), (0.49, "uncertain"), (0.5, "possible"),
                                                    (0.69, "possible"), (0.7, "likely"), (0.95, "likely")])
def test_levels(probability: float, level: str) -> None:
    assert confidence_level(probability) == level


def test_the_margin_is_taken_over_the_best_different_value() -> None:
    # the same value printed twice (`0.95` as a result, `0.950` in a summary) is one answer, not two rivals
    weights = ValueWeights()
    ranked = [_cand(2, "0.95", "accuracy", 4.0), _cand(5, "0.950", "test accuracy", 3.9),
              _cand(7, "0.81", "train accuracy", 3.0)]
    share, margin = evidence(ranked, weights)
    assert share == pytest.approx(4.0 / weights.ceiling())
    assert margin == pytest.approx(1.0)
    alone = evidence(ranked[:2], weights)[1]
    assert alone == pytest.approx(4.0)  # no different value at all: the whole score stands clear
    assert value_confidence([]) == 0.0


def test_a_close_race_is_answered_with_a_notice_and_a_clear_winner_without_one() -> None:
    weights = ValueWeights()
    top = weights.ceiling()
    question = read_question("what static margin did we get")
    archive = cast(Any, None)  # `value_answer` reads the ranked candidates it is given, not the archive
    close = [_cand(2, "2.13", "static margin", 0.55 * top), _cand(5, "1.87", "static margin", 0.55 * top - 0.05)]
    unsure = value_answer(question, _result(), archive, None, weights, close)
    assert unsure is not None and unsure.confidence is not None
    assert unsure.confidence < 0.5 and unsure.notice is not None and "uncertain" in unsure.notice
    assert f"{unsure.confidence:.0%}" in unsure.notice and "Also found" in unsure.notice
    clear = [_cand(2, "2.13", "static margin", 0.85 * top), _cand(5, "1.87", "static margin", 0.3 * top)]
    sure = value_answer(question, _result(), archive, None, weights, clear)
    assert sure is not None and sure.confidence is not None and sure.confidence >= 0.7
    assert sure.notice is None or "uncertain" not in sure.notice
    # the rival printed in the same cell is no alternative of its own (one value per cell): nothing is "also found"
    one_cell = [close[0], _cand(2, "1.87", "static margin", 0.55 * top - 0.05)]
    alone = value_answer(question, _result(), archive, None, weights, one_cell)
    assert alone is not None and len(alone.values) == 1 and alone.notice is not None
    assert "uncertain" in alone.notice and "Also found" not in alone.notice
    # … it is named beside the first value instead, in the text and in `beside`, never among the values judged
    assert [v.value for v in alone.beside] == ["1.87"] and "the values beside it" in alone.notice
    assert "Beside it in the same cell: static margin = 1.87" in alone.text
    assert [v.value for v in unsure.beside] == [] and "beside" not in unsure.text.lower()
    sure_one_cell = value_answer(question, _result(), archive, None, weights,
                                 [clear[0], _cand(2, "1.87", "static margin", 0.3 * top)])
    assert sure_one_cell is not None and sure_one_cell.beside == []  # a likely value needs no comparison


def test_the_confidence_travels_with_the_answer_json() -> None:
    answer = Answer("q", "2.13", confidence=0.4321)
    payload = AnswerEvent("done", answer=answer).as_dict()["answer"]
    assert payload["confidence"] == 0.432
    assert Answer.from_dict(payload).confidence == 0.432
    assert Answer.from_dict({**payload, "confidence": None}).confidence is None


def test_the_values_beside_an_uncertain_value_travel_with_the_answer_json() -> None:
    from nbrecall.answer.types import Citation, FoundValue

    rival = FoundValue("1.87", "static margin", "static margin = 1.87", "", Citation("s.ipynb", 2, "c2", SHA))
    payload = AnswerEvent("done", answer=Answer("q", "2.13", confidence=0.3, beside=[rival])).as_dict()["answer"]
    assert payload["beside"][0]["value"] == "1.87" and payload["beside"][0]["cell"] == 2
    assert Answer.from_dict(payload).beside == [rival]
    assert Answer.from_dict({k: v for k, v in payload.items() if k != "beside"}).beside == []


def test_eval_counts_value_answers_right_per_confidence_level() -> None:
    from nbrecall.answer.evaluate import AnswerOutcome, by_confidence, judge_answer
    from nbrecall.answer.types import Citation, FoundValue
    from nbrecall.search.evaluate import Query

    def outcome(qid: str, shown: str, confidence: float | None, kind: str = "value") -> AnswerOutcome:
        cite = Citation("stability.ipynb", 2, "c2", SHA)
        value = FoundValue(shown, "GM", f"GM = {shown}", "m", cite)
        answer = Answer("q", f"GM = {shown}", [cite], values=[value], confidence=confidence)
        return judge_answer(Query(qid, "q", kind, "stability.ipynb", [2], "2.13" if kind == "value" else None),
                            answer)

    levels = by_confidence([outcome("a", "2.13", 0.9), outcome("b", "1.87", 0.8), outcome("c", "2.13", 0.3),
                            outcome("d", "2.13", 0.6), outcome("e", "2.13", None),
                            outcome("f", "2.13", 0.9, kind="where")])
    assert levels == {"uncertain": (1, 1), "possible": (1, 1), "likely": (2, 1)}


def test_alternatives_hold_other_values_and_the_context_keeps_every_cell() -> None:
    # the first value printed again in a summary cell is the same answer: the alternatives show other values
    from nbrecall.answer.compose import pick_values

    ranked = [_cand(2, "0.95", "accuracy", 4.0), _cand(2, "0.91", "precision", 3.95),
              _cand(5, "0.950", "test accuracy", 3.9), _cand(7, "0.81", "train accuracy", 3.0),
              _cand(9, "0.77", "recall", 2.0)]
    assert [c.fact.cell for c in pick_values(ranked)] == [2, 7, 9]
    assert [c.fact.cell for c in pick_values(ranked, distinct_values=False)] == [2, 5, 7]


@pytest.mark.parametrize(("text", "asked"), [
    ("peak discharge at the urban gauge", False),
    ("final RMSE of the tuned model", False),
    ("how is the Kutta condition enforced in the lifting panel method?", True),
    ("Fuel oil in 2 inch pipe: what psi drop do we get", True),
    ("ship transit segments with mmsi and seg_length?", False),  # keywords with a question mark
    ("Hitters ridge regression: test MSE?", False),
    ("On which weekday were the most cyclists counted?", True),
    ("Refinery LP solved with linprog — how many barrels per day?", True),
    ("For the widget sales series, what MAE did we get", True),
    ("where is the drag computed", True),
    ("Was bedeutet das Ersatzstabverfahren", True),
    ("whatever happened to the wash column", False),
])
def test_a_question_is_told_from_keywords_by_its_grammar_only(text: str, asked: bool) -> None:
    assert read_question(text).asked is asked


def test_keywords_get_the_value_first_when_its_confidence_is_at_least_possible() -> None:
    from nbrecall.answer.compose import _keywords_for_a_value

    keywords = read_question("peak discharge at the urban gauge")
    asked = read_question("how is the peak discharge at the urban gauge found?")
    assert keywords.kind == "general" and asked.kind == "general"
    possible, uncertain = Answer("q", "405.0", confidence=0.55), Answer("q", "405.0", confidence=0.45)
    assert _keywords_for_a_value(keywords, possible)
    assert not _keywords_for_a_value(keywords, uncertain)
    assert not _keywords_for_a_value(asked, possible)  # put as a question: the evidence decides, as before
    assert not _keywords_for_a_value(read_question("what peak discharge did we get at the urban gauge"), possible)


def test_in_the_learned_order_the_margin_is_the_model_s_lead_and_its_coefficients_apply() -> None:
    """After `rerank` the first value need not score highest: its margin is read on the model's scores, over the
    best candidate holding a different value, and the learned order's own coefficients give the probability."""
    weights = ValueWeights()
    first, same, rival = _cand(1, "0.95", "a", 2.0), _cand(2, "0.950", "b", 3.0), _cand(3, "0.40", "c", 2.5)
    first.learned, same.learned, rival.learned = 1.2, 0.9, 0.2
    ranked = [first, same, rival]
    share, margin = evidence(ranked, weights)
    assert share == pytest.approx(2.0 / weights.ceiling()) and margin == pytest.approx(1.0)  # 1.2 - 0.2, not 2.0-3.0
    assert model_for(ranked) is LEARNED and model_for([_cand(1, "1", "a", 1.0)]) == ConfidenceModel()
    assert value_confidence(ranked, weights) == pytest.approx(LEARNED.probability(share, 1.0))
    alone = [first, same]  # nothing contradicts the first value
    assert evidence(alone, weights)[1] == LEARNED_ALONE


def test_one_definition_says_when_two_printed_values_are_one() -> None:
    """Alternatives and the margin tell values apart to six digits; the learned order's support groups a number with
    its rounded copies at four; text compares with its spacing collapsed."""
    assert same_value("3803.0") == same_value("3,803") == same_value(" 3803 ")
    assert same_value("0.950012") != same_value("0.950034")
    assert same_value("0.950012", digits=4) == same_value("0.950034", digits=4)
    assert same_value("Total  ballast\n") == same_value("Total ballast")
