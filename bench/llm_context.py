"""What an LLM is sent: the share of value questions whose expected value is in the context of the real request.

Why: with an LLM configured the answer can only be as good as its context. This starts a local fake
OpenAI-compatible chat endpoint (streaming, on loopback), points nbrecall at it, runs `nbrecall.answer.answer()` on
every value question of each set, records each request the endpoint receives, and counts the requests whose user
message holds the expected value; it also reports the context sizes against `answer.context_tokens`.

    .venv/bin/python bench/llm_context.py --set eval=/tmp/idx1:../shared/eval/queries.jsonl \\
        --set eval2=/tmp/idx2:../shared/eval2/queries.jsonl [--misses]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from answer_ablation import set_spec  # bench/, beside this script
from nbrecall.answer.answer import answer
from nbrecall.answer.evaluate import holds_value
from nbrecall.config import load_settings
from nbrecall.convert.tokens import count_llm_tokens
from nbrecall.search.evaluate import load_queries
from nbrecall.service import Archive


class FakeEndpoint:
    """A chat completions endpoint that records every request and streams one fixed answer."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server interface
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                recorder.requests.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chunk = {"choices": [{"delta": {"content": "See the context."}}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def run_set(name: str, index: Path, queries: Path, endpoint: FakeEndpoint, show_misses: bool) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBRECALL_LLM")}
    settings = load_settings(None, env=env)
    settings.index_dir = index
    settings.answer.base_url = endpoint.url
    settings.answer.model = "fake"
    archive = Archive(settings)
    items = [q for q in load_queries(queries) if q.kind == "value" and q.answer]
    held = 0
    sizes: list[int] = []
    for q in items:
        before = len(endpoint.requests)
        answer(q.query, archive, settings)
        sent = endpoint.requests[before:]
        message = sent[-1]["messages"][-1]["content"] if sent else ""
        context = message.split("\n\nContext:\n\n", 1)[-1].rsplit("\n\nQuestion (again): ", 1)[0]  # the context alone
        sizes.append(count_llm_tokens(context))
        ok = holds_value(q.answer, context)
        held += ok
        if show_misses and not ok:
            print(f"[{name} {q.id}] {q.query}\n    expected {q.answer!r} not in the {sizes[-1]}-token context")
    budget = settings.answer.context_tokens
    return [name, f"{held}/{len(items)}", f"{held / max(len(items), 1):.3f}", str(budget),
            f"{max(sizes, default=0)}", f"{sum(sizes) / max(len(sizes), 1):.0f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, metavar="NAME=INDEX:QUERIES[:CORPUS]",
                        help="a set to run (a corpus given as a third part is ignored: the context is judged by value)")
    parser.add_argument("--misses", action="store_true")
    args = parser.parse_args()
    endpoint = FakeEndpoint()
    rows = []
    for spec in args.set:
        name, index, queries, _corpus = set_spec(spec)
        rows.append(run_set(name, index, queries, endpoint, args.misses))
    print("| set | value in the context | share | budget (tokens) | largest context | mean context |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
