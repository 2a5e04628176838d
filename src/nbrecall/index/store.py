"""Chunk storage behind a small `Store` protocol; LanceDB is the embedded default.

LanceDB gives vectors, native BM25 full-text search, hybrid search fused by reciprocal rank, filters and atomic
versioned commits on local disk. A notebook's chunks are replaced with one `merge_insert` commit, so a reader
sees each notebook either at its old or at its new version, never half-written.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from nbrecall.index.faults import damaged, storage_fault
from nbrecall.index.fusion import FusionSettings, StoreHit, fuse


@dataclass
class ChunkRow:
    """A chunk as stored: its text, where it points, the notebook's metadata, and its vector (if any)."""

    chunk_id: str
    nb_sha: str
    notebook: str
    root: str
    kind: str
    cells: list[int]
    cell_ids: list[str]
    anchor: int
    anchor_id: str
    heading: str
    text: str
    year: int | None = None
    project: str = ""
    author: str = ""
    tags: list[str] = field(default_factory=list)
    deprecated: bool = False
    stale: bool = False
    health: float = 1.0
    vector: np.ndarray | None = None


def parse_year_range(year: str | None) -> tuple[int | None, int | None]:
    """`2017` → (2017, 2017); `2015..2019`, `2015..`, `..2019`; ValueError for anything else."""
    if not year or not year.strip():
        return None, None
    year = year.strip()
    if re.fullmatch(r"[0-9]{4}", year):
        return int(year), int(year)
    match = re.fullmatch(r"([0-9]{4})?\.\.([0-9]{4})?", year)
    if not match:
        raise ValueError(f"year takes YYYY or a range YYYY..YYYY, not {year!r}")
    low, high = match.groups()
    return (int(low) if low else None), (int(high) if high else None)


@dataclass
class SearchFilters:
    """Filters applied inside the store (before ranking), so a filtered search still fills its fan-out."""

    year_from: int | None = None
    year_to: int | None = None
    project: str | None = None
    author: str | None = None
    tag: str | None = None
    include_deprecated: bool = False
    kinds: list[str] | None = None

    @classmethod
    def from_options(
        cls, year: str | None, project: str | None, author: str | None, tag: str | None, include_deprecated: bool
    ) -> SearchFilters:
        """The filters as the CLI, the HTTP API and MCP take them; ValueError for a malformed year."""
        year_from, year_to = parse_year_range(year)
        return cls(
            year_from=year_from,
            year_to=year_to,
            project=(project or "").strip() or None,
            author=(author or "").strip() or None,
            tag=(tag or "").strip() or None,
            include_deprecated=bool(include_deprecated),
        )

    def where(self) -> str | None:
        clauses: list[str] = []
        if self.year_from is not None:
            clauses.append(f"year >= {int(self.year_from)}")
        if self.year_to is not None:
            clauses.append(f"year <= {int(self.year_to)}")
        if self.project:
            clauses.append(f"project = {_quote(self.project)}")
        if self.author:
            clauses.append(f"lower(author) LIKE {_quote('%' + self.author.lower() + '%')}")
        if self.tag:
            clauses.append(f"array_has_any(tags, [{_quote(self.tag)}])")
        if not self.include_deprecated:
            clauses.append("deprecated = false")
        if self.kinds:
            clauses.append(f"kind IN ({', '.join(_quote(k) for k in self.kinds)})")
        return " AND ".join(clauses) or None


class Store(Protocol):
    """What the indexer and the retriever need from a chunk store."""

    def replace_notebooks(self, remove: list[str], rows: list[ChunkRow]) -> None: ...
    def delete_notebooks(self, shas: list[str]) -> None: ...
    def search(
        self,
        text: str,
        vector: np.ndarray | None,
        k: int,
        filters: SearchFilters,
        fusion: FusionSettings | None = None,
    ) -> list[StoreHit]: ...
    def finish_run(self) -> None: ...
    def count(self) -> int: ...
    def notebook_shas(self) -> dict[str, int]: ...


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


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
            pa.field("year", pa.int32()),
            pa.field("project", pa.string()),
            pa.field("author", pa.string()),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("deprecated", pa.bool_()),
            pa.field("stale", pa.bool_()),
            pa.field("health", pa.float32()),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=True),
        ]
    )


class LanceStore:
    """The embedded default store: one LanceDB table `chunks` in `<index>/lance`."""

    TABLE = "chunks"

    def __init__(self, path: Path, dim: int) -> None:
        import lancedb

        self.path = path
        self.dim = dim
        self.schema = chunk_schema(dim)
        try:
            path.mkdir(parents=True, exist_ok=True)
            # Check for a newer version on every read: a long-lived reader (`serve`, `mcp`) must follow the
            # index runs of another process, not search a snapshot whose files a later run cleans up.
            self.db = lancedb.connect(str(path), read_consistency_interval=_dt.timedelta(0))
            if self.TABLE in self.db.list_tables().tables:
                self.table = self.db.open_table(self.TABLE)
            else:
                self.table = self.db.create_table(self.TABLE, schema=self.schema)
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
        self._fts_ready = self._has_fts()

    def _has_fts(self) -> bool:
        try:
            return any("text" in (idx.columns or []) for idx in self.table.list_indices())
        except Exception:
            return False

    def _to_arrow(self, rows: list[ChunkRow]) -> pa.Table:
        columns: dict[str, list[Any]] = {f.name: [] for f in self.schema}
        for row in rows:
            for name in columns:
                value = getattr(row, name)
                if name == "vector" and value is not None:
                    value = np.asarray(value, dtype=np.float32).tolist()
                columns[name].append(value)
        return pa.Table.from_pydict(columns, schema=self.schema)

    def replace_notebooks(self, remove: list[str], rows: list[ChunkRow]) -> None:
        """Insert `rows`; delete every other chunk of the notebooks in `remove` (+ those of `rows`); one commit."""
        shas = sorted({*remove, *(r.nb_sha for r in rows)})
        if not shas:
            return
        condition = f"nb_sha IN ({', '.join(_quote(s) for s in shas)})"
        if not rows:
            self.table.delete(condition)
            return
        (
            self.table.merge_insert("chunk_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(condition)
            .execute(self._to_arrow(rows), on_bad_vectors="null")
        )

    def delete_notebooks(self, shas: list[str]) -> None:
        for start in range(0, len(shas), 500):
            part = shas[start : start + 500]
            self.table.delete(f"nb_sha IN ({', '.join(_quote(s) for s in part)})")

    def finish_run(self) -> None:
        """Bring the keyword index up to date and compact: rows added since the index was built become findable."""
        from lancedb.index import FTS

        if self.table.count_rows() == 0:
            return
        if not self._fts_ready:
            self.table.create_index(
                "text",
                config=FTS(
                    with_position=False,
                    stem=True,
                    remove_stop_words=True,
                    lower_case=True,
                    ascii_folding=True,
                ),
                replace=True,
            )
            self._fts_ready = True
        self.table.optimize(cleanup_older_than=_dt.timedelta(minutes=10))

    def count(self) -> int:
        return self.table.count_rows()

    def notebook_shas(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        column = self.table.search().select(["nb_sha"]).limit(None).to_arrow()["nb_sha"]
        for sha in column.to_pylist():
            counts[sha] = counts.get(sha, 0) + 1
        return counts

    _COLUMNS = [
        "chunk_id",
        "nb_sha",
        "notebook",
        "root",
        "kind",
        "cells",
        "cell_ids",
        "anchor",
        "anchor_id",
        "heading",
        "text",
        "year",
        "project",
        "author",
        "tags",
        "deprecated",
        "stale",
        "health",
    ]

    def keyword(self, text: str, k: int, filters: SearchFilters) -> list[dict[str, Any]]:
        if not self._fts_ready:
            self._fts_ready = self._has_fts()  # a reader opened before the first run built it
        if not self._fts_ready or not text.strip():
            return []
        query = self.table.search(text, query_type="fts").select([*self._COLUMNS, "_score"]).limit(k)
        where = filters.where()
        if where:
            query = query.where(where, prefilter=True)
        try:
            return query.to_list()
        except Exception as exc:  # a query the full-text parser rejects finds nothing; a damaged file is an error
            if storage_fault(exc, self.path.parent, "searching") is not None:
                raise
            return []

    def vector(self, vector: np.ndarray, k: int, filters: SearchFilters) -> list[dict[str, Any]]:
        query = (
            self.table.search(np.asarray(vector, dtype=np.float32), vector_column_name="vector")
            .distance_type("cosine")
            .select([*self._COLUMNS, "_distance"])
            .limit(k)
        )
        where = filters.where()
        if where:
            query = query.where(where, prefilter=True)
        return query.to_list()

    def search(
        self,
        text: str,
        vector: np.ndarray | None,
        k: int,
        filters: SearchFilters,
        fusion: FusionSettings | None = None,
    ) -> list[StoreHit]:
        """Hybrid: the keyword and vector lists (each `k` long) fused; either list alone works."""
        try:
            keyword = self.keyword(text, k, filters)
            dense = self.vector(vector, k, filters) if vector is not None else []
        except Exception as exc:  # a damaged data file: say which one and how to rebuild
            fault = storage_fault(exc, self.path.parent, "searching")
            if fault is None:
                raise
            raise fault from exc
        return fuse(keyword, dense, fusion or FusionSettings())
