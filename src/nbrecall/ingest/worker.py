"""The picklable per-notebook tasks an `Executor` runs: build (parse, analyse, chunk) and embed.

`build_notebook` never raises: it returns the built rows, a quarantine reason (the notebook is at fault), or a
fault (the worker is: it cannot load the tokenizer, its model differs from the run's, or the archive is not
mounted there). A fault stops the run with that message instead of quarantining every notebook, since a
quarantined content is only retried when it changes.

Out of process, a worker builds the embedder the settings describe, once per process, and uses only its
tokenizer (chunk budgets count word pieces); the ONNX model is loaded only if that worker is asked to embed.
"""

from __future__ import annotations

import dataclasses
import gc
import pickle
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nbrecall.config import Settings
from nbrecall.executor import Executor, ExecutorError
from nbrecall.index.embed import Embedder
from nbrecall.ingest.build import IndexReport, build_rows, fingerprint
from nbrecall.notebook.archives import split_member
from nbrecall.notebook.read import NotebookUnreadable
from nbrecall.plugins import PluginManager, plugin_manager

if TYPE_CHECKING:
    from nbrecall.ingest.chunk import Chunk
    from nbrecall.records import CellRecord, ChunkRow, ContentRecord, Signature

BuildItem = tuple[str, str, str, str]  # (path, rel, root, sha256): small, so a task costs little to ship


class WorkerFault(ExecutorError):
    """A worker cannot build notebooks the way this run does; the run stops (nothing is quarantined for it)."""


class EmbedderMismatch(ExecutorError):
    """A worker's embedder is not the run's (another model): its vectors would not be comparable."""


@dataclass
class BuildOutcome:
    """What one build task returns: `built` (chunks, content record, cell records, rows without vectors), or a
    quarantine `reason`, or a worker `fault`; `seconds` are the stage timings measured in the worker."""

    sha: str
    rel: str
    built: tuple[list[Chunk], ContentRecord, list[CellRecord], list[ChunkRow]] | None = None
    reason: str = ""
    fault: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    signature: Signature | None = None  # for notebook families (`ingest.families`), when they are on


# --- the per-worker embedder cache ------------------------------------------------------------------------------
# The one piece of global mutable state here, on purpose. A worker process (a pool process or a Ray worker) runs
# thousands of tasks; building the embedder reads and hashes the tokenizer and the model files (~0.2 s for the
# bundled MiniLM, more than parsing and chunking a typical notebook), and an embed task would also load the ONNX
# session (~1 s). So each worker builds it once per model identity (the embed settings and the index folder that
# holds the built-model cache) and keeps it for the life of the process. An in-process build does not use it:
# there the run's own embedder is passed in.
_WORKER_EMBEDDERS: dict[tuple[str, ...], Embedder] = {}
# Likewise its plugin manager (`nbrecall.plugins`), by whether entry points load: scanning the installed
# distributions for them costs more than a small notebook.
_WORKER_PLUGINS: dict[bool, PluginManager] = {}
_WORKER_LOCK = threading.Lock()
_WORKER_CACHE_SIZE = 4  # distinct models one worker keeps; a long-lived Ray worker may serve several runs


def _model_key(settings: Settings) -> tuple[str, ...]:
    embed = dataclasses.asdict(settings.embed)
    embed.pop("enabled", None)
    return (*(f"{k}={embed[k]!r}" for k in sorted(embed)), f"index_dir={Path(settings.index_dir).resolve()}")


def worker_plugins(settings: Settings) -> PluginManager:
    """The plugin manager `settings` describe, built once per worker process (see above)."""
    key = settings.plugins.load_entrypoints
    with _WORKER_LOCK:
        if key not in _WORKER_PLUGINS:
            _WORKER_PLUGINS[key] = plugin_manager(settings)
        return _WORKER_PLUGINS[key]


def worker_embedder(settings: Settings) -> Embedder:
    """The embedder `settings` describe, built once per worker process and model identity (see above).

    `threads = 0` means one thread here, not all cores: each task holds one CPU (Ray schedules a task per CPU, the
    pool runs a task per core), and sessions that each took every core would fight over them."""
    key = _model_key(settings)
    plugins = worker_plugins(settings)
    with _WORKER_LOCK:
        embedder = _WORKER_EMBEDDERS.get(key)
        if embedder is None:
            from nbrecall.index.embedder_from_settings import make_embedder

            embed = dataclasses.replace(settings.embed, threads=settings.embed.threads or 1)
            embedder = make_embedder(dataclasses.replace(settings, embed=embed), plugins)
            if len(_WORKER_EMBEDDERS) >= _WORKER_CACHE_SIZE:
                _WORKER_EMBEDDERS.pop(next(iter(_WORKER_EMBEDDERS)))
            _WORKER_EMBEDDERS[key] = embedder
            # The worker's libraries and embedder are loaded now and live as long as the process. Freezing them
            # keeps the cyclic garbage collector from walking them again at every full collection, which syntax
            # trees and parsed JSON trigger often: 15% of the CPU of 300 notebooks built in one process, 6% of the
            # workers' CPU in a pool of 2 on 1,000 notebooks (six runs each, interleaved).
            gc.collect()
            gc.freeze()
        return embedder


def portable(settings: Settings) -> Settings:
    """A copy of `settings` whose folders are absolute: a worker (a Ray worker above all) has its own working
    folder, where `.nbrecall` or a relative model path would name another folder, or none."""
    embed = dataclasses.replace(settings.embed)
    for name in ("path", "cache_dir"):
        value = getattr(embed, name)
        if value:
            setattr(embed, name, str(Path(value).expanduser().absolute()))
    return dataclasses.replace(settings, index_dir=Path(settings.index_dir).absolute(), embed=embed)


def _where() -> str:
    return f"worker on {socket.gethostname()}"


# --- build ------------------------------------------------------------------------------------------------------


def build_notebook(
    path: str,
    rel: str,
    root: str,
    sha: str,
    settings: Settings,
    *,
    expect: str = "",
    counter: Embedder | None = None,
    plugins: PluginManager | None = None,
) -> BuildOutcome:
    """Parse, analyse and chunk one notebook (`build.build_rows`); never raises.

    `counter` is the run's own embedder when this runs in the calling process; else the worker's (built from
    `settings`) is used, and its `fingerprint` must equal `expect`, the run's, or the outcome is a fault.
    `plugins` likewise: the run's manager in the calling process, else the worker's (built from `settings`)."""
    outcome = BuildOutcome(sha, rel)
    built_here = plugins is None or counter is None
    if plugins is None:
        try:
            plugins = worker_plugins(settings)
        except Exception as exc:
            outcome.fault = (f"{_where()} cannot load nbrecall's plugins ({type(exc).__name__}: {exc}); install the "
                             "same plugins on every worker")
            return outcome
    if counter is None:
        try:
            counter = worker_embedder(settings)
        except Exception as exc:
            outcome.fault = (
                f"{_where()} cannot load the embedder's tokenizer ({type(exc).__name__}: {exc}); workers build it "
                "from the [embed] settings, so the model (package or folder) must be installed there too"
            )
            return outcome
    if built_here and expect:
        got = fingerprint(settings, counter, plugins)
        if got != expect:
            outcome.fault = (
                f"{_where()} would chunk with '{got}', this run with '{expect}': workers build the embedder from "
                "the [embed] settings and find the plugins installed there; install the same model, plugins and "
                "nbrecall version on every worker"
            )
            return outcome
    if not Path(path).exists() and not Path(path).parent.is_dir() and split_member(path) is None:
        outcome.fault = (
            f"{_where()} cannot see {Path(path).parent}: workers read notebooks by path, so mount the archive at "
            "the same path on every node"
        )
        return outcome
    report = IndexReport()
    try:
        outcome.built = build_rows(Path(path), rel, root, sha, settings, counter, report, plugins)
        if settings.families.enabled:
            from nbrecall.ingest.families import signature

            started = time.perf_counter()
            outcome.signature = signature(outcome.built[2], settings.families.num_perm)
            report.add_time("families", time.perf_counter() - started)
    except NotebookUnreadable as exc:
        outcome.reason = exc.reason
    except Exception as exc:  # a bug on one notebook must not stop the run: quarantine with the reason
        outcome.reason = f"internal error while indexing: {type(exc).__name__}: {exc}"[:300]
    outcome.seconds = report.seconds
    return outcome


@dataclass
class BuildTask:
    """`build_notebook` as a one-argument callable for `Executor.map`; picklable when `counter` is None."""

    settings: Settings
    expect: str = ""  # the run's fingerprint (`build.fingerprint`)
    counter: Embedder | None = None
    plugins: PluginManager | None = None  # the run's plugin manager, in this process only (it holds modules)

    @classmethod
    def for_run(
        cls, settings: Settings, embedder: Embedder, executor: Executor, plugins: PluginManager
    ) -> BuildTask:
        """The task for a run with `embedder` on `executor`: the run's embedder travels with the task when it runs
        in this process or pickles (a small test embedder); the bundled and endpoint embedders do not (they hold
        locks, sessions, clients), so each worker builds the configured one, which must give the same fingerprint.
        The run's `plugins` travel only in this process; a worker builds its own from the settings (the plugins
        it finds count in the fingerprint, so a worker without the run's metadata plugins is a fault)."""
        travels = executor.in_process
        if not travels:
            try:
                pickle.dumps(embedder)
                travels = True
            except Exception:
                travels = False
        expect = fingerprint(settings, embedder, plugins)
        return cls(settings if executor.in_process else portable(settings), expect, embedder if travels else None,
                   plugins if executor.in_process else None)

    def __call__(self, item: BuildItem) -> BuildOutcome:
        path, rel, root, sha = item
        return build_notebook(path, rel, root, sha, self.settings, expect=self.expect, counter=self.counter,
                              plugins=self.plugins)


# How a task dies when its notebook kills the worker (a segfault, memory): after its retries, the notebook is
# quarantined. Anything else that escapes `build_notebook` (which catches what the notebook causes) is the worker's
# environment: nbrecall missing or another version there, a task that cannot be unpickled.
_LOST_WORKER = {"BrokenProcessPool", "WorkerCrashedError", "OutOfMemoryError", "NodeDiedError", "ObjectLostError",
                "MemoryError"}


def build_failed(item: BuildItem, exc: BaseException) -> BuildOutcome:
    """`on_error` for build tasks: a task whose worker died on every try quarantines its notebook with the reason;
    an executor failure or a broken worker environment stops the run (WorkerFault) instead of quarantining every
    notebook, since a quarantined content is retried only when it changes."""
    if isinstance(exc, ExecutorError):
        raise exc
    if type(exc).__name__ not in _LOST_WORKER:
        raise WorkerFault(
            f"a build task failed on a worker for a reason that is not its notebook's ({type(exc).__name__}: "
            f"{str(exc)[:300]}); install the same nbrecall version in the same environment on every worker"
        ) from exc
    _path, rel, _root, sha = item
    return BuildOutcome(sha, rel, reason=f"worker failed while indexing: {type(exc).__name__}: {exc}"[:300])


# --- embed ------------------------------------------------------------------------------------------------------


def embed_texts(texts: list[str], settings: Settings, expect_model: str = "") -> np.ndarray:
    """Vectors (float32 [n, dim], L2-normalised) of `texts` with the worker's embedder; raises on failure.

    For Ray workers, which then do the model's work; locally the main process embeds. `expect_model` (the run's
    `model_id`) guards against a worker with other weights: its vectors would not be comparable."""
    embedder = worker_embedder(settings)
    if expect_model and embedder.model_id != expect_model:
        raise EmbedderMismatch(
            f"{_where()} embeds with {embedder.model_id}, this run with {expect_model}: install the same model on "
            "every worker"
        )
    return np.asarray(embedder.embed(list(texts)), dtype=np.float32)


@dataclass
class EmbedTask:
    """`embed_texts` as a one-argument callable for `Executor.map`: one item is a list of texts (a batch)."""

    settings: Settings
    expect_model: str = ""

    def __call__(self, texts: list[str]) -> np.ndarray:
        return embed_texts(texts, self.settings, self.expect_model)


def clear_worker_cache() -> None:
    """Forget this process's embedders (tests; a long-lived worker after the model files changed)."""
    with _WORKER_LOCK:
        _WORKER_EMBEDDERS.clear()
