"""Chunk storage in LanceDB, the embedded default implementation of `protocols.Store`.

LanceDB gives vectors, native BM25 full-text search, hybrid search fused by reciprocal rank, filters and atomic
versioned commits on local disk. A notebook's chunks are replaced with one `merge_insert` commit, so a reader
sees each notebook either at its old or at its new version, never half-written.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from nbrecall.index.fact_table import FactTable, fuse_facts
from nbrecall.index.faults import damaged, storage_fault
from nbrecall.index.fusion import fuse
from nbrecall.index.heap import bound_arenas, release_free_memory
from nbrecall.index.lance_schema import (
    AnnSettings,
    KeywordCoverage,
    chunk_schema,
    create_filter_indexes,
    create_text_index,
    lance_where,
    merge_keyword_parts,
    split_rows,
    sql_literal,
    text_index_name,
)
from nbrecall.index.terms import keyword_query, keyword_text
from nbrecall.records import HIT_COLUMNS, ChunkRow, SearchFilters, StoreHit, StoreQuery

log = logging.getLogger("nbrecall.index")


class LanceStore:
    """The embedded default store: LanceDB tables `chunks` and `facts` (value facts, `index.fact_table`) in
    `<index>/lance`. Rows of kind `fact` are written with the chunks and go to the fact table."""

    TABLE = "chunks"
    # capabilities (`protocols.Store`): one indexer at a time (the writer lock); finish_run may run beside appends
    # (LanceDB commits them side by side); chunk writes commit on their own, before the manifest's
    shared = False
    concurrent_refresh = True
    transactional = False

    def __init__(self, path: Path, dim: int, ann: AnnSettings | None = None, cache_mb: int = 768) -> None:
        """`cache_mb` bounds LanceDB's index and metadata caches (3:1): with its defaults (gigabytes) a long index
        run over 41,000 notebooks grew past 2 GB resident, one cached entry per fragment and version."""
        from nbrecall.index.lance_import import import_lancedb

        lancedb = import_lancedb()  # without the REST namespace client (0.5-0.7 s): see lance_import
        bound_arenas()  # before LanceDB starts its threads: see nbrecall.index.heap
        self.path = path
        self.dim = dim
        self.ann = ann or AnnSettings()
        self._probes = (0.0, 20)  # (refresh after, partitions to probe): see `probes()`
        self._coverage = KeywordCoverage()  # rows the keyword index lacks, per table version
        self._lists: ThreadPoolExecutor | None = None  # runs the vector list beside the keyword list
        self.schema = chunk_schema(dim)
        try:
            path.mkdir(parents=True, exist_ok=True)
            # Check for a newer version on every read: a long-lived reader (`serve`, `mcp`) must follow the
            # index runs of another process, not search a snapshot whose files a later run cleans up.
            cache = max(cache_mb, 64) * 1024 * 1024
            session = lancedb.Session(index_cache_size_bytes=cache * 3 // 4, metadata_cache_size_bytes=cache // 4)
            self.db = lancedb.connect(str(path), read_consistency_interval=_dt.timedelta(0), session=session)
            if self.TABLE in self.db.list_tables().tables:
                self.table = self.db.open_table(self.TABLE)
            else:
                self.table = self.db.create_table(self.TABLE, schema=self.schema)
            self.facts = FactTable(self.db, dim)
        except Exception as exc:  # damaged version file, read-only folder for a new index, ...
            fault = storage_fault(exc, path.parent, "opening")
            if fault is None:
                raise
            raise fault from exc
        if "chunk_id" not in self.table.schema.names:
            # LanceDB opens a table whose latest version file is zeroed as an empty table without columns.
            raise damaged(
                path / f"{self.TABLE}.lance" / "_versions", path.parent, "the chunk table has lost its columns"
            )
        if not self.facts.has_columns():
            raise damaged(
                path / f"{FactTable.NAME}.lance" / "_versions", path.parent, "the fact table has lost its columns"
            )
        self._fts_ready = self._has_fts()

    def _has_fts(self) -> bool:
        return self._fts_index() is not None

    def _fts_index(self) -> str | None:
        """The name of the keyword index on `text`, None without one."""
        return text_index_name(self.table)

    def _to_arrow(self, rows: list[ChunkRow]) -> pa.Table:
        columns: dict[str, list[Any]] = {f.name: [] for f in self.schema}
        for row in rows:
            for name in columns:
                value = getattr(row, name)
                if name == "vector" and value is not None:
                    value = np.asarray(value, dtype=np.float32).tolist()
                elif name == "text":
                    value = keyword_text(value)  # symbols and CJK words made findable (index/terms.py)
                columns[name].append(value)
        return pa.Table.from_pydict(columns, schema=self.schema)

    def replace_notebooks(self, remove: list[str], rows: list[ChunkRow]) -> None:
        """Insert `rows`; delete every other chunk and fact of the notebooks in `remove` (+ those of `rows`); one
        commit per table, the chunks' first. A crash between the two leaves a notebook's new chunks beside its
        old facts: the manifest still lists its old content, so the next run indexes it again (and a fact is
        shown only inside a notebook the chunks ranked, its fields read from the manifest)."""
        shas = sorted({*remove, *(r.nb_sha for r in rows)})
        if not shas:
            return
        condition = f"nb_sha IN ({', '.join(sql_literal(s) for s in shas)})"
        chunks, facts = split_rows(rows)
        if not chunks:
            self.table.delete(condition)
        else:
            (
                self.table.merge_insert("chunk_id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .when_not_matched_by_source_delete(condition)
                .execute(self._to_arrow(chunks), on_bad_vectors="null")
            )
        self.facts.replace(condition, facts)

    def append_notebooks(self, rows: list[ChunkRow]) -> None:
        """Add the chunks of notebooks the store does not hold yet: one append commit, no scan of the table (a
        `merge_insert` joins against every row, which grows with the archive). The caller guarantees they are new
        (after an interrupted run, the indexer first deletes chunks the manifest does not know)."""
        chunks, facts = split_rows(rows)
        if chunks:
            self.table.add(self._to_arrow(chunks), on_bad_vectors="null")
        self.facts.append(facts)

    def set_vectors(self, vectors: dict[str, np.ndarray]) -> None:
        """Give stored chunks their vectors (progressive indexing: text first, vectors later); one commit.
        Chunks that are gone meanwhile (their notebook changed or was deleted) are skipped."""
        if not vectors:
            return
        ids = sorted(vectors)
        where_ids = f"chunk_id IN ({', '.join(sql_literal(i) for i in ids)})"
        found = self.table.search().where(where_ids).select(list(self.schema.names)).limit(None).to_arrow()
        if found.num_rows < len(ids):  # the rest are facts (or gone)
            held = set(found["chunk_id"].to_pylist())
            rest = [i for i in ids if i not in held]
            self.facts.set_vectors({i: vectors[i] for i in rest},
                                   f"chunk_id IN ({', '.join(sql_literal(i) for i in rest)})")
        if found.num_rows == 0:
            return
        column = [np.asarray(vectors[i], dtype=np.float32).tolist() for i in found["chunk_id"].to_pylist()]
        field = self.schema.field("vector")
        updated = found.set_column(found.schema.get_field_index("vector"), field, pa.array(column, field.type))
        self.table.merge_insert("chunk_id").when_matched_update_all().execute(updated.cast(self.schema))

    def delete_notebooks(self, shas: list[str]) -> None:
        for start in range(0, len(shas), 500):
            part = shas[start : start + 500]
            condition = f"nb_sha IN ({', '.join(sql_literal(s) for s in part)})"
            self.table.delete(condition)
            self.facts.delete(condition)

    def finish_run(self) -> None:
        """Bring the keyword index up to date and compact: rows added since the index was built become findable."""
        self.facts.finish_run(_dt.timedelta(minutes=10))
        if self.table.count_rows() == 0:
            return
        if not self._fts_ready:
            create_text_index(self.table)
            self._fts_ready = True
        self.ensure_filter_indexes()
        self.table.optimize(cleanup_older_than=_dt.timedelta(minutes=10))
        release_free_memory()  # the keyword index update is the run's largest allocation (1.2 GB at 2.5M rows)
        self.ensure_vector_index()
        release_free_memory()

    # Scalar indexes on the columns `lance_where` tests: a filter is applied before the limit
    # (prefilter), and without an index every search evaluates it over every row (deprecated = false is on by
    # default). With them an exact search restricted to one project read 241 rows instead of 300k (919 → 14 ms).
    FILTER_INDEXES = (("deprecated", "BITMAP"), ("year", "BITMAP"), ("kind", "BITMAP"), ("project", "BTREE"),
                      ("tags", "LABEL_LIST"), ("nb_sha", "BTREE"))

    def ensure_filter_indexes(self) -> None:
        """Create the missing filter indexes (cheap: ~0.3 s at 300k rows); `optimize()` keeps them current."""

        def fail(column: str, kind: str, exc: Exception) -> None:
            fault = storage_fault(exc, self.path.parent, "indexing")
            if fault is not None:
                raise fault from exc
            log.warning("no %s index on %s (%s): filters on it scan the column", kind, column, exc)

        create_filter_indexes(self.table, self.FILTER_INDEXES, fail)

    def vector_index(self) -> Any | None:
        """LanceDB's description of the vector index (`num_indexed_rows`, `size_bytes`, ...), None without one."""
        try:
            indices = self.table.list_indices()
        except Exception:
            return None
        return next((idx for idx in indices if "vector" in (idx.columns or []) and idx.index_type != "FTS"), None)

    def probes(self) -> int:
        """IVF partitions to probe: `probe_share` of the partitions the index was trained with (from the state
        file, re-read every 30 s so a long-lived reader follows a retrained index), at least 20."""
        if self.ann.nprobes > 0:
            return self.ann.nprobes
        refresh_at, probes = self._probes
        now = time.monotonic()
        if now >= refresh_at:
            try:
                state = json.loads((self.path / self.ann.state_file).read_text())
                partitions = int(state.get("partitions") or 0)
            except (OSError, ValueError, TypeError, AttributeError):
                partitions = 0
            probes = max(20, math.ceil(self.ann.probe_share * partitions))
            self._probes = (now + 30.0, probes)
        return probes

    def ensure_vector_index(self, force: bool = False) -> str:
        """Build the ANN index once enough rows have a vector, train it again when the table has grown a lot
        (`AnnSettings`; `force`: now, whatever the counts); `optimize()` has already added newer rows to an
        existing one. Returns what happened: "flat" (below the threshold), "kept", "built" or "retrained". A
        failed build leaves flat search (exact, slower) and is logged; a storage fault is raised.

        Rows are counted from the table's metadata (free); the rows with a vector (a scan of the vector column,
        ~0.4 s per 100k rows) only while there is no index and the table has reached the threshold."""
        rows = self.table.count_rows()
        index = self.vector_index()
        state_path = self.path / self.ann.state_file
        if force:
            if rows == 0:
                return "flat"
            action = "retrained" if index is not None else "built"
        elif index is None:
            if rows < self.ann.min_rows or self.table.count_rows("vector IS NOT NULL") < self.ann.min_rows:
                return "flat"
            action = "built"
        else:
            try:
                trained = int(json.loads(state_path.read_text())["trained_rows"])
            except (OSError, ValueError, KeyError, TypeError):
                trained = rows  # no record (built elsewhere): count from now
                self._write_ann_state(state_path, trained, 0.0, round(math.sqrt(index.num_indexed_rows or rows)))
            if rows < self.ann.retrain_growth * max(trained, 1):
                return "kept"
            action = "retrained"
        start = time.perf_counter()
        try:
            config = self._ann_config(rows)
            self.table.create_index("vector", config=config, replace=True)
        except Exception as exc:
            fault = storage_fault(exc, self.path.parent, "indexing")
            if fault is not None:
                raise fault from exc
            log.warning("vector index not %s (%s): vector search stays exact (flat)", action, exc)
            return "flat" if index is None else "kept"
        self._write_ann_state(state_path, rows, time.perf_counter() - start, config.num_partitions or 1)
        self._probes = (0.0, 20)
        return action

    def _ann_config(self, rows: int) -> Any:
        from lancedb.index import HnswFlat, HnswSq, IvfPq, IvfSq

        graphs = max(1, round(rows / max(1, self.ann.partition_rows)))  # HNSW: one graph per partition
        kind = self.ann.index_type.upper()
        if kind in ("IVF_HNSW_SQ", "IVF_HNSW_FLAT"):
            config = HnswSq if kind == "IVF_HNSW_SQ" else HnswFlat
            return config(distance_type="cosine", num_partitions=graphs, m=self.ann.m,
                          ef_construction=self.ann.ef_construction)
        partitions = max(1, round(math.sqrt(rows)))  # IVF alone: √rows, LanceDB's default, recorded for `probes`
        if kind == "IVF_SQ":
            return IvfSq(distance_type="cosine", num_partitions=partitions)
        if kind == "IVF_PQ":
            return IvfPq(distance_type="cosine", num_partitions=partitions, num_sub_vectors=max(1, self.dim // 8))
        raise ValueError(f"unknown vector index type {self.ann.index_type!r}")

    def _write_ann_state(self, path: Path, trained_rows: int, seconds: float, partitions: int = 0) -> None:
        state = {"trained_rows": trained_rows, "partitions": partitions, "build_seconds": round(seconds, 1),
                 "settings": asdict(self.ann),
                 "built_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
        path.write_text(json.dumps(state, indent=1) + "\n")

    def count(self) -> int:
        """Rows of both tables (chunks and facts), as the indexer counts the rows it writes."""
        return self.table.count_rows() + self.facts.count()

    def notebook_shas(self) -> dict[str, int]:
        """Notebook → rows held, chunks and facts: strays in either table are swept."""
        counts: dict[str, int] = {}
        column = self.table.search().select(["nb_sha"]).limit(None).to_arrow()["nb_sha"]
        for sha in [*column.to_pylist(), *self.facts.shas()]:
            counts[sha] = counts.get(sha, 0) + 1
        return counts

    def search_facts(self, query: StoreQuery) -> list[StoreHit]:
        """The `k` best value facts by keyword (their own table and BM25 statistics), each re-scored with its
        stored vector as a hybrid hit would be (`fuse` over the same list ranked by similarity); `filters.kinds`
        does not apply. A hit's row: `records.FACT_COLUMNS` plus `kind`, `cells` and `anchor`."""
        where = lance_where(replace(query.filters, kinds=None))
        try:
            rows = self.facts.keyword(query.text, query.k, where)
        except Exception as exc:  # a query the full-text parser rejects finds nothing; a damaged file is an error
            fault = storage_fault(exc, self.path.parent, "searching")
            if fault is not None:
                raise fault from exc
            return []
        return fuse_facts(rows, query.vector, query.fusion)

    def fact_vectors(self, notebooks: list[str], limit: int = 20_000) -> dict[str, np.ndarray]:
        """fact id → unit vector of the facts of `notebooks` (the answerer ranks every fact of a few notebooks)."""
        if not notebooks:
            return {}
        try:
            return self.facts.vectors(f"nb_sha IN ({', '.join(sql_literal(s) for s in notebooks)})", limit)
        except Exception as exc:
            fault = storage_fault(exc, self.path.parent, "searching")
            if fault is None:
                raise
            raise fault from exc


    def vectors(self, filters: SearchFilters, limit: int = 5000) -> dict[str, tuple[np.ndarray, list[int]]]:
        """chunk id → (vector, cells covered) of (at most `limit`) chunks that pass `filters` and have a vector:
        the answerer's look at every chunk of a few notebooks, which a nearest-neighbour list would cut short."""
        try:
            query = self.table.search().select(["chunk_id", "cells", "vector"]).limit(limit)
            where = lance_where(filters)
            if where:
                query = query.where(where)
            found = query.to_arrow()
        except Exception as exc:
            fault = storage_fault(exc, self.path.parent, "searching")
            if fault is None:
                raise
            raise fault from exc
        out: dict[str, tuple[np.ndarray, list[int]]] = {}
        columns = (found["chunk_id"].to_pylist(), found["cells"].to_pylist(), found["vector"].to_pylist())
        for cid, cells, vector in zip(*columns, strict=True):
            if vector is not None:
                out[cid] = (np.asarray(vector, dtype=np.float32), list(cells or []))
        return out

    def keyword(self, text: str, k: int, filters: SearchFilters) -> list[dict[str, Any]]:
        if not self._fts_ready:
            self._fts_ready = self._has_fts()  # a reader opened before the first run built it
        if not self._fts_ready or not text.strip():
            return []
        text = keyword_query(text)
        try:
            rows = self._fts(text, k, filters, indexed_only=False)
            if not rows or not self._unindexed_text_rows():
                return rows
            # Rows written since the keyword index was last refreshed (a run in progress, or one that stopped) are
            # scanned and scored on their own BM25 statistics: `merge_keyword_parts` ranks each side on its scale.
            indexed = self._fts(text, k, filters, indexed_only=True)
        except Exception as exc:  # a query the full-text parser rejects finds nothing; a damaged file is an error
            if storage_fault(exc, self.path.parent, "searching") is not None:
                raise
            return []
        return merge_keyword_parts(rows, indexed, k)

    def _fts(self, text: str, k: int, filters: SearchFilters, indexed_only: bool) -> list[dict[str, Any]]:
        query = self.table.search(text, query_type="fts").select([*HIT_COLUMNS, "_score"]).limit(k)
        if indexed_only:
            query = query.fast_search()
        where = lance_where(filters)
        if where:
            query = query.where(where, prefilter=True)
        return query.to_list()

    def _unindexed_text_rows(self) -> int:
        """Rows the keyword index does not cover yet (`lance_schema.KeywordCoverage`)."""
        return self._coverage.rows(self.table, self._fts_index)

    def vector(
        self, vector: np.ndarray, k: int, filters: SearchFilters, exact: bool = False
    ) -> list[dict[str, Any]]:
        """The `k` nearest chunks by cosine, through the ANN index when there is one (`exact` skips it: the
        ground truth for recall). The ANN settings are ignored by LanceDB while the table has no index.

        The default filter (only `deprecated = false`, which nearly every row passes) is applied after the
        search, to a list 25% longer, not before it: a prefilter builds a mask of every passing row, which cost
        ~28 ms per query at 1M rows (52 → 24 ms). If too few are left (many deprecated chunks near the query),
        the search runs again with the prefilter."""

        def query(limit: int, where: str | None) -> list[dict[str, Any]]:
            q = (
                self.table.search(np.asarray(vector, dtype=np.float32), vector_column_name="vector")
                .distance_type("cosine")
                .select([*HIT_COLUMNS, "_distance"])
                .limit(limit)
            )
            if exact:
                q = q.bypass_vector_index()
            else:
                if self.ann.refine_factor > 0:
                    q = q.refine_factor(self.ann.refine_factor)
                if self.ann.ef > 0:
                    q = q.ef(self.ann.ef)
                probes = self.probes()
                narrow = bool(filters.project or filters.author or filters.tag or filters.notebooks is not None)
                q = q.minimum_nprobes(probes).maximum_nprobes(0 if narrow else probes)
            if where:
                q = q.where(where, prefilter=True)
            return q.to_list()

        if not exact and filters == SearchFilters():
            longer = k + k // 4 + 10
            rows = query(longer, None)
            kept = [row for row in rows if not row.get("deprecated")]
            if len(kept) >= k or len(rows) < longer:
                return kept[:k]
        return query(k, lance_where(filters))

    def search(self, query: StoreQuery) -> list[StoreHit]:
        """Hybrid: the keyword and vector lists (each `k` long) fused; either list alone works.

        The two lists are queried at once (the vector list in a second thread): each waits on LanceDB's own
        threads without holding the GIL, so a search costs about the slower of the two instead of their sum."""
        vector, k, filters = query.vector, query.k, query.filters
        try:
            pending = None
            if vector is not None:
                if self._lists is None:
                    self._lists = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbrecall-vector")
                pending = self._lists.submit(self.vector, vector, k, filters)
            try:
                keyword = self.keyword(query.text, k, filters)
            finally:
                dense = pending.result() if pending is not None else []
        except Exception as exc:  # a damaged data file: say which one and how to rebuild
            fault = storage_fault(exc, self.path.parent, "searching")
            if fault is None:
                raise
            raise fault from exc
        return fuse(keyword, dense, query.fusion)
