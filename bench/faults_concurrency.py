"""Searches while the index is written: queries run, errors (target 0), notebooks seen at two versions (target 0).

    .venv/bin/python bench/faults_concurrency.py [--notebooks 200] [--rounds 4] [--threads 3]
                                                 [--work /tmp/nbrecall-concurrency]

Each round rewrites every notebook at the other version (a few deleted, then back) and indexes it in a writer
process while readers search: `--threads` one-shot readers (their own store and manifest per query, like
`nbrecall search`) plus one long-lived web server (one Archive opened before the first round, queried through
`/api/search`, like `nbrecall serve`) in this process, and a second process of one-shot readers. The checks are
those of tests/test_faults_concurrency.py: every search succeeds; the hits of a notebook come from one content
whose cells all carry one version; no path is shown at its old and its new content in one result; a content
visible in the manifest has all of its chunks in the store or (just removed) none. A second indexer started
during each round must be refused with the lock message.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import HashEmbedder  # noqa: E402
from nbrecall.config import Settings  # noqa: E402
from nbrecall.index.store import LanceStore  # noqa: E402
from nbrecall.ingest.lock import IndexLocked  # noqa: E402
from nbrecall.ingest.pipeline import run_index  # noqa: E402
from test_faults_concurrency import run_concurrently  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notebooks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.25, help="seconds per embedding call of the writer")
    parser.add_argument("--work", type=Path, default=Path("/tmp/nbrecall-concurrency"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    root, index = args.work / "share", args.work / "idx"
    totals = {"one-shot": [0, 0, 0], "web server": [0, 0, 0], "second process": [0, 0, 0]}
    refused = 0
    started = time.perf_counter()
    for r in range(1, args.rounds + 1):
        outcome: list[str] = []

        def second_indexer(writer: subprocess.Popen[str], outcome: list[str] = outcome) -> None:
            lock = index / "write.lock"
            deadline = time.monotonic() + 60
            while writer.poll() is None and time.monotonic() < deadline:
                if lock.exists() and lock.read_text().strip() == str(writer.pid):
                    break
                time.sleep(0.02)
            embedder = HashEmbedder()
            try:
                run_index([root], Settings(index_dir=index), embedder, LanceStore(index / "lance", embedder.dim))
                outcome.append("ran: NOT refused")
            except IndexLocked as exc:
                outcome.append(f"refused: {exc}")
            except Exception as exc:
                outcome.append(f"error: {type(exc).__name__}: {exc}")

        skip = ((r * 7) % args.notebooks, (r * 13) % args.notebooks)  # other notebooks deleted in each round
        one_shot, web, other, seconds = run_concurrently(
            root, index, args.notebooks, threads=args.threads, reader_seconds=3600, delay=args.delay,
            version=r % 2, rev=r, skip=skip, during=second_indexer,
        )
        result = outcome[0] if outcome else "not tried"
        refused += result.startswith("refused")
        for name, (queries, errors, violations) in {
            "one-shot": (one_shot.queries, one_shot.errors, one_shot.violations),
            "web server": (web.queries, web.errors, web.violations),
            "second process": (other["queries"], other["errors"], other["violations"]),
        }.items():
            totals[name][0] += queries
            totals[name][1] += len(errors)
            totals[name][2] += len(violations)
            for line in (errors + violations)[:3]:
                print(f"    {name}: {line}")
        print(f"round {r}: writer {seconds:.1f} s; queries {one_shot.queries} one-shot, {web.queries} web, "
              f"{other['queries']} second process; second indexer: {result[:90]}", flush=True)
    print(f"\nconcurrency figures ({args.notebooks} notebooks, {args.rounds} rounds, "
          f"{time.perf_counter() - started:.0f} s)")
    for name, (queries, errors, violations) in totals.items():
        print(f"  {name:15s} queries {queries:6,}  errors {errors}  version violations {violations}")
    queries = sum(t[0] for t in totals.values())
    errors = sum(t[1] + t[2] for t in totals.values())
    print(f"  total           queries {queries:6,}  errors+violations {errors}")
    print(f"  second indexer refused with the lock message: {refused}/{args.rounds}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
