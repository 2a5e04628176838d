"""Both store and both manifest implementations provide what `nbrecall.protocols` declares (mypy checks the types;
this checks names, parameters and capabilities, so a method added to one implementation only fails here)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.pg_manifest import PgManifest
from nbrecall.index.pg_store import PgStore
from nbrecall.index.store import LanceStore
from nbrecall.protocols import Manifest, Store


def _members(protocol: type) -> dict[str, object]:
    """The protocol's attributes (annotations) and methods (what it defines itself)."""
    names = set(protocol.__annotations__) | {n for n, v in vars(protocol).items() if callable(v)}
    return {name: getattr(protocol, name, None) for name in sorted(names) if not name.startswith("_")}


@pytest.mark.parametrize(("protocol", "implementation"), [
    (Store, LanceStore), (Store, PgStore), (Manifest, SqliteManifest), (Manifest, PgManifest),
])
def test_an_implementation_has_every_member_with_the_protocols_parameters(protocol: type, implementation: type) -> None:
    for name, declared in _members(protocol).items():
        assert hasattr(implementation, name) or name in implementation.__init__.__code__.co_names, (
            f"{implementation.__name__} lacks {protocol.__name__}.{name}")
        if callable(declared):
            wanted = list(inspect.signature(declared).parameters)
            got = list(inspect.signature(getattr(implementation, name)).parameters)
            assert got == wanted, f"{implementation.__name__}.{name}{got} differs from {protocol.__name__}{wanted}"


def test_capabilities_are_declared_on_each_class() -> None:
    assert (LanceStore.shared, LanceStore.concurrent_refresh, LanceStore.transactional) == (False, True, False)
    assert (PgStore.shared, PgStore.concurrent_refresh, PgStore.transactional) == (True, False, True)
    assert (SqliteManifest.shared, PgManifest.shared) == (False, True)


def test_the_embedded_pair_is_an_instance_of_the_protocols(tmp_path: Path) -> None:
    manifest = SqliteManifest(tmp_path / "manifest.sqlite")
    try:
        assert isinstance(manifest, Manifest)
        assert isinstance(LanceStore(tmp_path / "lance", 8), Store)
    finally:
        manifest.close()


def test_a_manifest_write_outside_a_transaction_is_refused_on_postgresql() -> None:
    """The write methods take no connection handle: PostgreSQL's use the open transaction's, and refuse without."""
    from nbrecall.index.pg_db import PgDatabase

    db = PgDatabase.__new__(PgDatabase)
    db._depth = 0
    with pytest.raises(RuntimeError, match="outside"):
        db.current()
