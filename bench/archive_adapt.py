"""Does an archive's own labelled questions adapt the learned order to it? Measured, archive by archive.

The shipped learned order (`answer/ranker.onnx`) was trained on other archives; on an archive it never saw, its
first value is right about half the time (bench/README.md, issue 13). An archive's owners can label some of their
own questions. This script measures what such labels buy: on each set given (each one archive the shipped model never
saw), its value questions are split into folds by their expected notebook (no notebook in two folds: a question
about a notebook nobody labelled is the case to judge), a small booster is fitted on the other folds with the shipped
model's scores as its starting point (LightGBM `init_score`: it learns a correction, not an order from scratch), and
the fold's questions are ordered by shipped + correction. Printed per set and pooled: the first candidate right
(top-1) and a right one among the first three (top-3), shipped model against adapted, and, for comparison, a booster
fitted on the other folds alone (no shipped model).

    .venv/bin/python bench/archive_adapt.py --cache /work/s28_keep/cache \\
        --set L=/tmp/ev/l:bench/heldout/queries_l.jsonl:/tmp/fresh_l/corpus …

Needs the `fit` extra (lightgbm).
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from answer_ablation import set_spec  # bench/, beside this script
from nbrecall.answer.rerank import model_scores
from ranker_fit import questions

FOLDS = 5
# Fixed, not tuned per run: a small correction (few shallow trees) because an archive's labels are few.
SETTINGS = {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": 7, "min_data_in_leaf": 20,
            "lambdarank_truncation_level": 10, "deterministic": True, "num_threads": 2, "seed": 1, "verbose": -1}
ROUNDS = 50


@dataclass
class Item:
    notebook: str
    rows: np.ndarray
    right: np.ndarray
    base: np.ndarray  # the shipped model's scores


def items_of(spec: str, cache: Path | None) -> tuple[str, list[Item]]:
    """The set's value questions as `ranker_fit.questions` reads them, with the shipped model's scores."""
    found = questions(spec, cache)
    return set_spec(spec)[0], [Item(q.notebook, q.rows, q.right, model_scores(q.rows)) for q in found]


def folds(items: list[Item], k: int = FOLDS) -> list[int]:
    """Each item's fold: notebooks shuffled with a fixed seed, dealt round-robin."""
    notebooks = sorted({i.notebook for i in items})
    random.Random(7).shuffle(notebooks)
    fold_of = {nb: n % k for n, nb in enumerate(notebooks)}
    return [fold_of[i.notebook] for i in items]


def fit(train: list[Item], init: bool):  # type: ignore[no-untyped-def]
    import lightgbm as lgb

    x = np.vstack([i.rows for i in train])
    y = np.concatenate([i.right for i in train])
    data = lgb.Dataset(x, y, group=[len(i.right) for i in train],
                       init_score=np.concatenate([i.base for i in train]) if init else None)
    return lgb.train(SETTINGS, data, num_boost_round=ROUNDS)


def top(scores: np.ndarray, right: np.ndarray) -> tuple[int, int]:
    order = np.argsort(-scores, kind="stable")
    return int(right[order[0]] > 0), int(right[order[:3]].any())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="NAME=INDEX:QUERIES[:CORPUS]")
    parser.add_argument("--cache", type=Path)
    args = parser.parse_args()
    total = np.zeros(7, dtype=int)
    print("set: n, labelled in training (mean) | top-1 shipped / adapted / own only | top-3 the same")
    for spec in args.set:
        name, items = items_of(spec, args.cache)
        fold = folds(items)
        got = np.zeros((len(items), 6), dtype=int)
        trained = []
        for f in range(FOLDS):
            train = [i for i, g in zip(items, fold, strict=True) if g != f and i.right.any()]
            test = [n for n, g in enumerate(fold) if g == f]
            if not test:
                continue
            trained.append(len(train))
            adapted, own = fit(train, True), fit(train, False)
            for n in test:
                i = items[n]
                s1, s3 = top(i.base, i.right)
                a1, a3 = top(i.base + adapted.predict(i.rows), i.right)
                o1, o3 = top(own.predict(i.rows), i.right)
                got[n] = (s1, a1, o1, s3, a3, o3)
        sums = got.sum(axis=0)
        total += np.array([len(items), *sums])
        print(f"{name:>4}: n {len(items)}, {np.mean(trained):.0f} | {sums[0]} / {sums[1]} / {sums[2]} | "
              f"{sums[3]} / {sums[4]} / {sums[5]}")
    print(f" all: n {total[0]} | top-1 {total[1]} / {total[2]} / {total[3]} | top-3 {total[4]} / {total[5]} / "
          f"{total[6]}")


if __name__ == "__main__":
    main()
