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
from dataclasses import dataclass

from nbrecall.answer.values import RankedFact, ValueWeights
from nbrecall.notebook.printed import leading_number


@dataclass(frozen=True)
class ConfidenceModel:
    """P(first value right) = 1 / (1 + exp(-(intercept + share × share_weight + margin × margin_weight)))."""

    intercept: float = -2.36
    share_weight: float = 3.16
    margin_weight: float = 1.81
    # Below this the answer says it is uncertain (`compose.value_answer`); from `likely` up it is likely right.
    uncertain_below: float = 0.5
    likely_from: float = 0.7

    def probability(self, share: float, margin: float) -> float:
        z = self.intercept + self.share_weight * share + self.margin_weight * margin
        return 1.0 / (1.0 + math.exp(-z))

    def level(self, probability: float) -> str:
        """`likely`, `possible` or `uncertain`: the bands `bench/confidence_fit.py` reports accuracy for."""
        if probability >= self.likely_from:
            return "likely"
        return "possible" if probability >= self.uncertain_below else "uncertain"


def same_value(value: str) -> str:
    """What makes two printed values one answer: their leading number to six significant digits (`0.95` and
    `0.950`), else the text itself."""
    number = leading_number(value)
    return f"{number:.6g}" if number is not None else value.strip()


def evidence(ranked: list[RankedFact], weights: ValueWeights) -> tuple[float, float]:
    """`share` and `margin` of the first of `ranked` (best first; see the module docstring)."""
    if not ranked:
        return 0.0, 0.0
    best = ranked[0]
    ceiling = weights.ceiling() or 1.0
    mine = same_value(best.fact.value)
    rival = next((c.score for c in ranked[1:] if same_value(c.fact.value) != mine), 0.0)
    return best.score / ceiling, best.score - rival


def value_confidence(ranked: list[RankedFact], weights: ValueWeights | None = None,
                     model: ConfidenceModel | None = None) -> float:
    """The chance that the first of `ranked` is the value asked for (0 when there is none)."""
    if not ranked:
        return 0.0
    share, margin = evidence(ranked, weights or ValueWeights())
    return (model or ConfidenceModel()).probability(share, margin)
