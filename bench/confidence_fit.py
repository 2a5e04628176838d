"""Fit and check the value answer's confidence (`nbrecall.answer.confidence.ConfidenceModel`).

For every value question of the sets given, the candidates are ranked with the default weights in the score's own
order (`answer.rerank = false`; the learned order's coefficients, `confidence.LEARNED`, are fitted by
`bench/ranker_fit.py`) and the first value's `share` and `margin` read (`confidence.evidence`), with whether it holds
the expected value (read whole, `answer.evaluate.holds_value`). A logistic curve of the two is fitted (Newton steps, a
small L2 pull on the two slopes). Each set's questions are then given probabilities from coefficients fitted on the
*other* sets only
(leave-one-set-out), and the share right is printed per confidence level: what a level promises on an archive the
coefficients never saw. Last, the coefficients fitted on every set, and the same table for the model's current
defaults.

    .venv/bin/python bench/confidence_fit.py --cache /tmp/conf \\
        --set eval=/tmp/idx1:../shared/eval/queries.jsonl:../shared/corpus \\
        --set eval2=/tmp/idx2:../shared/eval2/queries.jsonl:../shared/eval2/corpus \\
        --set F=/tmp/idxf:bench/heldout/queries_f.jsonl:/tmp/fresh_f/corpus … --pool F,G,H,I,J
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import numpy as np

from answer_fit import load_set  # bench/, beside this script
from nbrecall.answer.confidence import ConfidenceModel, evidence, level
from nbrecall.answer.evaluate import holds_value
from nbrecall.answer.question import read_question
from nbrecall.answer.values import ValueWeights, score


def observations(spec: str, cache: Path | None) -> tuple[str, np.ndarray]:
    """Per value question of the set: share, margin, right (1/0)."""
    data = load_set(spec, cache)
    weights = ValueWeights()
    rows = []
    for q, result, cands, _context in data.prepared:
        if q.kind != "value" or not q.answer:
            continue
        ranked = score(read_question(q.query), copy.deepcopy(cands), result, weights) if cands else []
        share, margin = evidence(ranked, weights)
        right = bool(ranked) and (holds_value(q.answer, ranked[0].fact.shown)
                                   or holds_value(q.answer, ranked[0].fact.statement()))
        rows.append((share, margin, float(right)))
    return data.name, np.array(rows, dtype=np.float64).reshape(-1, 3)


def fit(rows: np.ndarray, l2: float = 1.0) -> np.ndarray:
    """Intercept, share and margin coefficients of the logistic curve (Newton's method)."""
    x = np.c_[np.ones(len(rows)), rows[:, :2]]
    y = rows[:, 2]
    w = np.zeros(3)
    pull = l2 * np.diag([0.0, 1.0, 1.0])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        gradient = x.T @ (p - y) + pull @ w
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + pull
        w -= np.linalg.solve(hessian, gradient)
    return w


def model_of(w: np.ndarray) -> ConfidenceModel:
    return ConfidenceModel(float(w[0]), float(w[1]), float(w[2]))


def table(label: str, probabilities: np.ndarray, right: np.ndarray) -> str:
    """`label: uncertain n / share right · possible … · likely …`, and the log loss."""
    levels = np.array([level(p) for p in probabilities])
    parts = []
    for band in ("uncertain", "possible", "likely"):
        chosen = levels == band
        n = int(chosen.sum())
        parts.append(f"{band} {n}" + (f" ({right[chosen].mean():.2f} right)" if n else ""))
    clipped = np.clip(probabilities, 1e-9, 1 - 1e-9)
    loss = -np.mean(right * np.log(clipped) + (1 - right) * np.log(1 - clipped)) if len(right) else 0.0
    return f"{label:>12}: n {len(right)}, {right.mean() if len(right) else 0:.2f} right · " + " · ".join(parts) + \
        f" · log loss {loss:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="NAME=INDEX:QUERIES[:CORPUS]")
    parser.add_argument("--cache", type=Path, help="the folder answer_ablation.py caches its searches in")
    parser.add_argument("--pool", action="append", default=[], metavar="SET,SET,…",
                        help="also report these sets pooled (repeatable)")
    args = parser.parse_args()
    sets = dict(observations(spec, args.cache) for spec in args.set)
    names = list(sets)
    held: dict[str, np.ndarray] = {}
    for name in names:
        others = np.vstack([sets[o] for o in names if o != name])
        model = model_of(fit(others))
        held[name] = np.array([model.probability(s, m) for s, m, _ in sets[name]])
    default = ConfidenceModel()
    print("Leave-one-set-out (each set's probabilities from coefficients fitted on the others):")
    for name in names:
        print(table(name, held[name], sets[name][:, 2]))
    for pool in [",".join(names), *args.pool]:
        members = pool.split(",")
        print(table("+".join(members) if len(members) < 6 else f"{len(members)} sets",
                    np.concatenate([held[m] for m in members]), np.concatenate([sets[m][:, 2] for m in members])))
    everything = np.vstack([sets[n] for n in names])
    w = fit(everything)
    print(f"Fitted on every set: intercept {w[0]:.2f}, share {w[1]:.2f}, margin {w[2]:.2f}")
    print(f"Current defaults: intercept {default.intercept}, share {default.share_weight}, margin "
          f"{default.margin_weight}")
    for pool in [",".join(names), *args.pool]:
        members = pool.split(",")
        rows = np.vstack([sets[m] for m in members])
        p = np.array([default.probability(s, m) for s, m, _ in rows])
        print(table(("defaults, " + ("+".join(members) if len(members) < 6 else f"{len(members)} sets")), p,
                    rows[:, 2]))


if __name__ == "__main__":
    main()
