"""A spawn process pool on this machine, and the workers' tie to their parent (`die_with_parent`)."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from nbrecall.executor.base import OnError, R, T, _Closing, _failed


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
