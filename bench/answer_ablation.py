"""Extractive answers on both development sets, with each answer signal turned off in turn (the ablation table).

Why: every rule the answerer keeps must earn its place on *both* sets (`../shared/eval`, `../shared/eval2`), not on
the questions it was written for. This runs the extractive answerer on every query of each set against an
existing index (read-only), once with the default weights and once per variant with one signal set to 0, and
prints value@1, value@3 (value questions: the expected value in the first answer / the first three), cell@1 (a
right first citation; with the corpus as a third part of `--set`, the same cell of an `also` copy counts, as in
`nbrecall eval`) for value and where questions and over all kinds, and the LLM context coverage (value
questions whose value is in the context `llm_context` builds).

A variant takes one rule out (`Variant`): a signal of the score is taken out of the hand-set score and hidden from
the learned order (its input reads 0; the model is not retrained, so the row shows how much the shipped model leans
on it); "no learned order" is the hand-set order alone; two rows lift the gates that answer with the closest cell
instead of a value. `--pool LABEL=SET,…` adds sets' counts up (one row per variant), with the first citation of
value and where questions together.

Searches and fact look-ups are made once per query; only the scoring is repeated per variant (with tokenized texts
and term matches memoized: the same candidates are read by every variant). A rule of retrieval
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
import math
import os
import pickle
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path

from nbrecall.answer import compose
from nbrecall.answer.answer import llm_context
from nbrecall.answer.candidates import gather
from nbrecall.answer.evaluate import answer_metrics, judge_answer
from nbrecall.answer.question import Question, read_question
from nbrecall.answer.rerank import answer_order
from nbrecall.answer.values import TERMS, ValueWeights, score
from nbrecall.config import Settings, load_settings
from nbrecall.search.evaluate import load_queries, resolve_copies
from nbrecall.search.retrieve import SearchResult
from nbrecall.service import Archive


@dataclass(frozen=True)
class Variant:
    """One row of the table: the system with one rule or signal taken out.

    `weights` is the hand-set score's; a signal of `values.TERMS` taken out is also `hidden` from the learned order
    (its column of `rerank.features` reads 0), so that the row is the system without it, not only the score without
    it. `rerank` False is the hand-set order alone. `constants` overrides gates of `answer.compose` for the row."""

    label: str
    weights: ValueWeights
    hidden: str | None = None
    rerank: bool = True
    constants: tuple[tuple[str, float], ...] = ()


def variants() -> list[Variant]:
    base = ValueWeights()
    out = [Variant("default", base), Variant("no learned order", base, rerank=False)]
    for f in fields(ValueWeights):
        if getattr(base, f.name) == 0.0 and f.name not in TERMS:
            continue  # off by default and not an input of the learned order: its row is the default's
        if f.name == "outside":
            out.append(Variant("no outside penalty", replace(base, outside=1.0)))
        else:
            out.append(Variant(f"no {f.name}", replace(base, **{f.name: 0.0}),
                               hidden=f.name if f.name in TERMS else None))
    # the gates that send a question to the closest cell instead of a value (`compose.extractive_answer`)
    out.append(Variant("no few-words gate", base, constants=(("MIN_COVERAGE", 0.0),)))
    out.append(Variant("no absent-subject gate", base, constants=(("ABSENT_SUBJECT_SIMILARITY", -math.inf),)))
    return out


def memoize_term_sets() -> None:
    """Every variant tokenizes the same candidates' texts again and matches the same terms in them
    (`values.score`, `compose.found_terms`, `terms.Weights`): within this run each text is tokenized once, as a
    frozen set (hashable, and a caller that changed one would fail loudly), and each term is matched once against
    each set."""
    from nbrecall.answer import values
    from nbrecall.index import terms

    tokenize, match_term = terms.term_set, terms.match
    tokenized = lru_cache(maxsize=None)(lambda text: frozenset(tokenize(text)))
    matched: dict[tuple[str, frozenset[str]], float] = {}

    def match(term: str, vocabulary: set[str] | frozenset[str]) -> float:
        if not isinstance(vocabulary, frozenset):
            return match_term(term, vocabulary)
        key = (term, vocabulary)
        if key not in matched:
            matched[key] = match_term(term, vocabulary)
        return matched[key]

    for module in (values, compose):
        module.term_set = tokenized  # type: ignore[attr-defined]
    for module in (values, compose, terms):
        module.match = match  # type: ignore[attr-defined]


@contextmanager
def overridden(constants: tuple[tuple[str, float], ...]) -> Iterator[None]:
    """`answer.compose`'s module constants set for the duration (a bench's ablation only)."""
    saved = {name: getattr(compose, name) for name, _ in constants}
    try:
        for name, value in constants:
            setattr(compose, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(compose, name, value)


def order(question: Question, cands: list, result: SearchResult, settings: Settings,  # type: ignore[type-arg]
          variant: Variant) -> list:  # type: ignore[type-arg]
    """The candidates scored and ordered as the variant answers with them."""
    ranked = score(question, copy.deepcopy(cands), result, variant.weights)
    if variant.hidden is not None:
        for c in ranked:
            c.terms[variant.hidden] = 0.0
    answer_settings = settings.answer if variant.rerank else replace(settings.answer, rerank=False)
    return answer_order(ranked, answer_settings, variant.weights)


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


def tally(outcomes: list) -> dict[str, int]:  # type: ignore[type-arg]
    """Counts a pooled row adds up: value questions (first value, first three, first cell) and the first citation of
    value and where questions together (the issue's "first citation" figure)."""
    values = [o for o in outcomes if o.query.kind == "value"]
    where = [o for o in outcomes if o.query.kind == "where"]
    return {"values": len(values), "value@1": sum(bool(o.value_first) for o in values),
            "value@3": sum(bool(o.value_top3) for o in values), "value cell@1": sum(o.cell_first for o in values),
            "where": len(where), "where cell@1": sum(o.cell_first for o in where),
            "all": len(outcomes), "all cell@1": sum(o.cell_first for o in outcomes)}


def pooled_rows(counts: dict[tuple[str, str], dict[str, int]], label: str, names: list[str]) -> list[list[str]]:
    """One row per variant: the counts of the sets `names` added up."""
    rows = []
    for variant in dict.fromkeys(v for _, v in counts):
        parts = [counts[(n, variant)] for n in names if (n, variant) in counts]
        if not parts:
            continue
        total = {k: sum(p[k] for p in parts) for k in parts[0]}
        first = total["value cell@1"] + total["where cell@1"]
        rows.append([label, variant, f"{total['value@1']}/{total['values']}", str(total["value@3"]),
                     str(total["value cell@1"]), f"{total['where cell@1']}/{total['where']}",
                     f"{total['all cell@1']}/{total['all']}", f"first citation {first}"])
    return rows


def run_set(name: str, index: Path, queries: Path, show_misses: bool, only: set[str] | None,
            cache: Path | None = None, root: Path | None = None,
            retrieve: dict[str, str] | None = None,
            counts: dict[tuple[str, str], dict[str, int]] | None = None) -> list[list[str]]:
    """The table's rows for one set; each variant's counts also go to `counts` (by set and variant), for pooling."""
    counts = {} if counts is None else counts
    archive = open_archive(index, retrieve)
    settings = archive.settings
    items = load_queries(queries)
    if root is not None:
        resolve_copies(items, root)
    started = time.perf_counter()
    prepared = prepare(archive, settings, items, cache)
    seconds = (time.perf_counter() - started) / max(len(items), 1)
    rows = []
    for variant in variants():
        label = variant.label
        if only and label not in only:
            continue
        outcomes = []
        with overridden(variant.constants):
            for q, result, cands, context in prepared:
                ranked = order(read_question(q.query), cands, result, settings, variant)
                answer = compose.extractive_answer(q.query, result, archive, weights=variant.weights, ranked=ranked)
                outcomes.append(judge_answer(q, answer, context))
        counts[(name, label)] = tally(outcomes)
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
    parser.add_argument("--pool", action="append", default=[], metavar="LABEL=SET,SET,…",
                        help="also print these sets' counts added up, one row per variant")
    parser.add_argument("--retrieve", action="append", default=[], metavar="SETTING=VALUE",
                        help="a [retrieve] setting for every search of the run (e.g. work_region=0)")
    args = parser.parse_args()
    memoize_term_sets()
    retrieve = dict(item.split("=", 1) for item in args.retrieve)
    rows: list[list[str]] = []
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for spec in args.set:
        name, index, queries, corpus = set_spec(spec)
        cache = args.cache / f"{name}.pickle" if args.cache else None
        if args.cache:
            args.cache.mkdir(parents=True, exist_ok=True)
        rows.extend(run_set(name, index, queries, args.misses, set(args.only) if args.only else None,
                            cache, corpus, retrieve, counts))
    for pool in args.pool:
        label, names = pool.split("=", 1)
        rows.extend(pooled_rows(counts, label, names.split(",")))
    header = ["set", "variant", "value@1", "value@3", "value cell@1", "where cell@1", "all cell@1", "context"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


if __name__ == "__main__":
    main()
