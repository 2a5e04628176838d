"""The PostgreSQL + pgvector store: what several indexers and servers share (`[store] url = "postgresql://..."`).

Vector side: exact (a scan of inline vectors) below `EXACT_BELOW` chunks, like LanceStore's flat search; from
there an HNSW index (cosine, built by `finish_run` once the store is that large). HNSW queries run with
`hnsw.iterative_scan = relaxed_order` (without it a selective filter silently returns fewer than k rows) inside a
materialised CTE that restores strict distance order, and `ef_search` 400: on the eval corpus 100 lost whole
neighbourhoods of near-duplicate chunks (recall@50 0.87-0.91, some queries 0), 400 gives 0.98-0.99.

Keyword side: BM25 computed in SQL over PostgreSQL full text (GIN index; tokenized exactly like LanceDB's index,
see `pg_schema.store_migrations`), so the fused scores mean what LanceDB's BM25 scores mean. `ts_rank`/`ts_rank_cd`
have no inverse document frequency: a long question would be ranked by its most common words. The query is an OR
of its lexemes (an AND of a long question finds nothing), each weighted by how often the query says it, as
LanceDB scores every query token ("a random male beats a random female" counts `random` twice); candidates come
from its rarest lexemes up to a postings budget (a query full of common words must not read half the table;
10,000 keeps the eval metrics, 5,000 lost nb@1 0.917 → 0.900) and are scored with every lexeme; among them the
top k is exact (see `keyword`), as LanceDB's WAND top k is. Document frequencies are refreshed by `finish_run`
(`ts_stat`), as LanceDB brings its keyword index up to date there.

Writes go in with COPY (binary), not row inserts: a notebook's old chunks are deleted first anyway, so there is
nothing to upsert, and COPY skips the per-row statement round trip and the text form of each vector.

Each batch's chunks are replaced in one transaction; inside `PgManifest.transaction()` (same database object)
the chunk write and the manifest write of a batch commit together.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import closing
from dataclasses import replace
from typing import Any

import numpy as np

from nbrecall.index.faults import StoreUnavailable, pg_fault, redact
from nbrecall.index.fusion import fuse
from nbrecall.index.pg_db import PgDatabase, clean_text
from nbrecall.index.pg_schema import store_migrations
from nbrecall.index.pg_sql import filter_sql, tsquery_literal
from nbrecall.index.terms import keyword_query, keyword_text
from nbrecall.records import (
    CHUNK_COLUMNS,
    FACT_KIND,
    ChunkRow,
    SearchFilters,
    StoreHit,
    StoreQuery,
)

log = logging.getLogger("nbrecall.index")

K1, B = 1.2, 0.75  # BM25 parameters (LanceDB's and Lucene's defaults)
POSTINGS_BUDGET = 10_000  # matching rows the keyword query may read before it drops its most common lexemes
RESCORE, RESCORE_CAP = 200, 2000  # chunks scored exactly from their tsvector (at least 4 k; ties at the cut, capped)
EF_SEARCH = 400  # recall@50 vs exact on the eval corpus: 100 → 0.87-0.91 (some queries 0), 400 → 0.98-0.99
EXACT_BELOW = 50_000  # chunks; below, vector search is an exact scan (as LanceStore's flat search below 50k)
STATS_REFRESH_SHARE = 0.02  # refresh document frequencies once this share of the rows changed

HNSW_M, HNSW_EF_CONSTRUCTION = 16, 64
BUILD_MEMORY_MB = 4096  # at most this much maintenance_work_mem for the HNSW build (see `ensure_vector_index`)

COLUMNS = CHUNK_COLUMNS  # the columns a search returns, as LanceStore's
# PostgreSQL type of each column, for binary COPY (a column added to ChunkRow without a type fails here, at import)
_PG_TYPES = {"chunk_id": "text", "nb_sha": "text", "notebook": "text", "root": "text", "kind": "text",
             "cells": "int4[]", "cell_ids": "text[]", "anchor": "int4", "anchor_id": "text", "heading": "text",
             "text": "text", "year": "int4", "project": "text", "author": "text", "tags": "text[]",
             "deprecated": "bool", "stale": "bool", "health": "float4"}
_COPY_TYPES = [_PG_TYPES[c] for c in COLUMNS] + ["vector"]
_COPY = f"COPY chunks ({', '.join(COLUMNS)}, vector) FROM STDIN (FORMAT BINARY)"


def _as_array(vector: Any) -> np.ndarray:
    """A `vector` column value as float32 (pgvector's adapter gives a `Vector`, or an array once registered)."""
    return np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)


class PgStore:
    """Chunks in PostgreSQL; see the module docstring. Capabilities (`protocols.Store`): several processes may
    write at once; statistics are refreshed between batches, not beside them; chunk writes join the manifest's
    transaction (same `PgDatabase`)."""

    shared = True
    concurrent_refresh = False
    transactional = True

    def __init__(self, db: PgDatabase, dim: int) -> None:
        self.db = db
        self.dim = dim
        self.path = redact(db.url)
        self._changed = 0  # rows written or deleted by this process since the statistics were refreshed
        self.ef_search = EF_SEARCH  # HNSW candidates per query (at least k)
        self.exact_below = EXACT_BELOW
        self._stats: tuple[float, int, float, bool] | None = None  # (read at, n_docs, avg_len, HNSW usable)
        self._ef_applied = 100  # what the session has (PgDatabase sets 100 on connect)
        self.build_memory_mb = BUILD_MEMORY_MB  # cap of maintenance_work_mem for the HNSW build
        self.build_workers: int | None = None  # max_parallel_maintenance_workers for it (None: the server's)
        db.ensure_vector_extension()
        db.migrate("store", store_migrations(dim), dim)
        self._check_dim()

    @classmethod
    def connect(cls, url: str, dim: int, schema: str = "nbrecall") -> PgStore:
        return cls(PgDatabase(url, schema), dim)

    def close(self) -> None:
        self.db.close()

    def _check_dim(self) -> None:
        have = self.db.version("store")
        stored = have[1] if have else None
        if stored is None or stored == self.dim:
            return
        if self.count() == 0:  # an empty store follows the model
            with self.db.transaction() as conn:
                conn.execute("DROP INDEX IF EXISTS chunks_vector")  # made again by ensure_vector_index
                conn.execute(f"ALTER TABLE chunks ALTER COLUMN vector TYPE vector({int(self.dim)})")
                for step in store_migrations(self.dim):
                    conn.execute(step)
                conn.execute("UPDATE schema_version SET dim = %s WHERE component = 'store'", (self.dim,))
            return
        raise StoreUnavailable(
            f"{self.path}: schema {self.db.schema} holds {stored}-dimensional vectors but the embedding model gives "
            f"{self.dim}; use the model it was indexed with, or index into another schema ([store] schema)",
            self.path,
        )

    # -- writes -----------------------------------------------------------------------------------------------
    def _vector(self, value: np.ndarray | None) -> np.ndarray | None:
        if value is None:
            return None
        array = np.asarray(value, dtype=np.float32).reshape(-1)
        if array.shape[0] != self.dim or not np.all(np.isfinite(array)):
            return None  # like LanceStore's on_bad_vectors="null": the chunk stays findable by keyword
        return array

    def _params(self, row: ChunkRow) -> tuple[Any, ...]:
        return (
            row.chunk_id,
            row.nb_sha,
            clean_text(row.notebook),
            clean_text(row.root),
            row.kind,
            [int(c) for c in row.cells],
            [clean_text(str(c)) for c in row.cell_ids],
            int(row.anchor),
            clean_text(row.anchor_id),
            clean_text(row.heading),
            clean_text(keyword_text(row.text)),  # as LanceStore stores it (index/terms.py)
            row.year,
            clean_text(row.project or ""),
            clean_text(row.author or ""),
            [clean_text(t) for t in row.tags],
            bool(row.deprecated),
            bool(row.stale),
            float(row.health),
            self._vector(row.vector),
        )

    def replace_notebooks(self, remove: list[str], rows: list[ChunkRow]) -> None:
        """Insert `rows`; delete every other chunk of the notebooks in `remove` (+ those of `rows`); one
        transaction (a savepoint of the caller's, inside `PgManifest.transaction()`)."""
        shas = sorted({*remove, *(r.nb_sha for r in rows)})
        if not shas:
            return
        latest = {r.chunk_id: r for r in rows}  # a chunk id given twice: the last one wins, as an upsert would
        ids = sorted(latest)
        with self.db.transaction() as conn:
            self.db.lock_contents(conn, shas)
            # The ids too: a chunk id held by a notebook outside `shas` moves to its new notebook, as it did when
            # rows were upserted; after this nothing can conflict, so the rows go in with COPY.
            deleted = conn.execute("DELETE FROM chunks WHERE nb_sha = ANY(%s) OR chunk_id = ANY(%s)",
                                   (shas, ids)).rowcount
            if ids:
                with conn.cursor() as cur, cur.copy(_COPY) as copy:
                    copy.set_types(_COPY_TYPES)
                    for cid in ids:
                        copy.write_row(self._params(latest[cid]))
        self._changed += len(ids) + max(deleted, 0)

    def append_notebooks(self, rows: list[ChunkRow]) -> None:
        """Add the chunks of notebooks new to the store. Another indexer may have stored the same notebook
        meanwhile, so this replaces (idempotent) rather than blindly appends; the `nb_sha` index keeps it cheap."""
        self.replace_notebooks([], rows)

    def delete_notebooks(self, shas: list[str]) -> None:
        for start in range(0, len(shas), 1000):
            part = sorted(shas[start : start + 1000])
            with self.db.transaction() as conn:
                self.db.lock_contents(conn, part)
                self._changed += max(conn.execute("DELETE FROM chunks WHERE nb_sha = ANY(%s)", (part,)).rowcount, 0)

    def set_vectors(self, vectors: dict[str, np.ndarray]) -> None:
        """Set the vector of existing chunks by chunk_id (progressive indexing: keyword first, vectors later);
        ids no longer in the store are ignored."""
        items = sorted((cid, self._vector(v)) for cid, v in vectors.items())
        if not items:
            return
        with self.db.transaction() as conn:
            shas = [r[0] for r in conn.execute(
                "SELECT DISTINCT nb_sha FROM chunks WHERE chunk_id = ANY(%s)", ([cid for cid, _ in items],))]
            self.db.lock_contents(conn, shas)
            with conn.cursor() as cur:
                cur.executemany("UPDATE chunks SET vector = %s WHERE chunk_id = %s", [(v, cid) for cid, v in items])

    def _row_changes(self) -> int:
        """Rows inserted or deleted in `chunks` since the server's statistics began, by every process (setting a
        vector is an update and does not count: it changes no text)."""
        self.db.execute("SELECT pg_stat_force_next_flush()")  # this session's own counts too
        row = self.db.execute(
            "SELECT n_tup_ins + n_tup_del FROM pg_stat_user_tables WHERE relid = 'chunks'::regclass"
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def finish_run(self) -> None:
        """Refresh the keyword statistics (document frequencies, mean length) once enough rows changed since the
        last refresh, whoever changed them (an indexer killed before its refresh leaves them to the next run), and
        the planner's statistics with them (another process refreshing at the same moment makes this one skip);
        build the HNSW index once the store is large enough for it."""
        row = self.db.execute("SELECT n_docs, mods FROM text_stats").fetchone()
        changed = max(self._changed, self._row_changes() - int(row[1])) if row else 1
        small = row is not None and int(row[0]) > 20_000 and changed < STATS_REFRESH_SHARE * int(row[0])
        if changed > 0 and not small:
            self.refresh_statistics()
        self.ensure_vector_index()

    def refresh_statistics(self) -> bool:
        """Recompute the document frequency of every lexeme (one scan); False if another process is doing it."""
        table = f'"{self.db.schema.replace(chr(34), chr(34) * 2)}".chunks'
        mods = self._row_changes()
        with self.db.transaction() as conn:
            got = conn.execute("SELECT pg_try_advisory_xact_lock(%s, -2)", (self.db.classid,)).fetchone()[0]
            if not got:
                return False
            conn.execute("DELETE FROM term_stats")
            conn.execute("INSERT INTO term_stats (lexeme, ndoc) SELECT word, ndoc FROM ts_stat(%s)",
                         (f"SELECT tsv FROM {table} WHERE tsv IS NOT NULL",))
            conn.execute(
                "INSERT INTO text_stats (id, n_docs, avg_len, mods) SELECT 1, count(*), coalesce(avg(ntok), 0), %s "
                "FROM chunks ON CONFLICT (id) DO UPDATE SET n_docs = EXCLUDED.n_docs, avg_len = EXCLUDED.avg_len, "
                "mods = EXCLUDED.mods",
                (mods,),
            )
        self.db.execute("ANALYZE chunks")
        self._changed = 0
        self._stats = None
        return True

    # -- reads ------------------------------------------------------------------------------------------------
    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def notebook_shas(self) -> dict[str, int]:
        return {sha: int(n) for sha, n in self.db.execute("SELECT nb_sha, count(*) FROM chunks GROUP BY nb_sha")}

    def vectors(self, filters: SearchFilters, limit: int = 5000) -> dict[str, tuple[np.ndarray, list[int]]]:
        """chunk id → (vector, cells covered) of (at most `limit`) chunks that pass `filters` (see `LanceStore`)."""
        where, params = filter_sql(filters)
        rows = self.db.execute(
            f"SELECT chunk_id, cells, vector FROM chunks WHERE {where} AND vector IS NOT NULL LIMIT %(f_limit)s",
            {**params, "f_limit": int(limit)},
        )
        return {cid: (_as_array(vector), list(cells or [])) for cid, cells, vector in rows}

    def search_facts(self, query: StoreQuery) -> list[StoreHit]:
        """Hybrid search of the value facts. Here they are still rows of kind `fact` in the chunk table (their own
        table, as `index.fact_table` has for LanceDB, is not written yet), so they share its BM25 statistics."""
        return self.search(replace(query, filters=replace(query.filters, kinds=[FACT_KIND])))

    def fact_vectors(self, notebooks: list[str], limit: int = 20_000) -> dict[str, np.ndarray]:
        """fact id → vector of the facts of `notebooks` (see `LanceStore.fact_vectors`)."""
        if not notebooks:
            return {}
        found = self.vectors(SearchFilters(kinds=[FACT_KIND], notebooks=notebooks, include_deprecated=True), limit)
        return {cid: vector for cid, (vector, _cells) in found.items()}

    def chunk_ids(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT chunk_id FROM chunks")]

    def _text_stats(self) -> tuple[int, float]:
        """(chunks, mean BM25 length) as of the last statistics refresh; re-read at most every 5 s."""
        return self._cached()[1:3]

    def _cached(self) -> tuple[float, int, float, bool]:
        now = time.monotonic()
        if self._stats is None or now - self._stats[0] > 5.0:
            row = self.db.execute(
                "SELECT (SELECT n_docs FROM text_stats), (SELECT avg_len FROM text_stats), EXISTS (SELECT 1 FROM "
                "pg_index WHERE indexrelid = to_regclass('chunks_vector') AND indisvalid)"
            ).fetchone()
            self._stats = (now, int(row[0] or 0), float(row[1] or 100.0), bool(row[2]))
        return self._stats

    def vector_index(self) -> bool:
        """Whether the HNSW index exists and is valid (searches use it from `exact_below` chunks on)."""
        return self._cached()[3]

    def ensure_vector_index(self, force: bool = False) -> str:
        """Build the HNSW index (m 16, ef_construction 64, cosine) once the store holds `exact_below` chunks
        (or now, with `force`); later rows are added to it as they are written. Built CONCURRENTLY, so other
        indexers keep writing and searches keep running meanwhile; one process builds, the others skip. Returns
        "exact" (too small, or more than 2,000 dimensions), "kept", "built" or "busy"."""
        import psycopg

        self._stats = None
        n_docs, _ = self._text_stats()
        if self.dim > 2000 or (not force and n_docs < self.exact_below):
            return "exact"
        if self.vector_index():
            return "kept"
        with closing(PgDatabase(self.db.url, self.db.schema)) as builder:  # CONCURRENTLY: outside transactions
            if not builder.execute("SELECT pg_try_advisory_lock(%s, -3)", (self.db.classid,)).fetchone()[0]:
                return "busy"
            try:
                builder.execute("DROP INDEX CONCURRENTLY IF EXISTS chunks_vector")  # an invalid, interrupted build
                rows, have_mb = builder.execute(
                    "SELECT reltuples, (SELECT setting::bigint / 1024 FROM pg_settings "
                    "WHERE name = 'maintenance_work_mem') FROM pg_class WHERE oid = 'chunks'::regclass").fetchone()
                memory = max(self.build_memory(max(n_docs, int(rows or 0))), int(have_mb or 0))  # never lower it
                builder.execute("SELECT set_config('maintenance_work_mem', %s, false)", (f"{memory}MB",))
                if self.build_workers is not None:
                    builder.execute("SELECT set_config('max_parallel_maintenance_workers', %s, false)",
                                    (str(int(self.build_workers)),))
                # pgvector says when the graph outgrew maintenance_work_mem (the build then slows down many-fold)
                builder.conn.add_notice_handler(lambda diag: log.warning("HNSW build: %s", diag.message_primary))
                builder.execute("CREATE INDEX CONCURRENTLY chunks_vector ON chunks USING hnsw (vector "
                                f"vector_cosine_ops) WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})")
            except psycopg.errors.DuplicateTable:
                return "kept"
            finally:
                builder.execute("SELECT pg_advisory_unlock(%s, -3)", (self.db.classid,))
        self._stats = None
        return "built"

    def build_memory(self, rows: int) -> int:
        """maintenance_work_mem (MB) for an HNSW build over `rows` vectors: the whole graph (vector, neighbour lists
        of 2·m entries on layer 0, element header; ×1.25), at least 512, at most `build_memory_mb` (a server set to
        more keeps its own: the build never lowers it). pgvector holds the graph in memory while it fits and then
        goes on inserting on disk, many times slower: measured 2.25 KB per row at 384 dimensions (the estimate
        says 3.1), so the former fixed 512 MB held ~240k rows."""
        per_row = 4 * self.dim + 8 + 2 * HNSW_M * 24 + 160
        return int(min(max(512, rows * per_row * 1.25 / 2**20), max(64, self.build_memory_mb)))

    def _query_terms(self, text: str) -> tuple[list[str], list[float], list[str]]:
        """The query's lexemes with their BM25 weight (idf × how often the query has the lexeme, as LanceDB sums
        over query tokens), and the subset that selects candidates (rarest first)."""
        rows = self.db.execute(
            "SELECT l.lexeme, coalesce(array_length(l.positions, 1), 1), coalesce(s.ndoc, 0) "
            "FROM unnest(chunk_tsv(%s)) AS l LEFT JOIN term_stats s ON s.lexeme = l.lexeme",
            (clean_text(text),),
        ).fetchall()
        if not rows:
            return [], [], []
        n_docs, _ = self._text_stats()
        by_df = sorted(((int(df), lex, int(qtf)) for lex, qtf, df in rows), key=lambda item: (item[0], item[1]))
        lexemes = [lex for _, lex, _ in by_df]
        weights = [qtf * math.log(1.0 + (max(n_docs - df, 0) + 0.5) / (df + 0.5)) for df, _, qtf in by_df]
        select: list[str] = []
        postings = 0
        for df, lex, _ in by_df:
            if select and postings + df > POSTINGS_BUDGET:
                break
            select.append(lex)
            postings += df
        return lexemes, weights, select

    def keyword(self, text: str, k: int, filters: SearchFilters) -> list[dict[str, Any]]:
        """BM25 over the full-text index: row dicts with `_score`, best first; the same top `k` as an exact BM25
        over every chunk that has one of the selecting lexemes (see `_query_terms`), unless more than
        `RESCORE_CAP` chunks outside the best estimates reach the bound (then the highest bounds are scored).

        In stages, because reading a chunk's tsvector (out of line, next to an inline vector) costs more than the
        rest of the query: (1) from the GIN index, every chunk matching a selecting lexeme gets an estimate (each
        term frequency taken as 1, from the length column alone) and a bound (each at most the chunk's `max_tf`,
        every unselected lexeme present); (2) the best `RESCORE` estimates (ties at the cut included, at most
        `RESCORE_CAP`) are scored exactly from their tsvectors (and `tf_extra`, the frequencies a tsvector cannot
        hold); (3) so is every other chunk whose bound reaches the k-th exact score (at most `RESCORE_CAP`): a
        chunk that says "churn" 16 times in a long table had an estimate outside the best 200 and an exact score
        in the top 10 (LanceDB's WAND found it).
        """
        from psycopg.rows import dict_row

        query = self.keyword_sql(text, k, filters)
        if query is None:
            return []
        with self.db.transaction() as conn:
            # The planner prices `tsv @@ q` as cheap and scans small tables; but each tsvector is out of line
            # (beside an inline vector), so a scan reads it for every row: the GIN index is always the way here.
            conn.execute("SET LOCAL enable_seqscan = off")
            with conn.cursor(row_factory=dict_row) as cur:
                return cur.execute(*query).fetchall()

    def keyword_sql(self, text: str, k: int, filters: SearchFilters) -> tuple[str, dict[str, Any]] | None:
        """The statement `keyword` runs and its parameters (None: nothing to look for); for EXPLAIN."""
        if not text.strip():
            return None
        lexemes, weights, select = self._query_terms(keyword_query(text))
        if not select:
            return None
        where, params = filter_sql(filters)
        weight_of = dict(zip(lexemes, weights, strict=True))
        params.update(lex=lexemes, weight=weights, k=int(k), n=max(RESCORE, 4 * int(k)), cap=RESCORE_CAP,
                      avgdl=self._text_stats()[1], rest=sum(w for lex, w in weight_of.items() if lex not in select))
        # One branch per selecting lexeme, its tsquery a parameter: the planner sees each value and its frequency
        # (a lateral join over an array of tsqueries got a generic estimate and scanned the table instead).
        branches = []
        for i, lex in enumerate(select):
            params[f"q{i}"], params[f"w{i}"] = tsquery_literal([lex]), weight_of[lex]
            branches.append(f"SELECT ctid AS tid, chunk_id, ntok, max_tf, %(w{i})s::float8 AS weight FROM chunks "
                            f"WHERE tsv @@ %(q{i})s::tsquery AND {where}")
        norm = f"{K1} * ({1 - B} + {B} * c.ntok / %(avgdl)s)"
        exact = f"""(
            SELECT coalesce(sum(t.weight * d.tf * {K1 + 1} / (d.tf + {norm})), 0)
            FROM (SELECT lexeme, coalesce((c.tf_extra ->> lexeme)::float8, array_length(positions, 1), 1) AS tf
                  FROM unnest(ts_filter(setweight(c.tsv, 'A', %(lex)s::text[]), '{{a}}'))) AS d
            JOIN unnest(%(lex)s::text[], %(weight)s::float8[]) AS t(lexeme, weight) ON t.lexeme = d.lexeme
        )"""
        sql = f"""
            WITH hit AS MATERIALIZED (
                SELECT c.tid, min(c.chunk_id) AS chunk_id, sum(c.weight * {K1 + 1} / (1 + {norm})) AS s,
                       (sum(c.weight) + %(rest)s) * {K1 + 1} * greatest(max(c.max_tf), 1)
                           / (greatest(max(c.max_tf), 1) + max({norm})) AS bound
                FROM ({" UNION ALL ".join(branches)}) AS c
                GROUP BY c.tid
            ), first AS MATERIALIZED (
                SELECT tid FROM (SELECT tid, chunk_id, rank() OVER (ORDER BY s DESC) AS r FROM hit) AS ranked
                WHERE r <= %(n)s ORDER BY r, chunk_id LIMIT %(cap)s
            ), first_scored AS MATERIALIZED (
                SELECT c.chunk_id, {exact} AS score FROM first JOIN chunks c ON c.ctid = first.tid
            ), bar AS (
                SELECT score FROM first_scored ORDER BY score DESC OFFSET %(k)s - 1 LIMIT 1
            ), second AS (
                SELECT h.tid FROM hit h
                WHERE h.bound >= (SELECT score FROM bar) AND NOT EXISTS (SELECT 1 FROM first f WHERE f.tid = h.tid)
                ORDER BY h.bound DESC LIMIT %(cap)s
            ), scored AS (
                SELECT chunk_id, score FROM first_scored
                UNION ALL
                SELECT c.chunk_id, {exact} FROM second JOIN chunks c ON c.ctid = second.tid
                ORDER BY score DESC, chunk_id LIMIT %(k)s
            )
            SELECT {', '.join('c.' + c for c in COLUMNS)}, scored.score AS _score
            FROM scored JOIN chunks c USING (chunk_id) ORDER BY scored.score DESC, c.chunk_id
        """
        return sql, params

    def vector(
        self, vector: np.ndarray, k: int, filters: SearchFilters, exact: bool = False
    ) -> list[dict[str, Any]]:
        """Nearest chunks by cosine distance: row dicts with `_distance`. HNSW (iterative scan under filters) from
        `exact_below` chunks on; below, an exact scan (`+ 0` keeps the planner off the index): HNSW missed whole
        neighbourhoods of near-duplicate chunks on the eval corpus, and a scan of 30k inline vectors takes ~30 ms.
        `exact` always scans (the ground truth for recall), as `LanceStore.vector`."""
        from psycopg.rows import dict_row

        query = self._vector(vector)
        if query is None:
            return []
        n_docs, _ = self._text_stats()
        exact = exact or n_docs < self.exact_below or not self.vector_index()
        ef = max(self.ef_search, int(k))
        if not exact and ef != self._ef_applied:
            self.db.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(ef),))
            self._ef_applied = ef
        where, params = filter_sql(filters)
        params.update(v=query, k=int(k))
        order = "(vector <=> %(v)s) + 0" if exact else "vector <=> %(v)s"
        sql = f"""
            WITH nn AS MATERIALIZED (
                SELECT {', '.join(COLUMNS)}, vector <=> %(v)s AS _distance FROM chunks
                WHERE vector IS NOT NULL AND {where} ORDER BY {order} LIMIT %(k)s
            )
            SELECT * FROM nn ORDER BY _distance, chunk_id
        """
        with self.db.conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(sql, params).fetchall()

    def search(self, query: StoreQuery) -> list[StoreHit]:
        """Hybrid: the keyword and vector lists (each `k` long) fused by `index.fusion.fuse`."""
        vector, k, filters = query.vector, query.k, query.filters
        try:
            keyword = self.keyword(query.text, k, filters)
            dense = self.vector(vector, k, filters) if vector is not None else []
        except Exception as exc:
            fault = pg_fault(exc, "searching", self.db.url)
            if fault is None:
                raise
            raise fault from exc
        return fuse(keyword, dense, query.fusion)


def wait_for_statistics(store: PgStore, timeout: float = 30.0) -> None:
    """Refresh the keyword statistics now, waiting for a concurrent refresh to end (tests, benchmarks)."""
    deadline = time.monotonic() + timeout
    while not store.refresh_statistics():
        if time.monotonic() > deadline:
            raise TimeoutError("another process kept refreshing the keyword statistics")
        time.sleep(0.1)
