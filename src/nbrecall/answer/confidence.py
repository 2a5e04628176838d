"""How far to trust a value answer: the chance that its first value is the one asked for.

On archives nothing here was tuned on, the first value is right about half the time (bench/README.md, issue 13),
so an answer that states every value alike misleads. Two things the ranking already knows tell a likely answer from
a guess, in any archive: how high the best value scores against what the signals can give (`share`: its score over
`ValueWeights.ceiling()`), and how far it stands above the best candidate holding a *different* value (`margin`: a
value printed twice is one answer, not two rivals). `ConfidenceModel` turns them into a probability with a logistic
curve whose three coefficients are fitted by `bench/confidence_fit.py` over the prepared candidates of the
development and held-out sets, each set's calibration checked with coefficients fitted on the others only
(bench/README.md, session 18). The coefficients hold for the default `ValueWeights`; other weights move the scores
they read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from nbrecall.answer.candidates import RankedFact, same_value
from nbrecall.answer.values import ValueWeights


@dataclass(frozen=True)
class ConfidenceModel:
    """P(first value right) = 1 / (1 + exp(-(intercept + share × share_weight + margin × margin_weight)))."""

    intercept: float = -2.36
    share_weight: float = 3.16
    margin_weight: float = 1.81

    def probability(self, share: float, margin: float) -> float:
        z = self.intercept + self.share_weight * share + self.margin_weight * margin
        return 1.0 / (1.0 + math.exp(-z))


# The bands are the probability's, whichever model gave it: below `UNCERTAIN_BELOW` the answer says it is uncertain
# (`compose.value_answer`); from `LIKELY_FROM` up it is likely right. One pair for every model, so an answer's level
# never depends on which coefficients another part of the code assumed.
UNCERTAIN_BELOW = 0.5
LIKELY_FROM = 0.7


def level(probability: float) -> str:
    """`likely`, `possible` or `uncertain`: the bands `bench/confidence_fit.py` reports accuracy for."""
    if probability >= LIKELY_FROM:
        return "likely"
    return "possible" if probability >= UNCERTAIN_BELOW else "uncertain"


# In the learned order (`rerank`) the margin is read on the model's scores: coefficients fitted by
# `bench/ranker_fit.py` on each archive's questions ordered by a model that never saw that archive (bench/README.md,
# session 19). A first value that no candidate contradicts leads by `LEARNED_ALONE`.
LEARNED = ConfidenceModel(intercept=-2.35, share_weight=2.80, margin_weight=0.71)
LEARNED_ALONE = 3.0


def lead(scores: Sequence[float], values: Sequence[str], alone: float) -> float:
    """How far the first of `scores` stands above the best one holding a different value (`alone` when none does):
    a value printed twice is one answer, not two rivals."""
    mine = same_value(values[0])
    rivals = [score for score, value in zip(scores[1:], values[1:], strict=True) if same_value(value) != mine]
    return scores[0] - max(rivals) if rivals else alone


def evidence(ranked: list[RankedFact], weights: ValueWeights) -> tuple[float, float]:
    """`share` and `margin` of the first of `ranked` (best first; see the module docstring). In the learned order
    (`rerank`) the margin is the model's lead over the best different value, else the score's."""
    if not ranked:
        return 0.0, 0.0
    best = ranked[0]
    share = best.score / (weights.ceiling() or 1.0)
    if best.learned is not None:
        head = [c for c in ranked if c.learned is not None]
        return share, lead([c.learned or 0.0 for c in head], [c.fact.value for c in head], LEARNED_ALONE)
    return share, lead([c.score for c in ranked], [c.fact.value for c in ranked], best.score)


def model_for(ranked: list[RankedFact]) -> ConfidenceModel:
    """The coefficients for the order `ranked` is in: the learned order's (`LEARNED`) or the score's (defaults)."""
    return LEARNED if ranked and ranked[0].learned is not None else ConfidenceModel()


def value_confidence(ranked: list[RankedFact], weights: ValueWeights | None = None,
                     model: ConfidenceModel | None = None) -> float:
    """The chance that the first of `ranked` is the value asked for (0 when there is none)."""
    if not ranked:
        return 0.0
    share, margin = evidence(ranked, weights or ValueWeights())
    return (model or model_for(ranked)).probability(share, margin)
