"""Shared builders for the web tests (no tests here): a fixture index and a live uvicorn server.

The fixture archive is the bundled sample archive plus one hostile notebook, indexed with the conftest
`HashEmbedder` (deterministic, instant). The app gets an `Archive` that embeds queries with the same stand-in,
so every layer below the embedding model is the real one: manifest, LanceDB store, retrieval, rendering.
"""

from __future__ import annotations

import base64
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
from nbformat import v4

from conftest import HashEmbedder
from nbrecall.config import Settings, load_settings
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index
from nbrecall.service import Archive

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
HOSTILE_REL = "hostile/payloads.ipynb"
BALLAST_REL = "projects/2017/17-042/ballast_distribution.ipynb"

PWN = "window.__pwned=1"
SVG_HOSTILE = (
    '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="120" height="40">'
    f"<script>{PWN}</script>"
    f'<rect width="120" height="40" fill="#cde" onload="{PWN}"/>'
    f'<a xlink:href="javascript:{PWN}"><text x="5" y="25">svg link</text></a>'
    f'<foreignObject width="10" height="10"><iframe srcdoc="&lt;script&gt;parent.__pwned=1&lt;/script&gt;"/>'
    "</foreignObject>"
    f'<set attributeName="onmouseover" to="{PWN}"/>'
    "</svg>"
)
HTML_HOSTILE = (
    "<b>hostile html output</b>"
    f"<script>{PWN}</script>"
    f'<img src=x onerror="{PWN}">'
    f'<a id="html-js-link" href="javascript:{PWN}">html javascript link</a>'
    f'<iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>'
    '<object data="javascript:window.__pwned=1"></object><embed src="javascript:window.__pwned=1">'
    "<style>body { display: none !important }</style>"
    '<div style="position:fixed;top:0;left:0;width:100%;height:100%;background:red">overlay</div>'
    f"<svg><script>{PWN}</script></svg>"
    '<form action="https://evil.example/"><button>go</button></form>'
    '<meta http-equiv="refresh" content="0;url=javascript:window.__pwned=1">'
    '<base href="https://evil.example/">'
    '<a id="cell-id=fake" href="#">anchor hijack</a>'
    '<table class="dataframe"><tr><th>col</th></tr><tr><td onclick="window.__pwned=1">1.5</td></tr></table>'
)
MARKDOWN_HOSTILE = (
    "# Hostile payloads\n\n"
    "Markdown with everything a notebook could smuggle in.\n\n"
    f"<script>{PWN}</script>\n\n"
    f'<img src=x onerror="{PWN}">\n\n'
    f'<a id="md-js-link" href="javascript:{PWN}">markdown html javascript link</a>\n\n'
    f"[markdown javascript link](javascript:{PWN})\n\n"
    '<iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>\n\n'
    f"<svg><script>{PWN}</script></svg>\n\n"
    f'<details open ontoggle="{PWN}"><summary>toggle</summary>x</details>\n\n'
    "![data svg](data:image/svg+xml;base64,"
    + base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=1"/>').decode()
    + ")\n"
)


def hostile_notebook() -> nbformat.NotebookNode:
    cells = [
        v4.new_markdown_cell(MARKDOWN_HOSTILE),
        v4.new_code_cell(
            "show_payloads()  # zanzibar payload cell",
            execution_count=1,
            outputs=[
                v4.new_output("display_data", data={"text/html": HTML_HOSTILE, "text/plain": "<hostile>"}),
                v4.new_output("display_data", data={"image/svg+xml": SVG_HOSTILE, "text/plain": "<svg>"}),
                v4.new_output("display_data", data={"text/markdown": f"[md output link](javascript:{PWN})"}),
                v4.new_output("display_data", data={"application/javascript": PWN, "text/plain": "js"}),
                v4.new_output("stream", name="stdout", text=f"\x1b[31mred\x1b[0m <script>{PWN}</script>\n"),
                v4.new_output(
                    "error",
                    ename="ValueError",
                    evalue=f"<img src=x onerror={PWN}>",
                    traceback=["\x1b[0;31mValueError\x1b[0m: <script>boom</script>"],
                ),
            ],
        ),
        v4.new_markdown_cell("## After the payloads\n\nThe page must still be here: zanzibar."),
    ]
    nb = v4.new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    )
    nb.nbformat_minor = 5
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"hostile-{i}"
    return nb


def build_archive(base: Path) -> tuple[Settings, dict[str, str]]:
    """Copy the sample archive under `base`, add the hostile notebook, index it; (settings, rel → sha)."""
    archive = base / "archive"
    shutil.copytree(SAMPLES / "archive", archive)
    target = archive / HOSTILE_REL
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(nbformat.writes(hostile_notebook()), encoding="utf-8")
    settings = load_settings(SAMPLES / "nbrecall.toml", env={})
    settings.index_dir = base / "index"
    settings.embed.cache_dir = str(base / "models")  # never used: queries go through the HashEmbedder
    return settings, index_archive(archive, settings)


def index_archive(archive: Path, settings: Settings) -> dict[str, str]:
    """Index `archive` with the HashEmbedder; the indexed notebooks' content hashes by relative path."""
    embedder = HashEmbedder()
    run_index([archive], settings, embedder, LanceStore(settings.index_dir / "lance", embedder.dim))
    manifest = SqliteManifest(settings.index_dir / "manifest.sqlite", readonly=True)
    try:
        return {rec.rel: rec.sha256 for rec in manifest.contents("indexed")}
    finally:
        manifest.close()


def open_archive(settings: Settings) -> Archive:
    return Archive(settings, _embedder=HashEmbedder())


def make_app(settings: Settings, token: str | None = None, **kwargs):  # type: ignore[no-untyped-def]
    from nbrecall.web.app import create_app

    return create_app(settings, token=token, archive=open_archive(settings), **kwargs)


LOCAL = "http://127.0.0.1"  # the app answers loopback Host names only (TestClient's default is "testserver")


def local_client(app, **kwargs):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    return TestClient(app, base_url=kwargs.pop("base_url", LOCAL), **kwargs)


@contextmanager
def live_server(app) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """Run `app` with uvicorn on 127.0.0.1 and a free port in a thread; yields the base URL; stops it after."""
    import uvicorn

    from nbrecall.web.app import UVICORN_OPTIONS

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", **UVICORN_OPTIONS))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        web = getattr(getattr(app, "state", None), "web", None)
        if web is not None:
            web.close()  # its render processes


# ---------------------------------------------------------------------------------------------------------
# A small archive with stored re-renders (written with the render module's own functions; no kernel runs)

RENDER_CHANGED_REL = "render/tank_totals.ipynb"
RENDER_STALE_REL = "render/old_loads.ipynb"
RENDER_PLAIN_REL = "render/not_rendered.ipynb"
RENDERED_AT = "2026-03-01T02:00:00+00:00"
TANKS_HTML = (
    '<table class="dataframe"><thead><tr><th></th><th>tank</th><th>volume_m3</th></tr></thead><tbody>'
    "<tr><th>0</th><td>T1</td><td>107.5</td></tr><tr><th>1</th><td>T2</td><td>115.0</td></tr>"
    "<tr><th>2</th><td>T3</td><td>122.5</td></tr></tbody></table>"
)


def bar_svg(heights: list[int]) -> str:
    bars = "".join(
        f'<rect x="{10 + 26 * i}" y="{110 - h}" width="20" height="{h}" fill="#4a78b5"/>' for i, h in enumerate(heights)
    )
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="280" height="120" viewBox="0 0 280 120">'
        f'<rect width="280" height="120" fill="#fff"/>{bars}<line x1="5" y1="110" x2="275" y2="110" stroke="#333"/>'
        "</svg>"
    )


def _out(kind: str, value: str, count: int | None = None) -> dict:
    if kind == "stream":
        return {"output_type": "stream", "name": "stdout", "text": value}
    if kind == "result":
        return {"output_type": "execute_result", "execution_count": count, "metadata": {},
                "data": {"text/plain": value}}
    if kind == "html":
        return {"output_type": "execute_result", "execution_count": count, "metadata": {},
                "data": {"text/html": value, "text/plain": "<DataFrame>"}}
    if kind == "svg":
        return {"output_type": "display_data", "metadata": {},
                "data": {"image/svg+xml": value, "text/plain": "<Figure>"}}
    raise ValueError(kind)


def make_notebook(cells: list[tuple[str, str, list[dict]]], prefix: str) -> nbformat.NotebookNode:
    """(type, source, outputs) → an nbformat 4.5 notebook with ids `<prefix>-<i>`."""
    nodes = []
    count = 0
    for i, (kind, source, outputs) in enumerate(cells):
        if kind == "md":
            node = v4.new_markdown_cell(source, id=f"{prefix}-{i}")
        else:
            count += 1 if outputs else 0
            node = v4.new_code_cell(source, id=f"{prefix}-{i}", execution_count=count if outputs else None,
                                    outputs=[nbformat.from_dict(o) for o in outputs])
        nodes.append(node)
    nb = v4.new_notebook(
        cells=nodes, metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    )
    nb.nbformat_minor = 5
    return nb


TANK_CELLS = [
    ("md", "# Aft ballast tanks\n\nVolumes of the aft ballast tanks of the 130 m PSV, from the tank table.", []),
    ("code", "import pandas as pd\ntanks = pd.read_csv(r'\\\\srv-calc-01\\projects\\2017\\17-042\\inputs\\tanks.csv')\n"
             "len(tanks)", [_out("result", "10", 1)]),
    ("code", "tanks.head(3)", [_out("html", TANKS_HTML, 2)]),
    ("code", "print(f'Total ballast aft: {tanks.volume_m3.sum():,.1f} m3')",
     [_out("stream", "Total ballast aft: 1,284.6 m3\n")]),
    ("code", "tanks.plot.bar(x='tank', y='volume_m3')", [_out("svg", bar_svg([30, 45, 60, 75, 90, 60, 45, 30]))]),
    ("code", "print('checked by', 'IS')", []),
]
TANK_FRESH = {  # cell index → the re-rendered outputs
    1: [_out("result", "8", 1)],
    2: [_out("html", TANKS_HTML, 2)],
    3: [_out("stream", "Total ballast aft: 1,092.4 m3\n")],
    4: [_out("svg", bar_svg([30, 45, 60, 75, 90, 60]))],
    5: [_out("stream", "checked by IS\n")],
}
TANK_STATUS = {1: ("changed", "--- original\n+++ fresh\n@@ -1 +1 @@\n-10\n+8"), 2: ("same", ""),
               3: ("changed", "--- original\n+++ fresh\n@@ -1 +1 @@\n-Total ballast aft: 1,284.6 m3\n"
                              "+Total ballast aft: 1,092.4 m3"),
               4: ("changed", "(images differ)"), 5: ("new", "")}

HOSTILE_FRESH_HTML = (
    f"<b>fresh hostile html</b><script>{PWN}</script><img src=x onerror=\"{PWN}\">"
    f'<a href="javascript:{PWN}">fresh javascript link</a><iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>'
    '<div style="position:fixed;top:0;left:0;width:100%;height:100%;background:red">overlay</div>'
)
LOADS_CELLS = [
    ("md", "# Mooring loads (old)\n\nBallast and mooring loads from the 2016 library.", []),
    ("code", "show_loads_table()", [_out("html", "<table><tr><th>line</th><th>kN</th></tr>"
                                             "<tr><td>1</td><td>412</td></tr></table>", 1)]),
    ("code", "import oldlib\nloads = oldlib.compute_ballast_loads()", [_out("stream", "computed 2 loads\n")]),
    ("code", "print(loads)", [_out("stream", "[412, 398]\n")]),
]
LOADS_FRESH = {
    1: [_out("html", HOSTILE_FRESH_HTML, 1)],
    2: [{"output_type": "error", "ename": "ModuleNotFoundError",
         "evalue": f"No module named 'oldlib' <img src=x onerror={PWN}>",
         "traceback": ["\x1b[0;31mModuleNotFoundError\x1b[0m: No module named 'oldlib'"]}],
    3: [],
}
LOADS_STATUS = {1: ("changed", "(outputs differ in kind or count)"),
                2: ("failed", "ModuleNotFoundError: No module named 'oldlib'"),
                3: ("failed", "not run (the run stopped earlier)")}
PLAIN_CELLS = [("md", "# Ballast notes\n\nNot re-rendered yet.", []),
               ("code", "print('ballast notes')", [_out("stream", "ballast notes\n")])]


def write_render_for(
    path: Path, out_dir: Path, status: str, reason: str, fresh: dict[int, list[dict]] | None,
    cell_status: dict[int, tuple[str, str]],
) -> str:
    """Store a render of `path` as `nbrecall render` would (RenderResult + executed copy); returns the sha."""
    from nbrecall.notebook.read import read_notebook
    from nbrecall.render.compare import CellComparison, RenderResult
    from nbrecall.render.run import to_executable, write_render

    original = read_notebook(path)
    executed = None
    if fresh is not None:
        executed = to_executable(original)
        for index, outputs in fresh.items():
            executed.cells[index].outputs = [nbformat.from_dict(o) for o in outputs]
            executed.cells[index].execution_count = index if outputs else None
    cells = [CellComparison(i, original.cells[i].id, s, d) for i, (s, d) in sorted(cell_status.items())]
    result = RenderResult(path=str(path), sha256=original.sha256, status=status, reason=reason, cells=cells,
                          rendered_at=RENDERED_AT, notes=["1 absolute path(s) no rule maps: /home/x/loads.csv"]
                          if status == "stale" else [])
    write_render(result, executed, out_dir)
    return original.sha256


def build_render_archive(base: Path) -> tuple[Settings, dict[str, str]]:
    """Three notebooks: one re-rendered `changed` (side by side), one `stale` (import error; hostile fresh
    outputs), one never rendered; renders stored before indexing. (settings, rel → sha)."""
    archive = base / "archive"
    for rel, cells, prefix in ((RENDER_CHANGED_REL, TANK_CELLS, "tank"), (RENDER_STALE_REL, LOADS_CELLS, "loads"),
                               (RENDER_PLAIN_REL, PLAIN_CELLS, "plain")):
        target = archive / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(nbformat.writes(make_notebook(cells, prefix)), encoding="utf-8")
    settings = Settings(index_dir=base / "index")
    settings.embed.cache_dir = str(base / "models")  # never used: queries go through the HashEmbedder
    renders = settings.index_dir / "renders"
    write_render_for(archive / RENDER_CHANGED_REL, renders, "changed", "", TANK_FRESH, TANK_STATUS)
    write_render_for(archive / RENDER_STALE_REL, renders, "stale", "import error: oldlib", LOADS_FRESH, LOADS_STATUS)
    return settings, index_archive(archive, settings)
