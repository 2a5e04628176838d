"""The indexing run: discover → parse → analyse → chunk → embed → store, incremental and crash-safe.

Order of writes per batch: the store commit (atomic per batch, `merge_insert`) comes first, then the manifest
transaction. Search only trusts chunks whose notebook the manifest lists as indexed, so a crash between the two
leaves nothing half-visible, and the next run redoes the batch (both writes are idempotent).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from nbrecall.config import Settings
from nbrecall.index.cache import EmbeddingCache
from nbrecall.index.embed import Embedder
from nbrecall.index.faults import storage_fault
from nbrecall.index.store import ChunkRow, Store
from nbrecall.ingest.chunk import CHUNKER_VERSION, Chunk, chunk_notebook, text_hash
from nbrecall.ingest.discover import discover
from nbrecall.ingest.lock import IndexLocked, WriterLock
from nbrecall.ingest.manifest import CellRecord, ContentRecord, FileRecord, Manifest
from nbrecall.ingest.metadata import notebook_meta
from nbrecall.ingest.renders import notebook_for_index, render_mtime_ns, renders_dir
from nbrecall.notebook.analysis import analyse
from nbrecall.notebook.outputs import OutputLimits, render_outputs
from nbrecall.notebook.read import NotebookUnreadable, read_notebook

Progress = Callable[[str, int, int], None]


@dataclass
class IndexReport:
    """What a run did, for the CLI summary and benchmarks."""

    files: int = 0
    hashed: int = 0
    changed: int = 0
    deleted_files: int = 0
    notebooks_indexed: int = 0
    quarantined: list[tuple[str, str]] = field(default_factory=list)
    chunks_written: int = 0
    texts_embedded: int = 0
    embed_cache_hits: int = 0
    notebooks_removed: int = 0
    strays_removed: int = 0  # chunks of notebooks an interrupted run wrote to the store but never to the manifest
    rerendered: int = 0  # unchanged notebooks indexed again because their render was made, replaced or removed
    seconds: dict[str, float] = field(default_factory=dict)

    def add_time(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds


def _budget(settings: Settings, embedder: Embedder) -> int:
    return settings.chunk.budget_tokens or int(embedder.max_tokens * 0.8)


def fingerprint(settings: Settings, embedder: Embedder) -> str:
    """What the chunks of a notebook depend on besides its content; a change re-chunks the archive."""
    return (f"chunker {CHUNKER_VERSION}; budget {_budget(settings, embedder)}; outputs "
            f"{settings.chunk.max_output_chars}; model {embedder.model_id}; vectors {settings.embed.enabled}")


def build_rows(
    path: Path, rel: str, root: str, sha: str, settings: Settings, embedder: Embedder, report: IndexReport
) -> tuple[list[Chunk], ContentRecord, list[CellRecord], list[ChunkRow]]:
    """Parse, analyse and chunk one notebook; raises NotebookUnreadable for quarantine.

    When a render of this content exists (`ingest.renders`), its fresh outputs are indexed in place of the file's
    own (`fresh`/`changed`), or the original outputs are indexed and flagged stale (`stale`). Metadata, health and
    execution-order warnings always describe the file itself.
    """
    started = time.perf_counter()
    original = read_notebook(path, display_path=rel)
    analysis = analyse(original)
    report.add_time("parse+analyse", time.perf_counter() - started)
    started = time.perf_counter()
    nb, stale, render_meta = notebook_for_index(renders_dir(settings), sha, original)
    if render_meta:
        report.add_time("renders", time.perf_counter() - started)
    started = time.perf_counter()
    meta = notebook_meta(original, rel, analysis, settings.metadata, file_path=path)
    limits = OutputLimits(max_chars=settings.chunk.max_output_chars)
    chunks = chunk_notebook(
        nb, analysis, count_tokens=embedder.count_tokens, budget=_budget(settings, embedder), limits=limits
    )
    cells = [
        CellRecord(
            sha,
            c.index,
            c.id,
            c.cell_type,
            c.execution_count,
            c.source,
            "\n".join(o.text for o in render_outputs(c, limits=limits)) if c.is_code else "",
        )
        for c in nb.cells
    ]
    rows = [
        ChunkRow(
            chunk_id=f"{sha[:20]}-{ch.seq:05d}",
            nb_sha=sha,
            notebook=rel,
            root=root,
            kind=ch.kind,
            cells=ch.cells,
            cell_ids=ch.cell_ids,
            anchor=ch.anchor,
            anchor_id=ch.anchor_id,
            heading=ch.heading,
            text=ch.text,
            year=meta.year,
            project=meta.project,
            author=meta.author,
            tags=meta.tags,
            deprecated=meta.deprecated,
            stale=stale,
            health=meta.health,
        )
        for ch in chunks
    ]
    meta_dict = asdict(meta)
    meta_dict["fingerprint"] = fingerprint(settings, embedder)
    meta_dict["notes"] = nb.notes
    meta_dict["nbformat"] = f"{nb.nbformat}.{nb.nbformat_minor}"
    meta_dict["order_warnings"] = analysis.order.warnings
    meta_dict.update(render_meta)
    record = ContentRecord(sha, "indexed", "", root, rel, len(nb.cells), len(chunks), 0, meta_dict)
    report.add_time("chunk", time.perf_counter() - started)
    return chunks, record, cells, rows


def embed_rows(
    chunks: list[Chunk], rows: list[ChunkRow], embedder: Embedder, cache: EmbeddingCache, report: IndexReport
) -> int:
    """Fill `row.vector` from the cache or the model; returns how many rows got a vector."""
    started = time.perf_counter()
    texts = [ch.embed_text for ch in chunks]
    hashes = [text_hash(t) for t in texts]
    cached = cache.get_many(sorted(set(hashes)), embedder.model_id)
    report.embed_cache_hits += sum(1 for h in hashes if h in cached)
    missing = sorted(
        {h: t for h, t in zip(hashes, texts, strict=True) if h not in cached and t.strip()}.items()
    )
    if missing:
        vectors = embedder.embed([t for _, t in missing])
        fresh = {h: v for (h, _), v in zip(missing, vectors, strict=True)}
        cache.put_many(fresh, embedder.model_id)
        cached.update(fresh)
        report.texts_embedded += len(missing)
    done = 0
    for row, h in zip(rows, hashes, strict=True):
        vector = cached.get(h)
        if vector is not None:
            row.vector = np.asarray(vector, dtype=np.float32)
            done += 1
    report.add_time("embed", time.perf_counter() - started)
    return done


def run_index(
    roots: list[Path],
    settings: Settings,
    embedder: Embedder,
    store: Store,
    *,
    progress: Progress | None = None,
    batch_notebooks: int = 16,
) -> IndexReport:
    """Index `roots` into `settings.index_dir`; safe to interrupt and re-run."""
    report = IndexReport()
    index_dir = settings.index_dir
    try:
        with (
            WriterLock(index_dir),
            closing(Manifest(index_dir / "manifest.sqlite")) as manifest,
            closing(EmbeddingCache(index_dir / "embeddings.sqlite")) as cache,
        ):
            run_id, interrupted = manifest.begin_run()
            _run(roots, settings, embedder, store, manifest, cache, report, progress, batch_notebooks)
            if interrupted:
                report.strays_removed = _sweep_strays(store, manifest)
            manifest.end_run(run_id, {"indexed": report.notebooks_indexed, "removed": report.notebooks_removed})
    except IndexLocked:
        raise
    except Exception as exc:  # disk full, read-only folder, damaged file: say which file and what to do
        fault = storage_fault(exc, index_dir, "indexing")
        if fault is None:
            raise
        raise fault from exc
    return report


def _sweep_strays(store: Store, manifest: Manifest) -> int:
    """After an interrupted run: delete chunks the store holds for contents the manifest does not know (a batch
    killed between its store commit and its manifest transaction, whose file changed before this run)."""
    strays = sorted(set(store.notebook_shas()) - manifest.content_shas())
    if strays:
        store.delete_notebooks(strays)
    return len(strays)


def _run(
    roots: list[Path],
    settings: Settings,
    embedder: Embedder,
    store: Store,
    manifest: Manifest,
    cache: EmbeddingCache,
    report: IndexReport,
    progress: Progress | None,
    batch_notebooks: int,
) -> None:
    started = time.perf_counter()
    found = discover(roots, manifest.files(), settings.discover)
    report.add_time("discover", time.perf_counter() - started)
    report.files, report.hashed = len(found.files), found.hashed
    report.changed, report.deleted_files = len(found.changed), len(found.deleted)
    known = manifest.content_shas()
    todo: dict[str, FileRecord] = {}
    for record in found.changed:
        if record.sha256 not in known and record.sha256 not in todo:
            todo[record.sha256] = record
    # Contents indexed by another chunker version or other settings are redone (vectors come from the cache).
    current = fingerprint(settings, embedder)
    outdated = {sha for sha, value in manifest.fingerprints().items() if value != current}
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
    for start in range(0, len(items), batch_notebooks):
        batch = items[start : start + batch_notebooks]
        files = [f for r in batch for f in paths_of.get(r.sha256, [])]
        _index_batch(batch, settings, embedder, store, manifest, cache, report, files)
        if progress:
            progress("indexing", min(start + batch_notebooks, len(items)), len(items))
    # Files: new state of the rest (copies of known contents, touched, unreadable, deleted); then drop contents
    # no file refers to.
    unreadable_files, unreadable_contents = _unreadable_records(found.unreadable, known, report)
    with manifest.transaction() as db:
        manifest.save_contents(db, unreadable_contents, [])
        manifest.save_files(db, found.changed + found.touched + unreadable_files)
        manifest.delete_files(db, found.deleted)
    orphans = manifest.orphan_shas()
    if orphans:
        store.delete_notebooks(orphans)
        with manifest.transaction() as db:
            manifest.delete_contents(db, orphans)
    report.notebooks_removed = len(orphans)
    if items or orphans:
        started = time.perf_counter()
        store.finish_run()
        report.add_time("keyword index", time.perf_counter() - started)


def unreadable_sha(root: str, rel: str, reason: str) -> str:
    """The manifest key of a file that could not even be opened (no content to hash): stable while it stays so."""
    digest = hashlib.sha256(f"{root}\0{rel}\0{reason}".encode("utf-8", "backslashreplace")).hexdigest()
    return f"unreadable-{digest[:40]}"


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


def _index_batch(
    batch: list[FileRecord],
    settings: Settings,
    embedder: Embedder,
    store: Store,
    manifest: Manifest,
    cache: EmbeddingCache,
    report: IndexReport,
    files: list[FileRecord] | None = None,
) -> None:
    """Index `batch` (one record per new content). The store commit comes first; then one manifest transaction
    records the contents and points their `files` (every path with one of those contents) at them, so a search
    switches each path from its old content to its new one at once: only contents a file refers to are visible
    (`Manifest.indexed_shas`)."""
    records: list[ContentRecord] = []
    cell_records: list[CellRecord] = []
    all_rows: list[ChunkRow] = []
    for file in batch:
        path = Path(file.root) / file.rel if not Path(file.root).is_file() else Path(file.root)
        try:
            chunks, record, cells, rows = build_rows(
                path, file.rel, file.root, file.sha256, settings, embedder, report
            )
        except NotebookUnreadable as exc:
            records.append(ContentRecord(file.sha256, "quarantined", exc.reason, file.root, file.rel))
            report.quarantined.append((file.rel, exc.reason))
            continue
        except Exception as exc:  # a bug on one notebook must not stop the run: quarantine with the reason
            reason = f"internal error while indexing: {type(exc).__name__}: {exc}"[:300]
            records.append(ContentRecord(file.sha256, "quarantined", reason, file.root, file.rel))
            report.quarantined.append((file.rel, reason))
            continue
        if settings.embed.enabled and chunks:
            record.n_embedded = embed_rows(chunks, rows, embedder, cache, report)
        records.append(record)
        cell_records.extend(cells)
        all_rows.extend(rows)
        report.notebooks_indexed += 1
    started = time.perf_counter()
    store.replace_notebooks([r.sha256 for r in records], all_rows)
    with manifest.transaction() as db:
        manifest.save_contents(db, records, cell_records)
        manifest.save_files(db, files or [])
    report.chunks_written += len(all_rows)
    report.add_time("write", time.perf_counter() - started)
