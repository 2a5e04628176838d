"""Builders for the tests of `serve ROOT` (no tests here): small archives, a server that indexes them in the
background, and an embedder that holds the indexer at a chosen notebook until the test lets it go."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbformat import v4

from conftest import HashEmbedder, write_nb
from nbrecall.config import Settings, load_settings
from nbrecall.ingest.live import LiveIndexer
from nbrecall.service import Archive, prepare_index
from test_web_support import SAMPLES


class GateEmbedder(HashEmbedder):
    """The test embedder; counting the tokens of a text that holds `word` waits until `release()`: the indexer
    stops inside the notebook holding it, with the batches before it written."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def count_tokens(self, texts: list[str]) -> list[int]:
        if any(self.word in t for t in texts):
            self.waiting.set()
            if not self.gate.wait(60):
                raise TimeoutError("the test never released the gate")
        return super().count_tokens(texts)

    def release(self) -> None:
        self.gate.set()


def notebook(path: Path, title: str, words: str) -> Path:
    """A small notebook: a heading, a sentence and a code cell with a printed value, all about `words`."""
    return write_nb(path, [
        v4.new_markdown_cell(f"# {title}\n\nNotes on {words}."),
        v4.new_code_cell(f"value = 42  # {words}\nprint(value)",
                         outputs=[v4.new_output("stream", name="stdout", text=f"42 {words}\n")], execution_count=1),
    ])


def live_settings(base: Path) -> Settings:
    settings = load_settings(SAMPLES / "nbrecall.toml", env={})
    settings.index_dir = base / "index"
    settings.embed.cache_dir = str(base / "models")  # never used: the HashEmbedder stands in for the model
    return settings


def live_app(root: Path, settings: Settings, embedder: HashEmbedder, **options: Any):  # type: ignore[no-untyped-def]
    """The app `nbrecall serve ROOT` builds (not started: the caller starts `app.state.web.live`)."""
    from nbrecall.web.app import create_app

    store = prepare_index(settings, embedder)
    archive = Archive(settings, _embedder=embedder, _store=store)
    live = LiveIndexer([root], settings, embedder, store, **options)
    return create_app(settings, archive=archive, live=live)


def wait_for(check: Callable[[], Any], timeout: float, what: str, step: float = 0.1) -> Any:
    """Poll `check` until it returns something true; its value, or AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(step)
