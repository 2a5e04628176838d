"""The vectors of the indexing run: phase 1 takes what the embedding cache already has (`vectors_from_cache`) and
queues the rest by priority; phase 2 (`fill_vectors`) embeds the queue, most recent and healthiest notebooks first,
and stores the vectors, resumably. `pipeline` runs both (see its docstring)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from nbrecall.index.cache import EmbeddingCache
from nbrecall.index.embed import Embedder
from nbrecall.ingest.build import IndexReport
from nbrecall.ingest.chunk import Chunk, text_hash
from nbrecall.protocols import Manifest, Store
from nbrecall.records import ChunkRow, PendingVector

Progress = Callable[[str, int, int], None]


def priority(year: int | None, health: float) -> float:
    """Embedding order: recent notebooks first (the year from the path rules), healthier ones first within a year."""
    return float(year or 0) + max(0.0, min(1.0, health))


def vectors_from_cache(
    chunks: list[Chunk], rows: list[ChunkRow], embedder: Embedder, cache: EmbeddingCache, report: IndexReport
) -> list[PendingVector]:
    """Fill `row.vector` from the embedding cache; return the chunks still to embed (phase 2 does the model)."""
    started = time.perf_counter()
    texts = [ch.embed_text for ch in chunks]
    hashes = [text_hash(t) for t in texts]
    cached = cache.get_many(sorted(set(hashes)), embedder.model_id)
    report.embed_cache_hits += sum(1 for h in hashes if h in cached)
    pending: list[PendingVector] = []
    for row, text, h in zip(rows, texts, hashes, strict=True):
        vector = cached.get(h)
        if vector is not None:
            row.vector = np.asarray(vector, dtype=np.float32)
        elif text.strip():
            pending.append(PendingVector(row.chunk_id, row.nb_sha, priority(row.year, row.health), text))
    report.add_time("embed", time.perf_counter() - started)
    return pending


def fill_vectors(
    embedder: Embedder,
    store: Store,
    manifest: Manifest,
    cache: EmbeddingCache,
    report: IndexReport,
    progress: Progress | None = None,
    batch_chunks: int = 512,
    limit: int | None = None,
) -> None:
    """Phase 2: embed queued chunks by priority, store their vectors, take them off the queue; resumable.
    `limit` stops after about that many chunks (a time-boxed nightly run, a benchmark sample).

    Texts already in the cache (another notebook had the same text) cost nothing; identical texts in one batch are
    embedded once; the embedder sorts a batch by length so padding stays small."""
    total = manifest.pending_count()
    done = 0
    if progress:
        progress("embedding", 0, total)  # the phase starts now (the CLI measures its rate from here)
    while limit is None or done < limit:
        items = manifest.pending(batch_chunks if limit is None else min(batch_chunks, limit - done))
        if not items:
            break
        started = time.perf_counter()
        hashes = {item.chunk_id: text_hash(item.text) for item in items}
        cached = cache.get_many(sorted(set(hashes.values())), embedder.model_id)
        report.embed_cache_hits += sum(1 for h in hashes.values() if h in cached)
        missing = sorted({hashes[i.chunk_id]: i.text for i in items if hashes[i.chunk_id] not in cached}.items())
        if missing:
            vectors = embedder.embed([t for _, t in missing])
            fresh = {h: v for (h, _), v in zip(missing, vectors, strict=True)}
            cache.put_many(fresh, embedder.model_id)
            cached.update(fresh)
            report.texts_embedded += len(missing)
            counts = embedder.count_tokens([t for _, t in missing])
            report.embedded_tokens += sum(min(n, embedder.max_tokens) for n in counts)
        report.add_time("embed", time.perf_counter() - started)
        started = time.perf_counter()
        vectors_of = {i.chunk_id: cached[hashes[i.chunk_id]] for i in items if hashes[i.chunk_id] in cached}
        with manifest.transaction():
            store.set_vectors(vectors_of)
            manifest.vectors_done(items, set(vectors_of))
        report.add_time("write vectors", time.perf_counter() - started)
        done += len(items)
        if progress:
            progress("embedding", done, max(total, done))
