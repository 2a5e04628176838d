"""How far the learned order's first values move when its inputs are jittered: the noise a change is judged against.

For every value question of the sets given (their cached searches, read as `ranker_fit.py` reads them), the model
(the bundled one, or --model) orders the first `rerank.TOP` candidates and the questions whose first candidate holds
the expected value are counted. Then every input that is not a whole number (the score's terms, the score, its gap
and share, the magnitude) is multiplied by 1 + eps·N(0, 1), --draws times, and counted again. A set whose count
falls under a jitter of 0.1% sits on a knife-edge: a change that only moves an unrelated statistic (facts added to
other notebooks shift the fact table's keyword scores in the fourth decimal) can cost it a question without being
worse, and a change that gains one may have gained nothing. Session 28 (bench/README.md): eval2's 38 of 44 falls to
37 in most draws at eps 0.001.

    .venv/bin/python bench/noise_floor.py --cache /tmp/rank --set eval2=/tmp/idx2:../shared/eval2/queries.jsonl:…
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from nbrecall.answer.rerank import model_scores
from ranker_fit import hits, questions  # bench/, beside this script


def firsts(items: list, rows_of, model: str) -> int:  # type: ignore[no-untyped-def]
    """Questions whose first candidate under `model`, on the rows `rows_of(question)`, holds the expected value
    (`ranker_fit.hits`' top-1)."""
    return hits(items, lambda q: np.argsort(-model_scores(rows_of(q), model), kind="stable"))[0]


def jittered(rows: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    """`rows` with every entry that is not a whole number multiplied by 1 + eps·N(0, 1) (flags and counts kept)."""
    fractional = rows != np.round(rows)
    noise = 1.0 + eps * rng.standard_normal(rows.shape)
    return np.where(fractional, rows * noise, rows).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="NAME=INDEX:QUERIES[:CORPUS]")
    parser.add_argument("--cache", type=Path, help="the folder answer_ablation.py caches its searches in")
    parser.add_argument("--model", default="", metavar="FILE", help="a model from ranker_fit.py (default: bundled)")
    parser.add_argument("--eps", type=float, default=1e-3, help="the jitter's relative size (default 0.001)")
    parser.add_argument("--draws", type=int, default=30, help="jittered runs per set (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"first values right: as computed, then under a jitter of {args.eps:g} ({args.draws} draws)")
    for spec in args.set:
        items = questions(spec, args.cache)
        base = firsts(items, lambda q: q.rows, args.model)
        draws = np.array([firsts(items, lambda q: jittered(q.rows, args.eps, rng), args.model)
                          for _ in range(args.draws)])
        print(f"{spec.split('=', 1)[0]:>8}: n {len(items)}, {base}; jittered min {draws.min()}, median "
              f"{np.median(draws):g}, max {draws.max()}; below {base} in {(draws < base).sum()} of {args.draws}, "
              f"above in {(draws > base).sum()}")


if __name__ == "__main__":
    main()
