"""Indexing behind a running server (`nbrecall serve ROOT`): the first run at once, then again whenever
something changes, so a notebook saved into ROOT is searchable within a minute.

Each run is an ordinary incremental `run_index` (unchanged files are only stat'ed, new and changed ones parsed,
deleted ones dropped, malformed ones quarantined), in a thread of the server process, writing through the same
store the server searches: every batch is keyword-searchable as soon as it is written, vectors follow, exactly as
`nbrecall index` does. What starts a run:

- the server's start (the first run indexes ROOT);
- `watch`: file-system events under ROOT (`watchfiles`: inotify on Linux), debounced, so a notebook saved in
  pieces or a folder copied in costs one run, not hundreds; events during a run start one more run after it;
- `every`: a timer, for network shares (SMB, NFS) where the server's kernel never hears of changes made on other
  machines: a run with nothing changed costs a stat per file (6-8 s at 41,000 notebooks, bench/README.md).

A run that fails (disk full, another `nbrecall index` holding the writer lock) is reported in `status()` and the
next trigger (or a retry 30 s later) tries again; the server keeps serving what is indexed. Stopping (`close`)
ends a run at its next batch boundary, where the index is consistent.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nbrecall.config import Settings
from nbrecall.executor import Executor, InlineExecutor
from nbrecall.index.embed import Embedder
from nbrecall.notebook.archives import is_zip_name
from nbrecall.protocols import Store

log = logging.getLogger("nbrecall.live")

RETRY_SECONDS = 30.0  # after a failed or refused run
DEBOUNCE_MS = 1600  # events closer together than this are one change (watchfiles' default)


def parse_duration(text: str) -> float:
    """`90`, `90s`, `10m`, `1h`, `24h`, `1d` → seconds; ValueError for anything else (or below one second)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*", text or "")
    if not match:
        raise ValueError(f"{text!r} is no duration: write 30s, 10m, 1h or 1d")
    seconds = float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    if seconds < 1:
        raise ValueError(f"{text!r}: at least one second")
    return seconds


class _Stopped(Exception):
    """Raised from the progress callback to end a run at a batch boundary when the server stops."""


@dataclass
class LiveStatus:
    """What the page shows of the background indexing (`/api/progress`)."""

    state: str = "starting"  # starting | discovering | indexing | embedding | idle | waiting | failed | stopped
    roots: list[str] = field(default_factory=list)
    watching: bool = False
    every_seconds: float | None = None
    runs: int = 0  # runs started since the server started
    trigger: str = ""  # what started the current (or last) run
    run_started_at: float | None = None
    phase_started_at: float | None = None
    notebooks_done: int = 0  # this run: new or changed notebooks written so far
    notebooks_total: int | None = None  # this run: new or changed notebooks to write (None: still discovering)
    vectors_done: int = 0  # this run: chunks given a vector so far
    vectors_total: int | None = None
    eta_seconds: float | None = None  # the current phase's time left, from its rate so far
    last_finished_at: float | None = None
    last_seconds: float | None = None
    last_summary: dict[str, Any] = field(default_factory=dict)
    last_error: str | None = None
    next_run_at: float | None = None  # a periodic run, or a retry after a failure


def _eta(done: int, total: int | None, since: float | None, now: float) -> float | None:
    if total is None or since is None or done <= 0 or done >= total:
        return None
    rate = done / max(now - since, 1e-6)
    return (total - done) / rate


class LiveIndexer:
    """The background indexing of one server: `start()`, `trigger(reason)`, `status()`, `close()`.

    `embedder` and `store` are the server's own (one model and one set of caches in memory); `make_executor`
    builds the executor of each run (default: this process; `serve` passes the configured process pool, whose
    workers start only when a run has notebooks to parse)."""

    def __init__(
        self,
        roots: list[Path],
        settings: Settings,
        embedder: Embedder,
        store: Store,
        *,
        watch: bool = False,
        every: float | None = None,
        make_executor: Callable[[], Executor] | None = None,
        defer_vectors: bool = False,
        batch_notebooks: int = 16,
        debounce_ms: int = DEBOUNCE_MS,
    ) -> None:
        self.roots = [Path(r) for r in roots]
        self.settings = settings
        self.embedder = embedder
        self.store = store
        self.watch = watch
        self.every = every
        self.make_executor = make_executor or InlineExecutor
        self.defer_vectors = defer_vectors
        self.batch_notebooks = batch_notebooks
        self.debounce_ms = debounce_ms
        self._lock = threading.Lock()
        self._status = LiveStatus(roots=[str(r) for r in self.roots], watching=watch, every_seconds=every)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._reasons: list[str] = []
        self._threads: list[threading.Thread] = []

    # --- control -------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the first run now, and the watcher (with `watch`)."""
        self.trigger("server start")
        runner = threading.Thread(target=self._loop, name="nbrecall-live-index", daemon=True)
        self._threads.append(runner)
        runner.start()
        if self.watch:
            watcher = threading.Thread(target=self._watch, name="nbrecall-live-watch", daemon=True)
            self._threads.append(watcher)
            watcher.start()

    def trigger(self, reason: str) -> None:
        """Ask for a run (one more after the current one, if one is running)."""
        with self._lock:
            self._reasons.append(reason)
        self._wake.set()

    def close(self, timeout: float = 15.0) -> None:
        """Stop watching and end the run in progress at its next batch boundary (within `timeout`)."""
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._update(state="stopped", eta_seconds=None, next_run_at=None)

    def status(self) -> dict[str, Any]:
        with self._lock:
            data = asdict(self._status)
        now = time.time()
        if data["state"] == "indexing":
            data["eta_seconds"] = _eta(data["notebooks_done"], data["notebooks_total"], data["phase_started_at"], now)
        elif data["state"] == "embedding":
            data["eta_seconds"] = _eta(data["vectors_done"], data["vectors_total"], data["phase_started_at"], now)
        data["busy"] = data["state"] in ("starting", "discovering", "indexing", "embedding")
        return data

    def _update(self, **values: Any) -> None:
        with self._lock:
            for key, value in values.items():
                setattr(self._status, key, value)

    # --- the runs ------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            timeout = None
            next_at = self._status.next_run_at
            if next_at is not None:
                timeout = max(0.0, next_at - time.time())
            woke = self._wake.wait(timeout)
            if self._stop.is_set():
                return
            self._wake.clear()
            with self._lock:
                reasons, self._reasons = self._reasons, []
            reason = ", ".join(dict.fromkeys(reasons)) if woke and reasons else "timer"
            self._run(reason)

    def _run(self, reason: str) -> None:
        from nbrecall.index.faults import IndexFault
        from nbrecall.ingest.lock import IndexLocked
        from nbrecall.ingest.pipeline import kept_notes, run_index

        started = time.time()
        self._update(state="discovering", trigger=reason, runs=self._status.runs + 1, run_started_at=started,
                     phase_started_at=started, notebooks_done=0, notebooks_total=None, vectors_done=0,
                     vectors_total=None, next_run_at=None)
        retry = None
        try:
            with self.make_executor() as executor:
                report = run_index(self.roots, self.settings, self.embedder, self.store, progress=self._progress,
                                   batch_notebooks=self.batch_notebooks, defer_vectors=self.defer_vectors,
                                   executor=executor)
        except _Stopped:
            return
        except IndexLocked as exc:
            self._update(state="waiting", last_error=str(exc))
            retry = RETRY_SECONDS
        except IndexFault as exc:  # disk full, read-only folder, damaged file: the message says what to do
            self._update(state="failed", last_error=str(exc))
            retry = RETRY_SECONDS
        except Exception as exc:  # a bug: logged with its traceback; the server keeps serving what is indexed
            log.exception("background index run failed")
            self._update(state="failed", last_error=f"{type(exc).__name__}: {exc}")
            retry = RETRY_SECONDS
        else:
            kept = kept_notes(report)
            summary = {
                "files": report.files, "changed": report.changed, "deleted": report.deleted_files,
                "indexed": report.notebooks_indexed, "removed": report.notebooks_removed,
                "quarantined": [{"path": rel, "reason": why} for rel, why in report.quarantined],
                "chunks": report.chunks_written, "vectors_waiting": report.vectors_pending,
                "kept": kept,
            }
            for note in kept:
                log.warning(note)
            self._update(state="idle", last_error=None, last_summary=summary)
            log.info("indexed %s: %d new or changed, %d removed, %d quarantined (%s)", ", ".join(map(str, self.roots)),
                     report.notebooks_indexed, report.notebooks_removed, len(report.quarantined), reason)
        finally:
            finished = time.time()
            self._update(last_finished_at=finished, last_seconds=finished - started, eta_seconds=None)
        if retry is not None or self.every is not None:
            self._update(next_run_at=time.time() + (retry if retry is not None else float(self.every or 0)))

    def _progress(self, stage: str, done: int, total: int) -> None:
        if self._stop.is_set():
            raise _Stopped()
        now = time.time()
        with self._lock:
            status = self._status
            if stage != status.state:
                status.state = stage
                status.phase_started_at = now
            if stage == "embedding":
                status.vectors_done, status.vectors_total = done, total
            else:
                status.notebooks_done, status.notebooks_total = done, total

    # --- file-system events ----------------------------------------------------------------------------------

    def _watch(self) -> None:
        try:
            from watchfiles import watch
        except ImportError:  # pragma: no cover - a dependency; said once, `every` still works
            log.error("watchfiles is not installed: --watch cannot see changes (pip install watchfiles)")
            return
        paths = [str(r) for r in self.roots if r.exists()]
        if not paths:
            return
        accept = NotebookChanges(self.settings, self.roots)
        try:
            for changes in watch(*paths, watch_filter=accept, debounce=self.debounce_ms, stop_event=self._stop,
                                 raise_interrupt=False):
                if changes:
                    self.trigger(f"{len(changes)} file change(s)")
        except Exception as exc:  # e.g. too many folders for the inotify limit: say it, keep serving
            log.error("watching %s stopped: %s (changes are picked up by --every, if given)", paths, exc)
            self._update(watching=False, last_error=f"watching stopped: {exc}")


class NotebookChanges:
    """Which file-system events can change the index: a notebook or a tag sidecar added or modified, a folder
    added (one copied or moved in whole raises no event per notebook), anything deleted (a deleted folder is
    gone before it can be told from a file; a run with nothing to do costs a stat per file). Not the index
    folder's own writes (an index inside ROOT would otherwise re-trigger itself forever), not hidden or excluded
    folders under a root."""

    def __init__(self, settings: Settings, roots: list[Path]) -> None:
        self.sidecar = settings.metadata.sidecar_suffix
        self.skip_hidden = settings.discover.skip_hidden
        self.exclude = set(settings.discover.exclude)
        self.index_dir = os.path.realpath(settings.index_dir)
        self.roots = [os.path.abspath(r) for r in roots]
        self.zips = settings.discover.zip_archives  # a zip archive saved or replaced: its notebooks may have changed

    def __call__(self, change: Any, path: str) -> bool:
        from watchfiles import Change

        real = os.path.realpath(path)
        if real == self.index_dir or real.startswith(self.index_dir + os.sep):
            return False
        absolute = os.path.abspath(path)
        root = next((r for r in self.roots if absolute == r or absolute.startswith(r.rstrip(os.sep) + os.sep)), None)
        parts = Path(os.path.relpath(absolute, root)).parts if root else Path(path).parts[-1:]
        if any(p in self.exclude for p in parts) or (self.skip_hidden and any(p.startswith(".") for p in parts)):
            return False
        if change == Change.deleted:
            return True
        name = parts[-1] if parts else ""
        return (name.endswith(".ipynb") or (self.zips and is_zip_name(name))
                or (bool(self.sidecar) and name.endswith(self.sidecar)) or os.path.isdir(path))
