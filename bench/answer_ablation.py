"""Extractive answers on both development sets, with each answer signal turned off in turn (the ablation table).

Why: every rule the answerer keeps must earn its place on *both* sets (`../shared/eval`, `../shared/eval2`), not on
the questions it was written for. This runs the extractive answerer on every query of each set against an
existing index (read-only), once with the default weights and once per variant with one signal set to 0, and
prints value@1, value@3 (value questions: the expected value in the first answer / the first three), cell@1 (a
right first citation; with the corpus as a third part of `--set`, the same cell of an `also` copy counts, as in
`nbrecall eval`) for value and where questions and over all kinds, and the LLM context coverage (value
questions whose value is in the context `llm_context` builds).

Searches and fact look-ups are made once per query; only the scoring is repeated per variant. A rule of retrieval
(a `[retrieve]` setting, e.g. `work_region`) is ablated by a run of its own with `--retrieve work_region=0` (and
another `--cache`): the searches are made again with that setting.

    .venv/bin/python bench/answer_ablation.py \\
        --set eval=/tmp/idx1:../shared/eval/queries.jsonl:../shared/corpus \\
        --set eval2=/tmp/idx2:../shared/eval2/queries.jsonl:../shared/eval2/corpus
    .venv/bin/python bench/answer_ablation.py --set eval2=/tmp/idx2:../shared/eval2/queries.jsonl --misses
"""

from __future__ import annotations

import argparse
import copy
import os
import pickle
import time
from dataclasses import fields, replace
from pathlib import Path

from nbrecall.answer.answer import llm_context
from nbrecall.answer.candidates import gather
from nbrecall.answer.compose import extractive_answer
from nbrecall.answer.evaluate import answer_metrics, judge_answer
from nbrecall.answer.question import read_question
from nbrecall.answer.rerank import answer_order
from nbrecall.answer.values import ValueWeights, score
from nbrecall.config import load_settings
from nbrecall.search.evaluate import load_queries, resolve_copies
from nbrecall.service import Archive


def variants() -> list[tuple[str, ValueWeights]]:
    base = ValueWeights()
    out = [("default", base)]
    for f in fields(ValueWeights):
        if f.name == "outside":
            out.append(("no outside penalty", replace(base, outside=1.0)))
        else:
            out.append((f"no {f.name}", replace(base, **{f.name: 0.0})))
    return out


def prepare(archive: Archive, settings, items: list, cache: Path | None) -> list:  # type: ignore[no-untyped-def, type-arg]
    """Per query: the search result, the candidate facts and the LLM context (default weights); pickled to
    `cache` when given, so that scoring alone can be re-run."""
    if cache is not None and cache.exists():
        with cache.open("rb") as f:
            return pickle.load(f)
    prepared = []
    for q in items:
        result = archive.search(q.query)
        question = read_question(q.query)
        cands = gather(question, result, archive) if result.notebooks else []
        ranked = answer_order(score(question, copy.deepcopy(cands), result), settings.answer)
        context = llm_context(q.query, result, archive, settings, ranked=ranked).text
        prepared.append((q, result, cands, context))
    if cache is not None:
        with cache.open("wb") as f:
            pickle.dump(prepared, f)
    return prepared


def set_spec(spec: str) -> tuple[str, Path, Path, Path | None]:
    """A `--set NAME=INDEX:QUERIES[:CORPUS]` argument as (name, index, queries, corpus root or None)."""
    name, rest = spec.split("=", 1)
    index, queries, *corpus = rest.split(":", 2)
    return name, Path(index), Path(queries), Path(corpus[0]) if corpus else None


def open_archive(index: Path, retrieve: dict[str, str] | None = None) -> Archive:
    """The index at `index`, read with the default settings (and `retrieve`'s `[retrieve]` settings, each converted
    to its field's type), extractive: no LLM endpoint from the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBRECALL_LLM")}
    settings = load_settings(None, env=env)
    settings.index_dir = index
    typed = {k: type(getattr(settings.retrieve, k))(v) for k, v in (retrieve or {}).items()}
    settings.retrieve = replace(settings.retrieve, **typed)
    settings.answer.base_url = None
    return Archive(settings)


def run_set(name: str, index: Path, queries: Path, show_misses: bool, only: set[str] | None,
            cache: Path | None = None, root: Path | None = None,
            retrieve: dict[str, str] | None = None) -> list[list[str]]:
    archive = open_archive(index, retrieve)
    settings = archive.settings
    items = load_queries(queries)
    if root is not None:
        resolve_copies(items, root)
    started = time.perf_counter()
    prepared = prepare(archive, settings, items, cache)
    seconds = (time.perf_counter() - started) / max(len(items), 1)
    rows = []
    for label, weights in variants():
        if only and label not in only:
            continue
        outcomes = []
        for q, result, cands, context in prepared:
            question = read_question(q.query)
            ranked = answer_order(score(question, copy.deepcopy(cands), result, weights), settings.answer, weights)
            answer = extractive_answer(q.query, result, archive, weights=weights, ranked=ranked)
            outcomes.append(judge_answer(q, answer, context))
        overall = answer_metrics(outcomes)
        values = answer_metrics(o for o in outcomes if o.query.kind == "value")
        where = answer_metrics(o for o in outcomes if o.query.kind == "where")
        rows.append([name, label, f"{values.get('value@1', 0):.3f}", f"{values.get('value@3', 0):.3f}",
                     f"{values['cell@1']:.3f}", f"{where['cell@1']:.3f}", f"{overall['cell@1']:.3f}",
                     f"{values.get('context', 0):.3f}"])
        if show_misses and label == "default":
            for o in outcomes:
                if o.value_first is False or (o.query.kind in ("value", "where") and not o.cell_first):
                    first = o.answer.citations[0] if o.answer.citations else None
                    print(f"[{name} {o.query.id} {o.query.kind}] {o.query.query}")
                    if o.value_first is False:
                        print(f"    expected {o.query.answer!r} (top3 {o.value_top3}, context {o.in_context})")
                    print(f"    answered {o.answer.text.splitlines()[0][:160] if o.answer.text else ''!r}")
                    if not o.cell_first:
                        print(f"    cell: expected {o.query.notebook} {o.query.cells}; cited "
                              f"{first.notebook + ' ' + str(first.cell) if first else None}")
    print(f"{name}: {len(items)} queries, {seconds:.2f} s per query to search, gather and answer")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="NAME=INDEX:QUERIES[:CORPUS]")
    parser.add_argument("--misses", action="store_true", help="list the default variant's misses")
    parser.add_argument("--only", action="append", help="run only these variants (e.g. --only default)")
    parser.add_argument("--cache", type=Path, help="a folder for the searches and candidates of each set (pickled):"
                        " a second run re-scores only")
    parser.add_argument("--retrieve", action="append", default=[], metavar="SETTING=VALUE",
                        help="a [retrieve] setting for every search of the run (e.g. work_region=0)")
    args = parser.parse_args()
    retrieve = dict(item.split("=", 1) for item in args.retrieve)
    rows: list[list[str]] = []
    for spec in args.set:
        name, index, queries, corpus = set_spec(spec)
        cache = args.cache / f"{name}.pickle" if args.cache else None
        if args.cache:
            args.cache.mkdir(parents=True, exist_ok=True)
        rows.extend(run_set(name, index, queries, args.misses, set(args.only) if args.only else None,
                            cache, corpus, retrieve))
    header = ["set", "variant", "value@1", "value@3", "value cell@1", "where cell@1", "all cell@1", "context"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


if __name__ == "__main__":
    main()
