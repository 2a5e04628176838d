"""The LLM answer path against a local fake OpenAI-compatible server: streaming, think blocks, citations, retries,
time-outs and the extractive fallback."""

from __future__ import annotations

import contextlib
import copy
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import HashEmbedder
from nbrecall.answer.answer import answer, stream_answer
from nbrecall.answer.context import Context, ContextCell
from nbrecall.answer.llm import ThinkFilter, parse_citations, strip_think
from nbrecall.config import Settings
from nbrecall.service import Archive
from test_answer import BALLAST, build_index

QUESTION = "what total ballast volume did we use aft"
CITE = f"[{BALLAST} › Cell 4]"


class FakeLLM:
    """A chat-completions endpoint on 127.0.0.1 that plays a script: one behaviour per request (the last
    repeats). Behaviours: ("stream", chunks, delay), ("status", code), ("sleep", seconds), ("break", chunks)."""

    def __init__(self) -> None:
        self.script: list[tuple[Any, ...]] = [("stream", ["Hello"], 0.0)]
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                step = fake.script[min(len(fake.requests), len(fake.script)) - 1]
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    fake.play(self, step)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @staticmethod
    def event(text: str) -> bytes:
        data = {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}
        return f"data: {json.dumps(data)}\n\n".encode()

    def play(self, handler: BaseHTTPRequestHandler, step: tuple[Any, ...]) -> None:
        kind = step[0]
        if kind == "sleep":
            time.sleep(step[1])
            step = ("stream", ["late"], 0.0)
            kind = "stream"
        if kind == "status":
            body = json.dumps({"error": {"message": f"fake failure {step[1]}"}}).encode()
            handler.send_response(step[1])
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            if step[1] == 429:
                handler.send_header("Retry-After", "0")
            handler.end_headers()
            handler.wfile.write(body)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        if kind == "break":
            handler.send_header("Content-Length", "100000")  # promise more than is sent: a broken stream
        handler.end_headers()
        handler.wfile.write(b": keep-alive comment\n\n")
        for chunk in step[1]:
            handler.wfile.write(self.event(chunk))
            handler.wfile.flush()
            if kind == "stream" and step[2]:
                time.sleep(step[2])
        if kind == "stream":
            handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
        handler.close_connection = True

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Archive:
    base = tmp_path_factory.mktemp("llm")
    return Archive(build_index(base / "share", base / "idx"), _embedder=HashEmbedder())


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    server = FakeLLM()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NBRECALL_LLM_API_KEY", "NBRECALL_SECRET_KEY", "NBRECALL_SECRET_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)


def llm_settings(archive: Archive, base_url: str, **answer: Any) -> Settings:
    settings = copy.deepcopy(archive.settings)
    settings.answer.base_url = base_url
    settings.answer.model = "fake-model"
    settings.answer.backoff = 0.01
    settings.answer.retries = 2
    settings.answer.connect_timeout = 1.0
    settings.answer.timeout = 5.0
    for key, value in answer.items():
        setattr(settings.answer, key, value)
    return settings


def test_tokens_stream_in_order_with_citations(archive: Archive, fake: FakeLLM) -> None:
    chunks = ["The aft ", "ballast was ", "1,284.6 m3 ", CITE, "."]
    fake.script = [("stream", chunks, 0.02)]
    events = list(stream_answer(QUESTION, archive, llm_settings(archive, fake.base_url)))
    tokens = [e.text for e in events if e.type == "token"]
    assert tokens == chunks
    kinds = [e.type for e in events]
    assert kinds == ["token"] * 5 + ["citation", "done"]
    done = events[-1].answer
    assert done is not None and done.mode == "llm" and done.notice is None
    assert done.text == "The aft ballast was 1,284.6 m3 " + CITE + "."
    assert [(c.notebook, c.cell) for c in done.citations] == [(BALLAST, 4)]
    assert done.citations[0].cell_id and done.citations[0].nb_sha
    request = fake.requests[0]
    assert request["path"] == "/v1/chat/completions"
    body = request["body"]
    assert body["model"] == "fake-model" and body["stream"] is True
    assert "[PATH › Cell n]" in body["messages"][0]["content"]
    user = body["messages"][1]["content"]
    assert QUESTION in user and f"# Notebook: {BALLAST}" in user and "## Cell [4] · type:code" in user
    assert "Authorization" not in request["headers"]


def test_think_blocks_are_stripped_even_when_split(archive: Archive, fake: FakeLLM) -> None:
    chunks = ["<th", "ink>Let me reason about ", "tanks</thi", "nk>\n\nAft: ", "1,284.6 m3 ", CITE]
    fake.script = [("stream", chunks, 0.0)]
    events = list(stream_answer(QUESTION, archive, llm_settings(archive, fake.base_url)))
    text = "".join(e.text for e in events if e.type == "token")
    assert text == "Aft: 1,284.6 m3 " + CITE
    assert events[-1].answer is not None and events[-1].answer.text == text


@pytest.mark.parametrize(
    "text",
    [
        "<think>a < b and </thin not yet</think>Answer <b>bold</b> here",
        "<THINK>upper</THINK>Answer <b>bold</b> here",
        "Answer <b>bold</b> here",
        "reasoning that the server's template opened</think>Answer <b>bold</b> here",
    ],
)
def test_think_filter_for_every_split(text: str) -> None:
    expected = "Answer <b>bold</b> here"
    assert strip_think(text) == expected
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1, 3):
            f = ThinkFilter()
            out = f.feed(text[:i]) + f.feed(text[i:j]) + f.feed(text[j:]) + f.flush()
            assert f.sent == expected, (i, j, f.sent)
            if "<" in text[:6]:  # an opened block never shows: the stream itself is clean
                assert out == expected, (i, j, out)
            else:
                assert out.endswith(expected) and f.restarted == (out != expected)


def test_invented_citations_are_dropped(archive: Archive, fake: FakeLLM) -> None:
    text = (
        f"Aft ballast 1,284.6 m3 {CITE}; see also [ballast.ipynb › Cell 5] and [elsewhere/other.ipynb › Cell 2] "
        f"and [{BALLAST} › Cell 99]."
    )
    fake.script = [("stream", [text], 0.0)]
    done = answer(QUESTION, archive, llm_settings(archive, fake.base_url))
    assert done.mode == "llm"
    cited = [(c.notebook, c.cell) for c in done.citations]
    assert (BALLAST, 4) in cited  # full path
    assert all(nb == BALLAST for nb, _ in cited)
    assert "[elsewhere/other.ipynb › Cell 2]" in (done.notice or "")
    assert f"[{BALLAST} › Cell 99]" in (done.notice or "")


def test_parse_citations_forms() -> None:
    cells = [ContextCell("a/b/nb.ipynb", "s", i, f"id{i}", "code") for i in (3, 4, 7)]
    context = Context("", cells)
    valid, invented = parse_citations(
        "x [a/b/nb.ipynb › Cell 3] y [nb.ipynb > Cell 4] z [a/b/nb.ipynb › Cells 7, 8] [a/b/nb.ipynb › Cell 3]",
        context,
    )
    assert [c.cell for c in valid] == [3, 4, 7]
    assert invented == ["[a/b/nb.ipynb › Cell 8]"]


def test_server_errors_retry_then_fall_back(archive: Archive, fake: FakeLLM) -> None:
    fake.script = [("status", 500)]
    events = list(stream_answer(QUESTION, archive, llm_settings(archive, fake.base_url, retries=2)))
    assert len(fake.requests) == 3  # one try and two retries
    assert events[0].type == "notice"
    done = events[-1].answer
    assert done is not None and done.mode == "extractive"
    assert done.notice is not None and "LLM endpoint failed after 3 attempts" in done.notice and "500" in done.notice
    assert done.text.startswith("Total ballast aft: 1,284.6 m3")


def test_transient_errors_are_retried_before_the_first_token(archive: Archive, fake: FakeLLM) -> None:
    fake.script = [("status", 503), ("status", 429), ("stream", ["ok ", CITE], 0.0)]
    done = answer(QUESTION, archive, llm_settings(archive, fake.base_url, retries=2))
    assert done.mode == "llm" and done.text == "ok " + CITE
    assert len(fake.requests) == 3


def test_client_errors_are_not_retried(archive: Archive, fake: FakeLLM) -> None:
    fake.script = [("status", 401)]
    done = answer(QUESTION, archive, llm_settings(archive, fake.base_url, retries=3))
    assert len(fake.requests) == 1
    assert done.mode == "extractive" and "401" in (done.notice or "")


def test_timeout_falls_back(archive: Archive, fake: FakeLLM) -> None:
    fake.script = [("sleep", 1.5)]
    started = time.perf_counter()
    done = answer(QUESTION, archive, llm_settings(archive, fake.base_url, timeout=0.3, retries=1))
    assert time.perf_counter() - started < 3.0
    assert len(fake.requests) == 2
    assert done.mode == "extractive" and "timed out" in (done.notice or "")


def test_connection_refused_falls_back(archive: Archive) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = answer(QUESTION, archive, llm_settings(archive, f"http://127.0.0.1:{port}/v1", retries=1))
    assert done.mode == "extractive"
    assert "connection failed" in (done.notice or "") and "after 2 attempts" in (done.notice or "")
    assert done.citations and done.citations[0].cell == 4


def test_broken_stream_after_first_token_is_not_retried(archive: Archive, fake: FakeLLM) -> None:
    fake.script = [("break", ["Partial ", "answer"])]
    events = list(stream_answer(QUESTION, archive, llm_settings(archive, fake.base_url)))
    assert len(fake.requests) == 1
    kinds = [e.type for e in events]
    assert kinds[:2] == ["token", "token"] and "notice" in kinds
    done = events[-1].answer
    assert done is not None and done.mode == "extractive" and "broke off" in (done.notice or "")


def test_api_key_from_the_environment_is_sent(
    archive: Archive, fake: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBRECALL_LLM_API_KEY", "sk-test-123")
    fake.script = [("stream", ["fine ", CITE], 0.0)]
    answer(QUESTION, archive, llm_settings(archive, fake.base_url))
    assert fake.requests[0]["headers"]["Authorization"] == "Bearer sk-test-123"


def test_stored_key_without_secret_key_falls_back_with_notice(
    archive: Archive, fake: FakeLLM, tmp_path: Path
) -> None:
    settings = llm_settings(archive, fake.base_url)
    settings.answer.secrets_file = str(tmp_path / "secrets.json")
    (tmp_path / "secrets.json").write_text(json.dumps({"version": 1, "keys": {"llm": {"token": "x"}}}))
    done = answer(QUESTION, archive, settings)
    assert fake.requests == []
    assert done.mode == "extractive" and "NBRECALL_SECRET_KEY" in (done.notice or "")


def test_answer_without_citations_gets_a_notice(archive: Archive, fake: FakeLLM) -> None:
    fake.script = [("stream", ["<think>hmm</think>", "I do not know."], 0.0)]
    done = answer(QUESTION, archive, llm_settings(archive, fake.base_url))
    assert done.mode == "llm" and done.text == "I do not know." and done.citations == []
    assert "cites no cell" in (done.notice or "")


def test_base_url_without_model_says_so(archive: Archive, fake: FakeLLM) -> None:
    settings = llm_settings(archive, fake.base_url)
    settings.answer.model = None
    done = answer(QUESTION, archive, settings)
    assert fake.requests == [] and done.mode == "extractive"
    assert "answer.model is not" in (done.notice or "")
