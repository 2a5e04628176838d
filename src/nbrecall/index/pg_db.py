"""One PostgreSQL database shared by `PgStore` (chunks) and `PgManifest`: connection, migrations, locks, errors.

Everything nbrecall keeps in PostgreSQL lives in one schema (`[store] schema`, default `nbrecall`), so several
indexes can share a database. The schema is created and migrated by nbrecall itself: each component (`manifest`,
`store`) has a row in `schema_version`, and its migrations (their SQL is in `pg_schema`) run under an advisory
lock, so two processes opening an empty database at once do not race on `CREATE ... IF NOT EXISTS`.

Writers never take a global lock. Transactions that touch a notebook content take a transaction-level advisory
lock on a bucket of its SHA-256 (`lock_contents`), always in ascending order, so concurrent indexers serialise
only on the contents they share and never deadlock on them.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from nbrecall.index.faults import WHAT_TO_DO_PG, StoreUnavailable, first_line, redact

LOCK_BUCKETS = 256  # advisory locks per schema: a transaction holds at most this many, whatever its size

def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).split("://", 1)[0] in ("postgresql", "postgres")


def lock_classid(schema: str) -> int:
    """The advisory-lock class of a schema: two indexes in one database never wait on each other."""
    return zlib.crc32(schema.encode()) & 0x7FFFFFFF


def _bucket(sha: str) -> int:
    """The advisory lock bucket of a content (`lock_contents`, `try_lock_contents`)."""
    return zlib.crc32(sha.encode()) % LOCK_BUCKETS


class PgDatabase:
    """A connection to the database plus nbrecall's schema in it.

    The connection runs in autocommit mode, so a reader never holds a snapshot or a lock between statements;
    writes go through `transaction()` (nested calls become savepoints, so the store and the manifest writes of a
    batch commit together). A broken connection is reopened at the next statement outside a transaction, so a
    long-running server survives a database restart.
    """

    def __init__(self, url: str, schema: str = "nbrecall", *, readonly: bool = False) -> None:
        if not is_postgres_url(url):
            raise StoreUnavailable(
                f"{redact(url)}: not a PostgreSQL URL; the store URL reads postgresql://USER:PASSWORD@HOST:PORT/DB "
                "(set in --store, NBRECALL_STORE or [store] url)",
                redact(url),
            )
        self.url = url
        self.schema = schema
        self.readonly = readonly
        self.classid = lock_classid(schema)
        self.vector_ready = False
        self._lock = threading.RLock()
        self._conn: Any = None
        self._depth = 0  # open transaction() blocks
        self._connect()

    # -- connection -------------------------------------------------------------------------------------------
    def _connect(self) -> None:
        import psycopg

        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.ProgrammingError as exc:  # a malformed conninfo
            raise StoreUnavailable(
                f"{redact(self.url)}: not a valid PostgreSQL URL ({first_line(exc)}); it reads "
                "postgresql://USER:PASSWORD@HOST:PORT/DB",
                redact(self.url),
            ) from exc
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"{redact(self.url)}: cannot connect to the PostgreSQL store ({first_line(exc)}). {WHAT_TO_DO_PG}",
                redact(self.url),
            ) from exc
        self._conn = conn
        self._set_path()
        if self.readonly:
            conn.execute("SET default_transaction_read_only = on")
        if self.vector_ready:
            self._register_vector()

    def _set_path(self) -> None:
        ext = self._conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
            "WHERE e.extname = 'vector'"
        ).fetchone()
        path = [self.schema] + ([ext[0]] if ext and ext[0] != self.schema else []) + ["public"]
        self._conn.execute("SELECT set_config('search_path', %s, false)", (", ".join(_ident(p) for p in path),))

    def _register_vector(self) -> None:
        from pgvector.psycopg import register_vector

        register_vector(self._conn)
        self._conn.execute("SET hnsw.iterative_scan = relaxed_order")  # filtered queries fill their k
        self._conn.execute("SET hnsw.ef_search = 100")
        self.vector_ready = True

    @property
    def conn(self) -> Any:
        """The connection, reopened if it broke (never inside a transaction: that one has failed)."""
        with self._lock:
            if (self._conn.closed or self._conn.broken) and self._depth == 0:
                self._connect()
            return self._conn

    def execute(self, sql: str, params: Any = None) -> Any:
        """One statement; outside a transaction, a connection lost since the last one (a server restart) is
        reopened and the statement run once more."""
        import psycopg

        conn = self.conn
        try:
            return conn.execute(sql, params)
        except psycopg.OperationalError:
            if self._depth or not conn.broken:
                raise
            return self.conn.execute(sql, params)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        conn = self.conn
        self._depth += 1
        try:
            with conn.transaction():
                yield conn
        finally:
            self._depth -= 1

    def current(self) -> Any:
        """The connection of the open `transaction()`: a write method of the manifest runs inside one, never alone."""
        if self._depth == 0:
            raise RuntimeError("a manifest write outside `transaction()`")
        return self._conn

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()

    def __del__(self) -> None:  # a dropped store or manifest closes its connection (no server-side leak)
        with suppress(Exception):
            self.close()

    def lock_contents(self, conn: Any, shas: Iterable[str]) -> None:
        """Advisory locks (until the transaction ends) on the buckets of these contents, in ascending order."""
        buckets = sorted({_bucket(s) for s in shas})
        if buckets:
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s, b) FROM unnest(%s::int[]) AS b ORDER BY b",
                (self.classid, buckets),
            )

    def try_lock_contents(self, conn: Any, shas: Iterable[str]) -> set[str]:
        """Of `shas`, those whose bucket lock this transaction holds now or could take without waiting: for work
        that may be left to a later run (a lock taken out of the ascending order could deadlock)."""
        wanted = set(shas)
        bucket = {s: _bucket(s) for s in wanted}
        got = {b for b, ok in conn.execute(
            "SELECT b, pg_try_advisory_xact_lock(%s, b) FROM unnest(%s::int[]) AS b ORDER BY b",
            (self.classid, sorted(set(bucket.values())))).fetchall() if ok}
        return {s for s in wanted if bucket[s] in got}

    # -- schema -----------------------------------------------------------------------------------------------
    def version(self, component: str) -> tuple[int, int | None] | None:
        """(version, dim) of a component, or None when it was never created in this schema."""
        exists = self.execute("SELECT to_regclass(%s)", (f"{_ident(self.schema)}.schema_version",)).fetchone()[0]
        if exists is None:
            return None
        row = self.execute("SELECT version, dim FROM schema_version WHERE component = %s", (component,)).fetchone()
        return (int(row[0]), row[1]) if row else None

    def migrate(self, component: str, steps: list[str], dim: int | None = None) -> None:
        """Create or bring `component` up to `len(steps)`; refuse a schema made by a newer nbrecall."""
        current = self.version(component)
        if current is not None and current[0] == len(steps):
            return
        if self.readonly:
            raise StoreUnavailable(
                f"{redact(self.url)}: schema {self.schema} has no up-to-date nbrecall {component}; run "
                "`nbrecall index ROOT` with this store first",
                redact(self.url),
            )
        import psycopg

        try:
            with self.transaction() as conn:
                conn.execute("SELECT pg_advisory_xact_lock(%s, -1)", (lock_classid("nbrecall schema setup"),))
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {_ident(self.schema)}")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_version (component text PRIMARY KEY, version integer NOT NULL,"
                    " dim integer)"
                )
                row = conn.execute(
                    "SELECT version FROM schema_version WHERE component = %s FOR UPDATE", (component,)
                ).fetchone()
                have = int(row[0]) if row else 0
                if have > len(steps):
                    raise StoreUnavailable(
                        f"{redact(self.url)}: schema {self.schema} was written by a newer nbrecall ({component} "
                        f"version {have}, this one knows {len(steps)}); upgrade nbrecall",
                        redact(self.url),
                    )
                for step in steps[have:]:
                    conn.execute(step)
                conn.execute(
                    "INSERT INTO schema_version (component, version, dim) VALUES (%s, %s, %s) ON CONFLICT (component)"
                    " DO UPDATE SET version = EXCLUDED.version, dim = coalesce(EXCLUDED.dim, schema_version.dim)",
                    (component, len(steps), dim),
                )
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreUnavailable(
                f"{redact(self.url)}: the PostgreSQL user may not create nbrecall's tables in schema {self.schema} "
                f"({first_line(exc)}); grant it CREATE on the database, or have an administrator run "
                "`nbrecall index` once",
                redact(self.url),
            ) from exc

    def ensure_vector_extension(self) -> None:
        import psycopg

        if self.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
            try:
                with self.transaction() as conn:
                    conn.execute("SELECT pg_advisory_xact_lock(%s, -1)", (lock_classid("nbrecall schema setup"),))
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
            except psycopg.Error as exc:
                raise StoreUnavailable(
                    f"{redact(self.url)}: the database has no pgvector extension and it cannot be created "
                    f"({first_line(exc)}); install pgvector on the server and have a superuser run "
                    "`CREATE EXTENSION vector;` in this database",
                    redact(self.url),
                ) from exc
            with self._lock:
                self._set_path()
        if not self.vector_ready:
            with self._lock:
                self._register_vector()


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def clean_text(value: str) -> str:
    """PostgreSQL text cannot hold NUL characters (SQLite and LanceDB can): drop them."""
    return value.replace("\x00", "") if "\x00" in value else value


def clean_json(value: Any) -> Any:
    """`clean_text` through a JSON value (jsonb rejects \\u0000)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value
