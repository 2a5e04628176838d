"""Ray tasks on a cluster (an optional dependency, imported on first use)."""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from nbrecall.executor.base import ExecutorError, OnError, R, T, _Closing, _failed

RAY_EXTRA_HINT = "pip install 'nbrecall[ray]' (or pip install 'ray[client]')"


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
                if not exhausted and len(window) < self.window:
                    wanted = self.window - len(window)
                    fresh = list(itertools.islice(source, wanted))
                    exhausted = len(fresh) < wanted
                    window.extend((item, self._remote.remote(fn_ref, item)) for item in fresh)
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
