"""Value facts in a LanceDB table of their own (`facts`), beside the chunk table of `index.store.LanceStore`.

Why apart: a fact repeats one value of a cell that a content chunk already holds, in a short text. In the chunk
table, ~28k short fact texts among ~30k chunks changed the chunks' BM25 statistics (document frequencies, mean
length) and took places in their fan-out: each development set lost a first notebook (issue 13). Here facts have
their own keyword index, and the chunk table is what it would be without them.

Why small: a fact row holds only what finds it and what ranks it. Its keyword text is the fact's own words (heading
path, label, value, unit, the variables behind it, the sentence above: `Fact.description`), not the notebook path
and context line its cell's chunks already carry (`ingest.chunk.fact_chunk`). Its vector (of the fact's name) is
stored as int8 codes: cosine is scale-free, so the codes of `v / max|v| * 127` compared after normalising give the
cosine within ~0.005 at a quarter of float32's bytes. And once per name within a notebook: a fact whose name an
earlier fact of its notebook has (`ChunkRow.vector_of`, set by the indexer) stores no vector, only that fact's
sequence number, and is read with that fact's vector (46% of the facts of ../shared/corpus). Facts are found by
keyword only (no ANN index over them); the stored vector re-scores the facts the keyword search found and ranks
every fact of the few notebooks an answer looks into (`LanceStore.fact_vectors`). Where the hit is shown, the
notebook path, root, heading, cell id, health and stale flag come from the manifest (`search.retrieve.complete_facts`).
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
    sql_literal,
    text_index_name,
)
from nbrecall.index.terms import keyword_query, keyword_text
from nbrecall.records import FACT_COLUMNS, FACT_KIND, ChunkRow, FusionSettings, StoreHit, chunk_id

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
            # int8 codes as `dim` bytes; null when the fact shares another's (a null costs nothing here, where a
            # fixed-size list column keeps its `dim` bytes: 15.4 → 8.4 MB for the facts of ../shared/corpus)
            pa.field("vector", pa.binary(), nullable=True),
            # the chunk sequence number of the fact of the same notebook whose vector this one shares (null: its own)
            pa.field("vector_of", pa.int32(), nullable=True),
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
    """A unit float32 vector from int8 codes, as bytes or (a table of chunker 8) a list (its cosine with a unit
    query is a dot product)."""
    if codes is None:
        return None
    raw = np.frombuffer(codes, dtype=np.int8) if isinstance(codes, bytes | bytearray) else codes
    v = np.asarray(raw, dtype=np.float32)
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
        self.db = db
        self.dim = dim
        self.schema = fact_schema(dim)
        if self.NAME in db.list_tables().tables:
            self.table = db.open_table(self.NAME)
        else:
            self.table = db.create_table(self.NAME, schema=self.schema)
        self._fts_ready = self._fts_index() is not None
        self._coverage = KeywordCoverage()  # rows the keyword index lacks, per table version

    def _shares(self) -> bool:
        """Whether the table has this layout (`vector_of`, vectors as bytes); a table of chunker 8 is read as it is
        until its first write."""
        return "vector_of" in self.table.schema.names

    def _ensure_layout(self) -> None:
        """Before the first write to a table of chunker 8: make it anew, empty. Its index's chunker version is
        older, so this run re-chunks every notebook and writes all their facts again (`ingest.chunk`)."""
        if not self._shares():
            self.db.drop_table(self.NAME)
            self.table = self.db.create_table(self.NAME, schema=self.schema)
            self._fts_ready = False

    def has_columns(self) -> bool:
        return "chunk_id" in self.table.schema.names

    def _fts_index(self) -> str | None:
        """The name of the keyword index on `text`, None without one."""
        return text_index_name(self.table)

    def _codes(self, vectors: list[Any]) -> pa.Array:
        """The `vector` column of `vectors` (None: a null)."""
        codes = [quantise(v, self.dim) for v in vectors]
        return pa.array([c.tobytes() if c is not None else None for c in codes], pa.binary())

    def to_arrow(self, rows: list[ChunkRow]) -> pa.Table:
        vectors = self._codes([r.vector if r.vector_of is None else None for r in rows])
        data: dict[str, list[Any]] = {
            "chunk_id": [r.chunk_id for r in rows], "nb_sha": [r.nb_sha for r in rows],
            "cell": [int(r.anchor) for r in rows], "text": [keyword_text(r.text) for r in rows],
            "year": [r.year for r in rows], "project": [r.project for r in rows], "author": [r.author for r in rows],
            "tags": [list(r.tags or []) for r in rows], "deprecated": [bool(r.deprecated) for r in rows],
            "vector_of": [r.vector_of for r in rows],
        }
        arrays = [vectors if f.name == "vector" else pa.array(data[f.name], f.type) for f in self.schema]
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def replace(self, condition: str, rows: list[ChunkRow]) -> None:
        """Insert `rows`, delete every other fact matching `condition` (the notebooks replaced): one commit."""
        if not rows:
            self.table.delete(condition)
            return
        self._ensure_layout()
        (
            self.table.merge_insert("chunk_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(condition)
            .execute(self.to_arrow(rows))
        )

    def append(self, rows: list[ChunkRow]) -> None:
        if rows:
            self._ensure_layout()
            self.table.add(self.to_arrow(rows))

    def delete(self, condition: str) -> None:
        self.table.delete(condition)

    def set_vectors(self, vectors: dict[str, np.ndarray], where_ids: str) -> None:
        """Give the facts among `vectors` their (quantised) vectors: one commit; ids it does not hold are skipped,
        and so are facts that share another's vector (`vector_of`)."""
        self._ensure_layout()
        found = self.table.search().where(where_ids).select(list(self.schema.names)).limit(None).to_arrow()
        if found.num_rows == 0:
            return
        shared = found["vector_of"].to_pylist()
        column = self._codes([vectors[i] if of is None else None
                              for i, of in zip(found["chunk_id"].to_pylist(), shared, strict=True)])
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
        if rows and self._unindexed_rows():
            rows = merge_keyword_parts(rows, self._fts(text, k, where, indexed_only=True), k)
        return [hit_row(r) for r in self._with_shared_vectors(rows)]

    def _with_shared_vectors(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fill the `vector` of the rows that share another fact's (one look-up for all of them)."""
        sharing = [row for row in rows if row.get("vector_of") is not None]
        if sharing:
            ids = sorted({chunk_id(row["nb_sha"], row["vector_of"]) for row in sharing})
            where = f"chunk_id IN ({', '.join(sql_literal(i) for i in ids)})"
            found = self.table.search().where(where).select(["chunk_id", "vector"]).limit(len(ids)).to_list()
            vectors = {r["chunk_id"]: r["vector"] for r in found}
            for row in sharing:
                row["vector"] = vectors.get(chunk_id(row["nb_sha"], row["vector_of"]))
        for row in rows:
            row.pop("vector_of", None)
        return rows

    def _fts(self, text: str, k: int, where: str | None, indexed_only: bool) -> list[dict[str, Any]]:
        shares = ["vector_of"] if self._shares() else []
        query = self.table.search(text, query_type="fts").select([*FACT_COLUMNS, "vector", *shares, "_score"]).limit(k)
        if indexed_only:
            query = query.fast_search()
        if where:
            query = query.where(where, prefilter=True)
        return query.to_list()

    def _unindexed_rows(self) -> int:
        """Rows the keyword index does not cover yet (`lance_schema.KeywordCoverage`)."""
        return self._coverage.rows(self.table, self._fts_index)

    def vectors(self, where: str, limit: int) -> dict[str, np.ndarray]:
        """fact id → unit float32 vector of (at most `limit`) facts matching `where` that have one, their own or the
        one they share with a fact of their notebook (`where` selects whole notebooks, so that fact is among them)."""
        shares = ["nb_sha", "vector_of"] if self._shares() else []
        found = self.table.search().where(where).select(["chunk_id", "vector", *shares]).limit(limit).to_arrow()
        if found.num_rows == 0:
            return {}
        ids = found["chunk_id"].to_pylist()
        held = [(cid, codes) for cid, codes in zip(ids, found["vector"].to_pylist(), strict=True)
                if codes is not None and len(codes) == self.dim]
        out: dict[str, np.ndarray] = {}
        if held:  # one matrix: a notebook can hold hundreds of facts
            raw = [codes for _, codes in held]
            matrix = (np.frombuffer(b"".join(raw), dtype=np.int8).reshape(-1, self.dim) if isinstance(raw[0], bytes)
                      else np.asarray(raw, dtype=np.int8)).astype(np.float32)
            norms = np.linalg.norm(matrix, axis=1)
            matrix /= np.where(norms > 0, norms, 1.0)[:, None]
            out = {cid: matrix[i] for i, (cid, _) in enumerate(held) if norms[i] > 0}
        if shares:
            for cid, sha, of in zip(ids, found["nb_sha"].to_pylist(), found["vector_of"].to_pylist(), strict=True):
                if of is not None and (vector := out.get(chunk_id(sha, of))) is not None:
                    out[cid] = vector
        return out
