"""Bounded heavy work for the web app: render worker processes, each task within a time and memory budget.

A notebook is untrusted input that can make its rendering arbitrarily expensive (deep HTML, 60,000 cells, a
50 MB output). `RenderPool` runs that work in `workers` separate processes (`nbrecall.web.worker`), so that:

- a task that runs past its time budget, or whose process grows past `memory_mb`, is stopped (the process is
  killed and replaced) and the caller shows the page degraded: no hung worker, no pinned CPU, no memory spike;
- at most `workers` tasks run at once, and at most `max_waiting` more wait for a process; beyond that a request
  is told at once that the server is busy. Routes run in the server's thread pool, so this bounds how many of
  its threads heavy requests can hold: searches always find a free thread and never queue behind a render;
- identical requests in flight share one computation, and results are kept by key (notebook hash, file state,
  page) in a byte-bounded LRU cache, so a report or a page is computed once per notebook, not once per viewer;
  failures are remembered for a while too, so a notebook that blew its budget does not burn it on every view.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

POLL = 0.05  # seconds between checks of a running task's memory
FAILURE_TTL = 600.0  # seconds a failed task is not tried again
START_TIMEOUT = 60.0  # seconds for a new worker to answer its first request


class RenderBusy(Exception):
    """Every render process is taken and enough requests already wait for one: try again shortly."""


class RenderFailed(Exception):
    """A task ran past its time or memory budget, its process died, or the task raised; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(eq=False)  # compared and hashed by identity: kept in a set
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection
    ready: bool = False  # it sent its "ready" (libraries loaded)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def rss(self) -> int:
        """Resident memory in bytes (Linux; 0 elsewhere)."""
        try:
            with open(f"/proc/{self.process.pid}/statm", "rb") as handle:
                return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.process.wait(timeout=5)
        with contextlib.suppress(OSError):
            self.conn.close()


class _Cache:
    """Results by key, least recently used dropped first, at most `capacity` bytes (their pickled size)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.size = 0
        self.lock = threading.Lock()

    def get(self, key: Hashable) -> tuple[bool, Any]:
        with self.lock:
            if key not in self.items:
                return False, None
            self.items.move_to_end(key)
            return True, self.items[key][0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        if size > self.capacity // 4:  # one huge result must not flush everything else
            return
        with self.lock:
            if key in self.items:
                self.size -= self.items.pop(key)[1]
            self.items[key] = (value, size)
            self.size += size
            while self.size > self.capacity and self.items:
                _key, (_value, dropped) = self.items.popitem(last=False)
                self.size -= dropped


class RenderPool:
    """`workers` render processes shared by every request; see the module docstring."""

    def __init__(
        self,
        workers: int = 2,
        memory_mb: int = 1024,
        cache_mb: int = 64,
        queue_timeout: float = 30.0,
        max_waiting: int | None = None,
    ) -> None:
        self.workers = max(1, int(workers))
        self.memory = max(64, int(memory_mb)) * 1024 * 1024
        self.queue_timeout = queue_timeout
        self.max_waiting = 4 * self.workers if max_waiting is None else max(0, max_waiting)
        self.cache = _Cache(max(1, int(cache_mb)) * 1024 * 1024)
        self._slots = threading.BoundedSemaphore(self.workers)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._inflight: dict[Hashable, Future[Any]] = {}
        self._failures: OrderedDict[Hashable, tuple[float, str]] = OrderedDict()
        self._admitted = 0
        self._closed = False
        self.stats = {"tasks": 0, "cache_hits": 0, "shared": 0, "timeouts": 0, "memory": 0, "crashes": 0, "busy": 0}

    # ------------------------------------------------------------------------------------------------------
    # the one entry point

    def run(self, key: Hashable, task: str, kwargs: dict[str, Any], timeout: float) -> Any:
        """The result of `task(**kwargs)` in a render process (cached by `key`; None: do not cache).

        Raises RenderBusy when no process frees up in time or too many requests wait, RenderFailed when the
        task overran `timeout` seconds or the memory budget, its process died, or the task itself raised.
        """
        if key is not None:
            hit, value = self.cache.get(key)
            if hit:
                self._count("cache_hits")
                return value
            failed = self._failure(key)
            if failed is not None:
                raise RenderFailed(failed)
        with self._lock:
            if self._closed:
                raise RenderBusy("the server is stopping")
            if self._admitted >= self.workers + self.max_waiting:
                self.stats["busy"] += 1  # under the lock already
                raise RenderBusy(f"{self._admitted} notebook renders are running or waiting")
            self._admitted += 1
            shared = self._inflight.get(key) if key is not None else None
            owner = shared is None
            if owner and key is not None:
                shared = Future()
                self._inflight[key] = shared
        try:
            if not owner:
                self._count("shared")
                assert shared is not None
                try:
                    return shared.result(timeout=self.queue_timeout + timeout + START_TIMEOUT)
                except FutureTimeout:
                    raise RenderBusy("the same page is being rendered for another request") from None
            try:
                value, size = self._execute(task, kwargs, timeout)
            except RenderFailed as exc:
                if key is not None:
                    self._remember_failure(key, exc.reason)
                if shared is not None:
                    shared.set_exception(exc)
                raise
            except BaseException as exc:
                if shared is not None:
                    shared.set_exception(exc)
                raise
            if key is not None:
                self.cache.put(key, value, size)
            if shared is not None:
                shared.set_result(value)
            return value
        finally:
            with self._lock:
                self._admitted -= 1
                if owner and key is not None:
                    self._inflight.pop(key, None)

    # ------------------------------------------------------------------------------------------------------
    # processes

    def start(self) -> None:
        """Start every process now (the server does at start-up, so the first page does not wait for one)."""
        with self._lock:
            missing = self.workers - len(self._all)
        for _ in range(max(0, missing)):
            worker = self._spawn()
            with self._lock:
                self._idle.append(worker)

    def close(self) -> None:
        """Stop every process, idle or busy (the requests they served get RenderFailed); a later `run` is refused
        with RenderBusy: the server is stopping."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for worker in workers:
            worker.kill()

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1

    def pids(self) -> list[int]:
        with self._lock:
            return [w.process.pid for w in self._all if w.alive]

    def _spawn(self) -> _Worker:
        if self._closed:
            raise RenderBusy("the server is stopping")
        parent, child = socket.socketpair()
        main = threading.current_thread() is threading.main_thread()
        args = [sys.executable, "-m", "nbrecall.web.worker", str(child.fileno()), str(os.getpid())]
        if main:
            args.append("pdeathsig")
        try:
            process = subprocess.Popen(
                args, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True
            )
        finally:
            child.close()
        worker = _Worker(process, Connection(parent.detach()))
        with self._lock:
            self._all.add(worker)
        return worker

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive:
                    return worker
                self._all.discard(worker)
                worker.kill()
        return self._spawn()

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if worker in self._all:
                self._idle.append(worker)

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._all.discard(worker)
        worker.kill()

    def _execute(self, task: str, kwargs: dict[str, Any], timeout: float) -> tuple[Any, int]:
        if not self._slots.acquire(timeout=self.queue_timeout):
            self._count("busy")
            raise RenderBusy(f"no render process was free within {self.queue_timeout:.0f} s")
        try:
            self._count("tasks")
            worker = self._ready_worker()
            try:
                worker.conn.send((task, kwargs))
                data = self._wait(worker, timeout)
            except (EOFError, OSError, ValueError):
                self._discard(worker)
                self._count("crashes")
                raise RenderFailed("the render process died (it ran out of memory or crashed)") from None
            self._give_back(worker)
            reply = pickle.loads(data)
            if reply[0] == "ok":
                return reply[1], len(data)
            raise RenderFailed(f"rendering failed: {reply[1]}")
        finally:
            self._slots.release()

    def _ready_worker(self) -> _Worker:
        """An idle process, or a new one once it has loaded its libraries (that start-up is not charged to the
        task's budget)."""
        for _attempt in range(3):
            worker = self._take()
            if worker.ready:
                return worker
            try:
                if worker.conn.poll(START_TIMEOUT) and worker.conn.recv()[0] == "ready":
                    worker.ready = True
                    return worker
            except (EOFError, OSError, ValueError):
                pass
            self._discard(worker)
        raise RenderFailed("no render process could be started")

    def _wait(self, worker: _Worker, timeout: float) -> bytes:
        """The worker's reply, within `timeout` seconds and the memory limit; kills it and raises otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._discard(worker)
                self._count("timeouts")
                raise RenderFailed(f"rendering took longer than {timeout:g} s")
            try:
                ready = worker.conn.poll(min(POLL, remaining))
            except (OSError, ValueError):
                raise EOFError from None
            if ready:
                try:
                    return worker.conn.recv_bytes()
                except (OSError, ValueError):
                    raise EOFError from None
            if not worker.alive:
                raise EOFError
            if worker.rss() > self.memory:
                self._discard(worker)
                self._count("memory")
                raise RenderFailed(f"rendering needed more than {self.memory // (1024 * 1024)} MB")

    # ------------------------------------------------------------------------------------------------------
    # failures

    def _failure(self, key: Hashable) -> str | None:
        with self._lock:
            found = self._failures.get(key)
            if found is None:
                return None
            at, reason = found
            if time.monotonic() - at > FAILURE_TTL:
                del self._failures[key]
                return None
            return reason

    def _remember_failure(self, key: Hashable, reason: str) -> None:
        with self._lock:
            self._failures[key] = (time.monotonic(), reason)
            while len(self._failures) > 512:
                self._failures.popitem(last=False)
