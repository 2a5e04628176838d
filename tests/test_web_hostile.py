"""The server against hostile requests and hostile notebooks (issue 14): linear cookie parsing, the Host
allow-list, token rules, nothing secret in logs or headers, strict decoding, plain-integer indexes, literal
filters, and notebooks too deep or too long rendered within budget (degraded, paged) in render processes."""

from __future__ import annotations

import contextlib
import http.client
import logging
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import pytest
from fastapi.testclient import TestClient
from nbformat import v4
from typer.testing import CliRunner

from nbrecall.cli import app as cli_app
from nbrecall.config import Settings, load_settings
from nbrecall.records import SearchFilters
from nbrecall.web import security
from nbrecall.web.heavy import RenderBusy, RenderFailed, RenderPool
from nbrecall.web.sanitize import html_nesting_exceeds, sanitize_svg
from nbrecall.web.security import CSP, allowed_hosts, sign_in_cookie
from test_web_support import SAMPLES, index_archive, local_client, make_app

TOKEN = "correct-horse-battery-staple"
DEEP_REL = "hostile/deep.ipynb"
LONG_REL = "hostile/long.ipynb"
LONG_CELLS = 450
NESTED = 300_000
BIG_REL = "hostile/big_outputs.ipynb"
BIG_STREAM = "".join(f"line {i:07d}\n" for i in range(250_000))  # 3.25 MB printed
BIG_HTML = "<p>row</p>" * 260_000  # 2.6 MB of HTML: over the viewer's 2 MB


def deep_notebook() -> nbformat.NotebookNode:
    deep_html = "<div>" * NESTED + "deep payload" + "</div>" * NESTED  # 3.3 MB of markup, 300,000 levels
    cells = [
        v4.new_markdown_cell("# Deep\n\nAn output nested too deep to sanitize in time."),
        v4.new_code_cell("show()", execution_count=1, outputs=[
            v4.new_output("display_data", data={"text/html": deep_html[:1_900_000], "text/plain": "<deep>"}),
        ]),
        v4.new_markdown_cell("<div>" * 1000 + "deep markdown" + "</div>" * 1000),
        v4.new_code_cell("print('after')", execution_count=2, outputs=[v4.new_output("stream", name="stdout",
                                                                                       text="after the deep ones\n")]),
    ]
    nb = v4.new_notebook(cells=cells)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"deep-{i}"
    return nb


def long_notebook() -> nbformat.NotebookNode:
    cells = []
    for i in range(LONG_CELLS):
        cells.append(v4.new_code_cell(f"v{i} = {i}\nprint(v{i})", execution_count=i + 1,
                                      outputs=[v4.new_output("stream", name="stdout", text=f"value {i}\n")]))
    nb = v4.new_notebook(cells=cells)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"long-{i}"
    return nb


def big_notebook() -> nbformat.NotebookNode:
    nb = v4.new_notebook(cells=[
        v4.new_code_cell("train()", execution_count=1, outputs=[
            v4.new_output("stream", name="stdout", text=BIG_STREAM),
            v4.new_output("display_data", data={"text/html": BIG_HTML, "text/plain": "<table>"}),
        ]),
    ])
    nb.cells[0]["id"] = "big-0"
    return nb


@pytest.fixture(scope="module")
def hostile_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict[str, str]]:
    base = tmp_path_factory.mktemp("hostile")
    archive = base / "archive"
    shutil.copytree(SAMPLES / "archive", archive)
    for rel, nb in ((DEEP_REL, deep_notebook()), (LONG_REL, long_notebook()), (BIG_REL, big_notebook())):
        (archive / rel).parent.mkdir(parents=True, exist_ok=True)
        (archive / rel).write_text(nbformat.writes(nb), encoding="utf-8")
    settings = load_settings(SAMPLES / "nbrecall.toml", env={})
    settings.index_dir = base / "index"
    settings.embed.cache_dir = str(base / "models")
    settings.serve.workers = 1
    return settings, index_archive(archive, settings)


@pytest.fixture(scope="module")
def app(hostile_index: tuple[Settings, dict[str, str]]):  # type: ignore[no-untyped-def]
    web = make_app(hostile_index[0])
    yield web
    web.state.web.close()


@pytest.fixture(scope="module")
def client(app) -> TestClient:  # type: ignore[no-untyped-def]
    return local_client(app)


@pytest.fixture(scope="module")
def locked(hostile_index: tuple[Settings, dict[str, str]]):  # type: ignore[no-untyped-def]
    web = make_app(hostile_index[0], token=TOKEN)
    yield local_client(web, follow_redirects=False)
    web.state.web.close()


# ---------------------------------------------------------------------------------------------------------
# cookies and headers


def test_the_backslash_cookie_is_answered_at_once(locked: TestClient) -> None:
    cookie = 'a="' + "\\" * 80_000 + '"'  # quadratic for http.cookies.SimpleCookie: 22.8 s
    started = time.perf_counter()
    response = locked.get("/api/status", headers={"cookie": cookie})
    elapsed = time.perf_counter() - started
    assert response.status_code == 401
    assert elapsed < 1.0, elapsed  # ~ms; bench/web_hostile.py measures it through a real server


def test_sign_in_cookie_is_found_by_one_linear_scan() -> None:
    value = security.cookie_value(TOKEN)
    assert sign_in_cookie(f"a=1; {security.TOKEN_COOKIE}={value}; b=2") == value
    assert sign_in_cookie(f'{security.TOKEN_COOKIE}="{value}"') == value
    assert sign_in_cookie('x="\\\\\\"; other=1') is None
    assert sign_in_cookie(f"{security.TOKEN_COOKIE}={value}; " + "a=" + "x" * 9000) is None  # over 8 KB: not read
    started = time.perf_counter()
    assert sign_in_cookie("a=" + '\\"' * 4000) is None
    assert time.perf_counter() - started < 0.05


def test_the_cookie_still_signs_in(locked: TestClient) -> None:
    fresh = TestClient(locked.app, base_url="http://127.0.0.1")
    fresh.cookies.set(security.TOKEN_COOKIE, security.cookie_value(TOKEN))
    assert fresh.get("/api/status").status_code == 200


def test_too_many_header_lines_are_refused(client: TestClient) -> None:
    headers = [(f"x-h{i}", "1") for i in range(120)]
    response = client.get("/api/status", headers=headers)
    assert response.status_code == 431
    assert response.headers["content-security-policy"] == CSP


# ---------------------------------------------------------------------------------------------------------
# Host allow-list (DNS rebinding)


@pytest.mark.parametrize("host", ["attacker.example", "127.0.0.1.nip.io", "evil.localhost.example", "0.0.0.0"])
def test_an_unknown_host_header_is_a_400_on_the_tokenless_server(client: TestClient, host: str) -> None:
    response = client.get("/api/status", headers={"host": host})
    assert response.status_code == 400
    assert response.headers["content-security-policy"] == CSP
    assert "notebooks" not in response.text


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST"])
def test_loopback_host_headers_are_answered(client: TestClient, host: str) -> None:
    assert client.get("/api/status", headers={"host": host}).status_code == 200


def test_configured_public_names_are_answered(hostile_index: tuple[Settings, dict[str, str]]) -> None:
    web = make_app(hostile_index[0], token=TOKEN, allowed_hosts=allowed_hosts("10.1.2.3", ["nbrecall.firm.local"]))
    client = TestClient(web, base_url="http://nbrecall.firm.local")
    auth = {"authorization": f"Bearer {TOKEN}"}
    assert client.get("/api/status", headers=auth).status_code == 200
    assert client.get("/api/status", headers={**auth, "host": "10.1.2.3:8765"}).status_code == 200
    assert client.get("/api/status", headers={**auth, "host": "attacker.example"}).status_code == 400
    web.state.web.close()


def test_allowed_hosts_for_each_kind_of_bind() -> None:
    assert allowed_hosts("127.0.0.1") == security.LOOPBACK_HOSTS
    assert "[fd00::5]" in allowed_hosts("fd00::5")
    import socket

    assert socket.gethostname().lower() in allowed_hosts("0.0.0.0")
    assert "share.example" in allowed_hosts("0.0.0.0", ["Share.Example "])


# ---------------------------------------------------------------------------------------------------------
# the token: strong enough, never logged, never echoed


@pytest.mark.parametrize("token", [" ", "   ", "short", "x" * 15, "sixteen chars ok", "tøken-tøken-tøken"])
def test_blank_short_or_spaced_tokens_are_refused_at_start(tmp_path: Path, token: str) -> None:
    env = {"NBRECALL_CONFIG": "", "NBRECALL_INDEX": "", "COLUMNS": "200"}
    for host in ("127.0.0.1", "0.0.0.0"):
        result = CliRunner().invoke(cli_app, ["serve", "--host", host, "--token", token, "--index", str(tmp_path)],
                                    env=env)
        assert result.exit_code == 2, result.output
        assert "refusing to serve" in result.output and "token" in result.output
    with pytest.raises(ValueError, match="token"):
        from nbrecall.web.app import create_app

        create_app(Settings(index_dir=tmp_path), token=token)


def test_a_token_of_16_visible_characters_is_accepted() -> None:
    assert security.token_problem("x" * 16) is None
    assert security.bind_refusal("0.0.0.0", "x" * 16) is None
    assert security.bind_refusal("0.0.0.0", "") is not None  # empty: no token, and off loopback


def _serve(app, records: list[str]):  # type: ignore[no-untyped-def]
    """uvicorn with the CLI's logging (access log on) in a thread; every log line is kept in `records`."""
    import socket

    import uvicorn

    from nbrecall.web.app import UVICORN_OPTIONS, uvicorn_log_config

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_config=uvicorn_log_config(), access_log=True, lifespan="off",
                            **UVICORN_OPTIONS)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    keep = Keep()  # the message with its arguments, as any formatter writes it
    for name in ("uvicorn.access", "uvicorn.error", "uvicorn", "nbrecall.web"):
        logging.getLogger(name).addHandler(keep)
    return server, thread, sock, keep


def test_the_token_appears_in_no_log_line_and_no_header(hostile_index: tuple[Settings, dict[str, str]]) -> None:
    web = make_app(hostile_index[0], token=TOKEN)
    records: list[str] = []
    server, thread, sock, keep = _serve(web, records)
    port = sock.getsockname()[1]
    seen_headers: list[str] = []
    statuses: dict[str, int] = {}
    try:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        for url, headers in [
            (f"/?token={TOKEN}", {}),
            (f"/?token={TOKEN}&q=ballast", {}),
            (f"/?q=x&token={TOKEN}", bearer),
            (f"/api/status/?token={TOKEN}", bearer),  # the trailing-slash redirect
            (f"/api/search/?q=ballast&token={TOKEN}", bearer),
            (f"/nb/{'0' * 64}/?token={TOKEN}", bearer),
            (f"/api/status?token={TOKEN}", {}),
            (f"/api/status?token=wrong-{TOKEN}", {}),
        ]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", url, headers=headers)
            response = conn.getresponse()
            body = response.read()
            conn.close()
            statuses[url] = response.status
            seen_headers += [f"{k}: {v}" for k, v in response.getheaders()]
            assert TOKEN.encode() not in body, url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        for name in ("uvicorn.access", "uvicorn.error", "uvicorn", "nbrecall.web"):
            logging.getLogger(name).removeHandler(keep)
        web.state.web.close()
    assert statuses[f"/?token={TOKEN}"] == 303
    assert statuses[f"/api/status/?token={TOKEN}"] in (307, 308)  # redirected, without the token
    assert any("location" in h.lower() for h in seen_headers)
    assert len([r for r in records if "GET" in r]) >= 8, records  # the access log did log every request
    for line in records + seen_headers:
        assert TOKEN not in line, line


def test_the_cookie_is_secure_over_https(locked: TestClient) -> None:
    plain = locked.get("/", params={"token": TOKEN})
    assert plain.status_code == 303 and "Secure" not in plain.headers["set-cookie"]
    https = TestClient(locked.app, base_url="https://127.0.0.1", follow_redirects=False)
    secure = https.get("/", params={"token": TOKEN})
    assert secure.status_code == 303 and "; Secure" in secure.headers["set-cookie"]
    assert secure.headers["location"] == "/"


# ---------------------------------------------------------------------------------------------------------
# strict decoding


@pytest.mark.parametrize(
    "body",
    [b'{"q": "\\ud800"}', b'{"q": "ok \\udfff"}', b'{"q": "ballast", "author": "\\ud83d"}', b'{"q": "\xff\xfe"}'],
)
def test_lone_surrogates_and_invalid_utf8_in_json_are_422(client: TestClient, body: bytes) -> None:
    response = client.post("/api/ask", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert isinstance(response.json()["detail"], list)
    assert response.headers["content-security-policy"] == CSP


def test_a_surrogate_pair_is_fine(client: TestClient) -> None:
    response = client.post("/api/ask", content=b'{"q": "\\ud83d\\ude00 ballast"}',
                           headers={"content-type": "application/json"})
    assert response.status_code in (200, 503)


@pytest.mark.parametrize("query", ["q=%ED%A0%80", "q=%FF", "q=ballast&author=%C3", "q%FF=x", "q=ok&tag=%ED%BF%BF"])
def test_query_strings_must_be_utf8(client: TestClient, query: str) -> None:
    for path in ("/api/search", "/"):
        response = client.get(f"{path}?{query}")
        assert response.status_code == 422, (path, query, response.text[:200])


def test_a_path_that_is_not_utf8_is_refused(client: TestClient) -> None:
    assert client.get("/nb/%FF%FE").status_code == 400


def test_the_validation_handler_copes_with_unencodable_input() -> None:
    assert security.scrub_text({"input": "\ud800", "loc": ["body", "q"]}) == {"input": "\\ud800",
                                                                               "loc": ["body", "q"]}


@pytest.mark.parametrize("index", ["1.0", "+1", " 1", "1e0", "1_0", "0x1", "٣"])
def test_cell_indexes_are_plain_integers(client: TestClient, hostile_index, index: str) -> None:  # type: ignore[no-untyped-def]
    sha = hostile_index[1][LONG_REL]
    response = client.get(f"/api/notebooks/{sha}/cells/{index}")
    assert response.status_code == 422, (index, response.status_code)
    assert client.get("/api/search", params={"q": "value", "k": index}).status_code == 422


def test_plain_integer_indexes_still_work(client: TestClient, hostile_index) -> None:  # type: ignore[no-untyped-def]
    sha = hostile_index[1][LONG_REL]
    assert client.get(f"/api/notebooks/{sha}/cells/1").status_code == 200
    assert client.get(f"/api/notebooks/{sha}/cells/-1").status_code == 404
    assert client.get(f"/api/notebooks/{sha}/cells/99999999999999999999").status_code == 404
    assert client.get("/api/search", params={"q": "value", "k": "7"}).status_code == 200


def test_like_wildcards_in_the_author_filter_are_literal(client: TestClient) -> None:
    def authors(author: str) -> set[str]:
        response = client.get("/api/search", params={"q": "ballast mooring pile coefficients", "author": author,
                                                     "k": 50, "include_deprecated": "true"})
        assert response.status_code == 200, response.text
        return {h["author"] for h in response.json()["results"]}

    assert authors("solberg")  # a plain substring still matches
    assert authors("%") == set() and authors("_") == set() and authors("s_lberg") == set()
    assert authors("\\") == set()
    from nbrecall.index.lance_schema import lance_where

    where = lance_where(SearchFilters(author="50%_a\\b")) or ""
    assert "LIKE '%50\\%\\_a\\\\b%' ESCAPE '\\'" in where


def test_the_postgresql_filter_is_a_literal_substring_too() -> None:
    from nbrecall.index.pg_sql import filter_sql

    sql, params = filter_sql(SearchFilters(author="A%_b"))
    assert "strpos(lower(author), %(f_author)s) > 0" in sql and params["f_author"] == "a%_b"
    assert "LIKE" not in sql


def test_svg_style_imports_do_not_survive() -> None:
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg"><style>@import url(https://evil.example/x.css);</style>'
        '<style>rect { fill: url("https://evil.example/p.svg#a") }</style>'
        "<style>*{stroke-linecap:butt}</style><style>@\\69mport 'x'</style><rect/></svg>"
    )
    clean = sanitize_svg(svg) or ""
    assert "evil" not in clean and "@" not in clean and "import" not in clean
    assert "stroke-linecap:butt" in clean and "<rect/>" in clean


# ---------------------------------------------------------------------------------------------------------
# hostile notebooks: bounded rendering


def test_nesting_detector_is_linear_and_conservative() -> None:
    assert html_nesting_exceeds("<div>" * 300)
    assert html_nesting_exceeds("<div></x>" * 300)  # an unknown closing tag closes nothing
    assert html_nesting_exceeds("<div/>" * 300)  # HTML has no self-closing div
    assert not html_nesting_exceeds("<div></div>" * 10_000)
    assert not html_nesting_exceeds("<br><img src=x><hr>" * 1000)
    assert not html_nesting_exceeds("<table><tr><td>1</td></tr></table>" * 1000)
    started = time.perf_counter()
    assert html_nesting_exceeds("<div>" * NESTED)
    assert not html_nesting_exceeds("<p>x</p>" * 100_000)
    assert time.perf_counter() - started < 2.0


def test_a_notebook_nested_300000_deep_is_shown_degraded_with_a_notice(client: TestClient, hostile_index) -> None:  # type: ignore[no-untyped-def]
    sha = hostile_index[1][DEEP_REL]
    started = time.perf_counter()
    response = client.get(f"/nb/{sha}")
    elapsed = time.perf_counter() - started
    assert response.status_code == 200
    html = response.text
    assert "shown as text" in html and "simplified-notice" in html
    assert "Cell [1]: an output with HTML nested deeper than 256 elements" in html
    assert "Cell [2]: markdown with HTML nested deeper" in html
    assert "&lt;div&gt;&lt;div&gt;" in html  # the markup itself, escaped
    assert "<div><div><div>" not in html
    assert "after the deep ones" in html  # the rest of the notebook is rendered as usual
    assert elapsed < 30, elapsed  # seconds on a cold render process; bench/web_hostile.py measures it


def test_long_outputs_are_cut_before_the_reader_with_their_true_sizes(client: TestClient, hostile_index) -> None:  # type: ignore[no-untyped-def]
    from nbrecall.web.cell_html import SHRUNK, shrink_output

    raw = {"output_type": "stream", "name": "stdout", "text": BIG_STREAM.splitlines(keepends=True)}
    shrunk, sizes = shrink_output(raw)
    assert sizes == {"text": len(BIG_STREAM)} and len(shrunk["text"]) == 200_000
    assert shrunk["text"].startswith("line 0000000\n") and shrunk["text"].endswith("line 0249999\n")
    small = {"output_type": "stream", "name": "stdout", "text": "ok\n"}
    assert shrink_output(small) == (small, {})
    # a page reads only its cells, cut: the reader accepts them, and the outputs carry their true lengths
    from nbrecall.records import CellRecord
    from nbrecall.web.documents import CellText
    from nbrecall.web.worker import _slice_cells

    record = CellRecord("x", 0, "big-0", "code", 1, "train()", "")
    nb = _slice_cells(CellText(nbformat.writes(big_notebook())), [record], BIG_REL, 5, "python", shrink=True)
    assert nb is not None
    stream_out, html_out = nb.cells[0].outputs
    assert len(stream_out.text) == 200_000 and stream_out.metadata[SHRUNK] == {"text": len(BIG_STREAM)}
    assert html_out.data["text/html"] == "" and html_out.metadata[SHRUNK] == {"text/html": len(BIG_HTML)}
    html = client.get(f"/nb/{hostile_index[1][BIG_REL]}").text
    assert f"[… {len(BIG_STREAM) - 100_000:,} characters omitted …]" in html  # the true count
    assert "line 0000000" in html and "line 0249999" in html and "line 0100000" not in html
    assert "[HTML output of 2.5 MB not shown]" in html


def test_cells_are_read_one_at_a_time_from_the_json_text() -> None:
    from nbrecall.web.documents import CellText

    text = nbformat.writes(long_notebook())
    source = CellText(text)
    assert source.ok
    page = source.cells(100, 103)
    assert [c["id"] for c in page] == ["long-100", "long-101", "long-102"]
    assert len(source.starts) == 103  # the cells after the page were not even looked at
    assert [c["id"] for c in source.cells(5, 6)] == ["long-5"]  # from the starts found, not scanned again
    assert source.cells(449, 450)[0]["id"] == "long-449" and source.cells(449, 451) is None
    # "cells" after the other top-level keys, and inside a string before them: the top level is walked
    odd = '{"metadata": {"x": "\\"cells\\": [1]"}, "nbformat": 4, "nbformat_minor": 5, "cells": [{"id": "a"}]}'
    assert CellText(odd).cells(0, 1) == [{"id": "a"}]
    assert not CellText('{"cells": []}').ok and not CellText("[]").ok
    assert CellText('{"cells": [1,').cells(0, 2) is None


def test_a_search_answers_while_every_render_process_is_busy(app, client: TestClient) -> None:  # type: ignore[no-untyped-def]
    pool: RenderPool = app.state.web.pool
    pool.run(None, "ping", {}, 30)  # started
    spinner = threading.Thread(target=lambda: _quietly(pool.run, None, "spin", {"seconds": 1.5}, 10))
    spinner.start()
    time.sleep(0.3)
    started = time.perf_counter()
    response = client.get("/api/search", params={"q": "ballast volume aft"})
    assert response.status_code == 200 and response.json()["results"]
    assert time.perf_counter() - started < 2.0
    spinner.join()


def _quietly(fn, *args):  # type: ignore[no-untyped-def]
    with contextlib.suppress(RenderBusy, RenderFailed):
        fn(*args)


def test_a_long_notebook_is_paged_and_a_cell_link_opens_its_page(client: TestClient, hostile_index) -> None:  # type: ignore[no-untyped-def]
    sha = hostile_index[1][LONG_REL]
    first = client.get(f"/nb/{sha}").text
    assert first.count('<section class="cell') == 100
    assert 'id="cell-id=long-0"' in first and 'id="cell-id=long-100"' not in first
    assert f"{LONG_CELLS} cells" in first and "cells 0–99 of 450" in first
    assert f'href="/nb/{sha}?page=5"' in first and 'rel="next"' in first
    third = client.get(f"/nb/{sha}", params={"page": 3}).text
    assert 'id="cell-id=long-200"' in third and 'id="cell-id=long-299"' in third and "value 250" in third
    linked = client.get(f"/nb/{sha}", params={"cell": "long-437"}).text
    assert 'id="cell-id=long-437"' in linked and "cells 400–449 of 450" in linked
    assert client.get(f"/nb/{sha}", params={"page": 99}).status_code == 200  # past the end: the last page
    assert client.get(f"/nb/{sha}", params={"page": "1.0"}).status_code == 422
    assert client.get(f"/nb/{sha}", params={"cell": "no-such-cell"}).status_code == 200  # the first page
    cell = client.get(f"/api/notebooks/{sha}/cells/437").json()
    assert cell["cell_id"] == "long-437" and cell["outputs"][0]["text"].strip() == "value 437"


def test_a_page_past_its_time_budget_is_plain_text_with_a_notice(hostile_index) -> None:  # type: ignore[no-untyped-def]
    settings, shas = hostile_index
    web = make_app(settings)
    state = web.state.web
    state.settings = replace(settings, serve=replace(settings.serve, render_timeout=0.0005))
    client = local_client(web)
    try:
        state.pool.run(None, "ping", {}, 30)  # a started process: the budget is the page's alone
        response = client.get(f"/nb/{shas[LONG_REL]}")
        assert response.status_code == 200
        html = response.text
        assert "shown simplified, as plain text" in html and "took longer than" in html
        assert 'id="cell-id=long-5"' in html and "value 5" in html  # from the index's records
        assert '<span class="n">' not in html  # no highlighting: nothing but escaped text
        assert state.pool.stats["timeouts"] >= 1
        cell = client.get(f"/api/notebooks/{shas[LONG_REL]}/cells/3").json()  # the API says so too
        assert cell["outputs"] == [] and "value 3" in cell["outputs_text"] and "longer than" in cell["notice"]
    finally:
        state.close()


def test_the_report_is_computed_once_per_notebook(app, client: TestClient, hostile_index) -> None:  # type: ignore[no-untyped-def]
    sha = hostile_index[1][LONG_REL]
    pool: RenderPool = app.state.web.pool
    before = pool.stats["tasks"]
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(client.get(f"/nb/{sha}/report").status_code))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 4
    assert client.get(f"/nb/{sha}/report").status_code == 200
    assert pool.stats["tasks"] - before == 1  # four at once shared one computation; the fifth came from the cache


# ---------------------------------------------------------------------------------------------------------
# the render pool itself


def test_render_pool_budgets_kill_the_process() -> None:
    pool = RenderPool(workers=1, memory_mb=128, queue_timeout=5)
    try:
        first = pool.run(None, "ping", {}, 30)
        started = time.perf_counter()
        with pytest.raises(RenderFailed, match="longer than 0.5 s"):
            pool.run(("spin",), "spin", {"seconds": 60}, 0.5)
        assert time.perf_counter() - started < 5
        with pytest.raises(RenderFailed, match="longer than"):  # remembered: not tried again
            pool.run(("spin",), "spin", {"seconds": 60}, 0.5)
        with pytest.raises(RenderFailed, match="more than 128 MB"):
            pool.run(None, "spin", {"seconds": 60, "allocate_mb": 200}, 30)
        second = pool.run(None, "ping", {}, 30)
        assert second != first  # the killed processes were replaced
        assert not Path(f"/proc/{first}").exists() or "Z" in Path(f"/proc/{first}/stat").read_text().split()[2]
    finally:
        pool.close()


def test_render_pool_admission_is_bounded() -> None:
    pool = RenderPool(workers=1, queue_timeout=0.2, max_waiting=0)
    try:
        pool.run(None, "ping", {}, 30)
        spinner = threading.Thread(target=lambda: _quietly(pool.run, None, "spin", {"seconds": 1.0}, 10))
        spinner.start()
        time.sleep(0.3)
        started = time.perf_counter()
        with pytest.raises(RenderBusy):
            pool.run(None, "ping", {}, 30)
        assert time.perf_counter() - started < 0.1  # refused at once: it holds no server thread
        spinner.join()
    finally:
        pool.close()


def test_a_killed_server_leaves_no_render_process(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "from nbrecall.web.heavy import RenderPool\n"
        "pool = RenderPool(workers=2)\n"
        "pool.start()\n"
        "pool.run(None, 'ping', {}, 60)\n"
        "print(' '.join(map(str, pool.pids())), flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _all_gone(pids, within=5.0), pids


def _all_gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_through_a_real_server_the_cookie_is_not_parsed_and_the_host_is_checked(hostile_index) -> None:  # type: ignore[no-untyped-def]
    """The same over uvicorn: the 80,000-backslash cookie on the tokenless server is ignored, not parsed."""
    from test_web_support import live_server

    with live_server(make_app(hostile_index[0])) as base:
        host, port = urlsplit(base).hostname, urlsplit(base).port
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/api/status", headers={"Cookie": 'a="' + "\\" * 80_000 + '"'})
        response = conn.getresponse()
        response.read()
        conn.close()
        assert response.status == 200
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/api/status", headers={"Host": "attacker.example"})
        response = conn.getresponse()
        response.read()
        conn.close()
        assert response.status == 400
