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
from nbrecall.index.store import LanceStore
from nbrecall.ingest.manifest import Manifest
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
    embedder = HashEmbedder()
    store = LanceStore(settings.index_dir / "lance", embedder.dim)
    run_index([archive], settings, embedder, store)
    manifest = Manifest(settings.index_dir / "manifest.sqlite", readonly=True)
    try:
        shas = {rec.rel: rec.sha256 for rec in manifest.contents("indexed")}
    finally:
        manifest.close()
    return settings, shas


def open_archive(settings: Settings) -> Archive:
    return Archive(settings, _embedder=HashEmbedder())


def make_app(settings: Settings, token: str | None = None):  # type: ignore[no-untyped-def]
    from nbrecall.web.app import create_app

    return create_app(settings, token=token, archive=open_archive(settings))


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
