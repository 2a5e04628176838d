"""Re-render corpus notebooks in the sandbox: how many are fresh, changed, stale (and why), notebooks per minute.

    .venv/bin/python bench/render_corpus.py [--workers 2] [--cell-timeout 60] [--limit N] [--report drift.html]
        [--json out.json] [--corpus DIR] [REPO ...]
    .venv/bin/python bench/render_corpus.py --recompare OUT_DIR   # judge stored renders again, run nothing
    .venv/bin/python bench/render_corpus.py --fixtures            # the drift fixtures (bench/render_fixtures.py)

Prints notebooks fresh/changed/stale, changed cells by class (values, text, figure, error, random; format only
apart), stale reasons, missing modules per environment (in install order, notebooks each brings back) and API
errors by library. The issue-18 folder: `--corpus ../shared/eval2/corpus spatialaudio__signals-and-systems-lecture`.

Each repository of `../shared/corpus` (read-only) is its own tree: it is bound read-only at /project (the notebook's
folder is a writable throw-away copy, so relative paths such as `../data/bikes.csv` resolve) and also as the
data folder at /data. Repositories are rendered one after another with the same pool size; the rate is the total
number of notebooks over the total wall time (kernel start and shutdown included). Results go to a temporary
folder unless `--out` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from nbrecall.render.availability import sandbox_problem
from nbrecall.render.compare import RenderResult
from nbrecall.render.report import write_report
from nbrecall.render.run import RenderOptions, discover, recompare, render_many, summarise
from nbrecall.render.sandbox import Limits

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
sys.path.insert(0, str(Path(__file__).resolve().parent))
DEFAULT_REPOS = ["jvns__pandas-cookbook", "barbagroup__CFDPython", "numerical-mooc__numerical-mooc"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repos", nargs="*", default=DEFAULT_REPOS)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cell-timeout", type=float, default=60.0)
    parser.add_argument("--notebook-timeout", type=float, default=300.0)
    parser.add_argument("--memory-mb", type=int, default=4096)
    parser.add_argument("--limit", type=int, default=0, help="render at most N notebooks in all (0: all)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--recompare", type=Path, default=None,
                        help="judge the stored renders in this folder again with today's rules (runs nothing)")
    parser.add_argument("--fixtures", action="store_true", help="render the drift fixtures and check their classes")
    args = parser.parse_args(argv)
    if args.recompare:
        results = [r for f in sorted(args.recompare.glob("*.json")) if (r := recompare(args.recompare, f.stem))]
        print_summary(summarise(results))
        if args.report:
            write_report(results, args.report)
        return 0
    if args.fixtures:
        from render_fixtures import run_fixtures

        return run_fixtures(args.workers)

    problem = sandbox_problem()
    if problem:
        print(f"sandbox unavailable: {problem}", file=sys.stderr)
        return 3
    out = args.out or Path(tempfile.mkdtemp(prefix="nbr-bench-"))
    results: list[RenderResult] = []
    per_repo: dict[str, dict] = {}
    budget = args.limit or 10**9
    started = time.perf_counter()
    for repo in args.repos:
        root = args.corpus / repo
        items = discover([root])[: max(0, budget - len(results))]
        if not items:
            continue
        options = RenderOptions(
            out_dir=out, data_dir=root, workers=args.workers,
            limits=Limits(cell_timeout=args.cell_timeout, notebook_timeout=args.notebook_timeout,
                          memory_mb=args.memory_mb),
        )
        t0 = time.perf_counter()
        mine: list[RenderResult] = []
        for result in render_many(items, options):
            mine.append(result)
            took = result.execution.get("duration_s", 0)
            print(f"{result.status:8s} {result.reason[:40]:40s} {took:6.1f}s  {Path(result.path).relative_to(root)}",
                  flush=True)
        elapsed = time.perf_counter() - t0
        per_repo[repo] = {**summarise(mine), "seconds": round(elapsed, 1),
                          "notebooks_per_min": round(len(mine) * 60 / elapsed, 1)}
        results += mine
    total = time.perf_counter() - started
    summary = {**summarise(results), "seconds": round(total, 1),
               "notebooks_per_min": round(len(results) * 60 / max(total, 1e-9), 1),
               "workers": args.workers, "cell_timeout": args.cell_timeout, "repos": per_repo}

    print()
    for repo, s in per_repo.items():
        st = s["status"]
        print(f"{repo}: {s['notebooks']} notebooks — fresh {st['fresh']}, changed {st['changed']}, "
              f"stale {st['stale']} ({s['notebooks_per_min']}/min)")
    st = summary["status"]
    print(f"\nall: {summary['notebooks']} notebooks in {summary['seconds']} s with {args.workers} workers — "
          f"{summary['notebooks_per_min']} notebooks/min")
    print_summary(summary)
    print("load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"results in {out}")
    if args.report:
        write_report(results, args.report)
        print(f"drift report: {args.report}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


def print_summary(summary: dict) -> None:
    """The figures issue 18 asks for: notebooks by status, changed cells by class, stale reasons, missing
    modules and API errors."""
    st = summary["status"]
    print(f"notebooks: {summary['notebooks']} — fresh {st['fresh']}, changed {st['changed']}, stale {st['stale']}")
    print("cells: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["cells"].items())))
    changes = summary["changes"]
    print("changed cells by class: " + ", ".join(f"{k} {changes[k]}" for k in ("values", "text", "figure", "error"))
          + f"; random (not drift) {changes['random']}; format only (same, not badged) {changes['format']}")
    print(f"notebooks whose result changed: {len(summary['ranking'])}")
    for row in summary["ranking"][:10]:
        print(f"  {row['share']:5.0%} ({row['changed']} of {row['compared']} cells) {row['path']} {row['classes']}")
    for reason, count in summary["reasons"]:
        print(f"  stale: {reason}: {count}")
    for env, modules in summary["missing_modules"].items():
        print(f"missing modules [{env}]: " + ", ".join(
            f"{m['module']} (needed by {m['needed_by']}, brings back {m['brings_back']})" for m in modules))
    for row in summary["api_errors"]:
        print(f"API errors in {row['library']}: {row['notebooks']} notebook(s), e.g. {row['examples'][0]}")


if __name__ == "__main__":
    sys.exit(main())
