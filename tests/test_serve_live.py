"""`serve ROOT`: background indexing behind a server that answers throughout, kept fresh by file-system events
(`--watch`) or a timer (`--every`); the page's progress at `/api/progress`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import HashEmbedder
from live_support import GateEmbedder, live_app, live_settings, notebook, wait_for
from nbrecall.ingest.live import NotebookChanges, parse_duration
from test_web_support import local_client


def _found(client, word: str) -> list[str]:  # type: ignore[no-untyped-def]
    response = client.get("/api/search", params={"q": word})
    assert response.status_code == 200, response.text
    return [group["path"] for group in response.json()["notebooks"]]


def _quarantined(client) -> list[str]:  # type: ignore[no-untyped-def]
    return [q["path"] for q in client.get("/api/status").json()["quarantined"]]


def test_watch_indexes_new_drops_deleted_and_quarantines_malformed(tmp_path: Path) -> None:
    root = tmp_path / "share"
    notebook(root / "loads" / "deck_loads.ipynb", "Deck loads", "deck load kilonewton")
    settings = live_settings(tmp_path)
    app = live_app(root, settings, HashEmbedder(), watch=True, debounce_ms=300)
    live = app.state.web.live
    with local_client(app) as client:
        live.start()
        try:
            wait_for(lambda: live.status()["state"] == "idle", 30, "the first run")
            assert _found(client, "kilonewton")[0] == "loads/deck_loads.ipynb"

            saved = time.monotonic()
            notebook(root / "new" / "mooring_study.ipynb", "Mooring", "mooring xylophone hawser")
            wait_for(lambda: "new/mooring_study.ipynb" in _found(client, "xylophone"), 60,
                     "the saved notebook searchable")
            assert time.monotonic() - saved < 60
            assert live.status()["trigger"].endswith("file change(s)")

            (root / "new" / "mooring_study.ipynb").unlink()
            wait_for(lambda: "new/mooring_study.ipynb" not in _found(client, "xylophone"), 60,
                     "the deleted notebook gone")

            (root / "loads" / "broken.ipynb").write_text('{"cells": [{"cell_type": "code", "sou')
            wait_for(lambda: "loads/broken.ipynb" in _quarantined(client), 60, "the malformed notebook quarantined")
            assert _found(client, "kilonewton")[0] == "loads/deck_loads.ipynb"  # still serving
            progress = client.get("/api/progress").json()
            assert progress["index"]["quarantined"] == 1
            assert any("quarantined" in line for line in progress["lines"])
        finally:
            live.close()
    assert live.status()["state"] == "stopped"


def test_every_finds_changes_without_events(tmp_path: Path) -> None:
    """The polling fallback for network shares: no watcher, a run every second."""
    root = tmp_path / "share"
    notebook(root / "a.ipynb", "First", "pontoon")
    app = live_app(root, live_settings(tmp_path), HashEmbedder(), every=1.0)
    live = app.state.web.live
    with local_client(app) as client:
        live.start()
        try:
            wait_for(lambda: "a.ipynb" in _found(client, "pontoon"), 30, "the first run")
            notebook(root / "b.ipynb", "Second", "gangway")
            wait_for(lambda: "b.ipynb" in _found(client, "gangway"), 30, "the new notebook, found by the timer")
            assert live.status()["trigger"] == "timer"
            wait_for(lambda: (live.status()["next_run_at"] or 0) > time.time(), 10, "the next run scheduled")
        finally:
            live.close()


def test_progress_while_indexing_and_results_from_what_is_indexed(tmp_path: Path) -> None:
    root = tmp_path / "share"
    for i in range(3):
        notebook(root / f"a{i}.ipynb", f"Alpha {i}", "kestrel alpha")
        notebook(root / f"z{i}.ipynb", f"Zulu {i}", "quokka zulu")
    embedder = GateEmbedder("quokka")
    app = live_app(root, live_settings(tmp_path), embedder, batch_notebooks=1)
    live = app.state.web.live
    with local_client(app) as client:
        live.start()
        try:
            assert embedder.waiting.wait(30)
            progress = wait_for(lambda: (p := client.get("/api/progress").json())["live"]["notebooks_done"] == 3
                                and p, 30, "three notebooks written")
            assert progress["live"]["state"] == "indexing" and progress["live"]["busy"]
            assert progress["live"]["notebooks_total"] == 6
            assert progress["fraction"] == pytest.approx(0.5)
            assert "3 of 6 new or changed notebooks written, 3 waiting" in progress["lines"][0]
            assert set(_found(client, "kestrel")[:3]) == {"a0.ipynb", "a1.ipynb", "a2.ipynb"}
            assert not {"z0.ipynb", "z1.ipynb", "z2.ipynb"} & set(_found(client, "quokka"))
            page = client.get("/")
            assert "3 of 6 new or changed notebooks written" in page.text and 'data-busy="true"' in page.text
        finally:
            embedder.release()
        try:
            wait_for(lambda: live.status()["state"] == "idle", 30, "the run finished")
            assert {"z0.ipynb", "z1.ipynb", "z2.ipynb"} <= set(_found(client, "quokka")[:3])
            done = client.get("/api/progress").json()
            assert done["index"]["notebooks"] == 6 and done["lines"][0].startswith("Up to date")
            assert done["live"]["last_summary"]["indexed"] == 6
        finally:
            live.close()


def test_a_locked_index_waits_and_retries(tmp_path: Path) -> None:
    from nbrecall.ingest.lock import WriterLock

    root = tmp_path / "share"
    notebook(root / "a.ipynb", "First", "bollard")
    settings = live_settings(tmp_path)
    app = live_app(root, settings, HashEmbedder())
    live = app.state.web.live
    with WriterLock(settings.index_dir):  # another `nbrecall index` is writing
        live.start()
        try:
            status = wait_for(lambda: (s := live.status())["state"] == "waiting" and s, 30, "the refused run")
            assert "another nbrecall process" in status["last_error"]
            assert status["next_run_at"] > time.time()
            with local_client(app) as client:
                assert client.get("/api/search", params={"q": "bollard"}).status_code == 200
                assert "Indexing paused" in client.get("/api/progress").json()["lines"][0]
        finally:
            live.close()


def test_notebook_changes_filter(tmp_path: Path) -> None:
    from watchfiles import Change

    root = tmp_path / "share"
    (root / "sub").mkdir(parents=True)
    settings = live_settings(tmp_path)
    settings.index_dir = root / ".nbrecall"
    accept = NotebookChanges(settings, [root])
    assert accept(Change.added, str(root / "sub" / "a.ipynb"))
    assert accept(Change.added, str(root / "sub"))  # a folder copied in
    assert accept(Change.modified, str(root / "a.tags.txt"))
    assert not accept(Change.modified, str(root / "data.csv"))
    assert accept(Change.deleted, str(root / "gone"))
    assert not accept(Change.added, str(root / ".nbrecall" / "manifest.sqlite"))  # the index's own writes
    assert not accept(Change.added, str(root / "sub" / ".ipynb_checkpoints" / "a-checkpoint.ipynb"))
    assert not accept(Change.added, str(root / ".hidden" / "a.ipynb"))
    assert accept(Change.modified, str(root / "sub" / "2017.ZIP"))  # a zipped project replaced
    settings.discover.zip_archives = False
    assert not NotebookChanges(settings, [root])(Change.modified, str(root / "sub" / "2017.zip"))


def test_parse_duration() -> None:
    assert parse_duration("90") == 90 and parse_duration("10m") == 600 and parse_duration("24h") == 86400
    assert parse_duration("1d") == 86400 and parse_duration("1.5m") == 90
    for bad in ("", "10 minutes", "m", "0s"):
        with pytest.raises(ValueError):
            parse_duration(bad)
