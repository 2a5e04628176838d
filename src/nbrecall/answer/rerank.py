"""A learned order for the best value candidates: what the hand-set score cannot weigh, learned from other archives.

The hand-set score (`values.score`) adds its signals linearly; refitting those weights never carried to a new
archive (bench/README.md, sessions 6, 13, 14). What did carry is a ranker that combines the same signals with what
the score leaves out (the value's origin and form, how many rivals its cell holds, where it stands among its
notebook's candidates, how many other candidates show the same number: a value printed, tabled and reused in several
cells or notebooks has support that one look-alike lacks) non-linearly: gradient-boosted trees trained for ranking
(LightGBM, lambdarank) on the labelled questions of other archives, each archive's gain measured with a model that
never saw it (`bench/ranker_fit.py`, bench/README.md, sessions 19 and 23).

The model is a file the project builds (`ranker.onnx`, written by `bench/ranker_fit.py`) and runs with onnxruntime,
which the embedder already needs: no training library at run time. It re-orders the first `TOP` candidates; the
rest keep the score's order after them. `answer.rerank = false` turns it off (the hand-set order);
`answer.ranker_model` names a model trained on an archive's own labelled questions instead.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nbrecall.answer.candidates import RankedFact, same_value
from nbrecall.answer.question import Question
from nbrecall.answer.values import TERMS, ValueWeights, rank_values
from nbrecall.config import AnswerSettings
from nbrecall.notebook.printed import NUMBER, leading_number
from nbrecall.records import SearchFilters
from nbrecall.search.retrieve import SearchResult

if TYPE_CHECKING:
    from nbrecall.service import Archive

# How many of the best-scored candidates the model re-orders (what it was trained on).
TOP = 40
ORIGINS = ("result", "line", "entry", "table", "latex", "input")
# The model's inputs, in order: the score's own terms, then what the score does not weigh.
FEATURES = (*TERMS, *(f"origin_{o}" for o in ORIGINS), "score", "gap", "position", "share", "notebook_rank",
            "rank_in_notebook", "cell_candidates", "final", "digits", "integer", "zero", "label_length", "magnitude",
            "has_unit", "stale", "same_value", "same_value_best")
MODEL_FILE = "ranker.onnx"


class RankerModelError(ValueError):
    """The learned order's model cannot be used: which file, and why."""


def number_digits(value: str) -> int:
    """The significant digits of a value's leading number itself, zeros at either end dropped (`282.798193` 9,
    `10.0000` 1, `0.0061` 2): how round the number is. `values._significant_digits` counts the precision it is
    printed with instead (`10.0000` 6), which is what the score's `computed` signal reads."""
    match = NUMBER.search(value)
    if match is None:
        return 0
    digits = "".join(c for c in match.group(0).split("e")[0].split("E")[0] if c.isdigit())
    return len(digits.strip("0"))


def features(ranked: list[RankedFact], weights: ValueWeights | None = None) -> np.ndarray:
    """One row of `FEATURES` per candidate of `ranked` (best-scored first, as `values.score` returns them)."""
    weights = weights or ValueWeights()
    ceiling = weights.ceiling() or 1.0
    best = ranked[0].score if ranked else 0.0
    per_cell = Counter((r.nb_sha, r.fact.cell) for r in ranked)
    keys = [same_value(r.fact.value, digits=4) for r in ranked]
    same = Counter(keys)
    best_of: dict[str, float] = {}
    for key, r in zip(keys, ranked, strict=True):
        best_of.setdefault(key, r.score)  # ranked best-scored first: the first is the best
    seen_in_notebook: Counter[str] = Counter()
    rows = []
    for position, r in enumerate(ranked):
        fact = r.fact
        number = leading_number(fact.value)
        row = [r.terms.get(t, 0.0) for t in TERMS]
        row += [1.0 if fact.origin == o else 0.0 for o in ORIGINS]
        row += [r.score, best - r.score, float(position), r.score / ceiling,
                float(r.rank if r.rank is not None else 9), float(seen_in_notebook[r.nb_sha]),
                float(per_cell[(r.nb_sha, fact.cell)]), float(fact.final),
                float(min(number_digits(fact.value), 12)),
                1.0 if number is not None and float(number).is_integer() else 0.0, 1.0 if number == 0 else 0.0,
                float(len(fact.label)), math.log1p(abs(number)) if number is not None else -1.0,
                1.0 if fact.unit else 0.0, 1.0 if fact.stale else 0.0,
                float(same[keys[position]] - 1), best_of[keys[position]] - r.score]
        seen_in_notebook[r.nb_sha] += 1
        rows.append(row)
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), len(FEATURES))


@lru_cache(maxsize=4)
def _session(path: str = "") -> Any:
    """The model at `path` ("": the bundled one), loaded once per process (an immutable file, like the embedder's)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # a few dozen rows: threads cost more than they save
    where = path or f"nbrecall/answer/{MODEL_FILE}"
    try:
        model = Path(path).expanduser().read_bytes() if path else \
            resources.files("nbrecall.answer").joinpath(MODEL_FILE).read_bytes()
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own types for a file that is not a model
        raise RankerModelError(f"{where}: not a model nbrecall can run ({exc}); [answer] rerank = false answers "
                               "without it") from exc
    width = session.get_inputs()[0].shape[-1]
    if width != len(FEATURES):
        raise RankerModelError(f"{where}: the model reads {width} features and this nbrecall computes "
                               f"{len(FEATURES)}: train it again with bench/ranker_fit.py")
    return session


def model_scores(rows: np.ndarray, model: str = "") -> np.ndarray:
    """The model's score for each row of `features` (higher: more likely the value asked for); `model` as in
    `_session`."""
    session = _session(model)
    name = session.get_inputs()[0].name
    return np.asarray(session.run(None, {name: rows})[0], dtype=np.float64).ravel()


def rerank(ranked: list[RankedFact], weights: ValueWeights | None = None, model: str = "") -> list[RankedFact]:
    """`ranked` with its first `TOP` candidates in the model's order (ties keep the score's order), the rest after.
    Each of the first keeps its score and gets the model's (`RankedFact.learned`)."""
    if len(ranked) < 2:
        return ranked
    head = ranked[:TOP]
    learned = model_scores(features(head, weights), model)
    for candidate, value in zip(head, learned, strict=True):
        candidate.learned = float(value)  # what the confidence reads (`confidence.evidence`)
    order = sorted(range(len(head)), key=lambda i: (-learned[i], i))
    return [head[i] for i in order] + ranked[TOP:]


def check_model(settings: AnswerSettings) -> None:
    """Load the settings' model now when the learned order is on, so that a model that cannot be used is reported
    where the setting is read (`nbrecall serve` refuses to start) rather than at the first question;
    `RankerModelError` names the file."""
    if settings.rerank:
        _session(settings.ranker_model)


def answer_order(ranked: list[RankedFact], settings: AnswerSettings,
                 weights: ValueWeights | None = None) -> list[RankedFact]:
    """Scored candidates (`values.score`) in the order the answers use: the learned one with the settings' model,
    unless `answer.rerank` is off."""
    return rerank(ranked, weights, settings.ranker_model) if settings.rerank else ranked


def ordered_values(question: Question, result: SearchResult, archive: Archive, filters: SearchFilters | None = None,
                   weights: ValueWeights | None = None) -> list[RankedFact]:
    """The value candidates for `question`, best first: scored (`values.rank_values`), then in the answers' order
    (`answer_order`)."""
    return answer_order(rank_values(question, result, archive, filters, weights), archive.settings.answer, weights)
