"""The manifest's size: the pages its embedding queue used are given back once the queue has drained
(`SqliteManifest.reclaim`), and a fact stores only what differs from the fact before it (`fact_rows`)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict
from pathlib import Path

from nbrecall.index.manifest import SqliteManifest, fact_rows, facts_from_rows
from nbrecall.notebook.facts import Fact
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


def _older_manifest(path: Path) -> SqliteManifest:
    """A manifest whose file was made before auto_vacuum was set: its mode can change only by VACUUM."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.close()
    return SqliteManifest(path)


def test_an_older_manifest_is_rewritten_once_when_most_of_it_is_free(tmp_path: Path) -> None:
    path = tmp_path / "manifest.sqlite"
    manifest = _older_manifest(path)
    assert manifest.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    _fill_and_drain(manifest)
    assert manifest.reclaim() > 0
    assert manifest.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    assert _pages(path)[0] == 0
    assert manifest.reclaim() == 0  # nothing left to give back
    manifest.close()


def test_an_older_manifest_with_few_free_pages_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "manifest.sqlite"
    manifest = _older_manifest(path)
    with manifest.transaction():
        manifest.save_contents([ContentRecord("b" * 64, "indexed", "", "/r", "big.ipynb", n_chunks=1,
                                              meta={"note": "x" * 400_000})], [])
    _fill_and_drain(manifest, n=20)  # ~80 kB freed in a file of ~0.5 MB: not worth a rewrite
    free, total = _pages(path)
    assert 0 < free < 0.25 * total
    assert manifest.reclaim() == 0
    assert _pages(path)[0] == free
    manifest.close()


def _facts() -> list[Fact]:
    """Facts of cells 8 and 9 under one heading, out of `seq` order: two of cell 8 with one sentence, then one of
    cell 9, then one more of cell 8 without the sentence."""
    heading, sentence = "Ballast › Totals", "The tanks are filled before departure, aft first."
    return [
        Fact(9, "c9", "3803.0", "total_ballast", "total_ballast = 3803.0", unit="m3", heading=heading,
             sentence=sentence, seq=12, number=3803.0),
        Fact(8, "c8", "1284.6", "Total ballast aft", "Total ballast aft: 1284.6 m3", unit="m3", heading=heading,
             sentence=sentence, seq=10, number=1284.6, position=0),
        Fact(8, "c8", "2518.4", "Total ballast fore", "Total ballast fore: 2518.4 m3", unit="m3",
             heading=heading, sentence=sentence, seq=11, number=2518.4, position=1, final=False, stale=True),
        Fact(8, "c8", "7", "tanks", "7 tanks", heading=heading, sentence="", seq=13, origin="table"),
    ]


def test_a_fact_stores_only_what_differs_from_the_fact_before_it_and_reads_back_whole(tmp_path: Path) -> None:
    facts = _facts()
    rows = [data for _, data in fact_rows(facts)]
    assert [r["seq"] for r in rows] == [10, 11, 12, 13]
    assert "heading" in rows[0] and "sentence" in rows[0] and "as_before" not in rows[0]
    assert rows[0].keys().isdisjoint({"origin", "final", "stale", "position"})  # at their defaults
    assert rows[1]["as_before"] and rows[1].keys().isdisjoint({"heading", "sentence", "cell_id", "cell", "unit"})
    assert rows[1]["final"] is False and rows[1]["stale"] is True
    assert rows[2]["cell"] == 9 and rows[2]["cell_id"] == "c9" and "heading" not in rows[2]
    assert rows[3]["sentence"] == "" and rows[3]["unit"] == "" and rows[3]["origin"] == "table"  # differs: kept
    assert facts_from_rows(rows) == sorted(facts, key=lambda f: f.seq)
    assert len(json.dumps(rows[1])) < 0.6 * len(json.dumps(asdict(facts[2])))
    old = json.dumps({k: v for k, v in asdict(facts[0]).items() if v not in ("", None)})
    assert facts_from_rows([json.loads(old)]) == [facts[0]]  # a row written before reads as it did

    manifest = SqliteManifest(tmp_path / "manifest.sqlite")
    with manifest.transaction():
        manifest.save_contents([ContentRecord("c" * 64, "indexed", "", "/r", "nb.ipynb", facts=facts)], [])
    assert manifest.facts("c" * 64) == sorted(facts, key=lambda f: f.seq)
    manifest.close()
