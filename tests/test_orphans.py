"""Workers die with their parent: after kill -9 of an indexer mid-run no worker of it is alive 5 s later (they
used to run on, one at 544 MB, for minutes), and the next run resumes as before."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from nbformat import v4

from conftest import HashEmbedder, code, result, write_nb
from nbrecall.config import Settings
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index

TESTS = Path(__file__).parent


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            todo.extend(children - found)
            found |= children
    return found


def wait_gone(pids: set[int], within: float) -> set[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return set()
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


POOL_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from executor_tasks import Sleeper
    from nbrecall.executor import ProcessExecutor

    with ProcessExecutor(2) as pool:
        for _ in pool.map(Sleeper(Path({folder!r})), range(8)):
            pass
""")


def test_pool_workers_die_with_a_killed_parent(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", POOL_SCRIPT.format(tests=str(TESTS), folder=str(tmp_path))])
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = {int(p.stem) for p in tmp_path.glob("*.pid")}
    assert len(workers) == 2, "the workers did not start"
    family = descendants(proc.pid) | workers  # the workers and multiprocessing's resource tracker
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert wait_gone(family, within=5.0) == set()


INDEX_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from slow_embedder import SlowTokens
    from nbrecall.config import Settings
    from nbrecall.index.store import LanceStore
    from nbrecall.executor import ProcessExecutor
    from nbrecall.ingest.pipeline import run_index

    emb = SlowTokens()
    settings = Settings(index_dir=Path({index!r}))
    with ProcessExecutor(2) as pool:
        run_index([Path({root!r})], settings, emb, LanceStore(Path({index!r}) / "lance", emb.dim), executor=pool,
                  batch_notebooks=2)
""")


@pytest.mark.slow
def test_a_killed_indexer_leaves_no_worker_and_the_next_run_resumes(tmp_path: Path) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    for i in range(30):
        write_nb(root / f"nb{i:02d}.ipynb", [v4.new_markdown_cell(f"# Study {i}\nHull {i} resistance."),
                                             code(f"r{i} = {i} * 2.5", 1, [result(str(i * 2.5), 1)])])
    proc = subprocess.Popen([sys.executable, "-c", INDEX_SCRIPT.format(tests=str(TESTS), index=str(index),
                                                                       root=str(root))])
    deadline = time.monotonic() + 60
    family: set[int] = set()
    while time.monotonic() < deadline:  # until both pool workers run (spawned: python children of the indexer)
        family = descendants(proc.pid)
        if len(family) >= 3 and (index / "manifest.sqlite").exists():
            break
        time.sleep(0.1)
    assert len(family) >= 3, family  # two workers and the resource tracker
    time.sleep(0.5)  # mid-run: workers are chunking (0.2 s per notebook)
    family |= descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert wait_gone(family, within=5.0) == set()

    done = _indexed(index)
    assert done < 30, "the run finished before it was killed"
    embedder = HashEmbedder()
    report = run_index([root], Settings(index_dir=index), embedder, LanceStore(index / "lance", embedder.dim))
    assert report.notebooks_indexed == 30 - done  # resumed: what the killed run finished is not done again
    assert _indexed(index) == 30


def _indexed(index: Path) -> int:
    if not (index / "manifest.sqlite").exists():
        return 0
    manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
    try:
        return manifest.stats()["notebooks"]
    finally:
        manifest.close()
