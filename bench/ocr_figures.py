"""OCR every distinct raster figure of a corpus into a figure cache: how many, seconds per figure, total, cache size.

    python bench/ocr_figures.py ../shared/corpus --cache build/c-ocr/figures.sqlite [--concurrency 2] [--limit N]

The same describer and cache the index run uses (`[vision] kind = "ocr"`), without the index: an index run that
follows (bench/describe_corpus.py) finds every description in this cache. Prints one JSON object with the load
average (the machine is shared: per-figure times depend on it).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from nbrecall.config import VisionSettings
from nbrecall.ingest.figures import FigureWork, figure_images
from nbrecall.notebook.files import walk_notebooks
from nbrecall.notebook.read import read_notebook
from nbrecall.vision.ocr import OcrDescriber
from nbrecall.vision.store import FigureStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="stop after this many figures (0: all)")
    args = parser.parse_args()
    describer = OcrDescriber(VisionSettings(kind="ocr"))
    describer.check()
    store = FigureStore(args.cache)
    work = FigureWork(describer, store)
    load_before = os.getloadavg()
    started = time.perf_counter()
    notebooks = refs = 0
    seen: set[str] = set()
    read_s = 0.0
    for path in walk_notebooks(args.root, skip_hidden=True, exclude=[".ipynb_checkpoints"]):
        begun = time.perf_counter()
        try:
            images = figure_images(read_notebook(path))
        except Exception:
            continue
        read_s += time.perf_counter() - begun
        notebooks += 1
        refs += len(images)
        new = [img for sha, img in images.items() if sha not in seen]
        seen.update(images)
        cached = store.get_many([i.sha for i in new], describer.id)
        todo = [i for i in new if i.sha not in cached]
        if todo:
            work.describe_images(todo, args.concurrency, max_failures_in_a_row=10**9)
        if args.limit and len(seen) >= args.limit:
            break
    wall = time.perf_counter() - started
    done, chars, busy = store.db.execute(
        "SELECT COUNT(*), SUM(LENGTH(text)), SUM(seconds) FROM descriptions WHERE text IS NOT NULL").fetchone()
    empty = store.db.execute("SELECT COUNT(*) FROM descriptions WHERE text = ''").fetchone()[0]
    print(json.dumps({
        "root": str(args.root), "notebooks_read": notebooks, "figure_refs": refs, "distinct_images": len(seen),
        "described_this_run": work.report.described, "failed_this_run": work.report.failed,
        "described_in_cache": done, "empty_descriptions": empty,
        "mean_description_chars": round((chars or 0) / done) if done else None,
        "wall_seconds": round(wall, 1), "reading_seconds": round(read_s, 1),
        "describe_wall_seconds": round(work.report.seconds, 1),
        "wall_seconds_per_figure": round(work.report.seconds / work.report.described, 3)
        if work.report.described else None,
        "tesseract_seconds_per_figure": round((busy or 0) / done, 3) if done else None,
        "concurrency": args.concurrency, "cache_bytes": store.cache_bytes(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }, indent=1))
    store.close()


if __name__ == "__main__":
    main()
