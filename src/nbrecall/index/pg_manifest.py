"""The manifest on PostgreSQL (`protocols.Manifest`, like `SqliteManifest`), in the schema of the PostgreSQL store.

With a PostgreSQL store everything several machines share lives in the database, so a server sees what any
indexer wrote. Differences from the SQLite manifest, all for several indexers writing at once:

* writes are idempotent upserts, and every transaction that writes a content (its row, its cells, a file that
  points at it, its deletion) takes the advisory lock of that content's bucket first (`PgDatabase.lock_contents`);
* `delete_contents` deletes only contents no file refers to when it runs, and returns them, so an indexer never
  drops a content that another indexer has just pointed a file at;
* `missing_contents` tells an indexer which contents it took as already indexed were dropped meanwhile;
* `begin_run` never reports an interrupted run: a batch's chunks and manifest rows commit in one transaction, so
  there are no stray chunks to sweep (and another indexer's unfinished run is not a crash).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from psycopg.types.json import Jsonb

from nbrecall.index.manifest import (
    ARCHIVED,
    MISPLACED_SQL,
    REPOINT_SQL,
    ROOTS_SQL,
    fact_rows,
    facts_from_rows,
    render_summary,
)
from nbrecall.index.pg_db import PgDatabase, clean_json, clean_text
from nbrecall.index.pg_schema import MANIFEST_MIGRATIONS
from nbrecall.index.pg_sql import upsert_sql
from nbrecall.notebook.facts import Fact
from nbrecall.records import CellRecord, ContentRecord, FileRecord, PendingVector, RootSummary

_CONTENT_COLUMNS = "sha256, status, reason, root, rel, n_cells, n_chunks, n_embedded, meta"
_SAVE_CONTENT = upsert_sql("contents", [*_CONTENT_COLUMNS.split(", "), "indexed_at"], ["sha256"])
_SAVE_CELL = upsert_sql("cells", ["sha256", "idx", "cell_id", "cell_type", "execution_count", "source", "outputs"],
                        ["sha256", "idx"])
_SAVE_FACT = upsert_sql("facts", ["sha256", "seq", "idx", "data"], ["sha256", "seq"])
_SAVE_PENDING = upsert_sql("pending_vectors", ["chunk_id", "sha256", "priority", "text"], ["chunk_id"])
_SAVE_FILE = upsert_sql("files", ["root", "rel", "size", "mtime_ns", "sha256", "seen_at"], ["root", "rel"])


class PgManifest:
    """Data access over the manifest tables of a PostgreSQL store; see the module docstring."""

    shared = True

    def __init__(self, db: PgDatabase, readonly: bool = False, *, owns: bool = False) -> None:
        self.db = db
        self.path = db.url
        self._owns = owns
        if not readonly:
            db.migrate("manifest", MANIFEST_MIGRATIONS)

    @classmethod
    def connect(cls, url: str, schema: str = "nbrecall", readonly: bool = False) -> PgManifest:
        return cls(PgDatabase(url, schema, readonly=readonly), readonly, owns=True)

    def exists(self) -> bool:
        """Whether an indexer has created the manifest in this schema."""
        return self.db.version("manifest") is not None

    def close(self) -> None:
        if self._owns:
            self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """The write methods below run inside one; a store on the same database joins it (savepoints)."""
        with self.db.transaction():
            yield

    def _all(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        return self.db.execute(sql, params).fetchall()

    def files(self, root: str | None = None) -> dict[tuple[str, str], FileRecord]:
        sql = "SELECT root, rel, size, mtime_ns, sha256 FROM files"
        args: tuple[Any, ...] = ()
        if root is not None:
            sql, args = sql + " WHERE root = %s", (root,)
        return {(r[0], r[1]): FileRecord(*r) for r in self._all(sql, args)}

    def roots(self) -> list[RootSummary]:
        """`SqliteManifest.roots`."""
        return [RootSummary(*row) for row in self._all(ROOTS_SQL)]

    def content(self, sha: str) -> ContentRecord | None:
        rows = self._all(f"SELECT {_CONTENT_COLUMNS} FROM contents WHERE sha256 = %s", (sha,))
        return _content(rows[0]) if rows else None

    def contents(self, status: str | None = None) -> list[ContentRecord]:
        sql = f"SELECT {_CONTENT_COLUMNS} FROM contents"
        args: tuple[Any, ...] = ()
        if status:
            sql, args = sql + " WHERE status = %s", (status,)
        return [_content(r) for r in self._all(sql + " ORDER BY root COLLATE \"C\", rel COLLATE \"C\"", args)]

    def content_shas(self) -> set[str]:
        return {r[0] for r in self._all("SELECT sha256 FROM contents")}

    def fingerprints(self) -> dict[str, str]:
        """The settings fingerprint each content was indexed or quarantined with ('' when none was recorded)."""
        return {r[0]: r[1] or "" for r in self._all("SELECT sha256, meta->>'fingerprint' FROM contents")}

    def indexed_shas(self, among: Iterable[str] | None = None) -> set[str]:
        """Contents visible to search: indexed and the content of at least one file (`among`: only these)."""
        sql = ("SELECT c.sha256 FROM contents c WHERE c.status = 'indexed' "
               "AND EXISTS (SELECT 1 FROM files f WHERE f.sha256 = c.sha256)")
        if among is None:
            return {r[0] for r in self._all(sql)}
        return {r[0] for r in self._all(sql + " AND c.sha256 = ANY(%s)", (sorted(set(among)),))}

    def holds_vectors(self) -> bool:
        """Whether any indexed chunk has a vector (see `SqliteManifest.holds_vectors`)."""
        rows = self._all("SELECT EXISTS (SELECT 1 FROM contents WHERE status = 'indexed' AND n_embedded > 0)")
        return bool(rows[0][0])

    def paths_of(self, sha: str) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self._all(
            f"SELECT root, rel FROM files WHERE sha256 = %s ORDER BY {ARCHIVED.format(t='')}, root COLLATE \"C\", "
            "rel COLLATE \"C\"", (sha,))]

    def paths_of_many(self, shas: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
        wanted = sorted(set(shas))
        found: dict[str, list[tuple[str, str]]] = {sha: [] for sha in wanted}
        for sha, root, rel in self._all("SELECT sha256, root, rel FROM files WHERE sha256 = ANY(%s) "
                                        f"ORDER BY {ARCHIVED.format(t='')}, root COLLATE \"C\", rel COLLATE \"C\"",
                                        (wanted,)):
            found[sha].append((root, rel))
        return found

    def cells(self, sha: str, start: int = 0, stop: int | None = None) -> list[CellRecord]:
        return [CellRecord(*r) for r in self._all(
            "SELECT sha256, idx, cell_id, cell_type, execution_count, source, outputs FROM cells "
            "WHERE sha256 = %s AND idx >= %s AND idx < %s ORDER BY idx", (sha, start, 2**62 if stop is None else stop))]

    def cell_index(self, sha: str, cell_id: str) -> int | None:
        rows = self._all("SELECT idx FROM cells WHERE sha256 = %s AND cell_id = %s ORDER BY idx LIMIT 1",
                         (sha, cell_id))
        return int(rows[0][0]) if rows else None

    def facts(self, sha: str) -> list[Fact]:
        """The value facts of a content, in cell order."""
        return facts_from_rows(r[0] for r in self._all("SELECT data FROM facts WHERE sha256 = %s ORDER BY seq", (sha,)))

    def find_by_path(self, rel: str) -> str | None:
        rows = self._all("SELECT sha256 FROM files WHERE rel = %s ORDER BY root COLLATE \"C\" LIMIT 1", (rel,))
        return rows[0][0] if rows else None

    def save_contents(self, records: Iterable[ContentRecord], cells: Iterable[CellRecord]) -> None:
        db = self.db.current()
        records = list(records)
        cells = list(cells)
        if not records and not cells:
            return
        now = time.time()
        self.db.lock_contents(db, [r.sha256 for r in records] + [c.sha256 for c in cells])
        shas = sorted({r.sha256 for r in records})
        db.execute("DELETE FROM cells WHERE sha256 = ANY(%s)", (shas,))
        db.execute("DELETE FROM pending_vectors WHERE sha256 = ANY(%s)", (shas,))
        db.execute("DELETE FROM facts WHERE sha256 = ANY(%s)", (shas,))
        with db.cursor() as cur:
            cur.executemany(
                _SAVE_CONTENT,
                [
                    (r.sha256, r.status, clean_text(r.reason), clean_text(r.root), clean_text(r.rel), r.n_cells,
                     r.n_chunks, r.n_embedded, Jsonb(clean_json(r.meta or {})), now)
                    for r in sorted(records, key=lambda r: r.sha256)
                ],
            )
            cur.executemany(
                _SAVE_CELL,
                [
                    (c.sha256, c.idx, clean_text(c.cell_id), c.cell_type, c.execution_count, clean_text(c.source),
                     clean_text(c.outputs))
                    for c in sorted(cells, key=lambda c: (c.sha256, c.idx))
                ],
            )
            cur.executemany(
                _SAVE_FACT,
                [
                    (r.sha256, f.seq, f.cell, Jsonb(clean_json(data)))
                    for r in sorted(records, key=lambda r: r.sha256) for f, data in fact_rows(r.facts)
                ],
            )

    def save_pending(self, items: Iterable[PendingVector]) -> None:
        """Queue chunks for embedding (after `save_contents` of their notebooks, in the same transaction)."""
        db = self.db.current()
        items = sorted(items, key=lambda p: p.chunk_id)
        if not items:
            return
        self.db.lock_contents(db, [p.sha256 for p in items])
        with db.cursor() as cur:
            cur.executemany(
                _SAVE_PENDING,
                [(p.chunk_id, p.sha256, p.priority, clean_text(p.text)) for p in items],
            )

    def pending(self, limit: int) -> list[PendingVector]:
        """The next chunks to embed, by priority (recent, healthy notebooks first)."""
        return [PendingVector(*r) for r in self._all(
            "SELECT chunk_id, sha256, priority, text FROM pending_vectors "
            "ORDER BY priority DESC, chunk_id COLLATE \"C\" LIMIT %s", (limit,))]

    def pending_count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM pending_vectors").fetchone()[0])

    def vectors_done(self, items: Iterable[PendingVector], embedded: set[str]) -> None:
        """Take `items` off the queue; count those in `embedded` per notebook. Only the rows this call removed
        are counted, so two indexers embedding the same queue entries count each chunk once."""
        db = self.db.current()
        items = list(items)
        if not items:
            return
        # No content locks here: `set_vectors` took those of the chunks it found, and locking the buckets of
        # chunks that are gone meanwhile now, out of order, could deadlock with a batch; row locks suffice.
        removed = db.execute(
            "DELETE FROM pending_vectors WHERE chunk_id = ANY(%s) RETURNING chunk_id, sha256",
            (sorted(p.chunk_id for p in items),),
        ).fetchall()
        per_sha: dict[str, int] = {}
        for chunk_id, sha in removed:
            if chunk_id in embedded:
                per_sha[sha] = per_sha.get(sha, 0) + 1
        with db.cursor() as cur:
            cur.executemany(
                "UPDATE contents SET n_embedded = LEAST(n_chunks, n_embedded + %s) WHERE sha256 = %s",
                [(count, sha) for sha, count in sorted(per_sha.items())],
            )

    def save_files(self, records: Iterable[FileRecord]) -> None:
        db = self.db.current()
        records = sorted(records, key=lambda r: (r.root, r.rel))
        if not records:
            return
        now = time.time()
        self.db.lock_contents(db, [r.sha256 for r in records])
        with db.cursor() as cur:
            cur.executemany(
                _SAVE_FILE,
                [(clean_text(r.root), clean_text(r.rel), r.size, r.mtime_ns, r.sha256, now) for r in records],
            )

    def delete_files(self, keys: Iterable[tuple[str, str]]) -> None:
        db = self.db.current()
        keys = sorted(keys)
        if keys:
            with db.cursor() as cur:
                cur.executemany("DELETE FROM files WHERE root = %s AND rel = %s", keys)

    def repoint_contents(self) -> int:
        """`SqliteManifest.repoint_contents`, in the order `paths_of` lists paths here (byte order), for the contents
        whose locks are free: one another indexer is writing is re-pointed by a later run (search names a current
        path anyway, `search.retrieve.at_current_paths`), since waiting for its lock here, after this run's own,
        could deadlock."""
        db = self.db.current()
        misplaced = [r[0] for r in db.execute(MISPLACED_SQL).fetchall()]
        wanted = sorted(self.db.try_lock_contents(db, misplaced))
        if not wanted:
            return 0
        with db.cursor() as cur:
            cur.execute(REPOINT_SQL.format(c=' COLLATE "C"', among="sha256 = ANY(%s)"), (wanted,))
            return int(cur.rowcount)

    def missing_contents(self, shas: Iterable[str]) -> set[str]:
        """Of `shas`, those with no content row, read under their locks: a content another indexer dropped after
        this one took it as known (then this indexer must index it again)."""
        db = self.db.current()
        wanted = sorted(set(shas))
        if not wanted:
            return set()
        self.db.lock_contents(db, wanted)
        found = {r[0] for r in db.execute("SELECT sha256 FROM contents WHERE sha256 = ANY(%s)", (wanted,))}
        return set(wanted) - found

    def orphan_shas(self) -> list[str]:
        return [r[0] for r in self._all(
            "SELECT c.sha256 FROM contents c WHERE NOT EXISTS (SELECT 1 FROM files f WHERE f.sha256 = c.sha256)")]

    def delete_contents(self, shas: list[str]) -> list[str]:
        """Delete the contents of `shas` that no file refers to now (checked under their locks); return those."""
        db = self.db.current()
        wanted = sorted(set(shas))
        if not wanted:
            return []
        self.db.lock_contents(db, wanted)
        gone = [r[0] for r in db.execute(
            "DELETE FROM contents c WHERE c.sha256 = ANY(%s) "
            "AND NOT EXISTS (SELECT 1 FROM files f WHERE f.sha256 = c.sha256) RETURNING c.sha256", (wanted,))]
        if gone:
            db.execute("DELETE FROM cells WHERE sha256 = ANY(%s)", (gone,))
            db.execute("DELETE FROM facts WHERE sha256 = ANY(%s)", (gone,))
            db.execute("DELETE FROM pending_vectors WHERE sha256 = ANY(%s)", (gone,))
        return sorted(gone)

    def render_marks(self) -> dict[str, int]:
        """sha → `render_mtime_ns` recorded in the meta of indexed contents that were indexed with a render."""
        return {r[0]: int(r[1]) for r in self._all(
            "SELECT sha256, meta->>'render_mtime_ns' FROM contents "
            "WHERE status = 'indexed' AND meta->>'render_mtime_ns' IS NOT NULL")}

    def render_counts(self) -> dict[str, Any] | None:
        """Indexed notebooks by render status and the stale reasons by frequency; None without renders."""
        return render_summary(self._all(
            "SELECT meta->>'render_status', meta->>'render_reason', count(*) FROM contents "
            "WHERE status = 'indexed' GROUP BY 1, 2"))

    def begin_run(self) -> tuple[int, bool]:
        """Record that a run starts. Never reports an interrupted run: batches commit chunks and manifest rows
        together, so no stray chunks can exist, and another indexer's open run is not a crash."""
        row = self.db.execute("INSERT INTO runs (started_at) VALUES (%s) RETURNING id", (time.time(),)).fetchone()
        return int(row[0]), False

    def end_run(self, run_id: int, summary: dict[str, Any]) -> None:
        self.db.execute("UPDATE runs SET finished_at = %s, summary = %s WHERE id = %s",
                        (time.time(), Jsonb(summary), run_id))

    def last_run(self) -> dict[str, Any]:
        """The summary of the last run that finished (any indexer's), or {}."""
        rows = self._all("SELECT summary FROM runs WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1")
        return dict(rows[0][0] or {}) if rows else {}

    def stats(self) -> dict[str, int]:
        """The counts `nbrecall status` shows, with the keys of `Manifest.stats`."""
        row = self.db.execute(
            "SELECT (SELECT count(*) FROM files), (SELECT count(*) FROM contents WHERE status = 'indexed'),"
            " (SELECT count(*) FROM contents WHERE status = 'quarantined'),"
            " (SELECT coalesce(sum(n_chunks), 0) FROM contents), (SELECT coalesce(sum(n_embedded), 0) FROM contents),"
            " (SELECT count(*) FROM pending_vectors)"
        ).fetchone()
        keys = ("files", "notebooks", "quarantined", "chunks", "embedded", "waiting for a vector")
        return {key: int(value) for key, value in zip(keys, row, strict=True)}


def _content(row: tuple[Any, ...]) -> ContentRecord:
    meta = row[8]
    if isinstance(meta, str):
        meta = json.loads(meta or "{}")
    return ContentRecord(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], meta or {})
