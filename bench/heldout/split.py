"""Write a held-out question file's lines into one file per corpus (`corpus` field), for the tools that take one
corpus root per query file (`nbrecall eval --root`, `bench/answer_ablation.py --set`).

    .venv/bin/python bench/heldout/split.py bench/heldout/queries.jsonl /tmp/ho
    # → /tmp/ho/corpus.jsonl (over ../shared/corpus) and /tmp/ho/eval2.jsonl (over ../shared/eval2/corpus)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def split(queries: Path, out: Path) -> dict[str, int]:
    """Lines by their `corpus` field, one file each in `out`; the count per corpus."""
    by_corpus: dict[str, list[str]] = {}
    for line in queries.read_text(encoding="utf-8").splitlines():
        if line.strip():
            by_corpus.setdefault(json.loads(line)["corpus"], []).append(line)
    out.mkdir(parents=True, exist_ok=True)
    for corpus, lines in by_corpus.items():
        (out / f"{corpus}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {corpus: len(lines) for corpus, lines in by_corpus.items()}


if __name__ == "__main__":
    print(split(Path(sys.argv[1]), Path(sys.argv[2])))
