"""`serve ROOT` in a real browser (Playwright driving Debian's Chromium, as tests/test_web_browser.py): the page is
up before ROOT is indexed, shows the progress, answers from what is indexed so far, and finds everything at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from live_support import GateEmbedder, live_app, live_settings, notebook
from test_web_browser import browser, page, shot, sync_api  # noqa: F401 (fixtures)
from test_web_support import live_server

pytestmark = pytest.mark.browser  # conftest checks chromium and playwright


def _search(tab, base: str, words: str) -> list[str]:  # type: ignore[no-untyped-def]
    tab.goto(f"{base}/?q={words}")
    tab.wait_for_selector("#results")
    return tab.locator(".nb-result .nb-path").all_inner_texts()


def test_serve_root_shows_progress_and_serves_what_is_indexed(tmp_path: Path, page) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    root = tmp_path / "share"
    early = [f"early/kestrel_{i}.ipynb" for i in range(4)]
    late = [f"late/quokka_{i}.ipynb" for i in range(4)]
    for rel in early:
        notebook(root / rel, "Kestrel survey", "kestrel wingspan")
    for rel in late:
        notebook(root / rel, "Quokka survey", "quokka burrow")
    embedder = GateEmbedder("quokka")  # the indexer stops inside the first late notebook until released
    app = live_app(root, live_settings(tmp_path), embedder, batch_notebooks=2)
    live = app.state.web.live
    with live_server(app) as base:
        page.goto(base + "/")  # the page is up before anything is indexed
        live.start()
        assert embedder.waiting.wait(30)
        progress = page.locator("#progress-lines")
        sync_api.expect(progress).to_contain_text("4 of 8 new or changed notebooks written, 4 waiting",
                                                  timeout=15_000)
        sync_api.expect(page.locator("#progress-bar")).to_be_visible()
        shot(page, "serve-root-progress.png")

        found = _search(page, base, "kestrel wingspan")
        assert set(found[:4]) == set(early), found  # hits from the notebooks already indexed
        assert not set(late) & set(found)
        assert not set(late) & set(_search(page, base, "quokka burrow"))
        sync_api.expect(page.locator(".progress-note")).to_contain_text("indexed so far")

        embedder.release()
        page.goto(base + "/")
        sync_api.expect(progress).to_contain_text("Up to date", timeout=30_000)
        sync_api.expect(progress).to_contain_text("8 notebooks searchable")
        sync_api.expect(page.locator("#progress-bar")).to_be_hidden()
        assert set(_search(page, base, "quokka burrow")[:4]) == set(late)
        assert set(_search(page, base, "kestrel wingspan")[:4]) == set(early)
        shot(page, "serve-root-done.png")
        assert page.csp_messages == []
