"""Where the heavy per-notebook stages run: in this process, in a local process pool, or on a Ray cluster.

One seam, `Executor.map(fn, items)`: results come back in input order, and at most `window` items (a few per
worker) are taken from `items` and not yet given back, so a 41,000-notebook archive never has more than a
handful of notebooks' results in memory. A task that fails (after its retries) raises at its place in the order,
or becomes `on_error(item, exc)` when the caller passes one: the indexer turns it into a quarantine reason, the
renderer into a stale result, so one bad notebook never stops a run.

`fn` and the items must be picklable for `ProcessExecutor` and `RayExecutor` (a module-level function or a
dataclass with `__call__`); results must be picklable too.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")
R = TypeVar("R")
OnError = Callable[[Any, BaseException], Any]

RAY_EXTRA_HINT = "pip install 'nbrecall[ray]' (or pip install 'ray[client]')"


class ExecutorError(RuntimeError):
    """The executor cannot be used (Ray missing, cluster unreachable, bad setting, cluster lost mid-run)."""


@runtime_checkable
class Executor(Protocol):
    """What the indexer and the renderer need from an executor."""

    workers: int
    in_process: bool  # True when `fn` runs in the calling process (objects need not be picklable)

    @property
    def window(self) -> int:
        """Most items taken from the input and not yet yielded (the back-pressure bound)."""
        ...

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, on_error: OnError | None = None) -> Iterator[R]:
        """`fn(item)` for each item, in input order, with bounded work in flight."""
        ...

    def release(self) -> None:
        """Free what idle workers hold on this machine (the pool's processes); a later `map` starts them again."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...


class _Closing:
    """Context-manager plumbing shared by the executors."""

    def release(self) -> None:
        """Nothing held between maps (in process; a Ray cluster's workers are the cluster's)."""

    def close(self) -> None:  # pragma: no cover - overridden
        pass

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _failed(item: Any, exc: BaseException, on_error: OnError | None) -> Any:
    if on_error is None:
        raise exc
    return on_error(item, exc)


class InlineExecutor(_Closing):
    """Runs every task in the calling process, one at a time: tests, `workers = 1`, and the library default.

    `retries` re-runs a task whose `fn` raised, when `retry_exceptions` is set (a crash cannot be survived here).
    """

    in_process = True

    def __init__(self, retries: int = 0, retry_exceptions: bool = False) -> None:
        self.workers = 1
        self.retries = max(0, retries)
        self.retry_exceptions = retry_exceptions

    @property
    def window(self) -> int:
        return 1

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, on_error: OnError | None = None) -> Iterator[R]:
        for item in items:
            attempts = 0
            while True:
                try:
                    result = fn(item)
                except Exception as exc:
                    if self.retry_exceptions and attempts < self.retries:
                        attempts += 1
                        continue
                    yield _failed(item, exc, on_error)
                    break
                yield result
                break

    def __repr__(self) -> str:
        return "InlineExecutor()"


@dataclass
class _Slot:
    item: Any
    future: Future[Any] | None = None
    attempts: int = 0
    suspect: bool = False  # was running when the pool broke: re-run alone, so a crash is pinned on its cause
    done: bool = False
    result: Any = None
    error: BaseException | None = None


PARENT_POLL = 0.5  # seconds between a worker's checks that its parent is still there
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, *, signal_on_death: bool = True) -> None:
    """End this (worker) process when `parent_pid` ends, however it ends: kill -9 included.

    Two mechanisms, because either alone has a gap: on Linux the kernel's parent-death signal (`prctl
    PR_SET_PDEATHSIG`, SIGKILL), which fires even while this process is stuck in C code, but is tied to the
    parent *thread* that started it, so `signal_on_death` is passed only when that was the parent's main thread;
    and everywhere a watchdog thread that ends the process once it has been re-parented (its parent pid
    changed), within `PARENT_POLL` seconds. Called first thing in every worker (`ProcessExecutor`'s
    initializer, the web's render workers).
    """
    if signal_on_death and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="nbrecall-parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(PARENT_POLL)
        if os.getppid() != parent_pid:
            os._exit(1)


def _pool_worker_start(parent_pid: int, main_thread: bool) -> None:
    """The pool's initializer: see `die_with_parent`."""
    die_with_parent(parent_pid, signal_on_death=main_thread)


class ProcessExecutor(_Closing):
    """A spawn process pool on this machine (`workers` default: os.cpu_count()).

    Spawn, not fork: workers start clean (no copied locks, threads or open index files of the parent). The pool
    lives as long as the executor, so a worker's per-process caches (the tokenizer, see `ingest.worker`) are
    loaded once per worker, not once per task. When a worker dies (segfault, OOM kill), the pool is rebuilt and
    the tasks that were running are re-run one at a time, so the crash is charged only to the task that causes
    it; that task is retried `retries` times, then reported through `on_error`. `retry_exceptions` also retries
    tasks whose `fn` raised.
    """

    in_process = False

    def __init__(self, workers: int | None = None, retries: int = 2, retry_exceptions: bool = False) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.retries = max(0, retries)
        self.retry_exceptions = retry_exceptions
        self._pool: ProcessPoolExecutor | None = None

    @property
    def window(self) -> int:
        """Eight notebooks per worker: results are given back in input order, so one large notebook at the head
        holds back those finished behind it; with two per worker the other workers stood idle ~20% of a 41k run
        (py-spy: waiting for tasks while the window was full), and eight notebooks' chunks are a few MB."""
        return 8 * self.workers

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # Workers end with this process even when it is killed (kill -9 of `nbrecall index`): no orphan keeps
            # its memory. The processes are started from this thread, which the kernel's signal is tied to.
            main = threading.current_thread() is threading.main_thread()
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_pool_worker_start,
                initargs=(os.getpid(), main),
            )
        return self._pool

    def _rebuild(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, on_error: OnError | None = None) -> Iterator[R]:
        slots: deque[_Slot] = deque()
        source = iter(items)
        exhausted = False
        try:
            while True:
                # Submit: new items up to the window, unless suspects of a crash are being re-run one by one.
                suspects = [s for s in slots if s.suspect and not s.done]
                if suspects:
                    if not any(s.future is not None for s in suspects):
                        self._submit(suspects[0], fn)
                else:
                    while not exhausted and len(slots) < self.window:
                        try:
                            item = next(source)
                        except StopIteration:
                            exhausted = True
                            break
                        slot = _Slot(item)
                        slots.append(slot)
                        self._submit(slot, fn)
                # Yield: every finished slot at the head, in input order.
                while slots and slots[0].done:
                    slot = slots.popleft()
                    if slot.error is not None:
                        yield _failed(slot.item, slot.error, on_error)
                    else:
                        yield slot.result
                if not slots:
                    if exhausted:
                        return
                    continue
                running = {s.future: s for s in slots if s.future is not None}
                if not running:
                    continue
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                self._collect(finished, running, fn)
        finally:
            for slot in slots:
                if slot.future is not None:
                    slot.future.cancel()

    def _submit(self, slot: _Slot, fn: Callable[[Any], Any]) -> None:
        try:
            slot.future = self._get_pool().submit(fn, slot.item)
        except BrokenProcessPool:
            self._rebuild()
            slot.future = self._get_pool().submit(fn, slot.item)

    def _collect(
        self, finished: set[Future[Any]], running: dict[Future[Any], _Slot], fn: Callable[[Any], Any]
    ) -> None:
        broken = False
        for future in finished:
            slot = running[future]
            try:
                slot.result = future.result()
            except BrokenProcessPool as exc:
                broken = True
                if slot.suspect and len(running) == 1:  # it ran alone: the crash is its own
                    slot.attempts += 1
                    if slot.attempts > self.retries:
                        slot.error, slot.done, slot.suspect = exc, True, False
                slot.future = None
                continue
            except Exception as exc:
                if self.retry_exceptions and slot.attempts < self.retries:
                    slot.attempts += 1
                    self._submit(slot, fn)
                else:
                    slot.error = exc
                    slot.done, slot.suspect, slot.future = True, False, None
                continue
            slot.done, slot.suspect, slot.future = True, False, None
        if broken:
            # Every task still running died with the pool: none is to blame yet; re-run them one at a time.
            for slot in running.values():
                if not slot.done:
                    if slot.future is not None:
                        slot.future = None
                    slot.suspect = True
            self._rebuild()

    def release(self) -> None:
        """Stop the pool's processes (each holds its tokenizer, ~200 MB): the indexer calls this before the
        final keyword-index update, its largest allocation, so the two peaks do not add up."""
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __repr__(self) -> str:
        return f"ProcessExecutor(workers={self.workers})"


class RayExecutor(_Closing):
    """Ray tasks on a cluster: `address` "ray://HOST:PORT" (Ray client), "HOST:PORT" (a cluster's GCS address,
    from one of its nodes), or None: `ray.init()` attaches to `$RAY_ADDRESS` or a cluster started here with
    `ray start`, else starts a local one.

    Each item is one task (`num_cpus` CPUs) with Ray's own retries: `max_retries=retries` when a worker or node
    dies, and `retry_exceptions` for exceptions `fn` raises. Back-pressure: at most `window` tasks are submitted
    and not yet yielded; the head of the order is awaited with `ray.wait`. Workers read notebooks and write
    nothing: files must be visible at the same paths on every node (a shared mount) and nbrecall installed in
    the same environment there.
    """

    in_process = False

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        retries: int = 2,
        retry_exceptions: bool = False,
        num_cpus: float = 1,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        ray = import_ray()
        self.address = address
        self.retries = max(0, retries)
        self.retry_exceptions = retry_exceptions
        self.num_cpus = num_cpus
        self._owned = False
        if not ray.is_initialized():
            # Offline by default: a cluster this process starts sends no usage statistics (set it to 1 to opt in).
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            kwargs: dict[str, Any] = {"logging_level": "warning"}
            if address is None:
                kwargs["include_dashboard"] = False  # a local cluster needs no web dashboard
            kwargs.update(init_kwargs or {})
            if address:
                _probe(address)  # Ray itself waits long (a GCS address: minutes) before it gives up
            try:
                ray.init(address=address, **kwargs)
            except Exception as exc:
                raise ExecutorError(_unreachable(address, exc)) from exc
            self._owned = True
        cpus = 0
        with contextlib.suppress(Exception):
            cpus = int(ray.cluster_resources().get("CPU", 0) // max(num_cpus, 1e-9))
        self.workers = max(1, workers or cpus or 1)
        self._remote = ray.remote(num_cpus=num_cpus, max_retries=self.retries, retry_exceptions=retry_exceptions)(
            _call
        )

    @property
    def window(self) -> int:
        return 2 * self.workers

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, on_error: OnError | None = None) -> Iterator[R]:
        ray = import_ray()
        fn_ref = ray.put(fn)  # shipped once per map, not once per task
        window: deque[tuple[Any, Any]] = deque()
        source = iter(items)
        exhausted = False
        try:
            while True:
                while not exhausted and len(window) < self.window:
                    try:
                        item = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    window.append((item, self._remote.remote(fn_ref, item)))
                if not window:
                    return
                item, ref = window[0]
                ray.wait([ref], num_returns=1)
                window.popleft()
                try:
                    result = ray.get(ref)
                except Exception as exc:
                    yield _failed(item, self._task_error(exc), on_error)
                    continue
                yield result
        finally:
            for _item, ref in window:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)

    def _task_error(self, exc: BaseException) -> BaseException:
        """The error of one task (its own exception, or a lost worker); a lost cluster raises ExecutorError."""
        ray = import_ray()
        errors = ray.exceptions
        if isinstance(exc, errors.RayTaskError):
            cause = getattr(exc, "cause", None)
            return cause if isinstance(cause, BaseException) else exc
        per_task = tuple(
            getattr(errors, name)
            for name in ("WorkerCrashedError", "OutOfMemoryError", "ObjectLostError", "TaskCancelledError",
                         "NodeDiedError", "TaskUnschedulableError")
            if hasattr(errors, name)
        )
        if isinstance(exc, per_task):
            return exc
        where = self.address or "ray (local)"
        raise ExecutorError(
            f"the Ray cluster at {where} failed during the run ({type(exc).__name__}: {exc}); "
            "check the cluster (`ray status` on the head node) and run again: finished batches are kept"
        ) from exc

    def close(self) -> None:
        if self._owned:
            ray = import_ray()
            with contextlib.suppress(Exception):
                ray.shutdown()
            self._owned = False

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, workers={self.workers})"


def _call(fn: Callable[[Any], Any], item: Any) -> Any:
    """The Ray task: `fn` arrives as an object reference resolved by Ray, the item by value."""
    return fn(item)


def import_ray() -> Any:
    """`ray`, imported on first use (an optional dependency), or ExecutorError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError(f"the ray executor needs Ray, which is not installed: {RAY_EXTRA_HINT}") from exc
    return ray


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast with ExecutorError when nothing listens at the address (a TCP connect, nothing sent)."""
    host, _sep, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        raise ExecutorError(_unreachable(address, exc)) from exc


def _unreachable(address: str | None, exc: BaseException) -> str:
    detail = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if address and address.startswith("ray://"):
        return (
            f"cannot reach the Ray cluster at {address} ({detail}). Check that its head node runs "
            "`ray start --head --ray-client-server-port=PORT` with that port, that this machine can reach it, and "
            "that Ray and Python versions match on both sides; or use --executor local"
        )
    if address:
        return (
            f"cannot connect to the Ray cluster at {address} ({detail}). A HOST:PORT address is the cluster's GCS "
            "address and works only from a node of that cluster (`ray start --address=...` here first); from "
            "elsewhere use ray://HOST:PORT (the head's client server port, default 10001); or use --executor local"
        )
    return (
        f"cannot start or attach to a local Ray cluster ({detail}). Check $RAY_ADDRESS and `ray status`, or use "
        "--executor local"
    )


# --- choosing one from the settings -----------------------------------------------------------------------------

EXECUTOR_KINDS = "local | ray | ray://HOST:PORT | HOST:PORT"


def parse_kind(kind: str) -> tuple[str, str | None]:
    """("local", None), ("ray", None), ("ray", address); ExecutorError for anything else."""
    value = (kind or "local").strip()
    if value in ("local", "inline"):
        return value, None
    if value == "ray":
        return "ray", None
    if value.startswith("ray://") and len(value) > len("ray://"):
        return "ray", value
    host, sep, port = value.rpartition(":")
    if sep and host and port.isdigit():
        return "ray", value
    raise ExecutorError(f"executor {kind!r}: expected one of {EXECUTOR_KINDS}")


def make_executor(kind: str = "local", workers: int = 0, retries: int = 2) -> Executor:
    """The executor a setting names: "local" is a process pool (inline when `workers` is 1), "inline" this process,
    "ray" / "ray://HOST:PORT" / "HOST:PORT" a Ray cluster (`workers` 0: as many as the cluster has CPUs)."""
    name, address = parse_kind(kind)
    if name == "inline" or (name == "local" and workers == 1):
        return InlineExecutor()
    if name == "local":
        return ProcessExecutor(workers or None, retries=retries)
    return RayExecutor(address, workers or None, retries=retries)
