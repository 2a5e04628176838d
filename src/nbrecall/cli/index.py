"""`nbrecall index`: an indexing run with its progress bar, and the table of what it did."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from nbrecall.backends import describe
from nbrecall.cli.common import (
    ConfigOpt,
    ExecutorOpt,
    IndexOpt,
    StoreOpt,
    _executor,
    _index_faults,
    _plain,
    _progress,
    _settings,
    err,
)


def index(
    roots: Annotated[list[Path], typer.Argument(help="Folders (or notebooks) to index.")],
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    store: StoreOpt = None,
    no_vectors: Annotated[
        bool, typer.Option("--no-vectors", help="Keyword index only; skip embedding.")
    ] = False,
    defer_vectors: Annotated[
        bool,
        typer.Option(
            "--defer-vectors",
            help="Make every notebook keyword-searchable and stop; vectors are queued for the next run.",
        ),
    ] = False,
    rehash: Annotated[
        bool,
        typer.Option("--rehash", help="Read and hash every file, not only those whose size or time changed "
                                      "(a content replaced with both kept: cp -p, a restore from backup)."),
    ] = False,
    executor: ExecutorOpt = None,
) -> None:
    """Index notebook archives: incremental, resumable, one writer at a time."""
    import time

    from rich.markup import escape

    from nbrecall.backends import index_exists
    from nbrecall.executor import ExecutorError
    from nbrecall.index.embedder_from_settings import make_embedder
    from nbrecall.ingest.lock import IndexLocked
    from nbrecall.ingest.pipeline import kept_notes, run_index
    from nbrecall.plugins import plugin_manager
    from nbrecall.service import open_store

    settings = _settings(config, index_dir, store)
    if no_vectors:
        settings.embed.enabled = False
    if rehash:
        settings.discover.rehash = True
    for root in roots:
        if not root.exists():
            err.print(f"[red]error:[/red] {_plain(root)}: no such file or folder")
            raise typer.Exit(2)
    with _index_faults(settings, "opening"):
        index_exists(settings)  # a bad store URL or a server that is down: said now, before the model loads
    pool = _executor(settings, executor)  # an unreachable cluster is said now too
    plugins = plugin_manager(settings)
    embedder = make_embedder(settings, plugins)
    with _index_faults(settings, "opening"):
        chunks = open_store(settings, embedder.dim)
    started = time.perf_counter()
    with _progress() as progress:
        task = progress.add_task("indexing", total=None, rate="")

        phase, since = "indexing", started

        def report(stage: str, done: int, total: int) -> None:
            nonlocal phase, since
            if stage != phase:  # phase 2: the same bar counts chunks given a vector
                phase, since = stage, time.perf_counter()
                progress.update(task, description=stage)
            rate = done / max(time.perf_counter() - since, 1e-9)
            unit = "chunks/s" if stage == "embedding" else "figures/s" if stage.startswith("describ") else "notebooks/s"
            progress.update(task, completed=done, total=total, rate=f"{rate:.1f} {unit}")

        try:
            with pool, _index_faults(settings, "indexing"):
                result = run_index(roots, settings, embedder, chunks, progress=report, defer_vectors=defer_vectors,
                                   executor=pool, plugins=plugins)
        except IndexLocked as exc:
            err.print(f"[red]locked:[/red] {_plain(exc)}")
            raise typer.Exit(3) from exc
        except ExecutorError as exc:  # a worker cannot build like this run, or the cluster went away
            err.print(f"[red]executor error:[/red] {escape(str(exc))}; finished batches are kept", soft_wrap=True)
            raise typer.Exit(2) from exc
        if progress.tasks[0].total is None:  # nothing to index or embed: say so, not `0/?`
            progress.update(task, description="up to date", total=result.files, completed=result.files,
                            rate="files checked")
    elapsed = time.perf_counter() - started
    table = Table(title=f"indexed into {describe(settings)} in {elapsed:.1f} s")
    table.add_column("what")
    table.add_column("count", justify="right")
    for label, value in [
        ("files seen", result.files),
        ("files hashed", result.hashed),
        ("new or changed files", result.changed),
        ("deleted files", result.deleted_files),
        ("notebooks indexed", result.notebooks_indexed),
        ("  re-indexed for a new or removed render", result.rerendered),
        ("quarantined", len(result.quarantined)),
        ("chunks written", result.chunks_written),
        ("texts embedded", result.texts_embedded),
        ("embedding cache hits", result.embed_cache_hits),
        ("chunks waiting for a vector", result.vectors_pending),
        ("notebooks removed", result.notebooks_removed),
    ]:
        table.add_row(label, f"{value:,}")
    if result.figures is not None:
        table.add_row("figures described", f"{result.figures.described:,}")
        table.add_row("figures not described (failed)", f"{result.figures.failed:,}")
    for stage, seconds in result.seconds.items():
        table.add_row(f"time: {stage}", f"{seconds:.1f} s")
    err.print(table)
    for note in result.figures.notes if result.figures is not None else []:
        err.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)
    for note in kept_notes(result):
        err.print(f"[yellow]kept:[/yellow] {escape(note)}", soft_wrap=True)
    for rel, reason in result.quarantined:
        err.print(f"[yellow]quarantined[/yellow] {escape(str(rel))}: {escape(str(reason))}", highlight=False)
