"""The manifest gives back the pages its embedding queue used once the queue has drained (`SqliteManifest.reclaim`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nbrecall.index.manifest import SqliteManifest
from nbrecall.records import ContentRecord, PendingVector


def _fill_and_drain(manifest: SqliteManifest, n: int = 400) -> None:
    """Queue `n` chunk texts of ~4 kB for one notebook, then take them all off the queue, as a run does."""
    with manifest.transaction():
        manifest.save_contents([ContentRecord("a" * 64, "indexed", "", "/r", "nb.ipynb", n_chunks=n)], [])
        items = [PendingVector(f"c-{i}", "a" * 64, 1.0, f"chunk {i} " + "text " * 800) for i in range(n)]
        manifest.save_pending(items)
    with manifest.transaction():
        manifest.vectors_done(items, {p.chunk_id for p in items})


def _pages(path: Path) -> tuple[int, int]:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA freelist_count").fetchone()[0], db.execute("PRAGMA page_count").fetchone()[0]
    finally:
        db.close()


def test_a_drained_queue_leaves_no_free_pages_after_the_run(tmp_path: Path) -> None:
    path = tmp_path / "manifest.sqlite"
    manifest = SqliteManifest(path)
    run_id, _ = manifest.begin_run()
    _fill_and_drain(manifest)
    free_before, total_before = _pages(path)
    assert free_before > 0.5 * total_before  # the queue's pages are free but still in the file
    manifest.end_run(run_id, {})
    free_after, total_after = _pages(path)
    assert free_after == 0
    assert total_after < 0.5 * total_before
    assert path.stat().st_size < 0.5 * total_before * 4096
    assert manifest.content("a" * 64) is not None and manifest.pending_count() == 0
    manifest.close()


def test_an_older_manifest_is_rewritten_once_when_most_of_it_is_free(tmp_path: Path) -> None:
    path = tmp_path / "manifest.sqlite"
    db = sqlite3.connect(path)  # a manifest made before auto_vacuum was set: the mode can change only by VACUUM
    db.execute("PRAGMA journal_mode=WAL")
    db.close()
    manifest = SqliteManifest(path)
    assert manifest.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    _fill_and_drain(manifest)
    assert manifest.reclaim() > 0
    assert manifest.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    assert _pages(path)[0] == 0
    assert manifest.reclaim() == 0  # nothing left to give back
    manifest.close()


def test_an_older_manifest_with_few_free_pages_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "manifest.sqlite"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.close()
    manifest = SqliteManifest(path)
    with manifest.transaction():
        manifest.save_contents([ContentRecord("b" * 64, "indexed", "", "/r", "big.ipynb", n_chunks=1,
                                              meta={"note": "x" * 400_000})], [])
    _fill_and_drain(manifest, n=20)  # ~80 kB freed in a file of ~0.5 MB: not worth a rewrite
    free, total = _pages(path)
    assert 0 < free < 0.25 * total
    assert manifest.reclaim() == 0
    assert _pages(path)[0] == free
    manifest.close()
