"""Fit the answer weights (`answer.values.ValueWeights`) to the development sets, and measure them on questions they
were not fitted on.

Why: the weights were set by hand while looking at both sets' misses, so their figures there are optimistic, and an
archive nobody here has seen is where they matter. This fits the linear part of the value score (every
`ValueWeights` field that multiplies one of a candidate's `terms`) by a pairwise logistic loss: for each value
question, each candidate fact that holds the expected value should score above each that does not. The fit is
pulled towards the hand-set weights (an L2 penalty of strength `--shrink`) and keeps every weight ≥ 0 (each term
already has the sign it is meant to have); `--loss softmax` fits the likelihood of a right first value instead
(`fit_softmax`). It prints, for the default weights and for fitted ones:

- `cross`: fitted on one set, measured on the other (the closest to an unseen archive that two sets allow); with
  more than two sets (the held-out sets of `bench/heldout/`, split per corpus), `left out`: each set measured with
  weights fitted on all the others;
- `cv`: k-fold over the value questions of both sets together, each question answered with weights fitted
  without it, reported per set;
- `all`: fitted on both sets (the weights one would ship), measured on both (in-sample: not evidence by itself).

Figures per set: value@1, value@3, cell@1 of value questions, cell@1 of where questions and of every kind (where
and other kinds change only through answers that fall back to values).

`--free a,b` fits only those weights, the others kept as they are; `--start 0` starts (and pulls) the free ones
from 0 instead of today's values, which measures signals before they are given a weight.

    .venv/bin/python bench/answer_fit.py --cache /tmp/abl \\
        --set eval=/tmp/idx1:../shared/eval/queries.jsonl:../shared/corpus \\
        --set eval2=/tmp/idx2:../shared/eval2/queries.jsonl:../shared/eval2/corpus
"""

from __future__ import annotations

import argparse
import copy
import random
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize, minimize_scalar

# the searches and candidates, made once per query (and cached)
from answer_ablation import open_archive, prepare, set_spec
from nbrecall.answer.compose import extractive_answer
from nbrecall.answer.evaluate import answer_metrics, holds_value, judge_answer
from nbrecall.answer.question import read_question
from nbrecall.answer.values import TERMS, ValueWeights, score
from nbrecall.search.evaluate import load_queries, resolve_copies
from nbrecall.service import Archive

# the weights of the linear part of the score: one per term `answer.values.score` records in `RankedFact.terms`
FITTED = list(TERMS)


@dataclass
class SetData:
    name: str
    archive: Archive
    prepared: list[Any]  # (query, search result, candidates, LLM context) per query


@dataclass
class Example:
    """One value question's candidates as term vectors (outside penalty applied) and which hold the value."""

    set_name: str
    qid: str
    x: np.ndarray  # candidates × len(FITTED)
    positive: np.ndarray  # bool per candidate


def load_set(spec: str, cache_dir: Path | None) -> SetData:
    name, index, queries, corpus = set_spec(spec)
    archive = open_archive(index)
    items = load_queries(queries)
    if corpus is not None:
        resolve_copies(items, corpus)
    cache = None
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache = cache_dir / f"{name}.pickle"
    return SetData(name, archive, prepare(archive, archive.settings, items, cache))


def examples(data: SetData, base: ValueWeights) -> list[Example]:
    """Term vectors of every value question's candidates, from one scoring with the weights `base`."""
    out = []
    for q, result, cands, _context in data.prepared:
        if q.kind != "value" or not q.answer or not cands:
            continue
        ranked = score(read_question(q.query), copy.deepcopy(cands), result, base)
        x = np.array([[c.terms[k] for k in FITTED] for c in ranked], dtype=np.float64)
        outside = np.array([base.outside if c.outside() else 1.0 for c in ranked])
        positive = np.array([holds_value(q.answer, c.fact.shown) or holds_value(q.answer, c.fact.statement())
                             for c in ranked])
        out.append(Example(data.name, q.id, x * outside[:, None], positive))
    return out


def fit(train: list[Example], shrink: float, base: ValueWeights, free: set[str], steps: int = 400,
        rate: float = 0.05) -> ValueWeights:
    """Projected gradient descent on the mean (over questions) pairwise logistic loss plus `shrink` × the squared
    distance to the weights `base`; only the `free` weights move."""
    prior = np.array([getattr(base, k) for k in FITTED])
    moving = np.array([k in free for k in FITTED])
    w = prior.copy()
    usable = [e for e in train if e.positive.any() and (~e.positive).any()]
    diffs = [(e.x[e.positive][:, None, :] - e.x[~e.positive][None, :, :]).reshape(-1, len(FITTED)) for e in usable]
    for _ in range(steps):
        grad = 2 * shrink * (w - prior)
        for d in diffs:
            margin = d @ w
            grad -= (d * (1.0 / (1.0 + np.exp(np.clip(margin, -30, 30))))[:, None]).mean(axis=0) / len(diffs)
        w = np.where(moving, np.maximum(w - rate * grad, 0.0), prior)
    return replace(base, **{k: float(v) for k, v in zip(FITTED, w, strict=True)})


def fit_softmax(train: list[Example], shrink: float, base: ValueWeights, free: set[str]) -> ValueWeights:
    """Maximum likelihood of a right first value: for each question a softmax over its candidates' scores, the
    probability of the ones that hold the value, plus `shrink` × the squared distance to `base` (L-BFGS, the free
    weights within 0..3). Unlike the pairwise loss, each question counts once, however many candidates it has.
    The scores' scale is the one at which `base` fits best."""
    prior = np.array([getattr(base, k) for k in FITTED])
    usable = [e for e in train if e.positive.any() and (~e.positive).any()]

    def loss(w: np.ndarray, beta: float) -> float:
        total = 0.0
        for e in usable:
            s = beta * (e.x @ w)
            total -= float(np.logaddexp.reduce(s[e.positive]) - np.logaddexp.reduce(s))
        return total / len(usable) + shrink * float(np.sum((w - prior) ** 2))

    beta = float(minimize_scalar(lambda b: loss(prior, b), bounds=(0.5, 50.0), method="bounded").x)
    bounds = [(0.0, 3.0) if k in free else (x, x) for k, x in zip(FITTED, prior, strict=True)]
    w = minimize(loss, prior, args=(beta,), bounds=bounds, method="L-BFGS-B").x
    return replace(base, **{k: float(v) for k, v in zip(FITTED, w, strict=True)})


def top1(examples_: list[Example], w: np.ndarray) -> int:
    """Value questions whose best-scoring candidate (the linear part of the score) holds the expected value."""
    return sum(bool(e.positive[int(np.argmax(e.x @ w))]) for e in examples_)


def search_top1(train: list[Example], base: ValueWeights, free: set[str], passes: int = 2) -> ValueWeights:
    """Coordinate search on the count of right first values itself (the loss above is smooth, this figure is
    not): each free weight in turn is set to the best of a few multiples of its value, ties kept at the current
    one."""
    w = np.array([getattr(base, k) for k in FITTED])
    best = top1(train, w)
    for _ in range(passes):
        for i in (i for i, k in enumerate(FITTED) if k in free):
            for value in (0.0, 0.5 * w[i], 1.5 * w[i], 2.0 * w[i], w[i] + 0.25):
                trial = w.copy()
                trial[i] = value
                got = top1(train, trial)
                if got > best:
                    best, w = got, trial
    return replace(base, **{k: float(v) for k, v in zip(FITTED, w, strict=True)})


def judge(data: SetData, weights_of: dict[str, ValueWeights], default: ValueWeights) -> dict[str, float]:
    """Answer every query of a set (value questions with the weights `weights_of` gives their id, others with
    `default`) and return the figures."""
    outcomes = []
    for q, result, cands, context in data.prepared:
        weights = weights_of.get(q.id, default)
        ranked = score(read_question(q.query), copy.deepcopy(cands), result, weights)
        answer = extractive_answer(q.query, result, data.archive, weights=weights, ranked=ranked)
        outcomes.append(judge_answer(q, answer, context))
    values = answer_metrics(o for o in outcomes if o.query.kind == "value")
    where = answer_metrics(o for o in outcomes if o.query.kind == "where")
    overall = answer_metrics(outcomes)
    return {"value@1": values.get("value@1", 0.0), "value@3": values.get("value@3", 0.0),
            "value cell@1": values["cell@1"], "where cell@1": where["cell@1"], "all cell@1": overall["cell@1"]}


def row(label: str, set_name: str, figures: dict[str, float]) -> list[str]:
    return [set_name, label, *(f"{figures[k]:.3f}" for k in
                               ("value@1", "value@3", "value cell@1", "where cell@1", "all cell@1"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="NAME=INDEX:QUERIES[:CORPUS]")
    parser.add_argument("--cache", type=Path, help="the folder answer_ablation.py caches its searches in")
    parser.add_argument("--shrink", type=float, action="append", help="L2 pull to the default weights (repeatable;"
                        " default 0.01, 0.1 and 1; --shrink -1 skips the logistic fit, leaving the top-1 search)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--free", help="the weights to fit, comma-separated (default: every weight of FITTED)")
    parser.add_argument("--start", type=float, help="start and pull the free weights from this value")
    parser.add_argument("--no-search", action="store_true", help="skip the top-1 coordinate search")
    parser.add_argument("--loss", choices=("pairwise", "softmax"), default="pairwise")
    args = parser.parse_args()
    free = set(args.free.split(",")) if args.free else set(FITTED)
    if free - set(FITTED):
        parser.error(f"not a fitted weight: {', '.join(sorted(free - set(FITTED)))}")
    default = ValueWeights()
    base = replace(default, **dict.fromkeys(free, args.start)) if args.start is not None else default
    sets = [load_set(spec, args.cache) for spec in args.set]
    data = {s.name: examples(s, base) for s in sets}
    rows = [row("default", s.name, judge(s, {}, default)) for s in sets]
    if base != default:
        rows += [row(f"start ({', '.join(sorted(free))} = {args.start})", s.name, judge(s, {}, base)) for s in sets]
    fitter_of = fit if args.loss == "pairwise" else fit_softmax
    fitters: dict[str, Callable[[list[Example]], ValueWeights]] = {
        f"{args.loss}, shrink {x}": partial(fitter_of, shrink=x, base=base, free=free)
        for x in (args.shrink or [0.01, 0.1, 1.0]) if x >= 0}
    if not args.no_search:
        fitters["top-1 search"] = partial(search_top1, base=base, free=free)
    pooled = [e for s in sets for e in data[s.name]]
    order = list(range(len(pooled)))
    random.Random(0).shuffle(order)
    for label, fitter in fitters.items():
        if len(sets) == 2:  # cross: fitted on the other set
            for s, other in ((sets[0], sets[1]), (sets[1], sets[0])):
                fitted = fitter(data[other.name])
                rows.append(row(f"cross, {label}, fitted on {other.name}", s.name, judge(s, {}, fitted)))
        else:  # left out: fitted on all the other sets
            for s in sets:
                fitted = fitter([e for other in sets if other is not s for e in data[other.name]])
                rows.append(row(f"left out, {label}", s.name, judge(s, {}, fitted)))
        per: dict[str, dict[str, ValueWeights]] = {s.name: {} for s in sets}
        for fold in range(args.folds):  # each question answered with weights fitted without it
            held = {order[i] for i in range(fold, len(order), args.folds)}
            w = fitter([e for i, e in enumerate(pooled) if i not in held])
            for i in held:
                per[pooled[i].set_name][pooled[i].qid] = w
        for s in sets:
            rows.append(row(f"cv {args.folds}-fold, {label}", s.name, judge(s, per[s.name], base)))
        w_all = fitter(pooled)
        for s in sets:
            rows.append(row(f"all (in-sample), {label}", s.name, judge(s, {}, w_all)))
        print(f"weights, {label}, fitted on all: " + ", ".join(
            f"{f.name} {getattr(w_all, f.name):.2f}" for f in fields(ValueWeights) if f.name in free))
    header = ["set", "weights", "value@1", "value@3", "value cell@1", "where cell@1", "all cell@1"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in sorted(rows, key=lambda r: r[0]):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


if __name__ == "__main__":
    main()
