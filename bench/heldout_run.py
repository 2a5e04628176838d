"""The held-out question sets (bench/heldout/) in one run: retrieval and extractive answers per set and corpus half,
and the pooled value figures.

Why: a figure from the development sets flatters every rule that was checked on them (bench/README.md, issue 13,
session 12); the held-out sets were written by helpers who never saw the answerer, over notebooks no development
question names. Each line's `corpus` field says which of the two indexes answers it.

    .venv/bin/python bench/heldout_run.py --index corpus=/tmp/ev/c --index eval2=/tmp/ev/e2 \\
        bench/heldout/queries.jsonl bench/heldout/queries_b.jsonl bench/heldout/queries_c.jsonl

It prints, per set and corpus: nb@1 and nb@3 (the right notebook, or one of its `also` copies, among the first
notebooks, as `nbrecall eval` counts them), value@1 and value@3 (the expected value in the first answer / the
first three), cell@1 for value and where questions (a right first citation) and the share of value questions whose
value is in the LLM context; then the value counts pooled over everything given.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

from answer_ablation import open_archive, prepare  # bench/, beside this script
from heldout.split import split
from heldout.verify import ROOTS  # each corpus' root, found from the checkout (../shared beside it)
from nbrecall.answer.compose import extractive_answer
from nbrecall.answer.evaluate import judge_answer
from nbrecall.answer.question import read_question
from nbrecall.answer.rerank import answer_order
from nbrecall.answer.values import score
from nbrecall.search.evaluate import Query, judge, load_queries, resolve_copies
from nbrecall.service import Archive


def by_corpus(path: Path) -> dict[str, list[Query]]:
    """A held-out file's questions, per the corpus its lines name (`heldout/split.py`)."""
    with tempfile.TemporaryDirectory() as tmp:
        return {corpus: load_queries(Path(tmp) / f"{corpus}.jsonl") for corpus in split(path, Path(tmp))}


def measure(archive: Archive, queries: list[Query], rows: list[str] | None = None,
            cache: Path | None = None) -> dict[str, int]:
    """Counts over `queries`: notebooks found, values given, first citations right, values in the LLM context.
    `rows`: one tab-separated line per question is appended (id, kind, notebook rank, value first, value in the
    first three, first cell right, value in the context, a right cell among the first three places), to compare two
    runs question by question. `cache`: the searches `answer_ablation.prepare` pickled for these queries (their LLM
    context was built with the order of the settings then, so `context` counts that order's)."""
    counts = dict.fromkeys(("n", "nb1", "nb3", "values", "v1", "v3", "vcell", "context", "where", "wcell", "wcell3"),
                           0)
    for q, result, cands, context in prepare(archive, archive.settings, queries, cache):
        ranked = answer_order(score(read_question(q.query), copy.deepcopy(cands), result), archive.settings.answer)
        outcome = judge_answer(q, extractive_answer(q.query, result, archive, ranked=ranked), context)
        rank = judge(q, [h.contract() for h in result.hits(30)]).notebook_rank  # as `nbrecall eval` ranks
        if rows is not None:
            rows.append("\t".join(str(x) for x in (q.id, q.kind, rank, int(bool(outcome.value_first)),
                                                    int(bool(outcome.value_top3)), int(outcome.cell_first),
                                                    int(bool(outcome.in_context)), int(outcome.cell_top3))))
        counts["n"] += 1
        counts["nb1"] += rank == 1
        counts["nb3"] += rank is not None and rank <= 3
        if q.kind == "value" and q.answer:
            counts["values"] += 1
            counts["v1"] += bool(outcome.value_first)
            counts["v3"] += bool(outcome.value_top3)
            counts["vcell"] += outcome.cell_first
            counts["context"] += bool(outcome.in_context)
        elif q.kind == "where":
            counts["where"] += 1
            counts["wcell"] += outcome.cell_first
            counts["wcell3"] += outcome.cell_top3
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", type=Path, help="held-out query files (JSON Lines with a corpus field)")
    parser.add_argument("--index", action="append", required=True, metavar="CORPUS=INDEX",
                        help="the index of each corpus named by the lines (corpus=…, eval2=…)")
    parser.add_argument("--root", action="append", default=[], metavar="CORPUS=DIR",
                        help="the folder of a corpus outside ../shared (a fresh set's fetched repositories)")
    parser.add_argument("--per-question", type=Path, metavar="FILE",
                        help="write one line per question (id, kind, notebook rank, value@1, value@3, cell@1, "
                             "context, cell@3) to FILE")
    parser.add_argument("--ranker-model", default="", metavar="FILE",
                        help="order values with this model (`bench/ranker_fit.py --out`), not the bundled one")
    parser.add_argument("--no-rerank", action="store_true", help="the hand-set score's order (`answer.rerank` off)")
    args = parser.parse_args()
    rows: list[str] = []
    roots = {**ROOTS, **dict(item.split("=", 1) for item in args.root)}
    archives: dict[str, Archive] = {k: open_archive(Path(v)) for k, v in (item.split("=", 1) for item in args.index)}
    for archive in archives.values():
        archive.settings.answer.ranker_model = args.ranker_model
        archive.settings.answer.rerank = not args.no_rerank
    print("| set | corpus | n | nb@1 | nb@3 | value@1 | value@3 | value cell@1 | where cell@1 | where cell@3 | "
          "value in context |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    pooled = dict.fromkeys(("values", "v1", "v3", "context"), 0)
    for path in args.sets:
        for corpus, queries in by_corpus(path).items():
            if corpus not in archives:
                sys.exit(f"{path}: its lines name the corpus {corpus!r}; give --index {corpus}=INDEX")
            resolve_copies(queries, Path(roots.get(corpus, corpus)))
            c = measure(archives[corpus], queries, rows)
            for key in pooled:
                pooled[key] += c[key]
            print(f"| {path.stem} | {corpus} | {c['n']} | {c['nb1'] / c['n']:.3f} | {c['nb3'] / c['n']:.3f} | "
                  f"{c['v1']}/{c['values']} | {c['v3']}/{c['values']} | {c['vcell']}/{c['values']} | "
                  f"{c['wcell']}/{c['where']} | {c['wcell3']}/{c['where']} | {c['context']}/{c['values']} |")
    n = pooled["values"] or 1
    print(f"\npooled value questions: {pooled['values']}; value@1 {pooled['v1']} ({pooled['v1'] / n:.2f}), "
          f"value@3 {pooled['v3']} ({pooled['v3'] / n:.2f}), in the LLM context {pooled['context']} "
          f"({pooled['context'] / n:.2f})")
    if args.per_question:
        args.per_question.write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")


if __name__ == "__main__":
    main()
