"""Time to the first streamed answer token through `GET /api/ask`, with a fake local OpenAI-compatible LLM.

Why: with a real model the user waits for search + context + the model's own first token; this measures what
nbrecall adds. The fake LLM (http.server on 127.0.0.1) answers every chat completion by streaming a short cited
answer, its first token after `--llm-delay` seconds (default 0, so the figure is nbrecall's overhead). The web
app (`nbrecall.web.app.create_app`) runs under uvicorn on 127.0.0.1; each query is sent as `GET /api/ask?q=…`
and timed from the request to the first `token` event and to the `done` event. The same is measured through
`stream_answer` directly (no HTTP) and for the extractive mode. If the web app is missing, only the direct
figures are printed.

Run from the repo root against an existing index (used read-only):
  .venv/bin/python bench/ask_first_token.py --index /tmp/idx1
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from nbrecall.answer.answer import stream_answer
from nbrecall.config import Settings, load_settings
from nbrecall.service import Archive

REPO = Path(__file__).resolve().parents[1]


def fake_llm(first_delay: float, pieces: int) -> ThreadingHTTPServer:
    """A chat-completions endpoint streaming `pieces` tokens that cite the first cell of the context."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            context = body["messages"][-1]["content"]
            notebook = context.split("# Notebook: ", 1)[1].split(" · ", 1)[0].split("\n", 1)[0] if (
                "# Notebook: " in context) else "unknown.ipynb"
            cell = context.split("## Cell [", 1)[1].split("]", 1)[0] if "## Cell [" in context else "0"
            words = ["The", " value", " is", " in", " the", " cell", " cited", " here"] * 8
            tokens = [*words[: max(1, pieces - 1)], f" [{notebook} › Cell {cell}]"]
            time.sleep(first_delay)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for token in tokens:
                data = {"choices": [{"index": 0, "delta": {"content": token}}]}
                self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(settings: Settings, archive: Archive) -> tuple[Any, str] | None:
    try:
        import uvicorn

        from nbrecall.web.app import create_app
    except ModuleNotFoundError as exc:
        print(f"web app not available ({exc}); measuring through stream_answer only")
        return None
    app = create_app(settings, archive=archive)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    if not server.started:
        raise SystemExit("uvicorn did not start")
    return server, f"http://127.0.0.1:{port}"


def over_http(client: httpx.Client, base: str, question: str) -> tuple[float | None, float, str]:
    """(seconds to the first token event, seconds to done, answer mode) for one question."""
    started = time.perf_counter()
    first = None
    mode = "?"
    with client.stream("GET", f"{base}/api/ask", params={"q": question}, timeout=120) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if event["type"] == "token" and first is None:
                first = time.perf_counter() - started
            if event["type"] == "done":
                mode = (event.get("answer") or {}).get("mode", "?")
                break
    return first, time.perf_counter() - started, mode


def direct(archive: Archive, settings: Settings, question: str) -> tuple[float | None, float, str]:
    started = time.perf_counter()
    first = None
    mode = "?"
    for event in stream_answer(question, archive, settings):
        if event.type == "token" and first is None:
            first = time.perf_counter() - started
        if event.type == "done" and event.answer is not None:
            mode = event.answer.mode
    return first, time.perf_counter() - started, mode


def summary(label: str, rows: list[tuple[float | None, float, str]]) -> None:
    firsts = sorted(r[0] for r in rows if r[0] is not None)
    totals = sorted(r[1] for r in rows)
    modes = sorted({r[2] for r in rows})
    if not firsts:
        print(f"{label:<34} no token events")
        return

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] * 1000

    print(f"{label:<34} first token p50 {statistics.median(firsts) * 1000:7.1f} ms  p95 {pct(firsts, 0.95):7.1f} ms"
          f"  max {firsts[-1] * 1000:7.1f} ms | done p50 {statistics.median(totals) * 1000:7.1f} ms"
          f"  (n={len(rows)}, mode {', '.join(modes)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, default=Path("/tmp/idx1"))
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--queries", type=Path, default=REPO.parent / "shared/eval/queries.jsonl")
    parser.add_argument("--n", type=int, default=30, help="number of queries (from the query file)")
    parser.add_argument("--llm-delay", type=float, default=0.0, help="fake model's own time to first token (s)")
    parser.add_argument("--tokens", type=int, default=40, help="tokens per fake answer")
    parser.add_argument("--no-vectors", action="store_true")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith("NBRECALL_LLM")}
    settings = load_settings(args.config, env=env)
    settings.index_dir = args.index
    if args.no_vectors:
        settings.embed.enabled = False
    llm = fake_llm(args.llm_delay, args.tokens)
    settings.answer.base_url = f"http://127.0.0.1:{llm.server_address[1]}/v1"
    settings.answer.model = "fake"
    extractive = copy.deepcopy(settings)
    extractive.answer.base_url = None

    questions = [json.loads(line)["query"] for line in args.queries.read_text(encoding="utf-8").splitlines()
                 if line.strip()][: args.n]
    archive = Archive(settings)
    direct(archive, settings, "warm up the model and the store")  # load the embedder once
    print(f"index {args.index}: {len(questions)} queries; fake LLM first-token delay {args.llm_delay * 1000:.0f} ms")

    web = start_web(settings, archive)
    if web is not None:
        server, base = web
        with httpx.Client() as client:
            over_http(client, base, "warm up")
            summary("HTTP /api/ask, LLM (fake)", [over_http(client, base, q) for q in questions])
        server.should_exit = True
        web_extractive = start_web(extractive, archive)
        if web_extractive is not None:
            server2, base2 = web_extractive
            with httpx.Client() as client:
                over_http(client, base2, "warm up")
                summary("HTTP /api/ask, extractive", [over_http(client, base2, q) for q in questions])
            server2.should_exit = True
    summary("stream_answer, LLM (fake)", [direct(archive, settings, q) for q in questions])
    summary("stream_answer, extractive", [direct(archive, extractive, q) for q in questions])
    llm.shutdown()


if __name__ == "__main__":
    main()
