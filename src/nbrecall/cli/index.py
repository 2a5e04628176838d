"""`nbrecall index`: an indexing run with its progress bar, and the table of what it did; `nbrecall forget`: a run
that only takes folders or notebooks out of the index."""

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
from nbrecall.config import Settings


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
    forget: Annotated[
        list[Path] | None,
        typer.Option("--forget", help="A folder or notebook, on disk or gone, whose indexed files leave the index in "
                                      "this run (repeatable): `index NEW --forget OLD` moves an archive without "
                                      "indexing it again."),
    ] = None,
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
    forget = forget or []
    if forget:
        check_forget(settings, forget, roots)
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
                                   executor=pool, plugins=plugins, forget=forget)
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
        *([("forgotten files (--forget)", result.forgotten_files)] if forget else []),
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


def check_forget(settings: Settings, forget: list[Path], roots: list[Path]) -> list[tuple[str, str]]:
    """Refuse (exit 2) a path to forget that overlaps a root of the run, or under which nothing is indexed (naming
    the roots the index holds, so a typo is not taken for a done job); the indexed files `(root, rel)`."""
    from nbrecall.backends import index_exists, open_manifest
    from nbrecall.ingest.discover import files_under, forget_conflict

    conflict = forget_conflict(forget, roots)
    if conflict is not None:
        err.print(f"[red]error:[/red] {_plain(conflict)}", soft_wrap=True)
        raise typer.Exit(2)
    with _index_faults(settings, "reading"):
        if not index_exists(settings):
            err.print(f"[red]error:[/red] {describe(settings)}: no index here; nothing to forget")
            raise typer.Exit(2)
        manifest = open_manifest(settings, readonly=True)
        try:
            known = list(manifest.files())
        finally:
            manifest.close()
    for path in forget:
        if not files_under([path], known):
            held = sorted({root for root, _rel in known})
            err.print(f"[red]error:[/red] {_plain(path)}: no indexed file lies there; the index holds files under "
                      f"{', '.join(held[:10]) or 'no root'}{' …' if len(held) > 10 else ''}", soft_wrap=True)
            raise typer.Exit(2)
    return known


def forget(
    paths: Annotated[list[Path], typer.Argument(help="Folders or notebooks to take out of the index (on disk or "
                                                     "gone).")],
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    store: StoreOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say how many indexed files each path holds; change "
                                                            "nothing.")] = False,
) -> None:
    """Take folders or notebooks out of the index (a share now mounted elsewhere, a folder indexed by mistake); the
    files on disk are not touched. A later `index` of a root that holds them brings them back."""
    from rich.markup import escape

    from nbrecall.index.embedder_from_settings import make_embedder
    from nbrecall.ingest.discover import files_under
    from nbrecall.ingest.lock import IndexLocked
    from nbrecall.ingest.pipeline import run_index
    from nbrecall.plugins import plugin_manager
    from nbrecall.service import open_store

    settings = _settings(config, index_dir, store)
    known = check_forget(settings, paths, [])
    if dry_run:
        for path in paths:
            err.print(f"{escape(_plain(path))}: {len(files_under([path], known)):,} indexed file(s) would leave the "
                      "index", soft_wrap=True)
        return
    plugins = plugin_manager(settings)
    embedder = make_embedder(settings, plugins)
    with _index_faults(settings, "opening"):
        chunks = open_store(settings, embedder.dim)
    try:
        with _index_faults(settings, "indexing"):
            result = run_index([], settings, embedder, chunks, defer_vectors=True, plugins=plugins, forget=paths)
    except IndexLocked as exc:
        err.print(f"[red]locked:[/red] {_plain(exc)}")
        raise typer.Exit(3) from exc
    err.print(f"forgot {result.forgotten_files:,} indexed file(s); {result.notebooks_removed:,} of their contents "
              "were in no other file and left the index", soft_wrap=True)
