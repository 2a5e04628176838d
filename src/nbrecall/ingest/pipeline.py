"""The indexing run: discover → parse → analyse → chunk → embed → store, incremental and crash-safe.

Order of writes per batch: the store commit (atomic per batch, `merge_insert`) comes first, then the manifest
transaction. Search only trusts chunks whose notebook the manifest lists as indexed, so a crash between the two
leaves nothing half-visible, and the next run redoes the batch (both writes are idempotent).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from nbrecall.config import Settings
from nbrecall.index.cache import EmbeddingCache
from nbrecall.index.embed import Embedder
from nbrecall.index.store import ChunkRow, Store
from nbrecall.ingest.chunk import Chunk, chunk_notebook, text_hash
from nbrecall.ingest.discover import discover
from nbrecall.ingest.lock import WriterLock
from nbrecall.ingest.manifest import CellRecord, ContentRecord, FileRecord, Manifest
from nbrecall.ingest.metadata import notebook_meta
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
    seconds: dict[str, float] = field(default_factory=dict)

    def add_time(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds


def _budget(settings: Settings, embedder: Embedder) -> int:
    return settings.chunk.budget_tokens or int(embedder.max_tokens * 0.8)


def build_rows(
    path: Path, rel: str, root: str, sha: str, settings: Settings, embedder: Embedder, report: IndexReport
) -> tuple[list[Chunk], ContentRecord, list[CellRecord], list[ChunkRow]]:
    """Parse, analyse and chunk one notebook; raises NotebookUnreadable for quarantine."""
    started = time.perf_counter()
    nb = read_notebook(path, display_path=rel)
    analysis = analyse(nb)
    report.add_time("parse+analyse", time.perf_counter() - started)
    started = time.perf_counter()
    meta = notebook_meta(nb, rel, analysis, settings.metadata, file_path=path)
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
            health=meta.health,
        )
        for ch in chunks
    ]
    meta_dict = asdict(meta)
    meta_dict["notes"] = nb.notes
    meta_dict["nbformat"] = f"{nb.nbformat}.{nb.nbformat_minor}"
    meta_dict["order_warnings"] = analysis.order.warnings
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
    with WriterLock(index_dir):
        manifest = Manifest(index_dir / "manifest.sqlite")
        cache = EmbeddingCache(index_dir / "embeddings.sqlite")
        try:
            _run(roots, settings, embedder, store, manifest, cache, report, progress, batch_notebooks)
        finally:
            cache.close()
            manifest.close()
    return report


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
    items = list(todo.values())
    for start in range(0, len(items), batch_notebooks):
        batch = items[start : start + batch_notebooks]
        _index_batch(batch, settings, embedder, store, manifest, cache, report)
        if progress:
            progress("indexing", min(start + batch_notebooks, len(items)), len(items))
    # Files: new state recorded only now that their contents are indexed; then drop contents no file refers to.
    with manifest.transaction() as db:
        manifest.save_files(db, found.changed + found.touched)
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


def _index_batch(
    batch: list[FileRecord],
    settings: Settings,
    embedder: Embedder,
    store: Store,
    manifest: Manifest,
    cache: EmbeddingCache,
    report: IndexReport,
) -> None:
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
    report.chunks_written += len(all_rows)
    report.add_time("write", time.perf_counter() - started)
