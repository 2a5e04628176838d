"""The LanceDB side of the embedded store that is not the store itself: the chunk table's schema, filters as
a LanceDB condition, when the approximate vector index is built (`AnnSettings`), and what the chunk and fact
tables share (their filter columns, keyword and filter indexes, the merge of indexed and scanned keyword hits).
Kept apart from `index.store.LanceStore` so the table layout and the query language can be read without the
store's methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from nbrecall.records import FACT_KIND, ChunkRow, SearchFilters


def sql_literal(value: str) -> str:
    """`value` as a quoted SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def _like_literal(value: str) -> str:
    """`value` matched literally inside a LIKE pattern whose escape character is a backslash."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def lance_where(filters: SearchFilters) -> str | None:
    """`SearchFilters` as a LanceDB (DataFusion SQL) condition; `index.pg_sql.filter_sql` is its PostgreSQL twin."""
    clauses: list[str] = []
    if filters.year_from is not None:
        clauses.append(f"year >= {int(filters.year_from)}")
    if filters.year_to is not None:
        clauses.append(f"year <= {int(filters.year_to)}")
    if filters.project:
        clauses.append(f"project = {sql_literal(filters.project)}")
    if filters.author:
        # a substring match: the filter's own `%`, `_` and `\\` are literal characters, not wildcards
        pattern = sql_literal("%" + _like_literal(filters.author.lower()) + "%")
        clauses.append(f"lower(author) LIKE {pattern} ESCAPE '\\'")
    if filters.tag:
        clauses.append(f"array_has_any(tags, [{sql_literal(filters.tag)}])")
    if not filters.include_deprecated:
        clauses.append("deprecated = false")
    if filters.kinds:
        clauses.append(f"kind IN ({', '.join(sql_literal(k) for k in filters.kinds)})")
    if filters.notebooks is not None:
        clauses.append(f"nb_sha IN ({', '.join(sql_literal(s) for s in filters.notebooks) or sql_literal('')})")
    return " AND ".join(clauses) or None


def split_rows(rows: list[ChunkRow]) -> tuple[list[ChunkRow], list[ChunkRow]]:
    """(content chunks, value facts): each goes to its own table."""
    return [r for r in rows if r.kind != FACT_KIND], [r for r in rows if r.kind == FACT_KIND]


# The columns `lance_where` tests on every table (chunks and facts), in their stored order.
FILTER_FIELDS: tuple[pa.Field, ...] = (
    pa.field("year", pa.int32()),
    pa.field("project", pa.string()),
    pa.field("author", pa.string()),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("deprecated", pa.bool_()),
)


def chunk_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("nb_sha", pa.string(), nullable=False),
            pa.field("notebook", pa.string()),
            pa.field("root", pa.string()),
            pa.field("kind", pa.string()),
            pa.field("cells", pa.list_(pa.int32())),
            pa.field("cell_ids", pa.list_(pa.string())),
            pa.field("anchor", pa.int32()),
            pa.field("anchor_id", pa.string()),
            pa.field("heading", pa.string()),
            pa.field("text", pa.string()),
            *FILTER_FIELDS,
            pa.field("stale", pa.bool_()),
            pa.field("health", pa.float32()),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=True),
        ]
    )


@dataclass
class AnnSettings:
    """When `LanceStore` builds its approximate vector index (ANN), and how it is searched.

    Below `min_rows` rows with a vector, a flat scan is exact and fast enough (measured in bench/README.md), so no
    index is built. From `min_rows` on, `finish_run` builds one (cosine); later runs add new rows to it
    incrementally (`optimize()`), and train it again from scratch once the table has grown `retrain_growth`-fold
    since it was trained (partitions and quantiser fitted to a smaller archive; 2: total build work stays
    under twice the last build).

    IVF_SQ (√rows partitions, 8-bit scalar quantisation), because on vectors with the shape of real MiniLM
    embeddings and real query wording (bench/scale_query.py, bench/README.md) it reached recall@10 ≥ 0.95 where
    IVF_HNSW_SQ and IVF_HNSW_FLAT stayed at 0.80–0.83 with their default `ef` (0.94 at `ef` 300), and it builds
    in 30 s at 1M rows (HNSW: minutes; IVF_PQ: 25× slower and recall 0.75 at 100k).

    Query side: real questions lie away from the chunks they match, so their neighbours spread over more IVF
    partitions than a fixed 20 probes reach (recall@10 0.77 at 1M rows with 20 of 1,000 partitions); probing
    `probe_share` of the partitions held recall@10 ≥ 0.95 from 100k to 1M rows (0.993 at 1M, 16%) for ~10 ms.
    A narrow filter (project, author, tag) lets LanceDB probe on until k rows pass it (else its rows in other
    partitions are missed); broad filters do not, as that costs 3–4× (it probes until the result is provably
    exact). `refine_factor` re-scores the candidates with the stored vectors: without it LanceDB returns the
    quantised distance as `_distance`, which the fusion would read as the cosine.
    """

    min_rows: int = 50_000
    index_type: str = "IVF_SQ"  # or IVF_HNSW_SQ, IVF_HNSW_FLAT, IVF_PQ (compared in bench/scale_query.py)
    partition_rows: int = 1_000_000  # HNSW types only: target rows per IVF partition (one graph each)
    m: int = 20  # HNSW neighbours per node
    ef_construction: int = 150
    ef: int = 0  # HNSW candidates per query; 0: LanceDB's 1.5 × k
    probe_share: float = 0.15  # IVF partitions probed per query, as a share of all (at least 20)
    nprobes: int = 0  # a fixed number of partitions instead of `probe_share`
    refine_factor: int = 1
    retrain_growth: float = 2.0
    state_file: str = "vector_index.json"  # beside the table: rows the index was trained on, build time


def text_index_name(table: Any) -> str | None:
    """The name of a LanceDB table's keyword (FTS) index on `text`, None without one (or when it cannot be read)."""
    try:
        return next((idx.name for idx in table.list_indices() if "text" in (idx.columns or [])
                     and idx.index_type == "FTS"), None)
    except Exception:
        return None


@dataclass
class KeywordCoverage:
    """How many rows of a table its keyword index does not cover yet, from index metadata (no scan), looked up once
    per table version: a search asks on every query, and the two metadata calls cost more than the version check
    (~2.3 vs ~1 ms at 1M rows). One per table (chunks, facts)."""

    version: int | None = None
    unindexed: int = 0

    def rows(self, table: Any, index_name: Callable[[], str | None]) -> int:
        try:
            version = table.version
        except Exception:
            version = None
        if version is not None and self.version == version:
            return self.unindexed
        name = index_name()
        unindexed = 0
        if name is not None:
            try:
                stats = table.index_stats(name)
                unindexed = int(stats.num_unindexed_rows or 0) if stats is not None else 0
            except Exception:
                unindexed = 0
        if version is not None:
            self.version, self.unindexed = version, unindexed
        return unindexed


def create_text_index(table: Any) -> None:
    """Build a table's keyword (FTS) index on `text`: stemmed, stop words removed, lower-cased, ASCII-folded (the
    tokenizer `index.terms` and PostgreSQL's mirror of it follow); no positions, as no query uses phrases."""
    from lancedb.index import FTS

    config = FTS(with_position=False, stem=True, remove_stop_words=True, lower_case=True, ascii_folding=True)
    table.create_index("text", config=config, replace=True)


def create_filter_indexes(table: Any, wanted: tuple[tuple[str, str], ...],
                          on_error: Callable[[str, str, Exception], None]) -> None:
    """Create the scalar indexes of `wanted` ((column, BITMAP | BTREE | LABEL_LIST)) that `table` lacks; a filter
    on a column without one still works, by scanning it. `on_error(column, kind, exc)` decides what a failure is."""
    from lancedb.index import Bitmap, BTree, LabelList

    configs = {"BITMAP": Bitmap, "BTREE": BTree, "LABEL_LIST": LabelList}
    try:
        have = {col for idx in table.list_indices() for col in (idx.columns or [])}
    except Exception:
        return
    for column, kind in wanted:
        if column not in have:
            try:
                table.create_index(column, config=configs[kind](), replace=True)
            except Exception as exc:
                on_error(column, kind, exc)


def merge_keyword_parts(rows: list[dict[str, Any]], indexed: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The `k` best of a keyword search whose rows came from two scorers: `indexed` (the keyword index alone) and
    the rest of `rows` (rows written since the index was refreshed, found by a scan). LanceDB scores the two with
    their own BM25 statistics, several-fold apart (lance-format/lance#7905), so one side could crowd out the other's
    best matches: each side is ranked on its own scale (relative to its best), then merged."""
    seen = {row["chunk_id"] for row in indexed}
    scanned = [row for row in rows if row["chunk_id"] not in seen]
    for part in (indexed, scanned):
        best = max((row.get("_score") or 0.0 for row in part), default=0.0) or 1.0
        for row in part:
            row["_score"] = float(row.get("_score") or 0.0) / best
    return sorted(indexed + scanned, key=lambda row: -row["_score"])[:k]
