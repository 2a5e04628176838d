"""Which store and manifest an index uses: the embedded pair in the index folder, or PostgreSQL.

Without `[store] url` (or `NBRECALL_STORE`, `--store`) the index is the folder's LanceDB table plus its SQLite
manifest, as always. With a PostgreSQL URL, chunks and manifest both live in the database (schema
`[store] schema`), so indexers and servers on other machines share them; the index folder then keeps only local
caches (models, embedding cache, renders, the stored API key).
"""

from __future__ import annotations

import sys

from nbrecall.config import Settings
from nbrecall.protocols import Manifest, Store


def store_url(settings: Settings) -> str | None:
    url = (settings.store.url or "").strip()
    return url or None


def describe(settings: Settings) -> str:
    """Where the index lives, for messages (the password of a URL hidden)."""
    url = store_url(settings)
    if url is None:
        return str(settings.index_dir)
    from nbrecall.index.faults import redact

    return f"{redact(url)} (schema {settings.store.schema})"


def open_store(settings: Settings, dim: int) -> Store:
    """The chunk store of these settings, for vectors of `dim` dimensions."""
    url = store_url(settings)
    if url is None:
        from nbrecall.index.store import LanceStore

        return LanceStore(settings.index_dir / "lance", dim, cache_mb=settings.store.cache_mb)
    from nbrecall.index.pg_store import PgStore

    return PgStore.connect(url, dim, settings.store.schema)


def open_manifest(settings: Settings, readonly: bool = False, store: Store | None = None) -> Manifest:
    """The manifest of these settings. Given a `PgStore`, the manifest shares its connection, so a batch's chunk
    write and manifest write commit in one transaction."""
    # A PgStore can only exist once its module is imported: not importing it here keeps `status` and the other
    # readers of the embedded manifest from loading numpy and pyarrow (~0.2 s) for nothing.
    pg_store = sys.modules.get("nbrecall.index.pg_store")
    if pg_store is not None and isinstance(store, pg_store.PgStore):
        from nbrecall.index.pg_manifest import PgManifest

        return PgManifest(store.db, readonly)
    url = store_url(settings)
    if url is None:
        from nbrecall.index.manifest import SqliteManifest

        return SqliteManifest(settings.index_dir / "manifest.sqlite", readonly=readonly)
    from nbrecall.index.pg_manifest import PgManifest

    return PgManifest.connect(url, settings.store.schema, readonly=readonly)


def index_exists(settings: Settings) -> bool:
    """Whether an index run has created the index these settings point at (a PostgreSQL store is asked)."""
    url = store_url(settings)
    if url is None:
        return (settings.index_dir / "manifest.sqlite").is_file()
    from nbrecall.index.pg_db import PgDatabase

    db = PgDatabase(url, settings.store.schema, readonly=True)
    try:
        return db.version("manifest") is not None
    finally:
        db.close()
