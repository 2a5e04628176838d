"""Storage faults of an index folder, turned into one clear message: which file, what happened, what to do.

LanceDB, SQLite and the OS each report a full disk, a read-only folder or a damaged file in their own words
(`OSError(28)`, `database or disk is full`, `LanceError(IO): ... failed to fill whole buffer`, ...). The indexer
and the readers map those onto two exceptions the CLI prints as they are:

* `IndexWriteError`: the folder cannot be written (disk full, read-only, permission). Nothing that was already
  indexed is lost: LanceDB commits and SQLite transactions are atomic, so the index stays at its last batch.
* `IndexDamaged`: a file of the index is corrupt or missing. The message names it and says how to rebuild.
"""

from __future__ import annotations

import errno
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit


class IndexFault(RuntimeError):
    """The index folder cannot be used as it is; `str()` says which file, what happened and what to do."""

    def __init__(self, message: str, path: Path | str) -> None:
        super().__init__(message)
        self.path = str(path)


class IndexWriteError(IndexFault):
    """The index folder cannot be written: disk full, read-only file system or permission denied."""


class IndexDamaged(IndexFault):
    """A file of the index is corrupt or missing; rebuild (see `rebuild_hint`)."""


def rebuild_hint(index_dir: Path | str) -> str:
    """The documented way to rebuild an index folder, keeping the embedding cache."""
    d = Path(index_dir)
    return (
        f"to rebuild, delete {d / 'lance'} and {d / 'manifest.sqlite'}* and run `nbrecall index ROOT...` again "
        "(keep the rest of the folder: embeddings.sqlite lets the rebuild reuse every embedding already computed, "
        "and renders/ and the stored API key live there too)"
    )


_NO_SPACE = ("no space left on device", "database or disk is full", "disk quota exceeded", "os error 28")
_READ_ONLY = ("read-only file system", "attempt to write a readonly database", "os error 30")
_DENIED = ("permission denied", "os error 13")
_LANCE_DAMAGED = (
    "encountered corrupt file",
    "does not appear to be a lance file",
    "failed to fill whole buffer",
    "invalid format",
    "magic number does not match",
    "not found: ",
    "invalid range",
    "file size is too small",
    "lanceerror(io)",
    "panicked",
)
# Errors of the moment, not of the files: never worth a rebuild.
_TRANSIENT = ("too many open files", "cannot allocate memory", "resource temporarily unavailable", "interrupted",
              "os error 24", "os error 12", "os error 11", "os error 4)")
_LANCE_FILE = re.compile(r"(/?[^\s,:'\"]+\.(?:lance|manifest|txn))")


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(a) for a in exc.args) if exc.args else str(exc)


def storage_fault(exc: BaseException, index_dir: Path | str, action: str = "writing") -> IndexFault | None:
    """The `IndexFault` that `exc` (raised while `action` the index in `index_dir`) amounts to, or None when it
    is not a storage fault of the index (then re-raise `exc` as it is: a bug, a network error, ...)."""
    if isinstance(exc, IndexFault):
        return exc
    if type(exc).__module__.split(".")[0] == "psycopg":  # the PostgreSQL store: name the server, not the folder
        return pg_fault(exc, action)
    d = Path(index_dir)
    text = _message(exc)
    low = text.lower()
    code = exc.errno if isinstance(exc, OSError) else None
    where = getattr(exc, "filename", None) or _file_named(text, d) or d
    storage = isinstance(exc, sqlite3.Error) or "lance" in low or _inside(where, d)
    if code in (errno.ENOSPC, errno.EDQUOT) or any(s in low for s in _NO_SPACE):
        return IndexWriteError(
            f"{where}: no space left on the device holding the index {d} while {action}. Free some space and "
            "run `nbrecall index` again: the run resumes where it stopped, and what was indexed before is intact "
            "and searchable.",
            where,
        )
    read_only = code == errno.EROFS or any(s in low for s in _READ_ONLY)
    denied = code in (errno.EACCES, errno.EPERM) or any(s in low for s in _DENIED)
    if read_only or (denied and storage):
        if action == "indexing":
            problem, hint = "cannot write to", "Indexing needs write access to it; searching a read-only index works."
        else:
            problem, hint = "cannot use", "Check the permissions of the index folder and its files."
        return IndexWriteError(f"{where}: {problem} the index folder {d} ({_short(text)}). {hint}", where)
    if any(s in low for s in _TRANSIENT):
        return None
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        # "file is not a database", "database disk image is malformed": SQLite does not say which file
        bad = sqlite_damage(d) if Path(where) == d else []
        return damaged(bad[0] if bad else where, d, _short(text))
    if ("lance" in low or "panicked" in low) and any(s in low for s in _LANCE_DAMAGED):
        return damaged(where, d, _short(text))
    return None


def sqlite_damage(index_dir: Path | str) -> list[Path]:
    """The SQLite files of the index that fail `PRAGMA quick_check` (only called once something failed)."""
    bad: list[Path] = []
    for name in ("manifest.sqlite", "embeddings.sqlite"):
        path = Path(index_dir) / name
        if not path.exists():
            continue
        try:
            with closing(sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)) as db:
                ok = db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        except sqlite3.OperationalError:
            ok = True  # cannot tell (e.g. cannot open it read-only here): do not blame this file
        except sqlite3.Error:
            ok = False
        if not ok:
            bad.append(path)
    return bad


def _inside(path: Path | str, folder: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return False


def damaged(path: Path | str, index_dir: Path | str, detail: str) -> IndexDamaged:
    """An `IndexDamaged` for `path` (a file of the index) with the rebuild procedure; the embedding cache only
    needs deleting."""
    name = Path(path).name
    if name.startswith("embeddings.sqlite"):
        fix = f"it is only a cache of embeddings: delete {path} and run `nbrecall index` again"
    else:
        fix = rebuild_hint(index_dir)
    return IndexDamaged(f"{path}: the index is damaged ({detail}); {fix}", path)


def _file_named(text: str, index_dir: Path) -> str | None:
    """The index file a LanceDB message names (it drops the leading slash of absolute paths)."""
    match = _LANCE_FILE.search(text)
    if not match:
        return None
    name = match.group(1)
    if not name.startswith("/") and ("/" + name).startswith(str(index_dir.resolve())):
        name = "/" + name
    return name


def _short(text: str, limit: int = 200) -> str:
    """The first line of an error message without LanceDB's source locations (`, /root/.cargo/...rs:12:5`)."""
    first = text.strip().splitlines()[0] if text.strip() else "unknown error"
    first = re.sub(r",\s*/\S+\.rs:\d+:\d+", "", first)
    return first[:limit]


# -- the PostgreSQL store's faults (psycopg errors as `IndexFault`s; here so `pg_db` builds on this module) ---
class StoreUnavailable(IndexFault):
    """The PostgreSQL store cannot be reached or used: the message names the URL and says what to do."""


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


WHAT_TO_DO_PG = (
    "Check that the PostgreSQL server is running and reachable, and that the URL (--store, NBRECALL_STORE or "
    "[store] url in nbrecall.toml) is right; then run the command again."
)


def pg_fault(exc: BaseException, action: str, url: str | None = None) -> IndexFault | None:
    """The `IndexFault` a psycopg error amounts to (lost connection, server down, no privileges), or None."""
    import psycopg

    if isinstance(exc, IndexFault):
        return exc
    if not isinstance(exc, psycopg.Error):
        return None
    where = redact(url) if url else _server_of(exc)
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return StoreUnavailable(
            f"{where}: the PostgreSQL user may not do this while {action} ({first_line(exc)}). Grant it the "
            "privileges on nbrecall's schema, or use another [store] schema.",
            where,
        )
    if isinstance(exc, psycopg.errors.DiskFull):
        return StoreUnavailable(
            f"{where}: the PostgreSQL server is out of disk space while {action}. Free space on the server and "
            "run `nbrecall index` again: the run resumes, and what was indexed before is intact.",
            where,
        )
    if isinstance(exc, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure):
        return StoreUnavailable(
            f"{where}: a write conflicted with another nbrecall process while {action} ({first_line(exc)}); "
            "nothing half-written was kept: run the command again",
            where,
        )
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return StoreUnavailable(
            f"{where}: the PostgreSQL store failed while {action} ({first_line(exc)}). {WHAT_TO_DO_PG}", where
        )
    return None


def _server_of(exc: BaseException) -> str:
    conn = getattr(exc, "pgconn", None)
    if conn is None:
        return "the PostgreSQL store"
    try:
        host = conn.host.decode() or "localhost"
        return f"postgresql://{host}:{conn.port.decode()}/{conn.db.decode()}"
    except Exception:
        return "the PostgreSQL store"
