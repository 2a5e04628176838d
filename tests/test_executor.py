"""Executors (in-process, process pool, Ray): order, bounded work in flight, errors and retries; the build task;
indexing and re-rendering through them give what a local run gives."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from nbformat import v4
from typer.testing import CliRunner

from conftest import HashEmbedder, code, import_or_missing, result, stream, tool_missing, write_nb
from executor_tasks import Flaky, fail_on_three, square
from nbrecall.config import Settings
from nbrecall.executor import (
    Executor,
    ExecutorError,
    InlineExecutor,
    ProcessExecutor,
    make_executor,
    parse_kind,
)
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest.build import fingerprint
from nbrecall.ingest.pipeline import run_index
from nbrecall.ingest.worker import EmbedTask, WorkerFault, build_failed, build_notebook, portable

TESTS = Path(__file__).parent


@pytest.fixture(params=["inline", "process"])
def executor(request: pytest.FixtureRequest) -> Iterator[Executor]:
    ex: Executor = InlineExecutor() if request.param == "inline" else ProcessExecutor(2)
    with ex:
        yield ex


class Counted:
    """An input iterator that records how far ahead of the consumer the executor has read."""

    def __init__(self, n: int) -> None:
        self.n, self.pulled, self.yielded, self.ahead = n, 0, 0, 0

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            self.pulled += 1
            self.ahead = max(self.ahead, self.pulled - self.yielded)
            yield i


def test_results_come_in_input_order(executor: Executor) -> None:
    assert list(executor.map(square, range(25))) == [i * i for i in range(25)]
    assert list(executor.map(square, [])) == []


def test_work_in_flight_is_bounded(executor: Executor) -> None:
    items = Counted(40)
    for value in executor.map(square, items):
        assert value == items.yielded ** 2
        items.yielded += 1
    assert items.yielded == 40
    assert executor.window == {InlineExecutor: 1, ProcessExecutor: 16}[type(executor)]
    assert items.ahead <= executor.window  # never more than a few notebooks per worker read ahead of the consumer


def test_a_failed_task_becomes_its_on_error_result_in_place(executor: Executor) -> None:
    out = list(executor.map(fail_on_three, range(6), on_error=lambda item, exc: f"{item}: {exc}"))
    assert out == [0, 1, 2, "3: three is bad", 4, 5]
    got: list[int] = []
    with pytest.raises(ValueError, match="three is bad"):
        for value in executor.map(fail_on_three, range(6)):
            got.append(value)
    assert got == [0, 1, 2]  # raised at its place in the order


def test_retry_exceptions_reruns_a_failed_task(tmp_path: Path) -> None:
    for ex in (InlineExecutor(retries=1, retry_exceptions=True), ProcessExecutor(2, retries=1, retry_exceptions=True)):
        folder = tmp_path / type(ex).__name__
        folder.mkdir()
        with ex:
            assert list(ex.map(Flaky(folder), range(5))) == list(range(5))
        assert all((folder / f"{i}.calls").read_text() == "2" for i in range(5))
    with ProcessExecutor(2, retries=0, retry_exceptions=True) as ex:  # no retries left: on_error
        (tmp_path / "none").mkdir()
        out = list(ex.map(Flaky(tmp_path / "none", only=2), range(4), on_error=lambda i, e: type(e).__name__))
    assert out == [0, 1, "RuntimeError", 3]


def test_a_crashed_worker_is_retried_and_only_its_task_is_charged(tmp_path: Path) -> None:
    """Item 2 kills its worker once (then works); item 4 kills it every time. The pool is rebuilt, the tasks that
    were running are re-run one by one, and only item 4 ends as an error."""
    (tmp_path / "a").mkdir()
    flaky = Flaky(tmp_path / "a", times=1, crash=True, only=2)
    with ProcessExecutor(2, retries=1) as ex:
        assert list(ex.map(flaky, range(6))) == list(range(6))
        always = Flaky(tmp_path / "b", times=99, crash=True, only=4)
        (tmp_path / "b").mkdir()
        out = list(ex.map(always, range(7), on_error=lambda i, e: f"error {type(e).__name__}"))
    assert out == [0, 1, 2, 3, "error BrokenProcessPool", 5, 6]
    # The first crash took its neighbours down too, so nobody was charged; alone it crashed again (charged), then
    # once more on its one retry.
    assert (tmp_path / "b" / "4.calls").read_text() == "3"


# --- choosing an executor -------------------------------------------------------------------------------------


def test_executor_kinds_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_kind("local") == ("local", None) and parse_kind("ray") == ("ray", None)
    assert parse_kind("ray://10.0.0.5:10001") == ("ray", "ray://10.0.0.5:10001")
    assert parse_kind("head:6379") == ("ray", "head:6379")
    for bad in ("dask", "ray://", "host:port"):
        with pytest.raises(ExecutorError, match="expected one of local | ray"):
            parse_kind(bad)
    assert isinstance(make_executor("local", 1), InlineExecutor)
    pool = make_executor("local", 0)
    assert isinstance(pool, ProcessExecutor) and pool.workers == (os.cpu_count() or 1)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ExecutorError, match=r"needs Ray, which is not installed: pip install 'nbrecall\[ray\]'"):
        make_executor("ray")


def test_cli_says_what_is_wrong_with_the_executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbrecall.cli import app

    monkeypatch.setattr("nbrecall.index.embedder_from_settings.make_embedder",
                        lambda settings, plugins=None: HashEmbedder())
    root = tmp_path / "share"
    write_nb(root / "a.ipynb", [code("x = 1", 1)])
    runner = CliRunner()
    bad = runner.invoke(app, ["index", str(root), "--index", str(tmp_path / "idx"), "--executor", "dask"])
    assert bad.exit_code == 2 and "executor error" in bad.output and "expected one of" in bad.output, bad.output
    import_or_missing("ray", "ray is not installed (the dev extra)")
    gone = runner.invoke(app, ["index", str(root), "--index", str(tmp_path / "idx"), "--executor", "127.0.0.1:1"])
    assert gone.exit_code == 2 and "cannot connect to the Ray cluster at 127.0.0.1:1" in gone.output, gone.output
    done = runner.invoke(app, ["index", str(root), "--index", str(tmp_path / "idx"), "--executor", "local"])
    assert done.exit_code == 0, done.output


# --- the build task -------------------------------------------------------------------------------------------


def make_corpus(root: Path) -> None:
    write_nb(
        root / "projects/2017/17-042/ballast.ipynb",
        [
            v4.new_markdown_cell("# Ballast distribution\nBallast plan for the 130 m PSV Nordhav."),
            code("aft = 1284.6\nprint(f'Total ballast aft: {aft:,.1f} m3')", 1,
                 [stream("Total ballast aft: 1,284.6 m3\n")]),
            v4.new_markdown_cell("## Forward tanks"),
            code("fwd = 512.0\nfwd", 2, [result("512.0", 2)]),
        ],
    )
    write_nb(root / "projects/2018/18-007/mooring.ipynb",
             [v4.new_markdown_cell("# Mooring loads\nCatenary pretension."), code("pretension_kN = 1200", 1)])
    for i in range(6):
        write_nb(root / f"calcs/c{i}.ipynb",
                 [v4.new_markdown_cell(f"# Calculation {i}\nHull {i} resistance at {10 + i} knots."),
                  code(f"r = {i} * 2.5\nr", 1, [result(str(i * 2.5), 1)])])
    (root / "scratch").mkdir(parents=True, exist_ok=True)
    (root / "scratch/broken.ipynb").write_text('{"nbformat": 4, "cells": [', encoding="utf-8")


def settings_for(index: Path) -> Settings:
    settings = Settings(index_dir=index)
    settings.metadata.path_rules = [r"projects/(?P<year>\d{4})/(?P<project>\d{2}-\d{3})/"]
    return settings


class Boom(HashEmbedder):
    def count_tokens(self, texts: list[str]) -> list[int]:
        raise KeyError("tokenizer exploded")


def test_build_notebook_returns_rows_a_reason_or_a_fault(tmp_path: Path) -> None:
    root = tmp_path / "share"
    make_corpus(root)
    settings, emb = settings_for(tmp_path / "idx"), HashEmbedder()
    good = build_notebook(str(root / "calcs/c1.ipynb"), "calcs/c1.ipynb", str(root), "a" * 64, settings, counter=emb)
    assert good.built is not None and not good.reason and not good.fault and "chunk" in good.seconds
    chunks, record, cells, rows = good.built
    assert record.status == "indexed" and len(rows) == len(chunks) and len(cells) == 2
    assert all(row.vector is None for row in rows)
    broken = build_notebook(str(root / "scratch/broken.ipynb"), "scratch/broken.ipynb", str(root), "b" * 64,
                            settings, counter=emb)
    assert broken.built is None and broken.reason and not broken.fault
    bug = build_notebook(str(root / "calcs/c1.ipynb"), "calcs/c1.ipynb", str(root), "c" * 64, settings,
                         counter=Boom())
    assert bug.reason.startswith("internal error while indexing: KeyError") and bug.built is None
    unmounted = build_notebook("/nowhere/x.ipynb", "x.ipynb", "/nowhere", "d" * 64, settings, counter=emb)
    assert "cannot see /nowhere" in unmounted.fault and "same path on every node" in unmounted.fault
    item = ("/a/x.ipynb", "x.ipynb", "/a", "f" * 64)
    crashed = build_failed(item, BrokenProcessPool("worker died"))
    assert crashed.reason == "worker failed while indexing: BrokenProcessPool: worker died" and crashed.sha == "f" * 64
    with pytest.raises(WorkerFault, match="not its notebook's .*ModuleNotFoundError"):
        build_failed(item, ModuleNotFoundError("No module named 'nbrecall'"))
    moved = portable(Settings(index_dir=Path(".nbrecall")))  # what a worker with another working folder gets
    assert moved.index_dir == Path(".nbrecall").absolute()
    # Out of process, the worker builds the configured embedder; a run with another one is stopped, not quarantined.
    other = build_notebook(str(root / "calcs/c1.ipynb"), "calcs/c1.ipynb", str(root), "e" * 64, settings,
                           expect=fingerprint(settings, emb, None))
    assert other.built is None and "would chunk with" in other.fault and "model hash-test@1" in other.fault


def snapshot(index: Path) -> dict[str, Any]:
    """What a run leaves: files, contents (status, reason, counts, metadata) and every chunk row."""
    with closing(SqliteManifest(index / "manifest.sqlite", readonly=True)) as manifest:
        files = {rel: f.sha256 for (_root, rel), f in manifest.files().items()}
        contents = {c.sha256: (c.status, c.reason, c.rel, c.n_cells, c.n_chunks, c.n_embedded, c.meta)
                    for c in manifest.contents()}
    table = LanceStore(index / "lance", HashEmbedder.dim).table
    columns = ["chunk_id", "nb_sha", "notebook", "kind", "cells", "anchor", "heading", "text", "year", "project",
               "stale", "deprecated", "health"]
    rows = table.search().select(columns).limit(None).to_arrow().to_pylist()
    return {"files": files, "contents": contents, "chunks": sorted(rows, key=lambda r: r["chunk_id"])}


def index_with(root: Path, index: Path, embedder: Any, executor: Executor | None, vectors: bool = True) -> Any:
    settings = settings_for(index)
    settings.embed.enabled = vectors
    return run_index([root], settings, embedder, LanceStore(index / "lance", HashEmbedder.dim), executor=executor,
                     batch_notebooks=4)


@pytest.mark.slow
def test_indexing_through_a_process_pool_gives_the_local_result(tmp_path: Path) -> None:
    root = tmp_path / "share"
    make_corpus(root)
    local = index_with(root, tmp_path / "inline", HashEmbedder(), None)
    with ProcessExecutor(2) as pool:
        pooled = index_with(root, tmp_path / "pool", HashEmbedder(), pool)
        assert pool._pool is None  # released before the final keyword-index update: idle workers hold no memory
        assert list(pool.map(square, range(3))) == [0, 1, 4]  # and started again on demand
    assert snapshot(tmp_path / "pool") == snapshot(tmp_path / "inline")
    assert pooled.notebooks_indexed == local.notebooks_indexed == 8
    assert [q[0] for q in pooled.quarantined] == ["scratch/broken.ipynb"]
    assert pooled.chunks_written == local.chunks_written > 8 and "chunk" in pooled.seconds


class LockedHashEmbedder(HashEmbedder):
    """Cannot be pickled (like the bundled model), so workers build the configured embedder instead."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()


@pytest.mark.slow
def test_a_worker_whose_embedder_differs_stops_the_run(tmp_path: Path) -> None:
    root = tmp_path / "share"
    make_corpus(root)
    with ProcessExecutor(1) as pool, pytest.raises(WorkerFault, match="would chunk with .*all-MiniLM-L6-v2"):
        index_with(root, tmp_path / "idx", LockedHashEmbedder(), pool)
    with closing(SqliteManifest(tmp_path / "idx" / "manifest.sqlite", readonly=True)) as manifest:
        assert manifest.contents("quarantined") == []  # nothing was quarantined for the worker's fault


# --- Ray ------------------------------------------------------------------------------------------------------

OBJECT_STORE = 80 * 1024 * 1024


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A head (no CPUs) and two worker nodes of one CPU each, on this machine, all on the loopback address."""
    ray = import_or_missing("ray", "ray is not installed (the dev extra)")
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as mp:
        # Ray advertises the machine's interface address unless it believes multi-node clusters are off: loopback.
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        for attempt in (1, 2):  # a raylet gets 30 s to register: on a machine busy with other work, try again
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                                     "object_store_memory": OBJECT_STORE})
            try:
                for _ in range(2):
                    cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
                break
            except Exception:
                cluster.shutdown()
                if attempt == 2:
                    raise
        try:
            yield cluster
        finally:
            if ray.is_initialized():
                ray.shutdown()
            cluster.shutdown()


@pytest.mark.ray
def test_ray_cluster_indexes_like_a_local_run(ray_cluster: Any, tmp_path: Path, model_cache: Path) -> None:
    """The bundled model's tokenizer on both sides (workers build it from the settings), no vectors: the same
    manifest and the same chunks as an in-process run; then an embed task on the workers gives the same vectors."""
    from nbrecall.executor import RayExecutor
    from nbrecall.index.embedder_from_settings import make_embedder

    root = tmp_path / "share"
    make_corpus(root)

    def settings(index: Path) -> Settings:
        s = settings_for(index)
        s.embed.enabled = False
        s.embed.cache_dir = str(model_cache)
        return s

    started = time.perf_counter()
    local = run_index([root], settings(tmp_path / "inline"), make_embedder(settings(tmp_path / "inline")),
                      LanceStore(tmp_path / "inline" / "lance", 384), batch_notebooks=4)
    with RayExecutor(ray_cluster.address) as ray_ex:
        assert ray_ex.workers == 2 and ray_ex.window == 4
        distributed = run_index([root], settings(tmp_path / "ray"), make_embedder(settings(tmp_path / "ray")),
                                LanceStore(tmp_path / "ray" / "lance", 384), batch_notebooks=4, executor=ray_ex)
        assert snapshot(tmp_path / "ray") == snapshot(tmp_path / "inline")
        assert distributed.notebooks_indexed == local.notebooks_indexed == 8
        assert distributed.chunks_written == local.chunks_written
        assert [q[0] for q in distributed.quarantined] == ["scratch/broken.ipynb"]
        # Embedding on the workers: the vectors the main process would compute.
        embed_settings = settings(tmp_path / "ray")
        embedder = make_embedder(embed_settings)
        embedder.prepare()  # build the ONNX graph once, into the shared cache the workers load
        batches = [["Ballast plan for the 130 m PSV", "pretension of the anchor lines"], ["Hull 3 resistance"]]
        remote = list(ray_ex.map(EmbedTask(embed_settings, embedder.model_id), batches))
        for texts, vectors in zip(batches, remote, strict=True):
            assert vectors.shape == (len(texts), 384)
            assert float(abs(vectors - embedder.embed(texts)).max()) < 1e-4
    assert time.perf_counter() - started < 120


@pytest.mark.ray
def test_ray_retries_a_lost_worker_and_reports_failures(ray_cluster: Any, tmp_path: Path) -> None:
    from nbrecall.executor import RayExecutor

    (tmp_path / "crash").mkdir()
    (tmp_path / "raise").mkdir()
    with RayExecutor(ray_cluster.address, retries=1) as ray_ex:
        items = Counted(12)
        out = []
        for value in ray_ex.map(Flaky(tmp_path / "crash", times=1, crash=True, only=5), items):
            out.append(value)
            items.yielded += 1
        assert out == list(range(12)) and items.ahead <= ray_ex.window
        assert (tmp_path / "crash" / "5.calls").read_text() == "2"  # Ray re-ran the task whose worker died
        failed = list(ray_ex.map(fail_on_three, range(5), on_error=lambda i, e: f"{i}: {type(e).__name__}: {e}"))
        assert failed == [0, 1, 2, "3: ValueError: three is bad", 4]
    with RayExecutor(ray_cluster.address, retries=1, retry_exceptions=True) as ray_ex:
        assert list(ray_ex.map(Flaky(tmp_path / "raise", only=1), range(3))) == [0, 1, 2]


@pytest.mark.ray
def test_ray_renders_in_the_sandbox_on_the_workers(ray_cluster: Any, tmp_path: Path) -> None:
    from nbrecall.executor import RayExecutor
    from nbrecall.render.availability import sandbox_problem
    from nbrecall.render.run import RenderOptions, load_render, render_many

    if sandbox_problem():
        tool_missing(f"no sandbox here: {sandbox_problem()}")
    root = tmp_path / "share"
    write_nb(root / "ok.ipynb", [code("print(6 * 7)", 1, [stream("42\n")])])
    write_nb(root / "drift.ipynb", [code("print(6 * 8)", 1, [stream("42\n")])])
    options = RenderOptions(out_dir=tmp_path / "renders", workers=1, hide=[tmp_path / "renders"])
    items = [(root / "ok.ipynb", root), (root / "drift.ipynb", root)]
    with RayExecutor(ray_cluster.address) as ray_ex:
        results = list(render_many(items, options, executor=ray_ex))
    assert [r.status for r in results] == ["fresh", "changed"]
    assert results[0].environment["backend"] == "bwrap"
    stored = load_render(options.out_dir, results[0].sha256)  # written here, by the caller
    assert stored is not None and stored.status == "fresh"
    assert (options.out_dir / f"{results[0].sha256}.ipynb").is_file()
