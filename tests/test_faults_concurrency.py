"""Concurrent use: searches (threads and a second process) while an index run rewrites the corpus, and a second
indexer on the same index.

Every search must succeed, and every notebook must be seen at its old or its new version: the hits of a result
come from one content, that content is complete in the store, and a path is never shown at two versions at
once. `bench/faults_concurrency.py` runs the same checks for longer and prints the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from nbformat import v4

from conftest import HashEmbedder, code, result, write_nb
from nbrecall.config import Settings
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest.lock import IndexLocked
from nbrecall.ingest.pipeline import run_index
from nbrecall.search.retrieve import SearchResult, retrieve
from nbrecall.service import Archive

TESTS = Path(__file__).parent
VERSIONS = ("alphaversion", "betaversion")


def write_corpus(root: Path, version: int, n: int, *, skip: tuple[int, ...] = (), rev: int = 0) -> None:
    """`n` small notebooks whose every cell carries the version marker, so a chunk tells which version it is;
    `rev` makes the texts new (nothing from the embedding cache), so every round makes the writer work."""
    marker = VERSIONS[version] + (f" rev{rev}" if rev else "")
    for i in range(n):
        path = root / f"nb{i:03d}.ipynb"
        if i in skip:
            path.unlink(missing_ok=True)
            continue
        write_nb(
            path,
            [
                v4.new_markdown_cell(f"# Study {i} {marker}\nHull {i} resistance, {marker} of the calculation."),
                code(f"r{i} = {i} * 2.5  # {marker}", 1, [result(f"{i * 2.5} {marker}", 1)]),
                v4.new_markdown_cell(f"## Mooring {i} {marker}\nAnchor line {i} pretension {marker}."),
                code(f"t{i} = {i} * 10  # {marker}", 2),
            ],
        )


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from conftest import HashEmbedder
    from nbrecall.config import Settings
    from nbrecall.index.store import LanceStore
    from nbrecall.ingest.pipeline import run_index

    class Slow(HashEmbedder):
        def embed(self, texts):
            time.sleep({delay})
            return super().embed(texts)

    emb = Slow()
    index = Path({index!r})
    print("started", flush=True)
    run_index([Path({root!r})], Settings(index_dir=index), emb, LanceStore(index / "lance", emb.dim),
              batch_notebooks={batch})
""")


def start_writer(root: Path, index: Path, delay: float = 0.05, batch: int = 2) -> subprocess.Popen[str]:
    script = WRITER.format(tests=str(TESTS), index=str(index), root=str(root), delay=delay, batch=batch)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    return proc


def version_of(manifest: SqliteManifest, sha: str) -> str:
    """The single version marker of a content's cells in the manifest ("mixed" if they disagree)."""
    found = {v for c in manifest.cells(sha) for v in VERSIONS if v in c.source}
    return found.pop() if len(found) == 1 else f"mixed {sorted(found)}"


@dataclass
class Tally:
    queries: int = 0
    errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    seen: dict[str, set[str]] = field(default_factory=dict)  # path → versions seen over the run
    lock: threading.Lock = field(default_factory=threading.Lock)


def check_result(found: SearchResult, manifest: SqliteManifest, query: str, tally: Tally) -> None:
    """Each notebook of a result at one version: its hits from one content whose cells all carry one version
    marker, no hit showing the other marker, and no path shown twice (at its old and its new content)."""
    problems: list[str] = []
    paths: dict[str, str] = {}
    for nb in found.notebooks:
        if any(h.nb_sha != nb.nb_sha for h in nb.hits):
            problems.append(f"{nb.notebook}: hits from several contents")
        version = version_of(manifest, nb.nb_sha)
        if version.startswith("mixed"):
            problems.append(f"{nb.notebook}: cells of {version}")
        for hit in nb.hits:
            other = [v for v in VERSIONS if v != version and v in hit.snippet]
            if other:
                problems.append(f"{nb.notebook}: {version} content shows a {other[0]} chunk")
        if nb.notebook in paths and paths[nb.notebook] != nb.nb_sha:
            problems.append(f"{nb.notebook}: shown at two versions in one result")
        paths[nb.notebook] = nb.nb_sha
        with tally.lock:
            tally.seen.setdefault(nb.notebook, set()).add(version)
    with tally.lock:
        tally.queries += 1
        tally.violations.extend(f"{query!r}: {p}" for p in problems)


def record_error(tally: Tally, where: str, exc: BaseException) -> None:
    with tally.lock:
        tally.queries += 1
        tally.errors.append(f"{where}: {type(exc).__name__}: {exc}")


def check_search(index: Path, embedder: HashEmbedder, query: str, tally: Tally) -> None:
    """One search as a one-shot reader does it (`nbrecall search`: its own store and read-only manifest)."""
    try:
        store = LanceStore(index / "lance", embedder.dim)
        manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
        try:
            found = retrieve(query, store, manifest, embedder.embed([query])[0], Settings().retrieve)
            check_result(found, manifest, query, tally)
        finally:
            manifest.close()
    except Exception as exc:  # any failure of a search while the index is written is a finding
        record_error(tally, repr(query), exc)


def server_loop(index: Path, stop: threading.Event, tally: Tally, n: int) -> None:
    """A long-lived reader as `serve` has it: one Archive opened before the run, queried through the web API."""
    from fastapi.testclient import TestClient

    from nbrecall.web.app import create_app

    archive = Archive(Settings(index_dir=index), _embedder=HashEmbedder())
    client = TestClient(create_app(archive.settings, archive=archive), base_url="http://127.0.0.1")
    i = 0
    while not stop.is_set():
        query = f"Hull {i % n} resistance"
        try:
            response = client.get("/api/search", params={"q": query, "k": 20})
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
            groups = response.json()["notebooks"]
            problems = []
            shown = [g["path"] for g in groups]
            if len(shown) != len(set(shown)):
                problems.append(f"a path shown twice: {sorted(shown)}")
            for group in groups:
                markers = {v for h in group["hits"] for v in VERSIONS if v in h["snippet"]}
                if len(markers) > 1:
                    problems.append(f"{group['path']}: hits of both versions")
                with tally.lock:
                    tally.seen.setdefault(group["path"], set()).update(markers)
            with tally.lock:
                tally.queries += 1
                tally.violations.extend(f"web {query!r}: {p}" for p in problems)
        except Exception as exc:
            record_error(tally, f"web {query!r}", exc)
        i += 1


def _counts(shas: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for sha in shas:
        counts[sha] = counts.get(sha, 0) + 1
    return counts


def check_store(index: Path, dim: int, tally: Tally) -> None:
    """Store-level: a content the manifest lists as visible has, in each table, all of its rows or (just deleted)
    none: its content chunks in the chunk table, its value facts in the fact table. Each table commits on its own
    (LanceDB has no transaction across tables), so while a notebook is deleted a reader may find its chunks gone
    and its facts not yet, or the reverse; within a table it is never half there."""
    try:
        manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
        try:
            visible = manifest.indexed_shas()
            expected = {c.sha256: (c.n_chunks, len(manifest.facts(c.sha256)))
                        for c in manifest.contents("indexed") if c.sha256 in visible}
        finally:
            manifest.close()
        store = LanceStore(index / "lance", dim)
        chunks = _counts(store.table.search().select(["nb_sha"]).limit(None).to_arrow()["nb_sha"].to_pylist())
        facts = _counts(store.facts.shas())
        for sha, (n, n_facts) in expected.items():
            for what, held, want in (("chunks", chunks.get(sha, 0), n - n_facts),
                                     ("facts", facts.get(sha, 0), n_facts)):
                if held not in (0, want):
                    with tally.lock:
                        tally.violations.append(f"store holds {held} of the {want} {what} of {sha[:12]}")
    except Exception as exc:
        with tally.lock:
            tally.errors.append(f"store check: {type(exc).__name__}: {exc}")


def reader_loop(index: Path, stop: threading.Event, tally: Tally, offset: int, n: int) -> None:
    embedder = HashEmbedder()
    i = offset
    while not stop.is_set():
        query = [f"Hull {i % n} resistance", "anchor line pretension", f"Mooring {i % n}"][i % 3]
        check_search(index, embedder, query, tally)
        if i % 5 == 0:
            check_store(index, embedder.dim, tally)
        i += 1


READER = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from test_faults_concurrency import Tally, check_search
    from conftest import HashEmbedder

    index, emb, tally, stop = Path({index!r}), HashEmbedder(), Tally(), Path({stop!r})
    print("ready", flush=True)
    deadline = time.monotonic() + {seconds}
    i = 0
    while time.monotonic() < deadline and not stop.exists():
        check_search(index, emb, f"Hull {{i % {n}}} resistance", tally)
        i += 1
    print(json.dumps({{"queries": tally.queries, "errors": tally.errors, "violations": tally.violations}}))
""")


def run_concurrently(
    root: Path,
    index: Path,
    n: int,
    *,
    threads: int,
    reader_seconds: float,
    delay: float,
    version: int = 1,
    rev: int = 0,
    skip: tuple[int, ...] = (1, 2),
    during: Callable[[subprocess.Popen[str]], None] | None = None,
) -> tuple[Tally, Tally, dict, float]:  # type: ignore[type-arg]
    """The other version written (`skip` deleted) and indexed by a writer process while readers search: threads
    of one-shot readers, a long-lived web server, and a second process (for at most `reader_seconds`, until the
    writer is done). `during(writer)` runs meanwhile. Returns (one-shot tally, web tally, the other process's
    figures, seconds the writer took)."""
    if not (index / "manifest.sqlite").exists():
        write_corpus(root, 0, n)
        embedder = HashEmbedder()
        run_index([root], Settings(index_dir=index), embedder, LanceStore(index / "lance", embedder.dim))
    write_corpus(root, version, n, skip=skip, rev=rev)
    tally, web, stop = Tally(), Tally(), threading.Event()
    stop_file = index.parent / "readers.stop"
    stop_file.unlink(missing_ok=True)
    script = READER.format(tests=str(TESTS), index=str(index), seconds=reader_seconds, n=n, stop=str(stop_file))
    reader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
    started = time.monotonic()
    writer = start_writer(root, index, delay=delay)
    workers = [
        threading.Thread(target=reader_loop, args=(index, stop, tally, t, n), daemon=True) for t in range(threads)
    ]
    workers.append(threading.Thread(target=server_loop, args=(index, stop, web, n), daemon=True))
    for w in workers:
        w.start()
    try:
        if during is not None:
            during(writer)
        assert writer.wait(timeout=900) == 0
    finally:
        elapsed = time.monotonic() - started
        stop.set()
        stop_file.touch()
        for w in workers:
            w.join(timeout=60)
    out, _ = reader.communicate(timeout=120)
    return tally, web, json.loads(out), elapsed


def second_indexer_refused(root: Path, index: Path, writer: subprocess.Popen[str]) -> str:
    """Start a second indexer on the index `writer` is writing; return how it was refused (IndexLocked's text)."""
    lock = index / "write.lock"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and writer.poll() is None:
        if lock.exists() and lock.read_text().strip() == str(writer.pid):
            break
        time.sleep(0.02)
    embedder = HashEmbedder()
    with pytest.raises(IndexLocked) as refused:
        run_index([root], Settings(index_dir=index), embedder, LanceStore(index / "lance", embedder.dim))
    return str(refused.value)


@pytest.mark.slow
def test_searches_during_an_index_run_see_each_notebook_at_one_version(tmp_path: Path) -> None:
    root, index, n = tmp_path / "share", tmp_path / "idx", 20
    refusals: list[tuple[int, str]] = []
    tally, web, other, _elapsed = run_concurrently(
        root, index, n, threads=2, reader_seconds=60, delay=0.08,
        during=lambda writer: refusals.append((writer.pid, second_indexer_refused(root, index, writer))),
    )
    # A second indexer on the same index is refused, naming the writer and what to do.
    [(pid, message)] = refusals
    assert f"another nbrecall process (pid {pid}) is writing to this index" in message
    assert "wait for it to finish, then run again" in message
    assert tally.queries >= 10 and web.queries >= 5 and other["queries"] >= 3
    assert tally.errors == [] and web.errors == [] and other["errors"] == []
    assert tally.violations == [] and web.violations == [] and other["violations"] == []
    # After the run: every notebook at its new version, the deleted ones gone.
    embedder = HashEmbedder()
    final = Tally()
    for i in range(n):
        check_search(index, embedder, f"Hull {i} resistance", final)
    assert final.errors == [] and final.violations == []
    assert set(final.seen) == {f"nb{i:03d}.ipynb" for i in range(n) if i not in (1, 2)}
    assert all(v == {"betaversion"} for v in final.seen.values())


def test_a_server_opened_before_an_index_run_serves_the_new_version(tmp_path: Path) -> None:
    """A long-lived reader follows another process's index runs (it used to keep searching its first snapshot)."""
    root, index = tmp_path / "share", tmp_path / "idx"
    write_corpus(root, 0, 6)
    embedder = HashEmbedder()
    run_index([root], Settings(index_dir=index), embedder, LanceStore(index / "lance", embedder.dim))
    archive = Archive(Settings(index_dir=index), _embedder=HashEmbedder())
    assert archive.search("Hull 3 resistance").notebooks[0].notebook == "nb003.ipynb"
    write_corpus(root, 1, 6)  # indexed by another writer (its own connection, as another process has)
    run_index([root], Settings(index_dir=index), embedder, LanceStore(index / "lance", embedder.dim))
    found = archive.search("Hull 3 resistance")
    assert found.notebooks and found.notebooks[0].notebook == "nb003.ipynb"
    assert version_of(archive.manifest, found.notebooks[0].nb_sha) == "betaversion"
