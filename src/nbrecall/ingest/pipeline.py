"""The indexing run: discover → parse → analyse → chunk → embed → store, incremental and crash-safe.

Order of writes per batch: the store commit (atomic per batch: an append for new notebooks, `merge_insert` for
re-indexed ones) comes first, then the manifest transaction. Search only trusts chunks whose notebook the manifest
lists as indexed, so a crash between the two leaves nothing half-visible; the next run first deletes chunks the
manifest does not know and redoes the batch.

Progressive: a run has two phases. Phase 1 parses and chunks every new or changed notebook and writes its chunks
with the vectors the embedding cache already has; the rest are queued in the manifest (`pending_vectors`), so a
notebook is keyword-searchable as soon as its batch is written. Phase 2 embeds the queue, most recent and healthiest
notebooks first, in length-sorted batches, and stores the vectors; search fuses whatever vectors exist. Killing
phase 2 loses nothing: the next run resumes the queue.

With a figure describer (`[vision]`), phase 1 also puts cached figure descriptions into figure chunks and queues
the other images; after the vectors, the describe phase (`ingest.figures`) describes the queue and chunks those
notebooks again, then the new figure chunks get their vectors. It is resumable the same way.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, nullcontext
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from nbrecall.backends import open_manifest
from nbrecall.config import Settings
from nbrecall.executor import Executor, InlineExecutor
from nbrecall.index.cache import EmbeddingCache
from nbrecall.index.embed import Embedder
from nbrecall.index.faults import storage_fault
from nbrecall.ingest.build import IndexReport, fingerprint
from nbrecall.ingest.discover import (
    discover,
    empty_root_note,
    files_under,
    forget_conflict,
    unlisted_note,
    unread_note,
)
from nbrecall.ingest.families import FamilyWriter
from nbrecall.ingest.figures import FigureWork, describe_waiting
from nbrecall.ingest.lock import IndexLocked, WriterLock
from nbrecall.ingest.renders import notebook_for_index, render_mtime_ns, renders_dir
from nbrecall.ingest.vectors import Progress, fill_vectors, priority, vectors_from_cache
from nbrecall.notebook.archives import in_archive
from nbrecall.notebook.files import notebook_exists, notebook_path, read_notebook_file
from nbrecall.notebook.read import READER_VERSION, read_notebook
from nbrecall.plugins import PluginManager, plugin_manager
from nbrecall.protocols import Manifest, Store
from nbrecall.records import CellRecord, ChunkRow, ContentRecord, FileRecord, PendingVector
from nbrecall.vision.describe import Describer
from nbrecall.vision.factory import make_describer
from nbrecall.vision.store import FigureStore

if TYPE_CHECKING:
    from nbrecall.ingest.worker import BuildOutcome



MAX_LISTED_LINKS = 1000  # notebooks read through links out of the roots, listed in the run's summary


@dataclass(frozen=True)
class _Run:
    """What every step of one indexing run works with, opened once by `run_index` (the steps take this, not a
    dozen arguments each)."""

    settings: Settings
    embedder: Embedder
    store: Store
    manifest: Manifest
    cache: EmbeddingCache
    report: IndexReport
    plugins: PluginManager
    executor: Executor
    progress: Progress | None = None
    families: FamilyWriter | None = None  # None: `[families] enabled = false`, or a step that does not group
    figures: FigureWork | None = None  # None: no figure describer
    forget: tuple[Path, ...] = ()  # folders and notebooks whose indexed files leave the index (`run_index`)

    @cached_property
    def fingerprint(self) -> str:
        """What this run's chunks depend on besides a notebook's content (`ingest.build.fingerprint`)."""
        return fingerprint(self.settings, self.embedder, self.plugins)


def run_index(
    roots: list[Path],
    settings: Settings,
    embedder: Embedder,
    store: Store,
    *,
    progress: Progress | None = None,
    batch_notebooks: int = 16,
    defer_vectors: bool = False,
    executor: Executor | None = None,
    describer: Describer | None = None,
    plugins: PluginManager | None = None,
    forget: Sequence[Path] = (),
) -> IndexReport:
    """Index `roots` into `settings.index_dir`; safe to interrupt and re-run.

    `forget`: folders or notebooks, on disk or gone (a share mounted elsewhere now, a folder indexed by mistake),
    whose indexed files leave the index in this run as deleted files do; their contents go unless another file
    still holds them (so `roots=[new place], forget=[old place]` moves an archive without indexing it again). None
    may overlap a root of the run (`ValueError`).

    `defer_vectors` stops after phase 1 (everything keyword-searchable); a later run embeds the queue and
    describes the figures. `executor` runs parse/analyse/chunk (`nbrecall.executor`; default: in this process); the
    caller closes it. `describer` overrides the one `[vision]` configures. `plugins`: the plugin manager (the
    metadata extractors, the describer; default: built from `settings`)."""
    conflict = forget_conflict(list(forget), roots)
    if conflict is not None:
        raise ValueError(conflict)
    report = IndexReport()
    index_dir = settings.index_dir
    plugins = plugins if plugins is not None else plugin_manager(settings)
    describer = describer if describer is not None else make_describer(settings, plugins=plugins)
    try:
        with (
            # A shared (PostgreSQL) store takes no folder lock: several indexers may write to it at once.
            nullcontext() if store.shared else WriterLock(index_dir),
            closing(open_manifest(settings, store=store)) as manifest,
            closing(EmbeddingCache(index_dir / "embeddings.sqlite")) as cache,
            closing(FigureStore.of_index(index_dir)) if describer is not None else nullcontext() as figure_store,
        ):
            figures = (FigureWork(describer, figure_store)
                       if describer is not None and figure_store is not None else None)
            report.figures = figures.report if figures is not None else None
            run_id, interrupted = manifest.begin_run()
            if interrupted:  # before anything is appended: a stray batch of new notebooks would be stored twice
                report.strays_removed = _sweep_strays(store, manifest)
            run = _Run(
                settings, embedder, store, manifest, cache, report, plugins, executor or InlineExecutor(), progress,
                families=FamilyWriter(manifest, settings.families) if settings.families.enabled else None,
                figures=figures, forget=tuple(forget),
            )
            _run(run, roots, batch_notebooks)
            if not defer_vectors:  # vectors, then (with a describer) figure descriptions and their vectors
                _vectors_phase(run)
                if figures is not None:
                    _describe_phase(run, figures)
                    _vectors_phase(run)
            report.vectors_pending = manifest.pending_count() if settings.embed.enabled else 0
            manifest.end_run(run_id, {
                "indexed": report.notebooks_indexed,
                "removed": report.notebooks_removed,
                "forgot": [str(p) for p in forget],
                # what `nbrecall status` lists: notebooks this run read through links out of the roots
                "outside_links": [list(pair) for pair in report.outside_links[:MAX_LISTED_LINKS]],
                "outside_links_total": len(report.outside_links),
                # what it kept although it could not see it: an empty root, a folder it could not list, a file
                # it could not read (`ingest.discover`)
                "kept": kept_notes(report)[:MAX_LISTED_LINKS],
            })
    except IndexLocked:
        raise
    except Exception as exc:  # disk full, read-only folder, damaged file: say which file and what to do
        fault = storage_fault(exc, index_dir, "indexing")
        if fault is None:
            raise
        raise fault from exc
    return report


def _vectors_phase(run: _Run) -> None:
    """Fill the waiting vectors (phase 2), then refresh the store's keyword and vector indexes."""
    if run.settings.embed.enabled and run.manifest.pending_count():
        fill_vectors(run.embedder, run.store, run.manifest, run.cache, run.report, run.progress)
        started = time.perf_counter()
        run.store.finish_run()
        run.report.add_time("keyword + vector index", time.perf_counter() - started)


def _describe_phase(run: _Run, figures: FigureWork) -> None:
    """Describe the waiting figures (`ingest.figures.describe_waiting`) and chunk their notebooks again, in this
    process (a few notebooks per step); their figure chunks wait for vectors like any new chunk."""
    settings, manifest = run.settings, run.manifest
    indexed = manifest.indexed_shas()
    known = manifest.content_shas()
    started = time.perf_counter()

    def located(sha: str) -> tuple[str, str, Path] | None:
        for root, rel in manifest.paths_of(sha):
            path = notebook_path(root, rel)
            if notebook_exists(path):
                return root, rel, path
        return None

    def load(sha: str):
        found = located(sha)
        if found is None:
            return None
        _root, rel, path = found
        try:
            if hashlib.sha256(read_notebook_file(path)).hexdigest() != sha:
                return None  # changed since this run saw it: the next run indexes the new content
            nb, _stale, _meta = notebook_for_index(renders_dir(settings), sha, read_notebook(path, display_path=rel))
            return nb
        except Exception:  # unreadable now: its figures stay as they are
            return None

    def reindex(shas: list[str]) -> None:
        batch = [FileRecord(found[0], found[1], 0, 0, sha) for sha in shas if (found := located(sha))]
        scratch = IndexReport()  # these notebooks are not counted twice; their time is the describe phase's
        _index_batch(replace(run, report=scratch, executor=InlineExecutor(), families=None), batch, [], known)
        run.report.embed_cache_hits += scratch.embed_cache_hits
        run.report.add_time("describe: chunk again", sum(scratch.seconds.values()))

    describe_waiting(
        figures, indexed, load, reindex, concurrency=settings.vision.concurrency,
        batch_notebooks=settings.vision.batch_notebooks, max_failures_in_a_row=settings.vision.max_failures_in_a_row,
        max_attempts=settings.vision.max_attempts, progress=run.progress,
    )
    run.report.add_time("describe figures", time.perf_counter() - started)


def _sweep_strays(store: Store, manifest: Manifest) -> int:
    """After an interrupted run: delete chunks the store holds for contents the manifest does not know (a batch
    killed between its store commit and its manifest transaction)."""
    strays = sorted(set(store.notebook_shas()) - manifest.content_shas())
    if strays:
        store.delete_notebooks(strays)
    return len(strays)


def _run(run: _Run, roots: list[Path], batch_notebooks: int) -> None:
    """Phase 1: discover, then index every new, changed or outdated content in batches; then the files' new
    state, orphans, families and the keyword index."""
    settings, store, manifest, report = run.settings, run.store, run.manifest, run.report
    started = time.perf_counter()
    known_files = manifest.files()
    found = discover(roots, known_files, settings.discover)
    report.add_time("discover", time.perf_counter() - started)
    report.files, report.hashed = len(found.files), found.hashed
    report.outside_links = [(rel, target) for _root, rel, target in found.outside]
    report.empty_roots, report.unlisted, report.unread = found.empty_roots, found.unlisted, found.unread
    report.changed, report.deleted_files = len(found.changed), len(found.deleted)
    if run.forget:  # as if deleted from disk
        listed = set(found.deleted)
        forgotten = [key for key in files_under(list(run.forget), known_files) if key not in listed]
        found.deleted.extend(forgotten)
        report.forgotten_files = len(forgotten)
    known = manifest.content_shas()
    todo: dict[str, FileRecord] = {}
    # a content a plain file and a zip archive both hold is indexed under the file (`in_archive`): a backup zip
    # beside the live folder must not become the path answers cite
    found.files.sort(key=lambda record: in_archive(record.rel))
    for record in found.files:  # new contents, and any a file still points at but that is gone (see below)
        if record.sha256 not in known and record.sha256 not in todo:
            todo[record.sha256] = record
    # Contents indexed by another chunker version or other settings are redone (vectors come from the cache), and
    # notebooks quarantined by another version are read again: a newer reader may repair what an older one could
    # not (files that could not even be opened are looked at again anyway, see `_unreadable_records`).
    current = run.fingerprint
    quarantined = {record.sha256 for record in manifest.contents("quarantined")}
    outdated = {sha for sha, value in manifest.fingerprints().items()
                if value != (quarantine_fingerprint(current) if sha in quarantined else current)
                and not sha.startswith(_UNREADABLE)}
    for record in found.files:
        if record.sha256 in outdated and record.sha256 not in todo:
            todo[record.sha256] = record
    for record in _render_changes(found.files, todo, manifest, renders_dir(settings)):
        todo[record.sha256] = record
        report.rerendered += 1
    items = list(todo.values())
    paths_of: dict[str, list[FileRecord]] = {}
    for record in found.changed:
        paths_of.setdefault(record.sha256, []).append(record)
    # Searchable while the run goes on: the first batch of a new index builds the keyword index; rows written
    # since the last refresh are found by a scan of what the index lacks (slower: ~0.1-0.5 s a query with 7k such
    # rows), so the index is refreshed whenever the rows it lacks reach the rows it has (and KEYWORD_REFRESH_ROWS):
    # a geometric schedule, whose refreshes together cost about twice the last one.
    indexed_rows = 0 if not known else None
    written_at_refresh = report.chunks_written
    # While only new notebooks are appended (no deletes to conflict with its compaction), a refresh runs beside
    # the batches: the workers would otherwise wait for it (171 s of a 41k run's 1,059 s).
    appending = store.concurrent_refresh and not any(r.sha256 in known for r in items)
    background = _BackgroundRefresh(store) if appending else None
    # One lazy map over every notebook (the executor keeps a few per worker in flight): workers go on parsing the
    # next notebooks while this process writes a batch, instead of waiting for each batch's slowest notebook.
    outcomes = _build(run, items)
    try:
        for start in range(0, len(items), batch_notebooks):
            batch = items[start : start + batch_notebooks]
            files = [f for r in batch for f in paths_of.get(r.sha256, [])]
            built = list(itertools.islice(outcomes, len(batch)))
            _index_batch(run, batch, files, known, built)
            lacking = report.chunks_written - written_at_refresh
            if indexed_rows is None:
                indexed_rows = max(store.count() - lacking, 0)
            if (start == 0 and not known) or lacking >= max(KEYWORD_REFRESH_ROWS, indexed_rows):
                if background is not None and start > 0:
                    # False: the last one is still running; the rows it lacks wait for the next.
                    refreshing = background.start(report)
                else:
                    begun = time.perf_counter()
                    store.finish_run()
                    report.add_time("keyword index", time.perf_counter() - begun)
                    refreshing = True
                if refreshing:
                    indexed_rows += lacking
                    written_at_refresh = report.chunks_written
            if run.progress:
                run.progress("indexing", min(start + batch_notebooks, len(items)), len(items))
    finally:
        if background is not None:
            background.close()
    run.executor.release()  # idle workers' memory is not held through the final keyword-index update
    # Files: new state of the rest (copies of known contents, touched, unreadable, deleted); then drop contents
    # no file refers to.
    unreadable_files, unreadable_contents = _unreadable_records(found.unreadable, known, report)
    with manifest.transaction():
        manifest.save_contents(unreadable_contents, [])
        manifest.save_files(found.changed + found.touched + unreadable_files)
        manifest.delete_files(found.deleted)
        manifest.repoint_contents()  # a content whose recorded file went while a copy stays names the copy
        lost = manifest.missing_contents({r.sha256 for r in found.changed})
    if lost:  # a shared store: another indexer dropped a content this run took as known (its last file went)
        again = [r for r in found.changed if r.sha256 in lost]
        batch = list({r.sha256: r for r in again}.values())
        _index_batch(run, batch, again, known - lost)
    orphans = manifest.orphan_shas()
    if orphans:
        with manifest.transaction():  # contents first: on a shared store, only those still orphaned
            orphans = manifest.delete_contents(orphans)
            store.delete_notebooks(orphans)
    report.notebooks_removed = len(orphans)
    if run.families is not None:  # new and changed notebooks join a family, removed ones leave theirs
        report.families = run.families.update()
        report.add_time("families", report.families.seconds)
    if items or orphans:
        started = time.perf_counter()
        store.finish_run()
        report.add_time("keyword index", time.perf_counter() - started)


KEYWORD_REFRESH_ROWS = 50_000  # during a long run, fold new rows into the keyword index from this many on


class _BackgroundRefresh:
    """`store.finish_run()` in a second thread while the run goes on appending (stores that declare
    `concurrent_refresh`: LanceDB commits an index update or a compaction beside appends). One at a time; an
    error (disk full, ...) is raised from `wait()`, and from `close()`, which the run calls before it ends."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbrecall-keyword-refresh")
        self._running: Future[None] | None = None

    def start(self, report: IndexReport) -> bool:
        """Start a refresh unless one is running (False: the caller tries again later)."""
        if self._running is not None and not self._running.done():
            return False
        self.wait()

        def refresh() -> None:
            begun = time.perf_counter()
            try:
                self.store.finish_run()
            finally:
                report.add_time("keyword index", time.perf_counter() - begun)

        self._running = self._pool.submit(refresh)
        return True

    def wait(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            running.result()  # re-raises the refresh's error here, in the run's thread

    def close(self) -> None:
        """Wait for the refresh in flight, then end the thread (not left idle until garbage collection)."""
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)


_UNREADABLE = "unreadable-"  # the key prefix of a file that could not be opened (`unreadable_sha`)


def unreadable_sha(root: str, rel: str, reason: str) -> str:
    """The manifest key of a file that could not even be opened (no content to hash): stable while it stays so."""
    digest = hashlib.sha256(f"{root}\0{rel}\0{reason}".encode("utf-8", "backslashreplace")).hexdigest()
    return f"{_UNREADABLE}{digest[:40]}"


def quarantine_fingerprint(fingerprint: str) -> str:
    """What a quarantined content was judged with: the run's fingerprint and the reader's version, so that a reader
    that accepts what it used to refuse (`notebook.read.READER_VERSION`) reads those files again, and only those."""
    return f"{fingerprint}; reader {READER_VERSION}"


def kept_notes(report: IndexReport) -> list[str]:
    """What a run kept although it could not see it, in the words the CLI, `serve` and `status` use."""
    return ([empty_root_note(*item) for item in report.empty_roots] + [unlisted_note(*item) for item in report.unlisted]
            + [unread_note(*item) for item in report.unread])


def _unreadable_records(
    unreadable: list[tuple[str, str, str]], known: set[str], report: IndexReport
) -> tuple[list[FileRecord], list[ContentRecord]]:
    """Files discover could not stat or open (broken or looping symlinks, FIFOs, permissions, non-UTF-8 names):
    quarantined with their reason like unreadable notebooks, so `nbrecall status` lists them. Size and mtime 0
    make the next run look at them again; the key changes with the reason, so a fixed file is picked up."""
    files: list[FileRecord] = []
    contents: list[ContentRecord] = []
    for root, rel, reason in unreadable:
        sha = unreadable_sha(root, rel, reason)
        files.append(FileRecord(root, rel, 0, 0, sha))
        if sha not in known:
            contents.append(ContentRecord(sha, "quarantined", reason, root, rel))
            report.quarantined.append((rel, reason))
            known.add(sha)
    return files, contents


def _render_changes(
    files: list[FileRecord], todo: dict[str, FileRecord], manifest: Manifest, out_dir: Path
) -> list[FileRecord]:
    """Indexed, unchanged contents whose render is not the one they were indexed with (made, replaced or removed
    since): one stat of `<renders>/<sha>.json` per content against the manifest's `render_mtime_ns`."""
    recorded = manifest.render_marks()
    if not recorded and not out_dir.is_dir():
        return []
    indexed = manifest.indexed_shas()
    redo: list[FileRecord] = []
    seen: set[str] = set()
    for record in files:
        sha = record.sha256
        if sha in todo or sha in seen or sha not in indexed:
            continue
        seen.add(sha)
        if render_mtime_ns(out_dir, sha) != recorded.get(sha):
            redo.append(record)
    return redo


def _build(run: _Run, records: list[FileRecord]) -> Iterator[BuildOutcome]:
    """Parse/analyse/chunk through the run's executor (`ingest.worker.BuildTask`), lazily and in order."""
    from nbrecall.ingest.worker import BuildTask, build_failed  # the worker module builds on this one

    # workers count tokens as the run's embedder does
    task = BuildTask.for_run(run.settings, run.embedder, run.executor, run.plugins)
    items = (  # absolute paths: a Ray worker's working folder is not this one
        (str(notebook_path(f.root, f.rel).absolute()), f.rel, f.root, f.sha256)
        for f in records
    )
    return run.executor.map(task, items, on_error=build_failed)


def _index_batch(
    run: _Run,
    batch: list[FileRecord],
    files: list[FileRecord],
    known: set[str],
    built: list[BuildOutcome] | None = None,
) -> None:
    """Index `batch` (one record per new content; `built`: its outcomes when the caller already mapped them).
    The store commit comes first; then one manifest transaction records the contents and points their `files`
    (every path with one of those contents) at them, so a search switches each path from its old content to its new
    one at once: only contents a file refers to are visible (`Manifest.indexed_shas`). Parse/analyse/chunk run
    through the run's executor (`_build`); cache lookups and writes stay here."""
    from nbrecall.ingest.worker import WorkerFault

    report, figures = run.report, run.figures
    if built is None:
        built = list(_build(run, batch))
    records: list[ContentRecord] = []
    cell_records: list[CellRecord] = []
    all_rows: list[ChunkRow] = []
    pending: list[PendingVector] = []
    signatures = []
    for file, outcome in zip(batch, built, strict=True):
        for stage, seconds in outcome.seconds.items():
            report.add_time(stage, seconds)
        if outcome.fault:
            raise WorkerFault(outcome.fault)
        if outcome.built is None:  # unreadable, or a bug or crash on this one notebook: quarantine with the reason
            records.append(ContentRecord(file.sha256, "quarantined", outcome.reason, file.root, file.rel,
                                         meta={"fingerprint": quarantine_fingerprint(run.fingerprint)}))
            report.quarantined.append((file.rel, outcome.reason))
            continue
        chunks, record, cells, rows = outcome.built
        if figures is not None:  # before the vectors: a figure chunk's vector includes its description
            figures.apply(file.sha256, chunks, rows, priority(rows[0].year, rows[0].health) if rows else 0.0)
        if run.settings.embed.enabled and chunks:
            queued = vectors_from_cache(chunks, rows, run.embedder, run.cache, report)
            record.n_embedded = len(rows) - len(queued)
            pending.extend(queued)
        records.append(record)
        cell_records.extend(cells)
        all_rows.extend(rows)
        report.notebooks_indexed += 1
        if outcome.signature is not None:
            signatures.append((record.sha256, outcome.signature))
    started = time.perf_counter()
    store, manifest = run.store, run.manifest
    new = {r.sha256 for r in records} - known  # never stored (strays were swept at the start of the run)
    if store.shared:  # another indexer may have stored them: one replace, one lock order
        new = set()
    with manifest.transaction():  # a shared store commits chunks and manifest rows together
        store.append_notebooks([row for row in all_rows if row.nb_sha in new])
        store.replace_notebooks(sorted(r.sha256 for r in records if r.sha256 not in new),
                                [row for row in all_rows if row.nb_sha not in new])
        manifest.save_contents(records, cell_records)
        manifest.save_pending(pending)
        manifest.save_files(files)
        if run.families is not None:
            run.families.save(signatures)
    report.chunks_written += len(all_rows)
    report.add_time("write", time.perf_counter() - started)
