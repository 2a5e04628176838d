"""Value facts in a LanceDB table of their own (`facts`), beside the chunk table of `index.store.LanceStore`.

Why apart: a fact repeats one value of a cell that a content chunk already holds, in a short text. In the chunk
table, ~28k short fact texts among ~30k chunks changed the chunks' BM25 statistics (document frequencies, mean
length) and took places in their fan-out: each development set lost a first notebook (issue 13). Here facts have
their own keyword index, and the chunk table is what it would be without them.

Why small: a fact row holds only what finds it and what ranks it. Its keyword text is the fact's own words (heading
path, label, value, unit, the variables behind it, the sentence above: `Fact.description`), not the notebook path
and context line its cell's chunks already carry (`ingest.chunk.fact_chunk`). Its vector (of the fact's name) is
stored as int8 codes: cosine is scale-free, so the codes of `v / max|v| * 127` compared after normalising give the
cosine within ~0.005 at a quarter of float32's bytes. Facts are found by keyword only (no ANN index over them);
the stored vector re-scores the facts the keyword search found and ranks every fact of the few notebooks an
answer looks into (`LanceStore.fact_vectors`). Where the hit is shown, the notebook path, root, heading, cell id,
health and stale flag come from the manifest (`search.retrieve.complete_facts`).
"""

from __future__ import annotations

import datetime as _dt
import logging
from typing import Any

import numpy as np
import pyarrow as pa

from nbrecall.index.fusion import fuse
from nbrecall.index.lance_schema import (
    FILTER_FIELDS,
    KeywordCoverage,
    create_filter_indexes,
    create_text_index,
    merge_keyword_parts,
    text_index_name,
)
from nbrecall.index.terms import keyword_query, keyword_text
from nbrecall.records import FACT_COLUMNS, FACT_KIND, ChunkRow, FusionSettings, StoreHit

log = logging.getLogger("nbrecall.index")

# What `lance_where` filters on that a fact row keeps (no `kind`: every row is a fact)
FILTER_INDEXES = (("deprecated", "BITMAP"), ("nb_sha", "BTREE"))


def fact_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),  # its chunk id: the embedding queue's key
            pa.field("nb_sha", pa.string(), nullable=False),
            pa.field("cell", pa.int32()),
            pa.field("text", pa.string()),
            *FILTER_FIELDS,
            pa.field("vector", pa.list_(pa.int8(), dim), nullable=True),
        ]
    )


def quantise(vector: Any, dim: int) -> np.ndarray | None:
    """int8 codes of a vector (None if missing, of another length or not finite: the fact stays findable by
    keyword, as `on_bad_vectors="null"` leaves a chunk)."""
    if vector is None:
        return None
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    if v.shape[0] != dim or not np.all(np.isfinite(v)):
        return None
    peak = float(np.max(np.abs(v)))
    if peak == 0.0:
        return None
    return np.round(v * (127.0 / peak)).astype(np.int8)


def dequantise(codes: Any) -> np.ndarray | None:
    """A unit float32 vector from int8 codes (its cosine with a unit query is a dot product)."""
    if codes is None:
        return None
    v = np.asarray(codes, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else None


def hit_row(row: dict[str, Any]) -> dict[str, Any]:
    """A fact row in the shape of a chunk hit's row: kind `fact`, one cell (the rest comes from the manifest)."""
    row["kind"] = FACT_KIND
    row["cells"] = [row["cell"]]
    row["anchor"] = row["cell"]
    return row


def fuse_facts(rows: list[dict[str, Any]], vector: np.ndarray | None, fusion: FusionSettings) -> list[StoreHit]:
    """Keyword fact rows (with their int8 `vector`) fused as a hybrid search would fuse them, the vector list being
    the same rows ordered by their cosine with `vector`: the scores keep the scale of a chunk hit's."""
    dense: list[dict[str, Any]] = []
    if vector is not None:
        query = np.asarray(vector, dtype=np.float32)
        for row in rows:
            unit = dequantise(row.get("vector"))
            if unit is not None:
                row["_distance"] = 1.0 - float(np.dot(unit, query))
                dense.append(row)
        dense.sort(key=lambda r: r["_distance"])
    for row in rows:
        row.pop("vector", None)
    return fuse(rows, dense, fusion)


class FactTable:
    """The `facts` table: written with the chunks (`LanceStore` routes rows of kind `fact` here), searched apart."""

    NAME = "facts"

    def __init__(self, db: Any, dim: int) -> None:
        """Opens the table, or creates it empty: an index written before facts had a table of their own (chunker
        7 and older, facts as chunk rows) opens with none, and the next `nbrecall index` re-chunks every
        notebook (the chunker version is in the fingerprint), which moves its facts here."""
        self.dim = dim
        self.schema = fact_schema(dim)
        if self.NAME in db.list_tables().tables:
            self.table = db.open_table(self.NAME)
        else:
            self.table = db.create_table(self.NAME, schema=self.schema)
        self._fts_ready = self._fts_index() is not None
        self._coverage = KeywordCoverage()  # rows the keyword index lacks, per table version

    def has_columns(self) -> bool:
        return "chunk_id" in self.table.schema.names

    def _fts_index(self) -> str | None:
        """The name of the keyword index on `text`, None without one."""
        return text_index_name(self.table)

    def to_arrow(self, rows: list[ChunkRow]) -> pa.Table:
        codes = [quantise(r.vector, self.dim) for r in rows]
        flat = np.concatenate([c if c is not None else np.zeros(self.dim, np.int8) for c in codes]) if rows \
            else np.zeros(0, np.int8)
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.int8()), self.dim,
                                                    mask=pa.array([c is None for c in codes], pa.bool_()))
        data: dict[str, list[Any]] = {
            "chunk_id": [r.chunk_id for r in rows], "nb_sha": [r.nb_sha for r in rows],
            "cell": [int(r.anchor) for r in rows], "text": [keyword_text(r.text) for r in rows],
            "year": [r.year for r in rows], "project": [r.project for r in rows], "author": [r.author for r in rows],
            "tags": [list(r.tags or []) for r in rows], "deprecated": [bool(r.deprecated) for r in rows],
        }
        arrays = [pa.array(data[f.name], f.type) for f in self.schema if f.name != "vector"]
        return pa.Table.from_arrays([*arrays, vectors], schema=self.schema)

    def replace(self, condition: str, rows: list[ChunkRow]) -> None:
        """Insert `rows`, delete every other fact matching `condition` (the notebooks replaced): one commit."""
        if not rows:
            self.table.delete(condition)
            return
        (
            self.table.merge_insert("chunk_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(condition)
            .execute(self.to_arrow(rows))
        )

    def append(self, rows: list[ChunkRow]) -> None:
        if rows:
            self.table.add(self.to_arrow(rows))

    def delete(self, condition: str) -> None:
        self.table.delete(condition)

    def set_vectors(self, vectors: dict[str, np.ndarray], where_ids: str) -> None:
        """Give the facts among `vectors` their (quantised) vectors: one commit; ids it does not hold are skipped."""
        found = self.table.search().where(where_ids).select(list(self.schema.names)).limit(None).to_arrow()
        if found.num_rows == 0:
            return
        codes = [quantise(vectors[i], self.dim) for i in found["chunk_id"].to_pylist()]
        flat = np.concatenate([c if c is not None else np.zeros(self.dim, np.int8) for c in codes])
        column = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.int8()), self.dim,
                                                   mask=pa.array([c is None for c in codes], pa.bool_()))
        updated = found.set_column(found.schema.get_field_index("vector"), self.schema.field("vector"), column)
        self.table.merge_insert("chunk_id").when_matched_update_all().execute(updated.cast(self.schema))

    def count(self) -> int:
        return self.table.count_rows()

    def shas(self) -> list[str]:
        return self.table.search().select(["nb_sha"]).limit(None).to_arrow()["nb_sha"].to_pylist()

    def finish_run(self, cleanup: _dt.timedelta) -> None:
        """Keyword index (created once, then brought up to date by `optimize`), filter indexes, compaction."""
        if self.table.count_rows() == 0:
            return
        if not self._fts_ready:
            create_text_index(self.table)
            self._fts_ready = True

        def warn(column: str, kind: str, exc: Exception) -> None:  # a filter on it scans the column: slower
            log.warning("no %s index on the fact table's %s (%s)", kind, column, exc)

        create_filter_indexes(self.table, FILTER_INDEXES, warn)
        self.table.optimize(cleanup_older_than=cleanup)

    def keyword(self, text: str, k: int, where: str | None) -> list[dict[str, Any]]:
        """The `k` best facts for `text` by BM25 on their own statistics, each with `_score` and its int8
        `vector`. Rows written since the keyword index was refreshed are scanned and ranked on their own scale,
        as `LanceStore.keyword` does for chunks (lance-format/lance#7905)."""
        if not self._fts_ready:
            self._fts_ready = self._fts_index() is not None
        if not self._fts_ready or not text.strip():
            return []
        text = keyword_query(text)
        rows = self._fts(text, k, where, indexed_only=False)
        if not rows or not self._unindexed_rows():
            return [hit_row(r) for r in rows]
        indexed = self._fts(text, k, where, indexed_only=True)
        return [hit_row(r) for r in merge_keyword_parts(rows, indexed, k)]

    def _fts(self, text: str, k: int, where: str | None, indexed_only: bool) -> list[dict[str, Any]]:
        query = self.table.search(text, query_type="fts").select([*FACT_COLUMNS, "vector", "_score"]).limit(k)
        if indexed_only:
            query = query.fast_search()
        if where:
            query = query.where(where, prefilter=True)
        return query.to_list()

    def _unindexed_rows(self) -> int:
        """Rows the keyword index does not cover yet (`lance_schema.KeywordCoverage`)."""
        return self._coverage.rows(self.table, self._fts_index)

    def vectors(self, where: str, limit: int) -> dict[str, np.ndarray]:
        """fact id → unit float32 vector of (at most `limit`) facts matching `where` that have one."""
        found = self.table.search().where(where).select(["chunk_id", "vector"]).limit(limit).to_arrow()
        if found.num_rows == 0:
            return {}
        column = found["vector"].combine_chunks()
        codes = column.values.to_numpy(zero_copy_only=False)
        codes = codes[column.offset * self.dim : (column.offset + len(column)) * self.dim].reshape(-1, self.dim)
        matrix = codes.astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1)
        missing = column.is_null().to_numpy(zero_copy_only=False) | (norms == 0)
        matrix /= np.where(norms > 0, norms, 1.0)[:, None]
        ids = found["chunk_id"].to_pylist()
        return {cid: matrix[i] for i, cid in enumerate(ids) if not missing[i]}
