"""How often the values an uncertain answer names beside its first value hold the value asked for.

Why: when a value answer is uncertain, it names up to two other values of the first value's own cell
(`Answer.beside`, `answer.compose.beside_values`): a wrong first value is at times the look-alike of a neighbour
in the same printout, which the alternatives (one per other cell) never show. These values are not judged by
`nbrecall eval --answers` (value@1 and value@3 read `Answer.values` only), so this counts, per question set, the
value answers that name values beside the first, and those whose first value is wrong while the right one is
beside it (`answer.evaluate.holds_value`, the judge's own test).

    .venv/bin/python bench/beside_values.py --set eval=/tmp/ev/c:../shared/eval/queries.jsonl:../shared/corpus \\
        --set eval2=/tmp/ev/e2:../shared/eval2/queries.jsonl:../shared/eval2/corpus
"""

from __future__ import annotations

import argparse
from pathlib import Path

from answer_ablation import open_archive, set_spec  # bench/, beside this script
from nbrecall.answer.answer import answer
from nbrecall.answer.evaluate import holds_value, judge_answer
from nbrecall.search.evaluate import load_queries, resolve_copies


def count(index: Path, queries: Path, root: Path | None) -> tuple[int, int, int, int]:
    """(value questions, first value right, answers with values beside, first wrong and the right one beside)."""
    archive = open_archive(index)
    items = load_queries(queries)
    if root is not None:
        resolve_copies(items, root)
    n = first = named = helped = 0
    for q in items:
        if q.kind != "value" or not q.answer:
            continue
        found = answer(q.query, archive, archive.settings)
        outcome = judge_answer(q, found)
        n += 1
        first += bool(outcome.value_first)
        if found.beside:
            named += 1
            helped += not outcome.value_first and any(holds_value(q.answer, v.shown) for v in found.beside)
    return n, first, named, helped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="NAME=INDEX:QUERIES[:CORPUS]")
    args = parser.parse_args()
    print("| set | value questions | first value right | answers with values beside | first wrong, right one beside |")
    print("|---|---:|---:|---:|---:|")
    for spec in args.set:
        name, index, queries, corpus = set_spec(spec)
        n, first, named, helped = count(index, queries, corpus)
        print(f"| {name} | {n} | {first} | {named} | {helped} |", flush=True)


if __name__ == "__main__":
    main()
