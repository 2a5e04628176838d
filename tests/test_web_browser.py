"""The web UI in a real browser: Playwright driving Debian's Chromium against uvicorn on 127.0.0.1.

Never downloads a browser: it launches /usr/bin/chromium (Debian package `chromium`) and is skipped when that
is absent. Screenshots land in build/screenshots/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CHROMIUM, import_or_missing
from nbrecall.config import Settings
from test_web_support import (
    BALLAST_REL,
    HOSTILE_REL,
    RENDER_CHANGED_REL,
    RENDER_STALE_REL,
    REPO,
    build_archive,
    build_render_archive,
    live_server,
    make_app,
)

SHOTS = REPO / "build" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

pytestmark = pytest.mark.browser  # conftest checks chromium and playwright
sync_api = import_or_missing("playwright.sync_api", "playwright (the Python package) is not installed")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Settings]]:
    settings, shas = build_archive(tmp_path_factory.mktemp("browser"))
    with live_server(make_app(settings)) as base:
        yield base, shas, settings


@pytest.fixture(scope="module")
def served_renders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    settings, shas = build_render_archive(tmp_path_factory.mktemp("browser-render"))
    with live_server(make_app(settings)) as base:
        yield base, shas


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=30_000)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.csp_messages = []  # type: ignore[attr-defined]
    page.on(
        "console",
        lambda m: page.csp_messages.append(m.text) if "Content Security Policy" in m.text else None,  # type: ignore[attr-defined]
    )
    yield page
    context.close()


def shot(page, name: str, full_page: bool = False) -> Path:  # type: ignore[no-untyped-def]
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / name
    page.screenshot(path=str(path), full_page=full_page)
    return path


def test_search_click_scrolls_to_and_highlights_the_cell(served, page) -> None:  # type: ignore[no-untyped-def]
    base, shas, _settings = served
    page.goto(base + "/")
    page.fill("#q", "ballast volume aft for the 130 m PSV")
    page.press("#q", "Enter")
    page.wait_for_selector(".nb-result")
    first = page.locator(".hit-link").first
    href = first.get_attribute("href")
    assert href is not None
    match = re.fullmatch(r"/nb/([0-9a-f]{64})#cell-id=(.+)", href)
    assert match, href
    assert match.group(1) == shas[BALLAST_REL]
    assert page.locator(".nb-result mark").count() > 0
    shot(page, "search.png")

    first.click()
    page.wait_for_url(re.compile(r"/nb/[0-9a-f]{64}#cell-id="))
    cell = page.locator(f'[id="cell-id={match.group(2)}"]')
    sync_api.expect(cell).to_have_class(re.compile(r"\bhighlight\b"))
    sync_api.expect(cell).to_be_in_viewport()
    assert page.evaluate("window.scrollY") > 200  # the cell is far down: the page really scrolled
    assert page.locator(".cell.highlight").count() == 1
    page.wait_for_timeout(350)  # let the highlight transition finish for the picture
    shot(page, "viewer.png")

    # a link to another cell of the same page (hashchange) moves the highlight
    other = page.locator(".cell").nth(2)
    other_id = other.get_attribute("id")
    page.evaluate("id => { location.hash = '#' + id; }", other_id)
    sync_api.expect(other).to_have_class(re.compile(r"\bhighlight\b"))
    sync_api.expect(other).to_be_in_viewport()
    assert page.locator(".cell.highlight").count() == 1
    assert page.csp_messages == []


def test_answer_panel_streams_an_answer(served, page) -> None:  # type: ignore[no-untyped-def]
    base, _shas, _settings = served
    page.goto(base + "/?q=" + "what ballast volume did we use aft for the 130 m PSV?".replace(" ", "+"))
    page.click("#ask-button")
    sync_api.expect(page.locator("#ask-button")).to_be_enabled(timeout=15_000)
    text = page.locator("#answer-text").inner_text()
    notice = page.locator("#answer-notice").inner_text() if page.locator("#answer-notice").is_visible() else ""
    assert text.strip() or notice.strip()
    if "not available" not in notice:
        assert page.locator("#answer-citations a").count() >= 1
        href = page.locator("#answer-citations a").first.get_attribute("href") or ""
        assert re.fullmatch(r"/nb/[0-9a-f]{64}#cell-id=.+", href), href
        # the best value's row says how likely the answer thinks it is right
        first_row = page.locator("#answer-values tbody tr td").first.inner_text()
        assert re.fullmatch(r"best · est\. \d{1,3}% right", first_row), first_row
    shot(page, "answer.png")
    assert page.csp_messages == []


def test_answer_panel_lists_the_values_beside_an_uncertain_one(served, page) -> None:  # type: ignore[no-untyped-def]
    # the panel's rows for an uncertain answer: the best value, the values beside it in its cell, then the
    # alternatives from other cells (the answer is served as the API streams it, so only the page is tested)
    import json

    from nbrecall.answer.types import Answer, AnswerEvent, Citation, FoundValue

    base, shas, _settings = served
    sha = shas[BALLAST_REL]

    def found(value: str, label: str, cell: int) -> FoundValue:
        return FoundValue(value, label, f"{label}: {value}", "", Citation(BALLAST_REL, cell, f"c{cell}", sha))

    answer = Answer("q", "Profit · 5: 25282.6", [Citation(BALLAST_REL, 3, "c3", sha)], values=[
        found("25282.6", "Profit · 5", 3), found("121719.2", "Optimal objective", 2)], confidence=0.31,
        beside=[found("26825.8", "Profit · 4", 3)])
    body = f"data: {json.dumps(AnswerEvent('done', answer=answer).as_dict())}\n\n"
    page.route("**/api/ask?*", lambda route: route.fulfill(status=200, body=body,
                                                           headers={"Content-Type": "text/event-stream"}))
    page.goto(base + "/?q=profit+in+the+fourth+year")
    page.click("#ask-button")
    sync_api.expect(page.locator("#ask-button")).to_be_enabled(timeout=15_000)
    rows = page.locator("#answer-values tbody tr")
    sync_api.expect(rows).to_have_count(3)
    kinds = [rows.nth(i).locator("td").first.inner_text() for i in range(3)]
    assert kinds == ["best · est. 31% right", "beside it", "also found"], kinds
    assert rows.nth(1).locator("td.value").inner_text() == "26825.8"
    assert page.csp_messages == []


def test_hostile_notebook_cannot_run_script(served, page) -> None:  # type: ignore[no-untyped-def]
    base, shas, _settings = served
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    url = f"{base}/nb/{shas[HOSTILE_REL]}"
    page.goto(url)
    page.wait_for_load_state("load")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    links = page.locator(".cells a")
    assert links.count() >= 4
    for i in range(links.count()):
        link = links.nth(i)
        if link.is_visible():
            link.click(timeout=3_000)
            page.wait_for_timeout(50)
            assert page.evaluate("typeof window.__pwned") == "undefined", link.inner_text()
            assert page.url.startswith(url), page.url  # never navigated away
    for image in page.locator(".cells img").all():
        if image.is_visible():
            image.hover()
            image.click()
    page.wait_for_timeout(200)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('iframe, object, embed, script:not([src])').length") == 0
    # the page is intact: no overlay, the last cell still visible and readable
    assert page.locator("text=The page must still be here").is_visible()
    assert dialogs == []
    assert page.csp_messages == [], page.csp_messages  # the sanitizer left nothing for the CSP to block
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "hostile.png", full_page=True)


def test_rendered_notebook_side_by_side_with_badges(served_renders, page) -> None:  # type: ignore[no-untyped-def]
    base, shas = served_renders
    # search results: a notebook-level badge per rendered notebook, the warning on the stale one
    page.goto(base + "/?q=ballast")
    page.wait_for_selector(".nb-result")
    sync_api.expect(page.locator(".nb-result .badge.render-changed")).to_have_text("re-rendered: changed")
    stale_badge = page.locator(".nb-result .badge.render-stale")
    sync_api.expect(stale_badge).to_have_text("stale: import error: oldlib")
    sync_api.expect(page.locator(".render-warning")).to_contain_text("Outputs could not be re-executed")
    shot(page, "render_search.png")

    page.goto(f"{base}/nb/{shas[RENDER_CHANGED_REL]}")
    sync_api.expect(page.locator("#render-badge")).to_have_text("re-rendered: changed")
    sync_api.expect(page.locator(".render-summary")).to_be_visible()
    blocks = page.locator(".outputs.compare")
    assert blocks.count() == 5
    for i in range(blocks.count()):
        block = blocks.nth(i)
        block.scroll_into_view_if_needed()
        left = block.locator(".side-original").bounding_box()
        right = block.locator(".side-fresh").bounding_box()
        assert left and right, i
        # two columns of about equal width, next to each other, not stacked
        assert right["x"] >= left["x"] + left["width"] - 1, (left, right)
        assert abs(right["y"] - left["y"]) < 2 and abs(right["width"] - left["width"]) < 4, (left, right)
        assert left["width"] > 300
    for status in ("same", "changed", "new"):
        badge = page.locator(f".cell-head .badge.cell-render.render-{status}").first
        sync_api.expect(badge).to_be_visible()
        sync_api.expect(badge).to_have_text(status)
    total = page.locator(".cell").nth(3)
    sync_api.expect(total.locator(".side-original")).to_contain_text("1,284.6")
    sync_api.expect(total.locator(".side-fresh")).to_contain_text("1,092.4")
    total.locator(".render-diff summary").click()
    sync_api.expect(total.locator(".render-diff pre")).to_contain_text("+Total ballast aft: 1,092.4 m3")
    figures = page.locator(".cell").nth(4).locator("img.output-image")
    assert figures.count() == 2
    for i in range(2):
        sync_api.expect(figures.nth(i)).to_be_visible()
        assert figures.nth(i).evaluate("img => img.naturalWidth") > 0  # the sanitized SVG really decodes
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "render_side_by_side.png", full_page=True)
    assert page.csp_messages == []

    # a stale notebook: its badge and reason, the failed cells, and fresh outputs as inert as the originals
    page.goto(f"{base}/nb/{shas[RENDER_STALE_REL]}")
    sync_api.expect(page.locator("#render-badge")).to_have_text("stale: import error: oldlib")
    sync_api.expect(page.locator(".cell-head .badge.render-failed").first).to_be_visible()
    sync_api.expect(page.locator(".side-fresh").nth(0)).to_contain_text("fresh hostile html")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.csp_messages == [], page.csp_messages
    shot(page, "render_stale.png", full_page=True)


def test_a_cell_link_to_another_page_opens_that_page(tmp_path_factory, browser) -> None:  # type: ignore[no-untyped-def]
    """A notebook shown 5 cells a page: a #cell-id link to cell 13 asks for its page, then highlights the cell."""
    from dataclasses import replace

    settings, shas = build_archive(tmp_path_factory.mktemp("browser-pages"))
    settings = replace(settings, serve=replace(settings.serve, page_cells=5))
    app = make_app(settings)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        with live_server(app) as base:
            sha = shas[BALLAST_REL]
            cell_id = "5c541fc0-a816-47a1-8d22-bc35cd653dc8"  # cell 8: the third page
            page.goto(f"{base}/nb/{sha}#cell-id={cell_id}")
            page.wait_for_url(re.compile(r"\?cell="))
            cell = page.locator(f'[id="cell-id={cell_id}"]')
            sync_api.expect(cell).to_have_class(re.compile(r"\bhighlight\b"))
            assert "cells 5–9 of 16" in page.content()
            page.goto(f"{base}/nb/{sha}#cell-id=no-such-cell")  # an id the notebook lacks: asked once, no loop
            page.wait_for_url(re.compile(r"\?cell=no-such-cell"))
            page.wait_for_timeout(500)
            assert "?cell=no-such-cell" in page.url and page.locator(".cell").count() == 5
    finally:
        context.close()
        app.state.web.close()
