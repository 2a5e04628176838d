"""Crash-resume: kill -9 the indexer at random points, then run it cleanly; check the index is consistent.

    .venv/bin/python bench/faults_crash.py [--trials 20] [--notebooks 60] [--work /tmp/nbrecall-crash] [--seed 7]

One index lives through all trials. Each trial changes the corpus (edits, deletions, additions, copies), starts
`run_index` in a subprocess with a slow stand-in embedder, kills it with SIGKILL at a random moment of its
expected duration, checks what a reader sees right then, sometimes changes files again (so the killed batch is
never redone), and runs the indexer to completion. Consistent means:

* right after the kill: every notebook visible to search has all of its chunks, no path is shown at two contents;
* after the clean run: the manifest lists exactly the files on disk with their current SHA-256; every indexed
  content has exactly its chunks in the store, none twice; the store holds nothing the manifest does not know;
  no content without a file; each notebook is found by its own words at its current version.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from nbformat import v4  # noqa: E402

from conftest import HashEmbedder, code, result, write_nb  # noqa: E402
from nbrecall.config import Settings  # noqa: E402
from nbrecall.index.manifest import SqliteManifest  # noqa: E402
from nbrecall.index.store import LanceStore  # noqa: E402
from nbrecall.ingest.pipeline import run_index  # noqa: E402
from nbrecall.search.retrieve import retrieve  # noqa: E402
from test_faults_concurrency import start_writer  # noqa: E402


def write(root: Path, i: int, rev: int) -> None:
    write_nb(
        root / f"group{i % 4}/nb{i:03d}.ipynb",
        [
            v4.new_markdown_cell(f"# Study {i}\nHull form w{i}q resistance, revision r{rev}x."),
            code(f"r{i} = {i} * {rev + 1}.5  # w{i}q", 1, [result(f"{i * (rev + 1.5)}", 1)]),
            v4.new_markdown_cell(f"## Mooring w{i}q\nAnchor pretension of revision r{rev}x."),
            code(f"t{i} = {rev} * 10", 2),
        ],
    )


def mutate(root: Path, revs: dict[int, int], rng: random.Random, next_id: list[int]) -> None:
    """Edit ~12, delete ~3, add ~3 notebooks, and copy one (same content, second path)."""
    present = sorted(revs)
    for i in rng.sample(present, min(12, len(present))):
        revs[i] += 1
        write(root, i, revs[i])
    for i in rng.sample(sorted(revs), min(3, len(revs))):
        (root / f"group{i % 4}/nb{i:03d}.ipynb").unlink()
        del revs[i]
    for _ in range(3):
        i = next_id[0]
        next_id[0] += 1
        revs[i] = 0
        write(root, i, 0)
    for old in root.glob("copies/*.ipynb"):
        old.unlink()
    src = rng.choice(sorted(revs))
    (root / "copies").mkdir(exist_ok=True)
    shutil.copy(root / f"group{src % 4}/nb{src:03d}.ipynb", root / f"copies/copy of nb{src:03d}.ipynb")


def disk_files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.ipynb"))}


def visible_now(index: Path, queries: list[str]) -> list[str]:
    """Right after a kill: what a reader sees is whole (all chunks of each visible content, one content a path)."""
    problems: list[str] = []
    embedder = HashEmbedder()
    store = LanceStore(index / "lance", embedder.dim)
    manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
    try:
        counts = store.notebook_shas()
        n_chunks = {c.sha256: c.n_chunks for c in manifest.contents("indexed")}
        for query in queries:
            found = retrieve(query, store, manifest, embedder.embed([query])[0], Settings().retrieve)
            paths: dict[str, str] = {}
            for nb in found.notebooks:
                if counts.get(nb.nb_sha, 0) != n_chunks.get(nb.nb_sha):
                    problems.append(f"{nb.notebook}: {counts.get(nb.nb_sha, 0)} of {n_chunks.get(nb.nb_sha)} chunks")
                if paths.get(nb.notebook, nb.nb_sha) != nb.nb_sha:
                    problems.append(f"{nb.notebook}: shown at two contents")
                paths[nb.notebook] = nb.nb_sha
    finally:
        manifest.close()
    return problems


def check_consistent(root: Path, index: Path, revs: dict[int, int], rng: random.Random) -> list[str]:
    problems: list[str] = []
    embedder = HashEmbedder()
    store = LanceStore(index / "lance", embedder.dim)
    manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
    try:
        key = str(root.resolve())
        recorded = {rel: rec.sha256 for (r, rel), rec in manifest.files().items() if r == key}
        if recorded != disk_files(root):
            problems.append("manifest files differ from the disk")
        contents = manifest.contents()
        expected = {c.sha256: c.n_chunks for c in contents if c.status == "indexed"}
        counts = store.notebook_shas()
        wrong = {s: (counts.get(s, 0), n) for s, n in expected.items() if counts.get(s, 0) != n}
        if wrong:
            problems.append(f"{len(wrong)} contents without exactly their chunks")
        strays = set(counts) - {c.sha256 for c in contents}
        if strays:
            problems.append(f"{len(strays)} contents in the store unknown to the manifest")
        ids = store.table.search().select(["chunk_id"]).limit(None).to_arrow()["chunk_id"].to_pylist()
        if len(ids) != len(set(ids)):
            problems.append(f"{len(ids) - len(set(ids))} chunks twice")
        orphans = {c.sha256 for c in contents} - set(recorded.values())
        if orphans:
            problems.append(f"{len(orphans)} contents no file refers to")
        for i in rng.sample(sorted(revs), min(6, len(revs))):
            query = f"mooring w{i}q anchor pretension"
            found = retrieve(query, store, manifest, embedder.embed([query])[0], Settings().retrieve)
            top = found.notebooks[0] if found.notebooks else None
            want = f"group{i % 4}/nb{i:03d}.ipynb"
            if top is None or want not in top.paths:
                problems.append(f"{want} not found by its words")
            elif f"r{revs[i]}x" not in " ".join(c.source for c in manifest.cells(top.nb_sha)):
                problems.append(f"{want} found at an old revision")
    finally:
        manifest.close()
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--notebooks", type=int, default=60)
    parser.add_argument("--work", type=Path, default=Path("/tmp/nbrecall-crash"))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per embedding call of the writer")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    shutil.rmtree(args.work, ignore_errors=True)
    root, index = args.work / "share", args.work / "idx"
    revs = {i: 0 for i in range(args.notebooks)}
    for i in revs:
        write(root, i, 0)
    next_id = [args.notebooks]
    # Calibrate: the duration of an uninterrupted run over one trial's worth of changes.
    run_index([root], Settings(index_dir=index), HashEmbedder(), LanceStore(index / "lance", HashEmbedder.dim))
    mutate(root, revs, rng, next_id)
    writer = start_writer(root, index, delay=args.delay)  # returns once the writer has imported everything
    t0 = time.perf_counter()
    writer.wait()
    expected = time.perf_counter() - t0
    print(f"an uninterrupted run over one trial's changes takes {expected:.2f} s; kills land in 0–{expected:.2f} s")

    consistent = 0
    strays_swept = 0
    for trial in range(1, args.trials + 1):
        mutate(root, revs, rng, next_id)
        writer = start_writer(root, index, delay=args.delay)
        kill_at = rng.uniform(0.0, expected)
        time.sleep(kill_at)
        finished = writer.poll() is not None
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        queries = [f"mooring w{i}q anchor pretension" for i in rng.sample(sorted(revs), 5)]
        problems = [f"after the kill: {p}" for p in visible_now(index, queries)]
        changed_after = rng.random() < 0.5
        if changed_after:  # the killed batch will never be redone: its store rows must not linger
            mutate(root, revs, rng, next_id)
        report = run_index([root], Settings(index_dir=index), HashEmbedder(),
                           LanceStore(index / "lance", HashEmbedder.dim))
        strays_swept += report.strays_removed
        problems += check_consistent(root, index, revs, rng)
        ok = not problems
        consistent += ok
        note = "finished before the kill" if finished else f"killed at {kill_at:.2f} s"
        print(f"trial {trial:2d}: {note:26s} changed after: {'yes' if changed_after else 'no '}  "
              f"clean run indexed {report.notebooks_indexed:3d}, swept {report.strays_removed} stray  "
              f"{'consistent' if ok else 'INCONSISTENT: ' + '; '.join(problems)}", flush=True)
    print(f"\ntrials consistent: {consistent}/{args.trials} (stray contents swept after kills: {strays_swept})")
    sys.exit(0 if consistent == args.trials else 1)


if __name__ == "__main__":
    main()
