"""Query latency from a warm process: p50/p95/p99 of `Archive.search` over the eval queries (repeated).

    .venv/bin/python bench/query_latency.py --index /tmp/idx1 [--queries ../shared/eval/queries.jsonl] [--rounds 3]

Prints one table: the whole search (embed query + hybrid store query + grouping + neighbourhoods), and the
query embedding alone, so the store's share is visible.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from nbrecall.config import load_settings
from nbrecall.service import Archive


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--queries", type=Path, default=Path("../shared/eval/queries.jsonl"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = load_settings(None)
    settings.index_dir = args.index
    archive = Archive(settings)
    queries = [json.loads(line)["query"] for line in args.queries.read_text().splitlines() if line.strip()]
    archive.search(queries[0])  # warm: model loaded, store opened
    total: list[float] = []
    embed: list[float] = []
    for _ in range(args.rounds):
        for query in queries:
            start = time.perf_counter()
            archive.embedder.embed([query])
            embed.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            archive.search(query)
            total.append((time.perf_counter() - start) * 1000)
    chunks = archive.manifest.stats()["chunks"]
    print(f"index {args.index}: {chunks:,} chunks; {len(total)} queries ({args.rounds} rounds of {len(queries)})")
    print(f"{'measure':<28}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}{'mean ms':>10}")
    for name, values in (("search (end to end)", total), ("query embedding only", embed)):
        print(f"{name:<28}{percentile(values, 0.5):>10.1f}{percentile(values, 0.95):>10.1f}"
              f"{percentile(values, 0.99):>10.1f}{statistics.mean(values):>10.1f}")


if __name__ == "__main__":
    main()
