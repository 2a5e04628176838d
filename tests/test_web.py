"""The web app: API contract, notebook and cell routes, ids and paths, headers, sanitizing, token, `serve`."""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import http.client
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from fastapi.testclient import TestClient
from nbformat import v4
from typer.testing import CliRunner

from conftest import code, stream, write_nb
from nbrecall.cli import app as cli_app
from nbrecall.config import Settings
from nbrecall.web import security
from nbrecall.web.render import highlight_terms
from nbrecall.web.sanitize import sanitize_html, sanitize_svg
from nbrecall.web.security import CSP, bind_refusal, is_loopback
from test_web_support import (
    BALLAST_REL,
    HOSTILE_REL,
    build_archive,
    live_server,
    local_client,
    make_app,
    open_archive,
)

PILE_REL = "projects/2019/19-113/pile_capacity.ipynb"
OLD_REL = "projects/2016/16-021/old_coefficients.ipynb"
CONTRACT_KEYS = {
    "notebook", "root", "cell", "cells", "cell_id", "kind", "score", "heading", "snippet",
    "year", "project", "author", "stale", "deprecated", "family", "versions", "checkpoint_of", "version_of",
}  # fmt: skip
HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def fixture_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict[str, str]]:
    return build_archive(tmp_path_factory.mktemp("web"))


@pytest.fixture(scope="module")
def settings(fixture_index: tuple[Settings, dict[str, str]]) -> Settings:
    return fixture_index[0]


@pytest.fixture(scope="module")
def shas(fixture_index: tuple[Settings, dict[str, str]]) -> dict[str, str]:
    return fixture_index[1]


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    app = make_app(settings)
    yield local_client(app)
    app.state.web.close()  # its render processes


def assert_security_headers(response) -> None:  # type: ignore[no-untyped-def]
    assert response.headers.get("content-security-policy") == CSP
    assert response.headers.get("x-content-type-options") == "nosniff"
    assert response.headers.get("referrer-policy") == "no-referrer"


# ---------------------------------------------------------------------------------------------------------
# search API


def test_search_api_returns_the_json_contract_and_a_notebook_grouping(
    client: TestClient, settings: Settings, shas: dict[str, str]
) -> None:
    query = "ballast volume aft for the 130 m PSV"
    response = client.get("/api/search", params={"q": query, "k": 6})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    data = response.json()
    assert set(data) == {"query", "results", "notebooks"}
    assert data["query"] == query
    assert 1 <= len(data["results"]) <= 6
    for hit in data["results"]:
        assert set(hit) == CONTRACT_KEYS | ({"fact"} if hit["kind"] == "fact" else set())
    # the same hits as the library gives (what `nbrecall search --json` prints)
    expected = [h.contract() for h in open_archive(settings).search(query).hits(6)]
    assert [(h["notebook"], h["cell"], h["cell_id"], h["kind"]) for h in data["results"]] == [
        (h["notebook"], h["cell"], h["cell_id"], h["kind"]) for h in expected
    ]
    assert data["results"][0]["notebook"] == BALLAST_REL
    # grouping: the same hits, notebook by notebook, each with its id and a viewer link
    keys = CONTRACT_KEYS | {"fact"}
    flat = [{k: v for k, v in h.items() if k in keys} for nb in data["notebooks"] for h in nb["hits"]]
    assert flat == data["results"]
    for nb in data["notebooks"]:
        assert HEX64.match(nb["id"]) and shas[nb["path"]] == nb["id"]
        assert {"id", "path", "score", "year", "project", "author", "hits"} <= set(nb)
        for hit in nb["hits"]:
            assert hit["nb_id"] == nb["id"]
            assert hit["url"] == f"/nb/{nb['id']}#cell-id={hit['cell_id']}"
    ballast = data["notebooks"][0]
    assert (ballast["year"], ballast["project"]) == (2017, "17-042")
    assert "Ingrid Solberg" in ballast["author"]


def test_search_api_filters(client: TestClient) -> None:
    def notebooks(**params: object) -> set[str]:
        response = client.get("/api/search", params={"q": "coefficients ballast mooring pile", "k": 50, **params})
        assert response.status_code == 200, response.text
        return {h["notebook"] for h in response.json()["results"]}

    everything = notebooks()
    assert len(everything) >= 3
    assert OLD_REL not in everything  # deprecated notebooks are excluded by default …
    assert OLD_REL in notebooks(include_deprecated="true")  # … and can be included
    assert notebooks(year="2017") == {BALLAST_REL}
    assert notebooks(project="18-007") == {"projects/2018/18-007/mooring_loads.ipynb"}
    assert notebooks(year="2018..2019") == {"projects/2018/18-007/mooring_loads.ipynb", PILE_REL}
    assert notebooks(year="..2014") <= {"projects/2014/14-003/stability_check.ipynb"}
    assert notebooks(project="99-999") == set()
    by_author = client.get("/api/search", params={"q": "ballast", "author": "solberg", "k": 50}).json()
    assert by_author["results"] and all("Solberg" in h["author"] for h in by_author["results"])


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"q": ""},
        {"q": "x" * 2001},
        {"q": "ballast", "k": 0},
        {"q": "ballast", "k": 101},
        {"q": "ballast", "k": "many"},
        {"q": "ballast", "year": "2017-2019"},
        {"q": "ballast", "year": "twenty"},
        {"q": "ballast", "project": "p" * 201},
        {"q": "???"},
    ],
)
def test_search_api_rejects_bad_parameters_with_422(client: TestClient, params: dict) -> None:
    response = client.get("/api/search", params=params)
    assert response.status_code == 422
    assert_security_headers(response)


def test_search_api_accepts_a_query_of_exactly_2000_characters(client: TestClient) -> None:
    response = client.get("/api/search", params={"q": ("ballast " * 300)[:2000]})
    assert response.status_code == 200
    wide = "船" * 2000  # 18 KB percent-encoded: still a valid query, not a 414
    assert client.get("/api/search", params={"q": wide}).status_code == 200
    assert client.get("/api/search", params={"q": wide + "船"}).status_code == 422


# ---------------------------------------------------------------------------------------------------------
# notebook and cell API, status


def test_notebook_api(client: TestClient, shas: dict[str, str]) -> None:
    sha = shas[BALLAST_REL]
    data = client.get(f"/api/notebooks/{sha}").json()
    assert data["id"] == sha and data["path"] == BALLAST_REL
    assert data["n_cells"] == len(data["cells"]) == 16
    assert data["source"] == "file"
    assert (data["year"], data["project"]) == (2017, "17-042")
    assert data["nbformat"] == "4.5"
    assert data["report_url"] == f"/nb/{sha}/report" and data["deps_url"] == f"/nb/{sha}/deps.svg"
    cell8 = data["cells"][8]
    assert cell8["cell_type"] == "code" and cell8["execution_count"] == 5
    assert cell8["url"] == f"/nb/{sha}#cell-id={cell8['cell_id']}"
    assert data["cells"][0]["first_line"].startswith("# PSV Nordhav")

    pile = client.get(f"/api/notebooks/{shas[PILE_REL]}").json()
    warnings = " | ".join(pile["order_warnings"])
    assert "runs below" in warnings and "never run: [8]" in warnings and "KeyError" in warnings


def test_cell_api(client: TestClient, shas: dict[str, str]) -> None:
    sha = shas[BALLAST_REL]
    cell = client.get(f"/api/notebooks/{sha}/cells/8").json()
    assert cell["index"] == 8 and cell["cell_type"] == "code" and cell["execution_count"] == 5
    assert cell["cell_id"] == "5c541fc0-a816-47a1-8d22-bc35cd653dc8"
    assert cell["tags"] == ["results"]
    assert 'print(f"Total ballast aft' in cell["source"]
    assert cell["outputs"][0]["output_type"] == "stream"
    assert "Total ballast aft: 1,284.6 m3" in cell["outputs"][0]["text"]
    assert "1,284.6" in cell["outputs_text"]
    # a figure output is filtered to a marker, never base64
    figure = client.get(f"/api/notebooks/{sha}/cells/13").json()
    kinds = [o["kind"] for o in figure["outputs"]]
    assert "figure" in kinds
    assert all("base64" not in o["text"] and len(o["text"]) < 2000 for o in figure["outputs"])
    # errors keep ename: evalue, ANSI stripped
    pile = client.get(f"/api/notebooks/{shas[PILE_REL]}/cells/10").json()
    error = next(o for o in pile["outputs"] if o["kind"] == "error")
    assert error["text"].startswith("KeyError: 'pile_diameter'") and "\x1b" not in error["text"]


@pytest.mark.parametrize("index", ["16", "999", "-1", "99999999999999999999999"])
def test_cell_api_out_of_range_is_404(client: TestClient, shas: dict[str, str], index: str) -> None:
    response = client.get(f"/api/notebooks/{shas[BALLAST_REL]}/cells/{index}")
    assert response.status_code == 404
    assert_security_headers(response)


def test_status_api(client: TestClient) -> None:
    data = client.get("/api/status").json()
    assert data["stats"]["notebooks"] == 7 and data["stats"]["quarantined"] == 1
    assert data["stats"]["chunks"] > 0
    (broken,) = data["quarantined"]
    assert broken["path"] == "scratch/broken.ipynb" and broken["reason"].startswith("truncated JSON")
    (root,) = data["roots"]  # where the files came from, as `nbrecall status` lists them
    assert root["root"] == broken["root"] and (root["notebooks"], root["quarantined"]) == (7, 1)
    assert root["files"] >= 8


def test_openapi_schema_has_typed_responses(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    assert set(paths) == {
        "/api/search", "/api/ask", "/api/notebooks/{nb_id}", "/api/notebooks/{nb_id}/cells/{index}", "/api/status",
        "/api/progress",
    }  # fmt: skip
    ok = paths["/api/search"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/SearchResponse"}
    assert "text/event-stream" in paths["/api/ask"]["get"]["responses"]["200"]["content"]
    assert "post" in paths["/api/ask"]
    components = schema["components"]["schemas"]
    assert {"SearchResponse", "Hit", "NotebookGroup", "NotebookDetail", "CellDetail", "StatusResponse"} <= set(
        components
    )
    q = next(p for p in paths["/api/search"]["get"]["parameters"] if p["name"] == "q")
    assert q["schema"]["maxLength"] == 2000


# ---------------------------------------------------------------------------------------------------------
# answers (server-sent events): needs nbrecall.answer.answer


def _answer_module_present() -> bool:
    try:
        import nbrecall.answer.answer  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def _events(body: str) -> list[dict]:
    blocks = [b for b in body.split("\n\n") if b.strip()]
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks), blocks[:3]
    return [json.loads(b[len("data: ") :]) for b in blocks]


def test_ask_streams_server_sent_events(client: TestClient) -> None:
    if not _answer_module_present():
        response = client.get("/api/ask", params={"q": "ballast aft"})
        assert response.status_code == 503
        pytest.skip("nbrecall.answer.answer is not there yet: /api/ask answers 503")
    for response in (
        client.get("/api/ask", params={"q": "what ballast volume did we use aft for the 130 m PSV?"}),
        client.post("/api/ask", json={"q": "what ballast volume did we use aft for the 130 m PSV?", "year": "2017"}),
    ):
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        assert_security_headers(response)
        events = _events(response.text)
        assert events and events[-1]["type"] == "done"
        assert {e["type"] for e in events} <= {"token", "notice", "citation", "done"}
        answer = events[-1].get("answer")
        if answer is not None:
            assert answer["question"].startswith("what ballast volume")


def test_ask_in_one_json_answer_with_its_values(client: TestClient) -> None:
    question = "what ballast volume did we use aft for the 130 m PSV?"
    for response in (client.get("/api/ask", params={"q": question, "format": "json"}),
                     client.post("/api/ask", json={"q": question, "format": "json"})):
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        answer = response.json()
        assert answer["question"] == question and answer["mode"] == "extractive" and answer["kind"] == "value"
        assert answer["values"] and answer["values"][0]["cell"] == answer["citations"][0]["cell"]
        assert {"value", "label", "shown", "unit", "notebook", "cell_id", "year"} <= set(answer["values"][0])


def test_an_answer_model_that_cannot_be_used_is_a_503_naming_the_file(settings: Settings, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    broken = copy.deepcopy(settings)
    broken.answer.ranker_model = str(garbage)
    app = make_app(broken)
    try:
        client = local_client(app)
        question = "what ballast volume did we use aft for the 130 m PSV?"
        response = client.get("/api/ask", params={"q": question, "format": "json"})
        assert response.status_code == 503 and "garbage.onnx: not a model" in response.json()["detail"]
        streamed = client.get("/api/ask", params={"q": question})  # the stream has started: a notice, then done
        events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert any(e["type"] == "notice" and "garbage.onnx" in e["text"] for e in events)
        assert events[-1]["type"] == "done"
    finally:
        app.state.web.close()


def test_the_servers_refuse_to_start_with_a_model_they_cannot_use(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    config = tmp_path / "nbrecall.toml"
    config.write_text(f"[answer]\nranker_model = '{garbage}'\n")
    for command in ("serve", "mcp"):
        result = CliRunner().invoke(cli_app, [command, "--index", str(tmp_path / "index"), "--config", str(config)])
        assert result.exit_code == 2 and "garbage.onnx" in result.output and "not a model" in result.output


@pytest.mark.parametrize(
    ("method", "kwargs"),
    [
        ("get", {"params": {"q": "x" * 2001}}),
        ("get", {"params": {}}),
        ("get", {"params": {"q": "   "}}),
        ("get", {"params": {"q": "???"}}),
        ("get", {"params": {"q": "ballast", "format": "xml"}}),
        ("post", {"json": {"q": " \t "}}),
        ("post", {"json": {"q": "x" * 2001}}),
        ("post", {"json": {"q": ""}}),
        ("post", {"json": {"q": "* -"}}),
        ("post", {"json": {"question": "no q"}}),
        ("post", {"content": b"not json", "headers": {"content-type": "application/json"}}),
    ],
)
def test_ask_rejects_bad_input_with_422(client: TestClient, method: str, kwargs: dict) -> None:
    response = getattr(client, method)("/api/ask", **kwargs)
    assert response.status_code == 422


def test_request_bodies_are_bounded(client: TestClient) -> None:
    big = json.dumps({"q": "ballast", "pad": "x" * 70_000}).encode()
    response = client.post("/api/ask", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert_security_headers(response)

    def chunks():  # no Content-Length: a chunked body is counted as it arrives
        for _ in range(20):
            yield b"x" * 8192

    response = client.post("/api/ask", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


# ---------------------------------------------------------------------------------------------------------
# ids and paths: only indexed notebooks, by hash; nothing outside the index


BAD_IDS = [
    "0" * 64,  # well-formed, not in the index
    "f" * 63,
    "F" * 64,
    "g" * 64,
    "...",
    "..%2F..%2F..%2Fetc%2Fpasswd",
    "%2Fetc%2Fpasswd",
    "%00",
    "0" * 63 + "%00",
    "C:%5CWindows%5Cwin.ini",
]


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize(
    "template",
    ["/nb/{}", "/nb/{}/report", "/nb/{}/deps.svg", "/api/notebooks/{}", "/api/notebooks/{}/cells/0"],
)
def test_unknown_or_malformed_notebook_ids_are_404(client: TestClient, template: str, bad: str) -> None:
    response = client.get(template.format(bad))
    assert 400 <= response.status_code < 500
    if not any(c in bad for c in ("%2F", "%00", "%5C")):  # those the middleware refuses first, with 400
        assert response.status_code == 404
    assert_security_headers(response)
    assert "root:" not in response.text


def test_quarantined_notebook_is_not_served(client: TestClient) -> None:
    broken = client.get("/api/status").json()["quarantined"][0]["sha256"]
    assert client.get(f"/nb/{broken}").status_code == 404
    assert client.get(f"/api/notebooks/{broken}").status_code == 404


def asgi_request(app, path: str, raw_path: bytes, query: bytes = b"") -> tuple[int, dict[str, str], bytes]:  # type: ignore[no-untyped-def]
    """Call the ASGI app with exactly this (decoded) path, as a server would after percent-decoding."""

    async def run() -> list[dict]:
        messages: list[dict] = []
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1")],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8765),
        }

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            messages.append(message)

        await app(scope, receive, send)
        return messages

    messages = asyncio.run(run())
    start = next(m for m in messages if m["type"] == "http.response.start")
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], headers, body


TRAVERSALS = [
    # (decoded path the server hands the app, raw path on the wire)
    ("/static/../../../../etc/passwd", b"/static/../../../../etc/passwd"),
    ("/static/../../../../etc/passwd", b"/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd"),
    ("/static/../../../../etc/passwd", b"/static/..%2f..%2f..%2f..%2fetc%2fpasswd"),
    ("/static//etc/passwd", b"/static//etc/passwd"),
    ("/static/app.css\x00.txt", b"/static/app.css%00.txt"),
    ("/static/..\\..\\..\\etc\\passwd", b"/static/..%5c..%5c..%5cetc%5cpasswd"),
    ("/nb/../../../etc/passwd", b"/nb/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd"),
    ("/nb//etc/passwd", b"/nb//etc/passwd"),
    ("/nb/\x00", b"/nb/%00"),
    ("/api/notebooks//etc/passwd/cells/0", b"/api/notebooks/%2fetc%2fpasswd/cells/0"),
    ("/api/notebooks/../../../etc/passwd", b"/api/notebooks/..%2f..%2f..%2fetc%2fpasswd"),
    ("/static/" + HOSTILE_REL, b"/static/" + HOSTILE_REL.encode()),
]


@pytest.mark.parametrize(("path", "raw"), TRAVERSALS)
def test_path_like_parameters_never_reach_files_outside_the_index(
    client: TestClient, settings: Settings, path: str, raw: bytes
) -> None:
    status, headers, body = asgi_request(client.app, path, raw)
    assert 400 <= status < 500, (path, status)
    assert headers.get("content-security-policy") == CSP
    assert b"root:" not in body
    assert b"zanzibar" not in body and b"nbformat" not in body  # not a notebook file either


def test_through_a_real_server_traversal_and_long_queries(settings: Settings) -> None:
    """The same requests on the wire, through uvicorn's own URL parsing."""
    with live_server(make_app(settings)) as base:
        host, port = urlsplit(base).hostname, urlsplit(base).port
        for _decoded, raw in TRAVERSALS:
            conn = http.client.HTTPConnection(host, port, timeout=10)
            conn.request("GET", raw.decode("latin-1"))
            response = conn.getresponse()
            body = response.read()
            conn.close()
            assert 400 <= response.status < 500, (raw, response.status)
            assert b"root:" not in body and b"zanzibar" not in body
            assert response.getheader("content-security-policy") == CSP
        # a 2,000-character non-ASCII query fits in uvicorn's request line; one more character is a 422
        for q, status in (("船" * 2000, 200), ("船" * 2001, 422)):
            conn = http.client.HTTPConnection(host, port, timeout=30)
            conn.request("GET", "/api/search?" + urlencode({"q": q}))
            response = conn.getresponse()
            response.read()
            conn.close()
            assert response.status == status
            assert response.getheader("server") is None


def test_viewer_serves_only_by_hash_never_a_path(client: TestClient, shas: dict[str, str]) -> None:
    response = client.get(f"/nb/{shas[BALLAST_REL]}", params={"path": "/etc/passwd", "file": "../../etc/passwd"})
    assert response.status_code == 200 and "root:" not in response.text


# ---------------------------------------------------------------------------------------------------------
# headers


def test_security_headers_on_every_kind_of_response(client: TestClient, shas: dict[str, str]) -> None:
    sha = shas[BALLAST_REL]
    for url in [
        "/",
        "/?q=ballast",
        f"/nb/{sha}",
        f"/nb/{sha}/report",
        f"/nb/{sha}/deps.svg",
        "/api/search?q=ballast",
        f"/api/notebooks/{sha}",
        "/api/status",
        "/openapi.json",
        "/static/app.css",
        "/static/app.js",
        "/static/pygments.css",
        "/static/missing.css",
        "/no/such/page",
        "/api/search",
    ]:
        response = client.get(url)
        assert_security_headers(response)
    assert client.get("/docs").status_code == 404  # interactive docs would need a CDN


def test_even_a_server_error_carries_the_headers(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app(settings)

    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("store unavailable")

    monkeypatch.setattr(app.state.web, "search", boom)
    response = local_client(app, raise_server_exceptions=False).get("/api/search", params={"q": "ballast"})
    assert response.status_code == 500
    assert_security_headers(response)
    assert "store unavailable" not in response.text  # no internals in the page


def test_static_assets(client: TestClient) -> None:
    assert client.get("/static/app.css").headers["content-type"].startswith("text/css")
    assert "javascript" in client.get("/static/app.js").headers["content-type"]
    pygments = client.get("/static/pygments.css")
    assert pygments.status_code == 200 and ".highlight" in pygments.text


def test_dependency_map_is_svg_with_the_csp(client: TestClient, shas: dict[str, str]) -> None:
    response = client.get(f"/nb/{shas[BALLAST_REL]}/deps.svg")
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/svg+xml"
    assert_security_headers(response)
    assert response.text.lstrip().startswith("<svg") and "<script" not in response.text
    assert "tanks" in response.text  # an arc label of the ballast notebook


def test_fidelity_report_page(client: TestClient, shas: dict[str, str]) -> None:
    response = client.get(f"/nb/{shas[BALLAST_REL]}/report")
    assert response.status_code == 200
    assert "<h1>Fidelity report: projects/2017/17-042/ballast_distribution.ipynb</h1>" in response.text
    assert "<table>" in response.text and "5c541fc0-a816-47a1-8d22-bc35cd653dc8" in response.text
    assert f'src="/nb/{shas[BALLAST_REL]}/deps.svg"' in response.text


# ---------------------------------------------------------------------------------------------------------
# pages and sanitizing


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.script_text.append(data)


def parse(html: str) -> _Collector:
    collector = _Collector()
    collector.feed(html)
    return collector


def assert_page_is_inert(html: str) -> None:
    """No inline script or style, no event handlers, no javascript: URLs, no frames: the CSP-compatible page."""
    page = parse(html)
    assert not page.script_text, page.script_text
    for tag, attrs in page.tags:
        assert tag not in {"iframe", "object", "embed", "style", "frame", "frameset", "base", "meta"} or (
            tag == "meta" and set(attrs) <= {"charset", "name", "content"} and "http-equiv" not in attrs
        ), (tag, attrs)
        if tag == "script":
            assert attrs.get("src") == "/static/app.js", attrs
        if tag == "link":
            assert attrs.get("href", "").startswith(("/static/", "data:")), attrs
        if tag == "form":
            assert attrs.get("action") == "/", attrs
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            assert name != "style", (tag, attrs)
            compact = re.sub(r"[\s\x00-\x1f]", "", value).lower()
            assert not compact.startswith(("javascript:", "vbscript:")), (tag, name, value)
            if compact.startswith("data:") and (tag, compact) != ("link", "data:,"):  # the empty favicon
                assert tag == "img" and name == "src" and compact.startswith("data:image/"), (tag, name)
        if tag == "img" and attrs.get("src", "").startswith("data:image/svg+xml"):
            svg = base64.b64decode(attrs["src"].split(",", 1)[1]).decode()
            for bad in ("<script", "onload", "javascript:", "foreignObject", "<set", "iframe"):
                assert bad not in svg, svg


def test_hostile_notebook_is_sanitized_in_the_viewer(client: TestClient, shas: dict[str, str]) -> None:
    response = client.get(f"/nb/{shas[HOSTILE_REL]}")
    assert response.status_code == 200
    html = response.text
    assert_page_is_inert(html)
    assert "window.__pwned=1</script>" not in html
    for gone in ("srcdoc", "<iframe", "<object", "<embed", "<style", "<svg", "<form", "<base", "http-equiv"):
        assert gone not in html, gone
    assert not re.search(r"<[^>]*\son\w+\s*=", html)  # no event handler attribute anywhere
    assert 'id="cell-id=fake"' not in html  # output HTML cannot forge a cell anchor
    assert "position:fixed" not in html
    # the content survives as text, escaped
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html  # the stream output
    assert "ValueError: &lt;img src=x onerror=window.__pwned=1&gt;" in html
    assert "hostile html output" in html and "html javascript link" in html and "zanzibar" in html
    assert "[JavaScript output not shown]" in html
    assert "\x1b" not in html
    # the sanitized SVG is still shown, as an image
    assert 'src="data:image/svg+xml;base64,' in html


def test_every_page_is_csp_compatible(client: TestClient, shas: dict[str, str]) -> None:
    pages = ["/", "/?q=ballast+volume+aft", "/?q=x&year=bad"]
    pages += [f"/nb/{sha}" for sha in shas.values()] + [f"/nb/{sha}/report" for sha in shas.values()]
    for url in pages:
        response = client.get(url)
        assert response.status_code in (200, 422), url
        assert_page_is_inert(response.text)


def test_sanitize_html_unit() -> None:
    dirty = (
        '<p onclick="x()">a<script>alert(1)</script><img src="x" onerror="alert(1)">'
        '<a href="javascript:alert(1)">j</a><a href=" JaVaScRiPt:alert(1)">k</a><a href="https://ok.example/">ok</a>'
        '<iframe src="https://x"></iframe><img src="data:text/html;base64,PHNjcmlwdD4=">'
        '<img src="data:image/png;base64,iVBORw0KGgo="><style>*{}</style><a href="data:text/html,x">d</a></p>'
    )
    clean = sanitize_html(dirty)
    for bad in ("onclick", "<script", "onerror", "javascript", "<iframe", "data:text", "<style"):
        assert bad not in clean.lower(), bad
    assert 'href="https://ok.example/"' in clean and 'src="data:image/png;base64,iVBORw0KGgo="' in clean


def test_sanitize_svg_unit() -> None:
    clean = sanitize_svg(
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
        '<defs><clipPath id="c"><rect width="1" height="1"/></clipPath></defs>'
        '<g clip-path="url(#c)" onclick="x()"><script>alert(1)</script><use xlink:href="https://evil/x.svg#a"/>'
        '<use href="#c"/><image href="https://evil/track.png"/><rect style="fill:url(https://evil/)"/>'
        '<rect style="fill:u\\72l(https://evil/)"/><text>label</text></g></svg>'
    )
    assert clean is not None
    for bad in ("onclick", "<script", "evil", "\\72"):
        assert bad not in clean, bad
    assert 'clip-path="url(#c)"' in clean and 'href="#c"' in clean and "label" in clean
    assert sanitize_svg("<html><script>1</script></html>") is None
    assert sanitize_svg('<!DOCTYPE svg [<!ENTITY x SYSTEM "file:///etc/passwd">]><svg>&x;</svg>') in (None, "<svg/>")


def test_search_page_renders_grouped_results_with_marks_and_links(client: TestClient, shas: dict[str, str]) -> None:
    response = client.get("/", params={"q": "ballast volume aft", "year": "2017"})
    assert response.status_code == 200
    html = response.text
    sha = shas[BALLAST_REL]
    assert html.count('class="nb-result"') == 1  # year filter: one notebook
    assert BALLAST_REL in html and "17-042" in html and "Ingrid Solberg" in html
    assert re.search(r"<mark>(?i:ballast)</mark>", html) and re.search(r"<mark>(?i:aft)</mark>", html)
    assert f'href="/nb/{sha}#cell-id=5c541fc0-a816-47a1-8d22-bc35cd653dc8"' in html
    assert 'class="badge kind kind-code"' in html
    for name in ("q", "year", "project", "author"):
        assert f'name="{name}"' in html
    assert 'id="answer-panel"' in html


def test_search_page_bad_year_is_a_message_not_a_crash(client: TestClient) -> None:
    response = client.get("/", params={"q": "ballast", "year": "2017-2019"})
    assert response.status_code == 422 and "YYYY..YYYY" in response.text


def test_search_page_question_without_words_is_a_message(client: TestClient) -> None:
    response = client.get("/", params={"q": "???"})
    assert response.status_code == 422 and "no words or numbers to look for" in response.text


def test_highlight_terms_escapes_and_marks() -> None:
    out = str(highlight_terms("<b>Total ballast</b> aft_volume & more", "ballast aft"))
    assert out.startswith("&lt;b&gt;Total <mark>ballast</mark>&lt;/b&gt; <mark>aft</mark>")
    assert "&amp; more" in out


def test_viewer_page_structure(client: TestClient, shas: dict[str, str]) -> None:
    sha = shas[PILE_REL]
    html = client.get(f"/nb/{sha}").text
    cells = re.findall(r'<section class="cell cell-(\w+)" id="cell-id=([^"]+)"', html)
    assert len(cells) == 15
    assert '<span class="cell-count">In[7]</span>' in html  # cell 5 re-run
    assert '<a class="cell-index" href="#cell-id=' in html and ">[10]</a>" in html
    assert 'class="warnings"' in html and "runs below" in html  # order warnings at the top
    assert html.index('class="warnings"') < html.index('class="cells"')
    assert f'href="/nb/{sha}/report"' in html and f'href="/nb/{sha}/deps.svg"' in html
    assert 'class="highlight"' in html  # pygments
    assert "KeyError: &#39;pile_diameter&#39;" in html or "KeyError: 'pile_diameter'" in html
    ballast = client.get(f"/nb/{shas[BALLAST_REL]}").text
    assert 'src="data:image/png;base64,' in ballast  # the figure output and the pasted attachment
    assert ballast.count('src="data:image/png;base64,') >= 2
    assert "<table>" in ballast  # DataFrame HTML, sanitized


def test_viewer_falls_back_to_the_index_when_the_file_changed(tmp_path: Path) -> None:
    from conftest import HashEmbedder
    from nbrecall.index.store import LanceStore
    from nbrecall.ingest.pipeline import run_index

    root = tmp_path / "root"
    path = write_nb(
        root / "calc.ipynb",
        [v4.new_markdown_cell("# Calc"), code("x = 41 + 1\nprint(x)", 1, [stream("42\n")])],
    )
    settings = Settings(index_dir=tmp_path / "idx")
    run_index([root], settings, HashEmbedder(), LanceStore(settings.index_dir / "lance", HashEmbedder.dim))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    client = local_client(make_app(settings))
    assert client.get(f"/api/notebooks/{sha}").json()["source"] == "file"
    path.write_text(path.read_text().replace("41", "40"))  # changed on disk since indexing
    html = client.get(f"/nb/{sha}").text
    assert "changed since it was indexed" in html and "41" in html and "42" in html
    assert client.get(f"/api/notebooks/{sha}").json()["source"] == "index"
    assert client.get(f"/nb/{sha}/report").status_code == 404
    path.unlink()
    assert client.get(f"/nb/{sha}").status_code == 200


# ---------------------------------------------------------------------------------------------------------
# token


TOKEN = "correct-horse-battery-staple"


@pytest.fixture(scope="module")
def locked(settings: Settings) -> Iterator[TestClient]:
    app = make_app(settings, token=TOKEN)
    yield local_client(app, follow_redirects=False)
    app.state.web.close()


@pytest.mark.parametrize(
    "url",
    ["/", "/?q=ballast", "/api/search?q=ballast", "/api/status", "/openapi.json", "/api/ask?q=x", "/nb/" + "0" * 64],
)
def test_token_required_on_every_route(locked: TestClient, url: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        response = locked.get(url, headers=headers)
        assert response.status_code == 401, (url, headers)
        assert_security_headers(response)
        assert TOKEN not in response.text
    assert locked.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).status_code in (200, 404, 503)


def test_static_assets_need_no_token(locked: TestClient) -> None:
    assert locked.get("/static/app.css").status_code == 200
    assert locked.get("/static/app.js").status_code == 200


def test_token_cookie_from_the_url(locked: TestClient) -> None:
    assert locked.get("/", params={"token": "wrong"}).status_code == 401
    response = locked.get("/", params={"token": TOKEN})
    assert response.status_code == 303 and response.headers["location"] == "/"
    cookie = response.headers["set-cookie"]
    value = security.cookie_value(TOKEN)
    assert cookie.startswith(f"{security.TOKEN_COOKIE}={value};") and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    fresh = local_client(locked.app, follow_redirects=False)
    assert fresh.get("/api/status").status_code == 401
    fresh.cookies.set(security.TOKEN_COOKIE, value)
    assert fresh.get("/api/status").status_code == 200
    assert fresh.get("/").status_code == 200
    for wrong in ("nope", TOKEN):  # the raw token is not the cookie
        fresh.cookies.set(security.TOKEN_COOKIE, wrong)
        assert fresh.get("/api/status").status_code == 401


def test_token_compared_in_constant_time(locked: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = security.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    assert locked.get("/api/status", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert locked.get("/api/status", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert (TOKEN.encode(), b"wrong") in calls and (TOKEN.encode(), TOKEN.encode()) in calls
    calls.clear()
    cookied = local_client(locked.app)
    cookied.cookies.set(security.TOKEN_COOKIE, security.cookie_value(TOKEN))
    assert cookied.get("/api/status").status_code == 200
    assert calls and all(len(a) == len(b) == 64 for a, b in calls)  # the cookie digest, compared the same way


# ---------------------------------------------------------------------------------------------------------
# serve


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.org", "10.0.0.1"])
def test_serve_refuses_a_non_loopback_host_without_a_token(tmp_path: Path, host: str) -> None:
    env = {"NBRECALL_TOKEN": "", "NBRECALL_CONFIG": "", "NBRECALL_INDEX": "", "COLUMNS": "200"}
    result = CliRunner().invoke(cli_app, ["serve", "--host", host, "--index", str(tmp_path)], env=env)
    assert result.exit_code == 2
    assert "refusing to serve" in result.output and "--token" in result.output


def test_serve_with_a_token_on_a_non_loopback_host_gets_past_the_check(tmp_path: Path) -> None:
    env = {"NBRECALL_TOKEN": "t0ken-of-20-chars-x", "NBRECALL_CONFIG": "", "NBRECALL_INDEX": "", "COLUMNS": "200"}
    result = CliRunner().invoke(cli_app, ["serve", "--host", "0.0.0.0", "--index", str(tmp_path / "none")], env=env)
    assert result.exit_code == 2
    assert "refusing" not in result.output and "no index here" in result.output  # stopped later, at the index


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host
        assert bind_refusal(host, None) is None
    for host in ("0.0.0.0", "::", "192.168.0.1", "example.org", "127.0.0.1.example.org", ""):
        assert not is_loopback(host), host
        assert bind_refusal(host, None) and bind_refusal(host, TOKEN) is None
