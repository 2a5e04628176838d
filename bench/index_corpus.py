"""Index a corpus twice and print what it cost: the first run, then a run with nothing changed.

    .venv/bin/python bench/index_corpus.py --corpus ../shared/corpus --index /tmp/nbrecall-bench [--fresh]

Each run is a separate `nbrecall index` process measured with `/usr/bin/time -v` (wall time, peak RSS); the
figures per stage come from nbrecall's own summary. The embedding cache lives in the index folder, so a
`--fresh` run (index folder removed first) embeds everything.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(corpus: Path, index: Path) -> dict[str, str]:
    nbrecall = Path(sys.executable).with_name("nbrecall")
    cmd = ["/usr/bin/time", "-v", str(nbrecall), "index", str(corpus), "--index", str(index)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    out = proc.stderr
    if proc.returncode:
        raise SystemExit(f"nbrecall index failed:\n{out[-3000:]}")
    figures: dict[str, str] = {}
    for label in ("notebooks indexed", "chunks written", "texts embedded", "embedding cache hits", "files hashed",
                  "quarantined"):
        match = re.search(rf"│ {label}\s*│\s*([\d,]+)", out)
        figures[label] = match.group(1) if match else "?"
    for stage in re.findall(r"│ time: ([^│]+?)\s*│\s*([\d.]+) s", out):
        figures[f"time {stage[0]}"] = stage[1]
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", out)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out)
    figures["wall"] = wall.group(1) if wall else "?"
    figures["peak RSS MiB"] = f"{int(rss.group(1)) / 1024:.0f}" if rss else "?"
    return figures


def seconds(wall: str) -> float:
    parts = [float(p) for p in wall.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=Path("../shared/corpus"))
    parser.add_argument("--index", type=Path, default=Path("/tmp/nbrecall-bench"))
    parser.add_argument("--fresh", action="store_true", help="remove the index folder first")
    args = parser.parse_args()
    if args.fresh and args.index.exists():
        shutil.rmtree(args.index)
    first = run(args.corpus, args.index)
    second = run(args.corpus, args.index)
    size = folder_size(args.index)
    for name, figures in (("first run", first), ("no-change run", second)):
        wall = seconds(figures["wall"])
        indexed = int(figures["notebooks indexed"].replace(",", "") or 0)
        embedded = int(figures["texts embedded"].replace(",", "") or 0)
        embed_s = float(figures.get("time embed", "0") or 0)
        print(f"== {name}: wall {wall:.1f} s, peak RSS {figures['peak RSS MiB']} MiB")
        print(f"   notebooks indexed {indexed:,} ({indexed / wall:.1f}/s), chunks {figures['chunks written']}, "
              f"texts embedded {embedded:,}"
              + (f" ({embedded / embed_s:.1f}/s in the embed stage)" if embed_s else "")
              + f", cache hits {figures['embedding cache hits']}, files hashed {figures['files hashed']}")
        print("   stages: " + ", ".join(f"{k[5:]} {v} s" for k, v in figures.items() if k.startswith("time ")))
    print(f"== index size: {size / 1024**2:.1f} MiB in {args.index}")


if __name__ == "__main__":
    main()
