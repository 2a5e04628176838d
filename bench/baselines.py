"""Score the naive baselines (LangChain NotebookLoader, per-cell, per-cell+outputs) × (BM25, dense).

Why: these are the loaders nbrecall has to beat; the numbers here are the bar. Each baseline is indexed once
into `--work` (reused on later runs for the same corpus files and model; vectors cached in
`--work/embeddings.sqlite`), then every query is run against BM25 only and vectors only, one result per
chunk, top 50, and scored with `nbrecall.search.evaluate`.

Run from the repo root:
  .venv/bin/python bench/baselines.py --corpus ../shared/corpus --queries ../shared/eval/queries.jsonl \
      --work /tmp/nbrecall-baselines
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from nbrecall.config import EmbedSettings
from nbrecall.index.embed import load_embedder
from nbrecall.search.baselines import BASELINES, MODES, baseline_search, build_baseline
from nbrecall.search.evaluate import evaluate, load_queries, resolve_copies

COLUMNS = ("nb@1", "nb@3", "nb@5", "MRR", "cell@10c")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("../shared/corpus"))
    parser.add_argument("--queries", type=Path, default=Path("../shared/eval/queries.jsonl"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/nbrecall-baselines"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--baselines", default=",".join(BASELINES), help="comma-separated subset")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of bm25,dense")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    queries = load_queries(args.queries)
    resolve_copies(queries, args.corpus)  # an `also` copy's identical cell is a right cell (search.evaluate)
    embedder = load_embedder(EmbedSettings(batch_size=args.batch_size, threads=args.threads),
                             args.work / "models")
    started = time.perf_counter()
    rows: list[tuple[str, dict[str, dict[str, float]], float]] = []
    builds: dict[str, dict] = {}
    for name in args.baselines.split(","):
        t0 = time.perf_counter()
        store = build_baseline(name, args.corpus, args.work, embedder)
        marker = json.loads((args.work / name / "baseline.json").read_text(encoding="utf-8"))
        builds[name] = {"chunks": store.count(), "notebooks": marker.get("notebooks"),
                        "unreadable": len(marker.get("skipped", [])), "build_s": marker.get("seconds"),
                        "this_run_s": round(time.perf_counter() - t0, 1)}
        for mode in args.modes.split(","):
            search = baseline_search(store, embedder, mode)
            t1 = time.perf_counter()
            table, _outcomes = evaluate(queries, search)
            per_query_ms = (time.perf_counter() - t1) / max(len(queries), 1) * 1000
            rows.append((f"{name} / {mode}", table, per_query_ms))
    total = time.perf_counter() - started

    print(f"\n{len(queries)} queries, model {embedder.model_id} (max {embedder.max_tokens} tokens), "
          f"total {total:.0f} s\n")
    print("builds:")
    for name, info in builds.items():
        print(f"  {name:18} " + ", ".join(f"{k}={v}" for k, v in info.items()))
    width = max(len(r[0]) for r in rows)
    print("\noverall")
    print(f"{'baseline / mode':{width}}  " + "  ".join(f"{c:>8}" for c in COLUMNS) + "  ms/query")
    for label, table, ms in rows:
        print(f"{label:{width}}  " + "  ".join(f"{table['all'][c]:8.3f}" for c in COLUMNS) + f"  {ms:8.0f}")
    kinds = [k for k in rows[0][1] if k != "all"]
    print("\nper kind: nb@1 / cell@10c  (n per kind: "
          + ", ".join(f"{k}={int(rows[0][1][k]['n'])}" for k in kinds) + ")")
    print(f"{'baseline / mode':{width}}  " + "  ".join(f"{k:>11}" for k in kinds))
    for label, table, _ms in rows:
        cells = [f"{table[k]['nb@1']:.2f}/{table[k]['cell@10c']:.2f}" for k in kinds]
        print(f"{label:{width}}  " + "  ".join(f"{c:>11}" for c in cells))
    out = args.work / "results.json"
    out.write_text(json.dumps({"model": embedder.model_id, "builds": builds, "seconds": round(total, 1),
                               "results": {label: table for label, table, _ in rows}}, indent=1))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
