"""The manifest: an SQLite file in the index folder that records every file, every notebook content and its cells.

Files are keyed by (root, relative path) with size, mtime and content hash, so a re-run stats first and hashes
only what changed. Contents are keyed by SHA-256: identical files are indexed once and every path is listed.
Cells are kept here too, so neighbourhoods and the viewer read exactly what was indexed.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import MISSING, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from nbrecall.index.faults import damaged
from nbrecall.records import CellRecord, ContentRecord, FileRecord, PendingVector, RootSummary

if TYPE_CHECKING:  # read when facts are (the fact reader imports the output rules: 0.3 s of a `status`)
    from nbrecall.notebook.facts import Fact

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    root TEXT NOT NULL, rel TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL, seen_at REAL NOT NULL, PRIMARY KEY (root, rel));
CREATE INDEX IF NOT EXISTS files_sha ON files (sha256);
CREATE TABLE IF NOT EXISTS contents (
    sha256 TEXT PRIMARY KEY, status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
    root TEXT NOT NULL, rel TEXT NOT NULL, n_cells INTEGER NOT NULL DEFAULT 0, n_chunks INTEGER NOT NULL DEFAULT 0,
    n_embedded INTEGER NOT NULL DEFAULT 0, meta TEXT NOT NULL DEFAULT '{}', indexed_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    sha256 TEXT NOT NULL, idx INTEGER NOT NULL, cell_id TEXT NOT NULL, cell_type TEXT NOT NULL,
    execution_count INTEGER, source TEXT NOT NULL, outputs TEXT NOT NULL, PRIMARY KEY (sha256, idx));
CREATE TABLE IF NOT EXISTS runs (
    started_at REAL NOT NULL, finished_at REAL, summary TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS pending_vectors (
    chunk_id TEXT PRIMARY KEY, sha256 TEXT NOT NULL, priority REAL NOT NULL, text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS pending_priority ON pending_vectors (priority DESC, chunk_id);
CREATE INDEX IF NOT EXISTS pending_sha ON pending_vectors (sha256);
-- `nbrecall status` and the page's counts read these instead of every content's row with its metadata (41,000
-- notebooks: 0.16 + 0.11 s for the two scans, 0.02 s with them; bench/README.md)
CREATE INDEX IF NOT EXISTS contents_counts ON contents (status, n_chunks, n_embedded);
CREATE INDEX IF NOT EXISTS contents_render ON contents (status, json_extract(meta, '$.render_status'),
    json_extract(meta, '$.render_reason'));
CREATE TABLE IF NOT EXISTS facts (
    sha256 TEXT NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (sha256, seq)) WITHOUT ROWID;  -- its key is its only index (a separate one was 2.5 MB at 28k facts)
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

# The queue's length is kept in `counters` by the methods below that add to it or take from it, one update per
# call: `SELECT COUNT(*) FROM pending_vectors` took 0.19 s of every `nbrecall status` (and of every page's counts)
# with 2.47 M chunks queued. (Triggers would keep it too, but cost +50% on every queue write.) An index written
# before the count was kept gets it, counted once, at its first writable open.
PENDING = "pending_vectors"

# The embedding queue holds every chunk's text until its vector is stored: on `../shared/corpus` it filled 36 MB of
# pages that stayed free when it drained, half the manifest's file (bench/README.md). A new manifest gives free
# pages back at the end of each run (`auto_vacuum` INCREMENTAL, set before its first table); an older one is
# rewritten once (VACUUM) at the end of a run that leaves over `RECLAIM_SHARE` of its pages free.
RECLAIM_SHARE = 0.25

# One row per root: its files, and how many hold an indexed or a quarantined content (both stores).
ROOTS_SQL = ("SELECT f.root, COUNT(*), COALESCE(SUM(CASE WHEN c.status = 'indexed' THEN 1 ELSE 0 END), 0),"
             " COALESCE(SUM(CASE WHEN c.status = 'quarantined' THEN 1 ELSE 0 END), 0)"
             " FROM files f LEFT JOIN contents c ON c.sha256 = f.sha256 GROUP BY f.root ORDER BY f.root")

# A content records the path it was first indexed under (`contents.root`, `rel`: the viewer's title, the file a
# re-render reads). When that file is deleted, moved, or holds another content now while a copy stays, the record is
# pointed at the copy, the first by root and path as `paths_of` lists them (`{c}`: the collation that order needs,
# "" in SQLite; `{among}`: the contents to look at). `MISPLACED` finds them: one pass over the contents, about 70 ms
# at 41,000 in SQLite (bench/README.md); contents no file holds are left to `orphan_shas`.
# A path inside a zip archive comes after every plain file (`notebook.archives.in_archive`; `%%` is `%` to a
# driver with parameters and the same pattern to one without), and a content recorded under one is pointed at a
# plain file that holds it.
ARCHIVED = "(lower({t}rel) LIKE '%%.zip/%%')"
_MISPLACED_WHERE = """((NOT EXISTS (SELECT 1 FROM files f
                       WHERE f.root = contents.root AND f.rel = contents.rel AND f.sha256 = contents.sha256)
       AND EXISTS (SELECT 1 FROM files f WHERE f.sha256 = contents.sha256))
      OR (""" + ARCHIVED.format(t="contents.") + """
          AND EXISTS (SELECT 1 FROM files f
                      WHERE f.sha256 = contents.sha256 AND NOT """ + ARCHIVED.format(t="f.") + """)))"""
MISPLACED_SQL = f"SELECT sha256 FROM contents WHERE {_MISPLACED_WHERE}"
REPOINT_SQL = """
    UPDATE contents SET
        root = (SELECT f.root FROM files f WHERE f.sha256 = contents.sha256
                ORDER BY """ + ARCHIVED.format(t="f.") + """, f.root{c}, f.rel{c} LIMIT 1),
        rel = (SELECT f.rel FROM files f WHERE f.sha256 = contents.sha256
               ORDER BY """ + ARCHIVED.format(t="f.") + """, f.root{c}, f.rel{c} LIMIT 1)
    WHERE {among} AND """ + _MISPLACED_WHERE

log = logging.getLogger("nbrecall.index")

T = TypeVar("T")

IN_LIST = 500  # ids per `IN (...)` list: well under SQLite's bound on a statement's parameters


def in_parts(items: Iterable[T]) -> Iterator[list[T]]:
    """`items` without repeats, sorted, in parts of `IN_LIST`: one `IN (...)` list each."""
    wanted = sorted(set(items))  # type: ignore[type-var]  # str or tuples of them: ordered
    for start in range(0, len(wanted), IN_LIST):
        yield wanted[start : start + IN_LIST]


def marks(part: list[Any]) -> str:
    """The placeholders of one `IN (...)` list."""
    return ", ".join("?" * len(part))


class SqliteManifest:
    """Thin data access over the manifest database; one connection, WAL mode so readers never block.
    The embedded implementation of `protocols.Manifest`; one indexer at a time (the writer lock)."""

    shared = False

    def __init__(self, path: Path, readonly: bool = False) -> None:
        self.path = path
        try:
            if readonly:
                self.db = _open_readonly(path)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(path, check_same_thread=False)
                self.db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # takes effect on a new file only
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.executescript(SCHEMA)
                with self.db:
                    self.db.execute("INSERT OR IGNORE INTO counters (name, value) VALUES (?,"
                                    " (SELECT COUNT(*) FROM pending_vectors))", (PENDING,))
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise
            raise damaged(path, path.parent, str(exc)) from exc
        self.db.row_factory = sqlite3.Row

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """The write methods below run inside one: committed together, or rolled back together."""
        with self.db:
            yield

    def files(self, root: str | None = None) -> dict[tuple[str, str], FileRecord]:
        sql = "SELECT root, rel, size, mtime_ns, sha256 FROM files"
        args: tuple[Any, ...] = ()
        if root is not None:
            sql, args = sql + " WHERE root = ?", (root,)
        return {(r["root"], r["rel"]): FileRecord(*r) for r in self.db.execute(sql, args)}

    def roots(self) -> list[RootSummary]:
        """What the index holds from each root, in root order (`ROOTS_SQL`)."""
        return [RootSummary(*row) for row in self.db.execute(ROOTS_SQL)]

    def content(self, sha: str) -> ContentRecord | None:
        row = self.db.execute("SELECT * FROM contents WHERE sha256 = ?", (sha,)).fetchone()
        return _content(row) if row else None

    def contents(self, status: str | None = None) -> list[ContentRecord]:
        sql = "SELECT * FROM contents"
        args: tuple[Any, ...] = ()
        if status:
            sql, args = sql + " WHERE status = ?", (status,)
        return [_content(r) for r in self.db.execute(sql + " ORDER BY root, rel", args)]

    def content_shas(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT sha256 FROM contents")}

    def fingerprints(self) -> dict[str, str]:
        """The settings fingerprint each content was indexed or quarantined with ('' when none was recorded)."""
        return {r[0]: r[1] or "" for r in self.db.execute(
            "SELECT sha256, json_extract(meta, '$.fingerprint') FROM contents")}

    def indexed_shas(self, among: Iterable[str] | None = None) -> set[str]:
        """Contents visible to search: indexed and the content of at least one file. A path's old content stops
        being visible in the transaction that points the path at its new content (a reader never sees both).

        `among`: only these candidates (a search's hits): at 40,000 notebooks building the whole set took 160 ms
        of every search. They are looked up by primary key, and each one's file by `files_sha`: `+status` keeps
        SQLite from walking the `contents_counts` index over every indexed content instead, and a correlated
        EXISTS from listing every file's hash (the plain `IN (SELECT sha256 FROM files)` form took 0.21 s per
        search at 41,000 notebooks; this one 0.3 ms warm, bench/README.md)."""
        if among is None:
            sql = "SELECT sha256 FROM contents WHERE status = 'indexed' AND sha256 IN (SELECT sha256 FROM files)"
            return {r[0] for r in self.db.execute(sql)}
        sql = ("SELECT c.sha256 FROM contents c WHERE +c.status = 'indexed' AND c.sha256 IN ({marks})"
               " AND EXISTS (SELECT 1 FROM files f WHERE f.sha256 = c.sha256)")
        found: set[str] = set()
        for part in in_parts(among):
            found.update(r[0] for r in self.db.execute(sql.format(marks=marks(part)), part))
        return found

    def holds_vectors(self) -> bool:
        """Whether any indexed chunk has a vector (`contents.n_embedded`; ~2 ms at 41,000 notebooks over the
        `contents_counts` index): a keyword-only index (`--no-vectors`, or vectors not filled yet) need not
        embed the question nor scan a vector column of nulls (0.9 s per list at 2.47 M chunks)."""
        row = self.db.execute(
            "SELECT EXISTS (SELECT 1 FROM contents WHERE status = 'indexed' AND n_embedded > 0)").fetchone()
        return bool(row[0])

    def paths_of(self, sha: str) -> list[tuple[str, str]]:
        return [
            (r[0], r[1])
            for r in self.db.execute(
                f"SELECT root, rel FROM files WHERE sha256 = ? ORDER BY {ARCHIVED.format(t='')}, root, rel", (sha,)
            )
        ]

    def paths_of_many(self, shas: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
        """`paths_of` for several contents in one query (a search's hits); a content no file holds maps to []."""
        found: dict[str, list[tuple[str, str]]] = {}
        for part in in_parts(shas):
            found.update((sha, []) for sha in part)
            for sha, root, rel in self.db.execute(
                    f"SELECT sha256, root, rel FROM files WHERE sha256 IN ({marks(part)}) "
                    f"ORDER BY {ARCHIVED.format(t='')}, root, rel", part):
                found[sha].append((root, rel))
        return found

    def cells(self, sha: str, start: int = 0, stop: int | None = None) -> list[CellRecord]:
        """The recorded cells of a content, in order; `start`/`stop` take one page of them (by cell index)."""
        return [
            CellRecord(*r)
            for r in self.db.execute(
                "SELECT sha256, idx, cell_id, cell_type, execution_count, source, outputs FROM cells "
                "WHERE sha256 = ? AND idx >= ? AND idx < ? ORDER BY idx",
                (sha, start, 2**62 if stop is None else stop),
            )
        ]

    def cell_index(self, sha: str, cell_id: str) -> int | None:
        """The index of the cell with this id in a content, or None."""
        row = self.db.execute(
            "SELECT idx FROM cells WHERE sha256 = ? AND cell_id = ? ORDER BY idx LIMIT 1", (sha, cell_id)
        ).fetchone()
        return int(row[0]) if row else None

    def facts(self, sha: str) -> list[Fact]:
        """The value facts of a content, in cell order ([] for an index written before facts existed)."""
        try:
            rows = self.db.execute("SELECT data FROM facts WHERE sha256 = ? ORDER BY seq", (sha,)).fetchall()
        except sqlite3.OperationalError:
            return []
        return facts_from_rows(json.loads(r[0]) for r in rows)

    def find_by_path(self, rel: str) -> str | None:
        row = self.db.execute(
            "SELECT sha256 FROM files WHERE rel = ? ORDER BY root LIMIT 1", (rel,)
        ).fetchone()
        return row[0] if row else None

    def save_contents(self, records: Iterable[ContentRecord], cells: Iterable[CellRecord]
    ) -> None:
        now = time.time()
        for rec in records:
            self.db.execute("DELETE FROM cells WHERE sha256 = ?", (rec.sha256,))
            dropped = self.db.execute("DELETE FROM pending_vectors WHERE sha256 = ?", (rec.sha256,)).rowcount
            self._count_pending(-dropped)
            self.db.execute("DELETE FROM facts WHERE sha256 = ?", (rec.sha256,))
            self.db.execute(
                "INSERT OR REPLACE INTO contents (sha256, status, reason, root, rel, n_cells, n_chunks, n_embedded,"
                " meta, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rec.sha256,
                    rec.status,
                    rec.reason,
                    rec.root,
                    rec.rel,
                    rec.n_cells,
                    rec.n_chunks,
                    rec.n_embedded,
                    json.dumps(rec.meta or {}),
                    now,
                ),
            )
        self.db.executemany(
            "INSERT OR REPLACE INTO cells (sha256, idx, cell_id, cell_type, execution_count, source, outputs) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (c.sha256, c.idx, c.cell_id, c.cell_type, c.execution_count, c.source, c.outputs)
                for c in cells
            ],
        )
        self.db.executemany(
            "INSERT OR REPLACE INTO facts (sha256, seq, idx, data) VALUES (?, ?, ?, ?)",
            [(rec.sha256, f.seq, f.cell, json.dumps(data, ensure_ascii=False))
             for rec in records for f, data in fact_rows(rec.facts)],
        )

    def save_pending(self, items: Iterable[PendingVector]) -> None:
        """Queue chunks for embedding (after `save_contents` of their notebooks, in the same transaction)."""
        rows = {p.chunk_id: (p.chunk_id, p.sha256, p.priority, p.text) for p in items}
        ids = sorted(rows)
        queued = 0  # already queued: replaced, not added (`save_contents` has emptied their notebooks' queue)
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ", ".join("?" * len(part))
            queued += self.db.execute(f"SELECT COUNT(*) FROM pending_vectors WHERE chunk_id IN ({marks})",
                                      part).fetchone()[0]
        self.db.executemany(
            "INSERT OR REPLACE INTO pending_vectors (chunk_id, sha256, priority, text) VALUES (?, ?, ?, ?)",
            list(rows.values()),
        )
        self._count_pending(len(rows) - queued)

    def _count_pending(self, change: int) -> None:
        if change:
            self.db.execute("UPDATE counters SET value = value + ? WHERE name = ?", (change, PENDING))

    def pending(self, limit: int) -> list[PendingVector]:
        """The next chunks to embed, by priority (recent, healthy notebooks first)."""
        rows = self.db.execute(
            "SELECT chunk_id, sha256, priority, text FROM pending_vectors ORDER BY priority DESC, chunk_id LIMIT ?",
            (limit,),
        )
        return [PendingVector(*row) for row in rows]

    def pending_count(self) -> int:
        """Chunks waiting for a vector: the kept count (`PENDING`); counted in an index written before
        it was kept and opened read-only here."""
        try:
            row = self.db.execute("SELECT value FROM counters WHERE name = ?", (PENDING,)).fetchone()
        except sqlite3.OperationalError:  # no counters table
            row = None
        if row is not None:
            return int(row[0])
        return int(self.db.execute("SELECT COUNT(*) FROM pending_vectors").fetchone()[0])

    def vectors_done(self, items: Iterable[PendingVector], embedded: set[str]) -> None:
        """Take `items` off the queue; count those in `embedded` (chunk ids that got a vector) per notebook."""
        per_sha: dict[str, int] = {}
        for item in items:
            if item.chunk_id in embedded:
                per_sha[item.sha256] = per_sha.get(item.sha256, 0) + 1
        removed = self.db.executemany("DELETE FROM pending_vectors WHERE chunk_id = ?", [(p.chunk_id,) for p in items])
        self._count_pending(-removed.rowcount)
        self.db.executemany(
            "UPDATE contents SET n_embedded = MIN(n_chunks, n_embedded + ?) WHERE sha256 = ?",
            [(count, sha) for sha, count in per_sha.items()],
        )

    def save_files(self, records: Iterable[FileRecord]) -> None:
        now = time.time()
        self.db.executemany(
            "INSERT OR REPLACE INTO files (root, rel, size, mtime_ns, sha256, seen_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(r.root, r.rel, r.size, r.mtime_ns, r.sha256, now) for r in records],
        )

    def delete_files(self, keys: Iterable[tuple[str, str]]) -> None:
        self.db.executemany("DELETE FROM files WHERE root = ? AND rel = ?", list(keys))

    def repoint_contents(self) -> int:
        """Point each content whose recorded path no longer holds it at a file that does (`REPOINT_SQL`), whatever
        made it so (this run, an interrupted one, a version before the rule); how many were."""
        return int(self.db.execute(REPOINT_SQL.format(c="", among="1 = 1")).rowcount)

    def orphan_shas(self) -> list[str]:
        return [
            r[0]
            for r in self.db.execute(
                "SELECT sha256 FROM contents WHERE sha256 NOT IN (SELECT sha256 FROM files)"
            )
        ]

    def delete_contents(self, shas: list[str]) -> list[str]:
        """Delete these contents, their cells and queued vectors; returns the shas deleted (all: one writer)."""
        for sha in shas:
            self.db.execute("DELETE FROM cells WHERE sha256 = ?", (sha,))
            self.db.execute("DELETE FROM facts WHERE sha256 = ?", (sha,))
            self._count_pending(-self.db.execute("DELETE FROM pending_vectors WHERE sha256 = ?", (sha,)).rowcount)
            self.db.execute("DELETE FROM contents WHERE sha256 = ?", (sha,))
        return list(shas)

    def missing_contents(self, shas: Iterable[str]) -> set[str]:
        """Of `shas`, those with no content row (always none with one writer at a time; see `PgManifest`)."""
        wanted = sorted(set(shas))
        found: set[str] = set()
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            marks = ",".join("?" * len(part))
            found.update(r[0] for r in self.db.execute(f"SELECT sha256 FROM contents WHERE sha256 IN ({marks})", part))
        return set(wanted) - found

    def render_marks(self) -> dict[str, int]:
        """sha → `render_mtime_ns` recorded in the meta of indexed contents that were indexed with a render."""
        rows = self.db.execute(
            "SELECT sha256, json_extract(meta, '$.render_mtime_ns') FROM contents "
            "WHERE status = 'indexed' AND json_extract(meta, '$.render_mtime_ns') IS NOT NULL"
        )
        return {r[0]: int(r[1]) for r in rows}

    def render_counts(self) -> dict[str, Any] | None:
        """Indexed notebooks by render status (`fresh`, `changed`, `stale`, `not_rendered`) and the stale reasons
        by frequency; None when no indexed notebook has a render."""
        rows = self.db.execute(
            "SELECT json_extract(meta, '$.render_status'), json_extract(meta, '$.render_reason'), COUNT(*) "
            "FROM contents WHERE status = 'indexed' GROUP BY 1, 2"
        )
        return render_summary(rows)

    def begin_run(self) -> tuple[int, bool]:
        """Record that a run starts; return its id and whether the run before it never finished (killed, or
        stopped by an error), in which case the store may hold chunks of a batch the manifest never recorded."""
        last = self.db.execute("SELECT finished_at FROM runs ORDER BY rowid DESC LIMIT 1").fetchone()
        with self.db:
            cursor = self.db.execute("INSERT INTO runs (started_at) VALUES (?)", (time.time(),))
        return int(cursor.lastrowid or 0), last is not None and last[0] is None

    def end_run(self, run_id: int, summary: dict[str, Any]) -> None:
        with self.db:
            self.db.execute(
                "UPDATE runs SET finished_at = ?, summary = ? WHERE rowid = ?",
                (time.time(), json.dumps(summary), run_id),
            )
        self.reclaim()

    def reclaim(self) -> int:
        """Give the file's free pages back to the file system (see `RECLAIM_SHARE`); the pages freed. A reader
        still open keeps the file at its size until the next checkpoint; a failure (busy, disk full) is logged and
        the index is left as it was."""
        free, total = (int(self.db.execute(f"PRAGMA {name}").fetchone()[0]) for name in ("freelist_count",
                                                                                          "page_count"))
        if not free:
            return 0
        incremental = int(self.db.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2
        if not incremental and free < RECLAIM_SHARE * total:
            return 0
        try:  # executescript steps the pragma to its end (execute() frees one page per step)
            self.db.executescript("PRAGMA incremental_vacuum;" if incremental
                                  else "PRAGMA auto_vacuum=INCREMENTAL; VACUUM;")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.OperationalError as exc:
            log.warning("%s: could not give %d free pages back (%s); the manifest is unchanged", self.path, free,
                        exc)
            return 0
        return free

    def last_run(self) -> dict[str, Any]:
        """The summary of the last run that finished, or {}."""
        row = self.db.execute(
            "SELECT summary FROM runs WHERE finished_at IS NOT NULL ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        try:
            return dict(json.loads(row[0])) if row else {}
        except (ValueError, TypeError):
            return {}

    def stats(self) -> dict[str, int]:
        row = self.db.execute(  # one scan of the contents (of `contents_counts` where it exists)
            "SELECT (SELECT COUNT(*) FROM files), COALESCE(SUM(status = 'indexed'), 0),"
            " COALESCE(SUM(status = 'quarantined'), 0), COALESCE(SUM(n_chunks), 0), COALESCE(SUM(n_embedded), 0)"
            " FROM contents"
        ).fetchone()
        try:
            pending = self.pending_count()
        except sqlite3.OperationalError:  # an index written before vectors were queued (read-only here)
            pending = 0
        return {
            "files": row[0],
            "notebooks": row[1],
            "quarantined": row[2],
            "chunks": row[3],
            "embedded": row[4],
            "waiting for a vector": pending,
        }


# A fact's place (its cell, the heading and the sentence above it, the code line and the names it reads) is mostly
# the place of the fact before it: repeated in every row, it took over half the facts' JSON on ../shared/corpus, and
# the facts 16.8 MB of a 39.5 MB manifest (bench/README.md)
_CARRIED = ("cell", "cell_id", "heading", "sentence", "code", "names", "origin", "unit")


def fact_rows(facts: Iterable[Fact]) -> list[tuple[Fact, dict[str, Any]]]:
    """Each fact, in `seq` order (the order `facts_from_rows` reads them back in), with its data as stored (shared
    with `PgManifest`). The notebook's first fact stores its fields not at their default; each one after it is
    marked `as_before` and stores, of the `_CARRIED` fields, only those that differ from the fact before it."""
    out: list[tuple[Fact, dict[str, Any]]] = []
    before: Fact | None = None
    for fact in sorted(facts, key=lambda f: f.seq):
        data: dict[str, Any] = {}
        for field in fields(fact):
            value = getattr(fact, field.name)
            if before is not None and field.name in _CARRIED:
                if value != getattr(before, field.name):
                    data[field.name] = value
            elif field.default is MISSING or value != field.default:
                data[field.name] = value
        if before is not None:
            data["as_before"] = True
        out.append((fact, data))
        before = fact
    return out


def facts_from_rows(rows: Iterable[dict[str, Any]]) -> list[Fact]:
    """The facts of `fact_rows`' data, in its order. Rows written before (every field but empty ones) read too."""
    from nbrecall.notebook.facts import Fact

    out: list[Fact] = []
    for data in rows:
        known = {k: v for k, v in data.items() if k in Fact.__dataclass_fields__}
        if data.get("as_before") and out:
            for key in _CARRIED:
                known.setdefault(key, getattr(out[-1], key))
        for required in ("cell", "cell_id", "value", "label", "shown"):  # empty ones were left out before
            known.setdefault(required, 0 if required == "cell" else "")
        out.append(Fact(**known))
    return out


def render_summary(rows: Iterable[Any]) -> dict[str, Any] | None:
    """`render_counts()` from (render_status, render_reason, count) rows of indexed contents (shared with
    `PgManifest`)."""
    counts = {"fresh": 0, "changed": 0, "stale": 0, "not_rendered": 0}
    reasons: dict[str, int] = {}
    for status, reason, count in rows:
        key = status if status in ("fresh", "changed", "stale") else "not_rendered"
        counts[key] += int(count)
        if key == "stale":
            reasons[str(reason or "unknown reason")] = reasons.get(str(reason or "unknown reason"), 0) + int(count)
    if not (counts["fresh"] or counts["changed"] or counts["stale"]):
        return None
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return {**counts, "stale_reasons": [{"reason": r, "count": n} for r, n in ranked]}


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection (the path is quoted: `#`, `?` or `%` in a folder name must not end the URI).

    A WAL database needs its `-shm` file, which a reader cannot create in a read-only folder (read-only mount,
    archive medium): only when the plain read-only open fails there is the file opened as immutable.
    """
    name = quote(str(path))
    db = sqlite3.connect(f"file:{name}?mode=ro", uri=True, check_same_thread=False)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.OperationalError:
        db.close()
        if not path.is_file() or os.access(path.parent, os.W_OK):
            raise
    return sqlite3.connect(f"file:{name}?mode=ro&immutable=1", uri=True, check_same_thread=False)


def _content(row: sqlite3.Row) -> ContentRecord:
    return ContentRecord(
        row["sha256"],
        row["status"],
        row["reason"],
        row["root"],
        row["rel"],
        row["n_cells"],
        row["n_chunks"],
        row["n_embedded"],
        json.loads(row["meta"] or "{}"),
    )
