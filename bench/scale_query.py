"""Query benchmark at archive scale: hybrid search latency, ANN recall and `nbrecall serve` under 4 clients.

    .venv/bin/python bench/scale_query.py all --rows 100000 [--dir /tmp/nbrecall-scale-query/ROWS] [--queries 200]
                                              [--clients 4] [--requests 60] [--source ../shared/corpus]
                                              [--eval ../shared/eval/queries.jsonl] [--sweep]
    .venv/bin/python bench/scale_query.py build --rows N …   # only the generated index (prints build table)
    .venv/bin/python bench/scale_query.py query --rows N …   # only the in-process measurements (warm process)
    .venv/bin/python bench/scale_query.py serve --rows N …   # only the HTTP clients against `nbrecall serve`
    .venv/bin/python bench/scale_query.py compare --rows N [--types IVF_HNSW_SQ,IVF_HNSW_FLAT,IVF_SQ,IVF_PQ]
                                                  # each vector index type over the same rows, query settings swept

Why: embedding 1M real chunks takes hours on 2 cores, and latency and recall at 1M do not need 1M real vectors,
so the store is filled with generated rows: text drawn from the cells of the real notebooks (so BM25 sees real
vocabulary and posting-list lengths), vectors derived from real all-MiniLM-L6-v2 vectors of real cells (see
`derived`: the anisotropy and neighbour structure of real embeddings; each notebook on a topic), and the
metadata of a firm's share (years, projects, authors, ~3% deprecated). Query vectors are the real model's
embeddings of real query wording. `finish_run()` then builds the keyword and vector indexes exactly as an index
run does (`AnnSettings` defaults unless overridden).

`query` runs in a fresh process (so its RSS is a reader's, not the builder's) and reports p50/p95/p99 of
`LanceStore.search` (fan-out 50) with the default filter (deprecated = false), a year range, a large and a small
project and no filter, each side alone, exact flat search, and recall@10 of the ANN search against exact search
(`bypass_vector_index`) on the same vectors. `serve` writes a manifest for the generated notebooks
(nbrecall.index.manifest), starts `nbrecall serve` on the index and measures 1 and 4 concurrent clients on
`GET /api/search` (which embeds the query with the real model, searches, groups and reads neighbourhoods from
the manifest).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from nbrecall.index.lance_schema import AnnSettings, chunk_schema
from nbrecall.index.store import LanceStore
from nbrecall.records import SearchFilters, StoreQuery

DIM = 384
KINDS = ["text"] * 60 + ["code"] * 15 + ["table"] * 10 + ["scalar"] * 8 + ["figure"] * 5 + ["error"] * 2
FIRST = ["Anna", "Bram", "Chen", "Daan", "Eva", "Femke", "Gert", "Hanna", "Ivo", "Joris", "Karin", "Lotte"]
LAST = ["de Vries", "Jansen", "Bakker", "Visser", "Smit", "Meijer", "Mulder", "de Boer", "Bos", "Vos"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def peak_rss_mib(pid: int | str = "self") -> float:
    """Peak resident set size (VmHWM) of a process, MiB (not `ru_maxrss`: Linux keeps that across exec, so a
    child would report its parent's peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class RssPeak:
    """Peak VmRSS of this process while a `with` block runs (sampled every 0.1 s): per-phase peaks, which
    `ru_maxrss` (one peak for the whole process) cannot give."""

    def __enter__(self) -> RssPeak:
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while True:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.peak = max(self.peak, int(line.split()[1]) / 1024)
            if self._stop.wait(0.1):
                return

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def machine_line() -> str:
    load = os.getloadavg()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"machine: {os.cpu_count()} cores, {mem:.1f} GiB RAM, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


def table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    """A markdown table (pasted as it is into bench/README.md)."""
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------- generated rows


def text_pool(source: Path, limit: int = 60_000, seed: int = 0) -> list[str]:
    """Cell sources of the real notebooks (one notebook at a time; at most `limit`, ≤ 1,500 characters each)."""
    rng = random.Random(f"pool:{seed}")
    pool: list[str] = []
    seen = 0
    for path in sorted(source.rglob("*.ipynb")):
        try:
            nb = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        cells = nb.get("cells") or (nb.get("worksheets") or [{}])[0].get("cells") or []
        for cell in cells:
            text = cell.get("source", cell.get("input", ""))
            text = "".join(text) if isinstance(text, list) else str(text)
            if not text.strip() or "data:image" in text:
                continue
            seen += 1
            item = text[:1500]
            if len(pool) < limit:
                pool.append(item)
            else:  # reservoir: every cell equally likely, memory bounded
                j = rng.randrange(seen)
                if j < limit:
                    pool[j] = item
    if not pool:
        raise SystemExit(f"{source}: no notebook cells to draw text from")
    return pool


@dataclass
class NotebookSpec:
    sha: str
    path: str
    year: int
    project: str
    author: str
    deprecated: bool
    stale: bool
    health: float
    topic: int
    chunks: int


def notebooks(rows: int, topics: int, seed: int) -> Iterator[NotebookSpec]:
    """Notebooks of ~25 chunks each, laid out like bench/scale_corpus.py, until `rows` chunks are planned."""
    rng = random.Random(f"nbs:{seed}")
    planned = number = 0
    project_no = {year: 0 for year in range(2015, 2025)}
    while planned < rows:
        year = rng.choice(range(2015, 2025))
        project_no[year] += 1
        project = f"{year % 100:02d}-{project_no[year] % 1000:03d}"
        for _ in range(rng.randint(3, 30)):
            if planned >= rows:
                break
            chunks = min(rows - planned, max(1, int(rng.expovariate(1 / 25))))
            sha = hashlib.sha256(f"{seed}:{number}".encode()).hexdigest()
            author = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
            yield NotebookSpec(sha, f"projects/{year}/{project}/nb_{number:06d}.ipynb", year, project, author,
                               rng.random() < 0.03, rng.random() < 0.05, rng.uniform(0.5, 1.0),
                               rng.randrange(topics), chunks)
            planned += chunks
            number += 1


def load_embedder(models: Path) -> Any:
    from nbrecall.config import EmbedSettings
    from nbrecall.index.embed import load_embedder as load

    return load(EmbedSettings(), models)


def seed_vectors(args: argparse.Namespace, pool: list[str], n: int = 2000) -> np.ndarray:
    """Real all-MiniLM-L6-v2 vectors to derive the rows from: `--seed-vectors` (an nbrecall embeddings.sqlite,
    read-only, or a .npy), else `n` cells of the pool embedded once and cached beside the index folder."""
    path: Path | None = args.seed_vectors
    if path is not None and path.suffix == ".npy":
        return np.load(path)
    if path is not None:
        import sqlite3

        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        blobs = [r[0] for r in db.execute("SELECT vector FROM vectors ORDER BY text_hash")]
        db.close()
        vectors = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), DIM)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cache = args.dir.parent / f"seed_vectors_{args.seed}_{n}.npy"
    if cache.is_file():
        return np.load(cache)
    rng = random.Random(f"seedvec:{args.seed}")
    texts = [t[:600] for t in rng.sample(pool, min(n, len(pool)))]
    t0 = time.perf_counter()
    vectors = load_embedder(args.models).embed(texts).astype(np.float32)
    print(f"  embedded {len(texts):,} seed cells in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors


def derived(seeds: np.ndarray, primary: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors made from real MiniLM vectors: a notebook's own seed mixed with a random other seed (weight
    0.5–1) plus a little noise. Calibrated on 30k real chunk vectors of ../shared/corpus (median cosine to the
    10th / 50th neighbour 0.815 / 0.711 real, 0.808 / 0.649 generated at the same size; median pair cosine
    0.24 real, 0.31 generated): the anisotropy and neighbour structure of real embeddings, which isotropic
    random clusters lack (their neighbours are all alike, and the query-to-data cosines wrong)."""
    n = len(primary)
    other = rng.integers(0, len(seeds), n)
    weight = rng.uniform(0.5, 1.0, size=(n, 1)).astype(np.float32)
    noise = rng.uniform(0.5, 1.5, size=(n, 1)).astype(np.float32) * 0.015
    vectors = weight * seeds[primary] + (1 - weight) * seeds[other] + noise * rng.normal(size=(n, DIM)).astype(
        np.float32
    )
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def row_batches(
    rows: int, pool: list[str], seeds: np.ndarray, seed: int, batch: int = 20_000
) -> Iterator[tuple[pa.Table, list[NotebookSpec]]]:
    """Arrow batches in the chunk schema, with the notebooks whose chunks they hold (for the manifest)."""
    rng = random.Random(f"rows:{seed}")
    nrng = np.random.default_rng(seed + 1)
    schema = chunk_schema(DIM)
    columns: dict[str, list[Any]] = {f.name: [] for f in schema if f.name != "vector"}
    topic_ids: list[int] = []
    specs: list[NotebookSpec] = []

    def flush() -> tuple[pa.Table, list[NotebookSpec]]:
        vectors = derived(seeds, np.asarray(topic_ids), nrng)
        arrays = {name: pa.array(values, schema.field(name).type) for name, values in columns.items()}
        arrays["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM)
        out = pa.table([arrays[f.name] for f in schema], schema=schema)
        done = list(specs)
        for values in columns.values():
            values.clear()
        topic_ids.clear()
        specs.clear()
        return out, done

    for nb in notebooks(rows, len(seeds), seed):
        specs.append(nb)
        for i in range(nb.chunks):
            heading = pool[rng.randrange(len(pool))].strip().split("\n", 1)[0].lstrip("# ")[:80]
            body = "\n\n".join(pool[rng.randrange(len(pool))] for _ in range(rng.randint(1, 3)))
            values = {
                "chunk_id": f"{nb.sha[:16]}:{i}", "nb_sha": nb.sha, "notebook": nb.path, "root": "/scale",
                "kind": rng.choice(KINDS), "cells": [i, i + 1], "cell_ids": [f"c{i}", f"c{i + 1}"], "anchor": i,
                "anchor_id": f"c{i}", "heading": heading, "text": f"{nb.path}\n{heading}\n\n{body}",
                "year": nb.year, "project": nb.project, "author": nb.author, "tags": ["deprecated"] if
                nb.deprecated else [], "deprecated": nb.deprecated, "stale": nb.stale, "health": nb.health,
            }
            for name, value in values.items():
                columns[name].append(value)
            topic_ids.append(nb.topic)
            if len(topic_ids) >= batch:
                yield flush()
    if topic_ids or specs:
        yield flush()


def query_texts(n: int, seed: int, eval_path: Path, pool: list[str]) -> list[str]:
    """`n` query texts: the eval queries (cycled), then 2–6 words drawn from a pool cell."""
    texts: list[str] = []
    if eval_path.is_file():
        texts = [json.loads(line)["query"] for line in eval_path.read_text().splitlines() if line.strip()]
    rng = random.Random(f"queries:{seed}")
    while len(texts) < n:
        words = [w for w in rng.choice(pool).split() if w.isalpha()]
        if words:
            texts.append(" ".join(rng.sample(words, min(rng.randint(2, 6), len(words)))))
    return texts[:n]


def query_set(args: argparse.Namespace, pool: list[str]) -> list[tuple[str, np.ndarray]]:
    """(text, vector) queries, the vectors from the real model, as `serve` would search."""
    texts = query_texts(args.queries, args.seed, args.eval, pool)
    vectors = load_embedder(args.models).embed(texts)
    return list(zip(texts, vectors, strict=True))


def ann_settings(args: argparse.Namespace) -> AnnSettings:
    ann = AnnSettings()
    if args.index_type:
        ann.index_type = args.index_type
    if args.min_rows is not None:
        ann.min_rows = args.min_rows
    return ann


# ---------------------------------------------------------------------------------------------- phases


def build(args: argparse.Namespace) -> None:
    """Fill a LanceStore with generated rows and a manifest, then `finish_run()`: FTS + compaction + ANN."""
    from nbrecall.index.manifest import SqliteManifest
    from nbrecall.records import CellRecord, ContentRecord, FileRecord

    index_dir: Path = args.dir
    if (index_dir / "lance").exists():
        raise SystemExit(f"{index_dir} already holds an index (delete it or pick another --dir)")
    print(machine_line())
    start = time.perf_counter()
    pool = text_pool(args.source, seed=args.seed)
    seeds = seed_vectors(args, pool)
    t_pool = time.perf_counter() - start
    store = LanceStore(index_dir / "lance", DIM, ann_settings(args))
    manifest = SqliteManifest(index_dir / "manifest.sqlite")
    t_add = t_manifest = 0.0
    added = 0
    for batch, specs in row_batches(args.rows, pool, seeds, args.seed):
        t0 = time.perf_counter()
        store.table.add(batch)
        t_add += time.perf_counter() - t0
        t0 = time.perf_counter()
        with manifest.transaction():
            files = [FileRecord("/scale", nb.path, 1000, 0, nb.sha) for nb in specs]
            contents = [ContentRecord(nb.sha, "indexed", "", "/scale", nb.path, nb.chunks + 1, nb.chunks, nb.chunks,
                                      {"year": nb.year, "project": nb.project, "author": nb.author})
                        for nb in specs]
            texts = batch.column("text").to_pylist()
            cells = [CellRecord(nb.sha, i, f"c{i}", "markdown" if i == 0 else "code", None,
                                "# " + nb.path if i == 0 else texts[(int(nb.sha[:8], 16) + i) % len(texts)][:300], "")
                     for nb in specs for i in range(nb.chunks + 1)]
            manifest.save_files(files)
            manifest.save_contents(contents, cells)
        t_manifest += time.perf_counter() - t0
        added += batch.num_rows
        print(f"  added {added:,} rows ({t_add:.0f} s)", file=sys.stderr, flush=True)
    manifest.close()
    # finish_run() in two timed halves: FTS + compaction (the vector index held back), then the vector index
    min_rows, store.ann.min_rows = store.ann.min_rows, 2**62
    t0 = time.perf_counter()
    with RssPeak() as rss_fts:
        store.finish_run()
    t_fts = time.perf_counter() - t0
    store.ann.min_rows = min_rows
    t0 = time.perf_counter()
    with RssPeak() as rss_ann:
        action = store.ensure_vector_index()
    t_ann = time.perf_counter() - t0
    state_path = store.path / store.ann.state_file
    state = json.loads(state_path.read_text()) if state_path.is_file() else {}
    sizes = {idx.index_type: idx.size_bytes for idx in store.table.list_indices()}
    on_disk = dir_bytes(store.path)
    store.table.optimize(cleanup_older_than=_dt.timedelta(0))  # no other reader here: drop the kept versions
    settled = dir_bytes(store.path)
    rows = [
        ["rows (chunks)", f"{store.count():,}"],
        ["text pool (cells of the real notebooks), seed vectors", f"{len(pool):,} cells, {len(seeds):,} vectors, "
                                                                    f"{t_pool:.1f} s"],
        ["append rows (LanceDB add, 20k per commit)", f"{t_add:.1f} s"],
        ["manifest rows", f"{t_manifest:.1f} s"],
        ["finish_run: FTS build + compaction (peak RSS)", f"{t_fts:.1f} s ({rss_fts.peak:,.0f} MiB)"],
        [f"finish_run: vector index {action} ({store.ann.index_type}, {state.get('trained_rows', 0):,} rows; "
         "peak RSS)", f"{t_ann:.1f} s ({rss_ann.peak:,.0f} MiB)"],
        ["index on disk: lance folder (after old versions are cleaned up)",
         f"{on_disk / 2**20:,.0f} MiB ({settled / 2**20:,.0f} MiB)"],
        ["  of which FTS index", f"{(sizes.get('FTS') or 0) / 2**20:,.0f} MiB"],
        ["  of which vector index", f"{sum(v or 0 for k, v in sizes.items() if k != 'FTS') / 2**20:,.0f} MiB"],
        ["manifest.sqlite", f"{(index_dir / 'manifest.sqlite').stat().st_size / 2**20:,.0f} MiB"],
        ["peak RSS of the build process", f"{peak_rss_mib():,.0f} MiB"],
        ["total", f"{time.perf_counter() - start:.1f} s"],
    ]
    table(f"Build: {args.rows:,} generated chunks", ["step", "value"], rows)


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times, result


def latency_row(name: str, values: list[float]) -> list[Any]:
    return [name, f"{percentile(values, 0.5):.1f}", f"{percentile(values, 0.95):.1f}",
            f"{percentile(values, 0.99):.1f}", f"{statistics.mean(values):.1f}"]


def recall_at(ann: list[dict[str, Any]], exact: list[dict[str, Any]], k: int = 10) -> float:
    truth = {r["chunk_id"] for r in exact[:k]}
    return len(truth & {r["chunk_id"] for r in ann[:k]}) / max(1, len(truth))


def query(args: argparse.Namespace) -> None:
    """In-process latency and recall, from a fresh process that opens the store like `serve` does."""
    print(machine_line())
    t0 = time.perf_counter()
    store = LanceStore(args.dir / "lance", DIM, ann_settings(args))
    t_open = (time.perf_counter() - t0) * 1000
    rows = store.count()
    pool = text_pool(args.source, seed=args.seed)
    queries = query_set(args, pool)
    del pool
    counts = store.table.search().select(["project"]).limit(None).to_arrow()["project"].value_counts().to_pylist()
    by_size = sorted((c["counts"], c["values"]) for c in counts)
    big_n, big = by_size[-1]
    small_n, small = min(by_size, key=lambda item: abs(item[0] - 30))  # fewer rows than the fan-out
    filters = {
        "default (deprecated = false)": SearchFilters(),
        "year 2017..2019": SearchFilters(year_from=2017, year_to=2019),
        f"project {big} ({big_n:,} rows)": SearchFilters(project=big),
        f"project {small} ({small_n:,} rows)": SearchFilters(project=small),
        "no filter (include deprecated)": SearchFilters(include_deprecated=True),
    }
    index = store.vector_index()
    for text, vector in queries[:20]:  # warm: caches, index files
        store.search(StoreQuery(text, vector, args.fanout, SearchFilters()))
    lat: list[list[Any]] = []
    for name, flt in filters.items():
        values = [timed(lambda t=t, v=v, f=flt: store.search(StoreQuery(t, v, args.fanout, f)))[0][0]
                  for t, v in queries]
        lat.append(latency_row(f"hybrid search, {name}", values))
    default = SearchFilters()
    lat.append(latency_row("keyword (BM25) only", [timed(lambda t=t: store.keyword(t, args.fanout, default))[0][0]
                                                    for t, _ in queries]))
    ann_ms: list[float] = []
    exact_ms: list[float] = []
    recalls: dict[str, list[float]] = {}
    truth: list[list[dict[str, Any]]] = []
    for name, flt in list(filters.items())[:4]:
        for _text, vector in queries:
            ms, ann = timed(lambda v=vector, f=flt: store.vector(v, args.fanout, f))
            ex_ms, exact = timed(lambda v=vector, f=flt: store.vector(v, args.fanout, f, exact=True))
            if name.startswith("default"):
                ann_ms.extend(ms)
                exact_ms.extend(ex_ms)
                truth.append(exact)
            recalls.setdefault(name, []).append(recall_at(ann, exact))
    lat.append(latency_row("vector only (ANN, k = 50)", ann_ms))
    lat.append(latency_row("vector only, exact flat scan", exact_ms))
    kind = f"{index.index_type}, {index.num_indexed_rows:,} indexed" if index else "none (flat)"
    table(f"Query latency, {rows:,} chunks, {len(queries)} queries, fan-out {args.fanout}, vector index: {kind}; "
          f"store opened in {t_open:.0f} ms", ["measure (ms)", "p50", "p95", "p99", "mean"], lat)
    table("ANN recall@10 against exact search (same vectors, top 10 of the k = 50 list)",
          ["filter", "recall@10 mean", "min", "queries ≥ 0.9"],
          [[name, f"{statistics.mean(v):.3f}", f"{min(v):.2f}", f"{sum(x >= 0.9 for x in v) / len(v):.0%}"]
           for name, v in recalls.items()])
    if args.sweep and index is not None:
        sweep(store, queries, args.fanout, f": {index.index_type}", truth)
    print(f"\npeak RSS of the query process: {peak_rss_mib():,.0f} MiB")


def sweep(
    store: LanceStore, queries: list[tuple[str, np.ndarray]], fanout: int, title: str = "",
    truth: list[list[dict[str, Any]]] | None = None,
) -> None:
    """Recall and latency of the vector search for a few query settings (the defaults are chosen from this)."""
    truth = truth or [store.vector(v, fanout, SearchFilters(), exact=True) for _t, v in queries]
    rows: list[list[Any]] = []
    saved = (store.ann.ef, store.ann.nprobes, store.ann.refine_factor)
    index = store.vector_index()
    if index is not None and "Hnsw" in index.index_type:
        grid = [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 0, 5), (0, 0, 10), (150, 0, 1), (300, 0, 1),
                (150, 0, 3), (300, 0, 3), (300, 0, 5)]
    else:
        grid = [(0, 0, 0), (0, 0, 1), (0, 20, 1), (0, 40, 1), (0, 80, 1), (0, 160, 1), (0, 320, 1), (0, 160, 5)]
    for ef, nprobes, refine in grid:
        store.ann.ef, store.ann.nprobes, store.ann.refine_factor = ef, nprobes, refine
        ms: list[float] = []
        rec: list[float] = []
        for (_t, vector), exact in zip(queries, truth, strict=True):
            t, ann = timed(lambda v=vector: store.vector(v, fanout, SearchFilters()))
            ms.extend(t)
            rec.append(recall_at(ann, exact))
        rows.append([ef or "default", nprobes or f"default ({store.probes()})", refine or "none",
                     f"{statistics.mean(rec):.3f}", f"{sum(r >= 0.9 for r in rec) / len(rec):.0%}",
                     f"{percentile(ms, 0.5):.1f}", f"{percentile(ms, 0.95):.1f}"])
    store.ann.ef, store.ann.nprobes, store.ann.refine_factor = saved
    table(f"Vector search settings{title} (default filter, k = 50, recall@10 of the top 10)",
          ["ef", "nprobes", "refine", "recall@10", "queries ≥ 0.9", "p50 ms", "p95 ms"], rows)


def compare(args: argparse.Namespace) -> None:
    """Each index type in `--types` built over the same rows, swept; the default type is rebuilt at the end."""
    print(machine_line())
    store = LanceStore(args.dir / "lance", DIM, ann_settings(args))
    pool = text_pool(args.source, seed=args.seed)
    queries = query_set(args, pool)
    del pool
    truth = [store.vector(v, args.fanout, SearchFilters(), exact=True) for _t, v in queries]
    default_type = store.ann.index_type
    for kind in args.types.split(","):
        store.ann.index_type = kind
        with RssPeak() as rss:
            t0 = time.perf_counter()
            store.ensure_vector_index(force=True)
            seconds = time.perf_counter() - t0
        index = store.vector_index()
        size = (index.size_bytes or 0) / 2**20 if index else 0.0
        for _t, v in queries[:10]:
            store.vector(v, args.fanout, SearchFilters())
        sweep(store, queries, args.fanout, f": {kind}, built in {seconds:.0f} s, {size:,.0f} MiB, build peak RSS "
              f"{rss.peak:,.0f} MiB", truth)
    store.ann.index_type = default_type
    store.ensure_vector_index(force=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(args: argparse.Namespace) -> None:
    """Start `nbrecall serve` on the index and measure 1 and `--clients` concurrent clients."""
    import httpx

    print(machine_line())
    config = args.dir / "nbrecall.toml"
    config.write_text(f'[embed]\ncache_dir = "{args.models}"\n')
    port = free_port()
    env = {**os.environ, "NBRECALL_CONFIG": str(config)}
    exe = Path(sys.executable).with_name("nbrecall")
    server = subprocess.Popen([str(exe), "serve", "--index", str(args.dir), "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600
        while True:
            try:
                if httpx.get(f"{base}/api/status", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.time() > deadline:
                stderr = server.stderr.read().decode()[-2000:] if server.stderr else ""
                raise SystemExit(f"serve did not start: {stderr}")
            time.sleep(0.5)
        pool = text_pool(args.source, seed=args.seed)
        texts = query_texts(max(args.requests, 60), args.seed, args.eval, pool)
        del pool
        t0 = time.perf_counter()
        first = httpx.get(f"{base}/api/search", params={"q": texts[0]}, timeout=600)
        first.raise_for_status()
        t_first = time.perf_counter() - t0
        for text in texts[1:11]:  # warm
            httpx.get(f"{base}/api/search", params={"q": text}, timeout=120).raise_for_status()
        rows = []
        for clients in (1, args.clients):
            lat, wall, errors = run_clients(base, texts, clients, args.requests)
            rows.append([clients, len(lat), errors, f"{len(lat) / wall:.1f}", f"{percentile(lat, 0.5):.0f}",
                         f"{percentile(lat, 0.95):.0f}", f"{percentile(lat, 0.99):.0f}"])
        rss = peak_rss_mib(server.pid)
        table(f"`nbrecall serve`, GET /api/search (k = 10, default filter); first request (loads the model) "
              f"{t_first:.1f} s; server peak RSS {rss:,.0f} MiB",
              ["clients", "requests", "errors", "requests/s", "p50 ms", "p95 ms", "p99 ms"], rows)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def run_clients(base: str, texts: list[str], clients: int, per_client: int) -> tuple[list[float], float, int]:
    """`clients` threads, each with its own connection, sending `per_client` searches back to back."""
    import httpx

    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()

    def client(offset: int) -> None:
        nonlocal errors
        with httpx.Client(base_url=base, timeout=120) as http:
            for i in range(per_client):
                text = texts[(offset * 17 + i) % len(texts)]
                t0 = time.perf_counter()
                response = http.get("/api/search", params={"q": text})
                ms = (time.perf_counter() - t0) * 1000
                with lock:
                    if response.status_code == 200:
                        latencies.append(ms)
                    else:
                        errors += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, time.perf_counter() - t0, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["all", "build", "query", "serve", "compare"])
    parser.add_argument("--rows", type=int, required=True, help="chunks in the generated index")
    parser.add_argument("--dir", type=Path, help="index folder (default /tmp/nbrecall-scale-query/ROWS)")
    parser.add_argument("--source", type=Path, default=Path("../shared/corpus"))
    parser.add_argument("--eval", type=Path, default=Path("../shared/eval/queries.jsonl"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=50)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=60, help="searches per client")
    parser.add_argument("--models", type=Path, help="embedding model cache (default next to --dir)")
    parser.add_argument("--seed-vectors", type=Path, help="real vectors to derive rows from: embeddings.sqlite or .npy")
    parser.add_argument("--index-type", help="override AnnSettings.index_type (IVF_HNSW_SQ, IVF_SQ, IVF_PQ)")
    parser.add_argument("--min-rows", type=int, help="override AnnSettings.min_rows")
    parser.add_argument("--sweep", action="store_true", help="also sweep ef / nprobes / refine_factor")
    parser.add_argument("--types", default="IVF_HNSW_SQ,IVF_HNSW_FLAT,IVF_SQ,IVF_PQ", help="for compare")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.dir = args.dir or Path(f"/tmp/nbrecall-scale-query/{args.rows}")
    args.models = args.models or args.dir.parent / "models"
    if args.phase in ("all", "build"):
        build(args)
    if args.phase == "all":  # a fresh, warm reader process, as `serve` would be
        forwarded = [a for a in sys.argv[1:] if a != "all"]
        subprocess.run([sys.executable, __file__, "query", *forwarded], check=True)
    if args.phase == "query":
        query(args)
    if args.phase in ("all", "serve"):
        serve(args)
    if args.phase == "compare":
        compare(args)


if __name__ == "__main__":
    main()
