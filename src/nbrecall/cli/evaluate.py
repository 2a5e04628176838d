"""`nbrecall eval`: retrieval measured on a query set (nb@k, MRR, cell@10c, per kind, against the baselines), or with
--answers the extractive answers (value@1, value@3, cell@1), and what each miss was."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from nbrecall.backends import describe
from nbrecall.cli.common import (
    ConfigOpt,
    IndexOpt,
    StoreOpt,
    VersionsOpt,
    _console,
    _index_faults,
    _open_archive,
    _settings,
    err,
)
from nbrecall.cli.index import index
from nbrecall.config import Settings

if TYPE_CHECKING:
    from nbrecall.search.evaluate import Query
    from nbrecall.service import Archive


def eval_command(
    queries: Annotated[
        Path, typer.Argument(help="Queries in JSON Lines (format of shared/eval/queries.jsonl).")
    ],
    root: Annotated[Path, typer.Option("--root", help="The corpus the query paths are relative to.")],
    index_dir: IndexOpt = None,
    baselines: Annotated[
        bool, typer.Option("--baselines", help="Also run the naive-loader baselines.")
    ] = False,
    show_misses: Annotated[bool, typer.Option("--misses", help="List the queries that missed.")] = False,
    all_versions: VersionsOpt = False,
    answers: Annotated[
        bool, typer.Option("--answers", help="Measure the extractive answers instead (value@1, value@3, cell@1, "
                           "and the share of value questions whose value is in the LLM context).")
    ] = False,
    config: ConfigOpt = None,
    store: StoreOpt = None,
) -> None:
    """Measure retrieval on a query set: nb@1, nb@3, nb@5, MRR and cell@10c, overall and per kind, and the
    distinct notebook families among the first five results; with --answers, the answers: the expected value
    first (value@1) or among three (value@3), a right first cell."""
    from nbrecall.backends import index_exists
    from nbrecall.search.evaluate import evaluate, load_queries, resolve_copies

    settings = _settings(config, index_dir, store)
    with _index_faults(settings, "opening"):
        exists = index_exists(settings)
    if not exists:
        err.print(f"indexing {root} into {describe(settings)} first")
        index([root], index_dir=settings.index_dir, config=config, no_vectors=False, store=settings.store.url)
    archive = _open_archive(settings)
    items = load_queries(queries)
    resolve_copies(items, root)  # the cells of `also` copies that are right cells too (search.evaluate)
    if answers:
        _eval_answers(archive, settings, items, root, show_misses)
        return

    def run(text: str) -> list[dict[str, Any]]:
        return [h.contract() for h in archive.search(text, all_versions=all_versions).hits(30)]

    tables = {"nbrecall": evaluate(items, run)}
    if baselines:
        from nbrecall.search.baselines import BASELINES, baseline_search, build_baseline

        work = settings.index_dir / "baselines"
        for name in BASELINES:
            baseline = build_baseline(name, root, work, archive.embedder)
            for mode in ("bm25", "dense"):
                tables[f"{name} {mode}"] = evaluate(items, baseline_search(baseline, archive.embedder, mode))
    out = _console()
    columns = ["nb@1", "nb@3", "nb@5", "MRR", "cell@10c", "cell@10c strict", "fam@5"]
    overall = Table(title=f"{len(items)} queries over {root}" + (" (all versions)" if all_versions else ""))
    overall.add_column("system")
    for column in columns:
        overall.add_column(column, justify="right")
    for name, (table, _outcomes) in tables.items():
        overall.add_row(name, *(f"{table['all'].get(c, float('nan')):.3f}" for c in columns))
    out.print(overall)
    table, outcomes = tables["nbrecall"]
    kinds = Table(title="nbrecall per kind")
    kinds.add_column("kind")
    kinds.add_column("n", justify="right")
    for column in columns:
        kinds.add_column(column, justify="right")
    for kind, values in table.items():
        kinds.add_row(kind, str(int(values["n"])), *(f"{values.get(c, float('nan')):.3f}" for c in columns))
    out.print(kinds)
    if show_misses:
        for outcome in outcomes:
            if outcome.notebook_rank != 1 or not outcome.cell_hit:
                q = outcome.query
                out.print(
                    f"[yellow]{q.id}[/yellow] {q.kind} nb rank {outcome.notebook_rank} cell "
                    f"{'hit' if outcome.cell_hit else 'miss'}: {q.query}"
                )


def _where_the_value_ranks(expected: str, shown: list[str], beside: list[str] | None = None) -> str:
    """For a missed value: whether the reader found it (a ranking miss: a model trained on your own questions,
    `bench/ranker_fit.py`, may fix it) or not (the value was not read from the outputs at all), and whether the
    answer named it beside its first value (`Answer.beside`: the reader saw it there)."""
    from nbrecall.answer.evaluate import holds_value

    rank = next((i for i, text in enumerate(shown) if holds_value(expected, text)), None)
    if rank is None:
        return f"no value candidate holds it ({len(shown)} candidates): it was not read as a value, or shown otherwise"
    named = any(holds_value(expected, text) for text in beside or [])
    return f"it is value candidate {rank + 1} of {len(shown)}: found, ranked lower" + (
        "; the answer names it beside the first value" if named else "")


def _eval_answers(archive: Archive, settings: Settings, items: list[Query], root: Path, show_misses: bool) -> None:
    from nbrecall.answer.answer import llm_context
    from nbrecall.answer.compose import extractive_answer
    from nbrecall.answer.evaluate import by_confidence, evaluate_answers
    from nbrecall.answer.question import read_question
    from nbrecall.answer.rerank import ordered_values
    from nbrecall.answer.types import Answer

    candidates: dict[str, list[str]] = {}  # with --misses, per question: what its value candidates show, best first

    def ask(text: str) -> tuple[Answer, str | None]:
        result = archive.search(text)
        ranked = ordered_values(read_question(text), result, archive) if result.notebooks else []
        if show_misses:
            candidates[text] = [c.fact.statement() for c in ranked]
        context = llm_context(text, result, archive, settings, ranked=ranked).text
        return extractive_answer(text, result, archive, ranked=ranked), context

    table, outcomes = evaluate_answers(items, ask)
    out = Console()
    columns = ["n", "value@1", "value@3", "cell@1", "cell@1 strict", "cell@3", "context"]
    kinds = Table(title=f"extractive answers: {len(items)} queries over {root}")
    kinds.add_column("kind")
    for column in columns:
        kinds.add_column(column, justify="right")
    for kind, values in table.items():
        kinds.add_row(kind, *(("" if c not in values else str(int(values[c])) if c == "n" else f"{values[c]:.3f}")
                              for c in columns))
    out.print(kinds)
    levels = by_confidence(outcomes)
    if any(n for n, _ in levels.values()):
        out.print("value answers by confidence (the answer's own estimate; right = the expected value first): "
                  + " · ".join(f"{level} {n}" + (f" ({right / n:.2f} right)" if n else "")
                               for level, (n, right) in levels.items()))
    if show_misses:
        from rich.markup import escape

        for o in outcomes:
            if o.value_first is False or not o.cell_first:
                q = o.query
                first = o.answer.citations[0] if o.answer.citations else None
                got = f"{first.notebook} › Cell {first.cell}" if first else "no citation"
                out.print(f"[yellow]{q.id}[/yellow] {q.kind}: {escape(q.query)}")
                if o.value_first is False:
                    out.print(f"   expected {escape(q.answer or '')!s}; answered: "
                              f"{escape(o.answer.text.splitlines()[0] if o.answer.text else '')}")
                    beside = [v.shown for v in o.answer.beside]
                    out.print(f"   {_where_the_value_ranks(q.answer or '', candidates.get(q.query, []), beside)}")
                if not o.cell_first:
                    out.print(f"   cell: expected {q.notebook} › {q.cells}; cited {escape(got)}")
