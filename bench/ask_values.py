"""Extractive answers to the `value` queries: how many answers contain the expected value (target ≥ 80%).

Why: a value question ("what RMSE did the tuned model reach?") is answered without an LLM by copying the output
line, table row or printed scalar that matches it. This runs `nbrecall.answer.answer()` in extractive mode on every
`value` query of the query set against an existing index (used read-only) and counts the answers whose text holds
the expected `answer` string; it lists the misses (query, expected, got) and whether retrieval put the expected
notebook in the top 3.

Run from the repo root (the index must have been built from ../shared/corpus):
  .venv/bin/python bench/ask_values.py --index /tmp/idx1
  .venv/bin/python bench/ask_values.py --index /tmp/idx0 --no-vectors     # a keyword-only index
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from nbrecall.answer.answer import answer
from nbrecall.config import load_settings
from nbrecall.service import Archive

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, default=Path("/tmp/idx1"))
    parser.add_argument("--queries", type=Path, default=REPO.parent / "shared/eval/queries.jsonl")
    parser.add_argument("--kind", default="value", help="query kind to run (default: value)")
    parser.add_argument("--no-vectors", action="store_true", help="keyword search only (index without vectors)")
    parser.add_argument("--json", action="store_true", help="print one JSON line per query as well")
    args = parser.parse_args()

    settings = load_settings(None, env={k: v for k, v in os.environ.items() if not k.startswith("NBRECALL_LLM")})
    settings.index_dir = args.index
    settings.answer.base_url = None  # extractive only
    if args.no_vectors:
        settings.embed.enabled = False
    archive = Archive(settings)
    items = [json.loads(line) for line in args.queries.read_text(encoding="utf-8").splitlines() if line.strip()]
    items = [q for q in items if q["kind"] == args.kind and q.get("answer")]
    hits = 0
    misses = []
    started = time.perf_counter()
    for q in items:
        t0 = time.perf_counter()
        result = answer(q["query"], archive, settings)
        seconds = time.perf_counter() - t0
        ok = q["answer"] in result.text
        hits += ok
        if args.json:
            print(json.dumps({"id": q["id"], "ok": ok, "seconds": round(seconds, 3), "text": result.text}))
        if not ok:
            found = archive.search(q["query"])
            ranks = [nb.notebook for nb in found.notebooks]
            rank = ranks.index(q["notebook"]) + 1 if q["notebook"] in ranks else None
            misses.append((q, result.text, rank))
    total = time.perf_counter() - started
    n = len(items)
    print(f"{args.kind} answers containing the expected value: {hits}/{n} = {hits / max(n, 1):.0%} "
          f"(index {args.index}{', keyword only' if args.no_vectors else ''}; {total / max(n, 1):.2f} s/query)")
    for q, got, rank in misses:
        where = f"expected notebook at rank {rank}" if rank else "expected notebook not retrieved"
        print(f"\n[{q['id']}] {q['query']}\n  expected: {q['answer']}\n  got:      {got}\n  ({where})")


if __name__ == "__main__":
    main()
