"""Where families live: tables of the manifest (SQLite in the index folder, or PostgreSQL beside the chunks).

* `family_sigs`: each indexed content's MinHash signature, its number of distinct lines, `pending` (1 until the
  family step of a run has placed it) and `banded` (its LSH keys are in `family_bands`);
* `family_bands`: the LSH index, one row per (band, key, content), keyed by bucket only: a content's rows are
  found again from its signature (`Banding.keys`), so each batch writes one row per notebook and the family step
  adds the bands of the run's new signatures in one sorted pass;
* `families`: each placed content's family id (the smallest content hash of its family; a content alone is its
  own family);
* `family_state`: the settings the stored families were made with (`families.state_key`).

Both classes answer the same calls (`ingest.families` and `search.families` use them); readers of an index made
before families get no families (every content alone), never an error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from nbrecall.index.manifest import in_parts, marks
from nbrecall.notebook.checkpoints import CHECKPOINTS, is_checkpoint, saved_path
from nbrecall.records import Signature


class Banding(Protocol):
    """How signatures map to LSH buckets (`ingest.families.Banding`)."""

    def keys(self, sig: Signature) -> list[tuple[int, int]]: ...


SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS family_sigs (
    sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, sig BLOB NOT NULL, pending INTEGER NOT NULL DEFAULT 1,
    banded INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS family_sigs_pending ON family_sigs (pending) WHERE pending = 1;
CREATE INDEX IF NOT EXISTS family_sigs_unbanded ON family_sigs (banded) WHERE banded = 0;
CREATE TABLE IF NOT EXISTS family_bands (
    band INTEGER NOT NULL, key INTEGER NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY (band, key, sha256))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS families (sha256 TEXT PRIMARY KEY, family TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS families_family ON families (family);
CREATE TABLE IF NOT EXISTS family_state (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# the queries both dialects share (SQLite and PostgreSQL read them alike)
PENDING_SQL = "SELECT sha256 FROM family_sigs WHERE pending = 1 ORDER BY sha256"
GONE_SQL = ("SELECT s.sha256 FROM family_sigs s WHERE NOT EXISTS (SELECT 1 FROM contents c "
            "WHERE c.sha256 = s.sha256 AND c.status = 'indexed') UNION SELECT f.sha256 FROM families f "
            "WHERE NOT EXISTS (SELECT 1 FROM family_sigs s WHERE s.sha256 = f.sha256)")
UNSIGNED_SQL = ("SELECT c.sha256 FROM contents c WHERE c.status = 'indexed' "
                "AND NOT EXISTS (SELECT 1 FROM family_sigs s WHERE s.sha256 = c.sha256) ORDER BY c.sha256")


def family_store(manifest: Any) -> SqliteFamilies | PgFamilies | None:
    """The family tables of this manifest (None for a read-only SQLite index made before families)."""
    if manifest.shared:
        return PgFamilies(manifest)
    store = SqliteFamilies(manifest)
    return store if store.available() else None


class _SameQueries:
    """The queries both family stores run with the same SQL; each store runs them with its own `_all`."""

    def _all(self, sql: str, args: Any = ()) -> list[Any]:
        raise NotImplementedError

    def unbanded(self) -> dict[str, Signature]:
        return {r[0]: Signature(int(r[1]), bytes(r[2])) for r in self._all(
            "SELECT sha256, size, sig FROM family_sigs WHERE banded = 0")}

    def unsigned(self) -> list[str]:
        return [r[0] for r in self._all(UNSIGNED_SQL)]

    def pending(self) -> list[str]:
        return [r[0] for r in self._all(PENDING_SQL)]

    def gone(self) -> list[str]:
        """Contents with a signature or a family that are no longer indexed (deleted, changed, quarantined)."""
        return sorted({r[0] for r in self._all(GONE_SQL)})

    def counts(self) -> tuple[int, int]:
        """(families of two or more, contents in them)."""
        row = self._all("SELECT count(*), coalesce(sum(n), 0) FROM (SELECT count(*) AS n FROM families "
                        "GROUP BY family HAVING count(*) > 1) AS f")[0]
        return int(row[0]), int(row[1])


class SqliteFamilies(_SameQueries):
    """The family tables in the SQLite manifest (created by the writer, `ensure`)."""

    def __init__(self, manifest: Any) -> None:
        self.manifest = manifest
        self.db: sqlite3.Connection = manifest.db

    def ensure(self) -> None:
        """Create the tables; tables of an earlier layout are dropped (signatures are made again from the cells)."""
        columns = {r[1] for r in self.db.execute("PRAGMA table_info(family_sigs)")}
        if columns and "banded" not in columns:
            with self.db:
                for table in ("family_sigs", "family_bands", "families", "family_state"):
                    self.db.execute(f"DROP TABLE IF EXISTS {table}")
        self.db.executescript(SQLITE_SCHEMA)

    @contextmanager
    def step_lock(self) -> Iterator[None]:  # one writer at a time already (the index folder's lock)
        yield

    def available(self) -> bool:
        row = self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'families'").fetchone()
        return row is not None

    def _all(self, sql: str, args: Iterable[Any] = ()) -> list[Any]:
        return self.db.execute(sql, tuple(args)).fetchall()

    def _in(self, sql: str, items: Iterable[str]) -> list[Any]:
        """`sql` with `{}` standing for a list of placeholders, run per part of `items`."""
        rows: list[Any] = []
        for part in in_parts(items):
            rows.extend(self._all(sql.format(marks(part)), part))
        return rows

    # --- the write side -----------------------------------------------------------------------------------------

    def state(self, name: str = "settings") -> str | None:
        row = self.db.execute("SELECT value FROM family_state WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def set_state(self, value: str, name: str = "settings") -> None:
        self.db.execute("INSERT OR REPLACE INTO family_state (name, value) VALUES (?, ?)", (name, value))

    def forget_signatures(self) -> None:
        for table in ("family_bands", "families", "family_sigs"):
            self.db.execute(f"DELETE FROM {table}")

    def save_signatures(self, items: list[tuple[str, Signature]], banding: Banding) -> None:
        """Store (or replace) signatures; each is pending until the family step, which bands it. A replaced one's
        old bands are removed first (found from the old signature)."""
        if not items:
            return
        old = {r[0]: Signature(int(r[1]), bytes(r[2])) for r in self._in(
            "SELECT sha256, size, sig FROM family_sigs WHERE banded = 1 AND sha256 IN ({})", (sha for sha, _ in items))}
        self.delete_bands([(band, key, sha) for sha, sig in old.items() for band, key in banding.keys(sig)])
        self.db.executemany(
            "INSERT OR REPLACE INTO family_sigs (sha256, size, sig, pending, banded) VALUES (?, ?, ?, 1, 0)",
            [(sha, sig.size, sig.hashes) for sha, sig in items],
        )

    def add_bands(self, rows: list[tuple[int, int, str]], shas: list[str]) -> None:
        self.db.executemany("INSERT OR IGNORE INTO family_bands (band, key, sha256) VALUES (?, ?, ?)", rows)
        self.db.executemany("UPDATE family_sigs SET banded = 1 WHERE sha256 = ?", [(sha,) for sha in shas])

    def delete_bands(self, rows: list[tuple[int, int, str]]) -> None:
        self.db.executemany("DELETE FROM family_bands WHERE band = ? AND key = ? AND sha256 = ?", rows)

    def rebuild_bands(self, banding: Banding) -> None:
        """New settings: every stored signature is banded and placed again (families start over)."""
        self.db.execute("DELETE FROM family_bands")
        self.db.execute("DELETE FROM families")
        self.db.execute("UPDATE family_sigs SET pending = 1, banded = 0")

    def bucket_rows(self, keys: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
        """(band, key, content) of every content in these buckets."""
        rows: list[tuple[int, int, str]] = []
        for part in in_parts(keys):
            marks = ", ".join("(?, ?)" for _ in part)
            rows.extend((int(r[0]), int(r[1]), str(r[2])) for r in self.db.execute(
                f"SELECT band, key, sha256 FROM family_bands WHERE (band, key) IN (VALUES {marks})",
                [x for pair in part for x in pair]))
        return sorted(rows)

    def all_bucket_rows(self) -> Iterable[tuple[int, int, str]]:
        rows = self.db.execute("SELECT band, key, sha256 FROM family_bands ORDER BY band, key, sha256")
        return (tuple(r) for r in rows)

    def count_signatures(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM family_sigs").fetchone()[0])

    def signatures(self, shas: Iterable[str]) -> dict[str, Signature]:
        return {r[0]: Signature(int(r[1]), bytes(r[2])) for r in self._in(
            "SELECT sha256, size, sig FROM family_sigs WHERE sha256 IN ({})", shas)}

    def has_checkpoints(self) -> bool:
        return self.db.execute(
            "SELECT 1 FROM files WHERE rel LIKE ? ESCAPE '\\' LIMIT 1", (f"%\\{CHECKPOINTS}/%",)
        ).fetchone() is not None

    def sha_at(self, root: str, rel: str) -> str | None:
        row = self.db.execute("SELECT sha256 FROM files WHERE root = ? AND rel = ?", (root, rel)).fetchone()
        return row[0] if row else None

    def write(self, assign: dict[str, str], delete: list[str], done: list[str]) -> None:
        """Families after a step; `delete`: contents gone (their bands are deleted by the caller)."""
        self.db.executemany("DELETE FROM families WHERE sha256 = ?", [(sha,) for sha in delete])
        self.db.executemany("DELETE FROM family_sigs WHERE sha256 = ?", [(sha,) for sha in delete])
        self.db.executemany("INSERT OR REPLACE INTO families (sha256, family) VALUES (?, ?)", sorted(assign.items()))
        self.db.executemany("UPDATE family_sigs SET pending = 0 WHERE sha256 = ?", [(sha,) for sha in done])

    # --- the read side ------------------------------------------------------------------------------------------

    def families_of(self, shas: Iterable[str]) -> dict[str, str]:
        return {r[0]: r[1] for r in self._in("SELECT sha256, family FROM families WHERE sha256 IN ({})", shas)}

    def members(self, families: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for sha, family in self._in(
                "SELECT sha256, family FROM families WHERE family IN ({}) ORDER BY sha256", families):
            out.setdefault(family, []).append(sha)
        return out

    def member_details(self, shas: Iterable[str]) -> list[dict[str, Any]]:
        """What a result lists of each member: first path, year, author, deprecated, health, last modified."""
        rows = self._in(
            "SELECT c.sha256, json_extract(c.meta, '$.year'), json_extract(c.meta, '$.author'), "
            "json_extract(c.meta, '$.deprecated'), json_extract(c.meta, '$.health'), "
            "(SELECT MAX(f.mtime_ns) FROM files f WHERE f.sha256 = c.sha256), "
            "(SELECT f.rel FROM files f WHERE f.sha256 = c.sha256 "
            "ORDER BY instr(f.rel, '.ipynb_checkpoints/') > 0, f.root, f.rel LIMIT 1), "
            "(SELECT COUNT(*) FROM files f WHERE f.sha256 = c.sha256) "
            "FROM contents c WHERE c.status = 'indexed' AND c.sha256 IN ({})", shas)
        return [_detail(r) for r in rows if r[6] is not None]


class PgFamilies(_SameQueries):
    """The family tables in PostgreSQL (created by manifest migration 3, `index.pg_schema.MANIFEST_MIGRATIONS`)."""

    def __init__(self, manifest: Any) -> None:
        self.manifest = manifest
        self.pg = manifest.db

    def ensure(self) -> None:  # the manifest's migrations made the tables
        return None

    @contextmanager
    def step_lock(self) -> Iterator[None]:
        """One family step at a time across indexers: two steps placing related notebooks at once would each
        miss the other's, and both would be marked done."""
        from nbrecall.index.pg_db import lock_classid

        key = lock_classid(f"nbrecall families {self.pg.schema}")
        self.pg.execute("SELECT pg_advisory_lock(%s, -2)", (key,))
        try:
            yield
        finally:
            self.pg.execute("SELECT pg_advisory_unlock(%s, -2)", (key,))

    def available(self) -> bool:
        return True

    def _all(self, sql: str, args: Any = None) -> list[Any]:
        return self.pg.execute(sql, args).fetchall()

    def state(self, name: str = "settings") -> str | None:
        rows = self._all("SELECT value FROM family_state WHERE name = %s", (name,))
        return rows[0][0] if rows else None

    def set_state(self, value: str, name: str = "settings") -> None:
        db = self.pg.current()  # the open transaction's connection
        db.execute("INSERT INTO family_state (name, value) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE "
                   "SET value = EXCLUDED.value", (name, value))

    def forget_signatures(self) -> None:
        db = self.pg.current()  # the open transaction's connection
        for table in ("family_bands", "families", "family_sigs"):
            db.execute(f"DELETE FROM {table}")

    def save_signatures(self, items: list[tuple[str, Signature]], banding: Banding) -> None:
        db = self.pg.current()  # the open transaction's connection
        if not items:
            return
        items = sorted(items, key=lambda item: item[0])
        old = {r[0]: Signature(int(r[1]), bytes(r[2])) for r in db.execute(
            "SELECT sha256, size, sig FROM family_sigs WHERE banded = 1 AND sha256 = ANY(%s)",
            ([sha for sha, _ in items],)).fetchall()}
        self.delete_bands([(band, key, sha) for sha, sig in old.items() for band, key in banding.keys(sig)])
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO family_sigs (sha256, size, sig, pending, banded) VALUES (%s, %s, %s, 1, 0) "
                "ON CONFLICT (sha256) DO UPDATE SET size = EXCLUDED.size, sig = EXCLUDED.sig, pending = 1, banded = 0",
                [(sha, sig.size, sig.hashes) for sha, sig in items],
            )

    def add_bands(self, rows: list[tuple[int, int, str]], shas: list[str]) -> None:
        db = self.pg.current()  # the open transaction's connection
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO family_bands (band, key, sha256) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", rows)
        if shas:
            db.execute("UPDATE family_sigs SET banded = 1 WHERE sha256 = ANY(%s)", (sorted(shas),))

    def delete_bands(self, rows: list[tuple[int, int, str]]) -> None:
        db = self.pg.current()  # the open transaction's connection
        if rows:
            db.execute(
                "DELETE FROM family_bands WHERE (band, key, sha256) IN "
                "(SELECT * FROM unnest(%s::int[], %s::bigint[], %s::text[]))",
                ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]))

    def rebuild_bands(self, banding: Banding) -> None:
        db = self.pg.current()  # the open transaction's connection
        db.execute("DELETE FROM family_bands")
        db.execute("DELETE FROM families")
        db.execute("UPDATE family_sigs SET pending = 1, banded = 0")

    def bucket_rows(self, keys: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
        wanted = sorted(set(keys))
        if not wanted:
            return []
        return sorted(tuple(r) for r in self._all(
            "SELECT band, key, sha256 FROM family_bands WHERE (band, key) IN "
            "(SELECT * FROM unnest(%s::int[], %s::bigint[]))", ([k[0] for k in wanted], [k[1] for k in wanted])))

    def all_bucket_rows(self) -> Iterable[tuple[int, int, str]]:
        return [tuple(r) for r in self._all(
            "SELECT band, key, sha256 FROM family_bands ORDER BY band, key, sha256 COLLATE \"C\"")]

    def count_signatures(self) -> int:
        return int(self.pg.execute("SELECT count(*) FROM family_sigs").fetchone()[0])

    def signatures(self, shas: Iterable[str]) -> dict[str, Signature]:
        out: dict[str, Signature] = {}
        for part in in_parts(shas):
            for sha, size, sig in self._all(
                    "SELECT sha256, size, sig FROM family_sigs WHERE sha256 = ANY(%s)", (part,)):
                out[sha] = Signature(int(size), bytes(sig))
        return out

    def has_checkpoints(self) -> bool:
        return bool(self._all("SELECT 1 FROM files WHERE strpos(rel, %s) > 0 LIMIT 1", (f"{CHECKPOINTS}/",)))

    def sha_at(self, root: str, rel: str) -> str | None:
        rows = self._all("SELECT sha256 FROM files WHERE root = %s AND rel = %s", (root, rel))
        return rows[0][0] if rows else None

    def write(self, assign: dict[str, str], delete: list[str], done: list[str]) -> None:
        db = self.pg.current()  # the open transaction's connection
        if delete:
            db.execute("DELETE FROM families WHERE sha256 = ANY(%s)", (delete,))
            db.execute("DELETE FROM family_sigs WHERE sha256 = ANY(%s)", (delete,))
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO families (sha256, family) VALUES (%s, %s) ON CONFLICT (sha256) DO UPDATE "
                "SET family = EXCLUDED.family", sorted(assign.items()))
        if done:
            db.execute("UPDATE family_sigs SET pending = 0 WHERE sha256 = ANY(%s)", (done,))

    def families_of(self, shas: Iterable[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for part in in_parts(shas):
            out.update({r[0]: r[1] for r in self._all(
                "SELECT sha256, family FROM families WHERE sha256 = ANY(%s)", (part,))})
        return out

    def members(self, families: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for part in in_parts(families):
            for sha, family in self._all(
                    "SELECT sha256, family FROM families WHERE family = ANY(%s) ORDER BY sha256", (part,)):
                out.setdefault(family, []).append(sha)
        return out

    def member_details(self, shas: Iterable[str]) -> list[dict[str, Any]]:
        rows: list[Any] = []
        for part in in_parts(shas):
            rows.extend(self._all(
                "SELECT c.sha256, c.meta->'year', c.meta->>'author', c.meta->'deprecated', c.meta->'health', "
                "(SELECT max(f.mtime_ns) FROM files f WHERE f.sha256 = c.sha256), "
                "(SELECT f.rel FROM files f WHERE f.sha256 = c.sha256 "
                "ORDER BY strpos(f.rel, '.ipynb_checkpoints/') > 0, f.root COLLATE \"C\", f.rel COLLATE \"C\" "
                "LIMIT 1), "
                "(SELECT count(*) FROM files f WHERE f.sha256 = c.sha256) "
                "FROM contents c WHERE c.status = 'indexed' AND c.sha256 = ANY(%s)", (part,)))
        return [_detail(r) for r in rows if r[6] is not None]


def _detail(row: Any) -> dict[str, Any]:

    sha, year, author, deprecated, health, mtime_ns, rel, n_paths = row
    return {
        "nb_sha": sha,
        "notebook": rel,
        "paths": int(n_paths or 1),
        "year": int(year) if isinstance(year, int | float) and not isinstance(year, bool) else None,
        "author": str(author or ""),
        "deprecated": deprecated in (True, 1, "true"),
        "health": float(health) if isinstance(health, int | float) and not isinstance(health, bool) else None,
        "modified_ns": int(mtime_ns or 0),
        "checkpoint_of": saved_path(rel) if is_checkpoint(rel) else None,
    }
