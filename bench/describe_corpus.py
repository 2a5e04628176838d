"""Figure describing on a real corpus: how many figures, how long per figure and in all, the cache's size.

    python bench/describe_corpus.py ../shared/corpus --index build/corpus-ocr [--kind ocr] [--from build/corpus]

`--from DIR` copies an index built without a describer first (its embedding cache makes the re-chunk cheap), so
the run measures what turning `[vision]` on costs an existing index: every notebook chunked again (vectors from the
cache, new ones only for described figure chunks) and every distinct raster image described once. A second run on
the same folder then shows what a re-index pays (nothing: every description comes from the cache).
Prints one JSON object; the load average is printed with it (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from contextlib import closing
from pathlib import Path

from nbrecall.backends import open_manifest
from nbrecall.config import load_settings
from nbrecall.ingest.pipeline import run_index
from nbrecall.service import make_embedder, open_store
from nbrecall.vision.store import FigureStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--kind", default="ocr")
    parser.add_argument("--from", dest="source", type=Path, default=None)
    args = parser.parse_args()
    if args.source is not None and not args.index.exists():
        shutil.copytree(args.source, args.index)
    settings = load_settings(env={})
    settings.index_dir = args.index
    settings.vision.kind = args.kind
    embedder = make_embedder(settings)
    store = open_store(settings, embedder.dim)
    load_before = os.getloadavg()
    started = time.perf_counter()
    cpu_started = time.process_time()
    report = run_index([args.root], settings, embedder, store)
    wall = time.perf_counter() - started
    figures = report.figures
    assert figures is not None
    with closing(open_manifest(settings, readonly=True)) as manifest, \
            closing(FigureStore.of_index(settings.index_dir)) as cache:
        counts = cache.counts(manifest.indexed_shas())
        listed = cache.db.execute("SELECT COUNT(*), COUNT(DISTINCT image_sha) FROM figures").fetchone()
        texts = cache.db.execute("SELECT COUNT(*), SUM(LENGTH(text)), SUM(seconds) FROM descriptions "
                                 "WHERE text IS NOT NULL").fetchone()
        size = cache.cache_bytes()
    describe_s = report.seconds.get("describe figures", 0.0)
    print(json.dumps({
        "root": str(args.root), "describer": args.kind,
        "notebooks_rechunked": report.notebooks_indexed,
        "figure_refs": listed[0], "distinct_images": listed[1], "states": counts,
        "described_this_run": figures.described, "failed_this_run": figures.failed,
        "from_cache_this_run": figures.cached,
        "run_seconds": round(wall, 1), "describe_phase_seconds": round(describe_s, 1),
        "describe_wall_seconds": round(figures.seconds, 1),
        "seconds_per_figure_wall": round(figures.seconds / figures.described, 3) if figures.described else None,
        "seconds_per_figure_tesseract": round((texts[2] or 0) / texts[0], 3) if texts[0] else None,
        "mean_description_chars": round((texts[1] or 0) / texts[0]) if texts[0] else None,
        "cache_bytes": size, "process_cpu_seconds": round(time.process_time() - cpu_started, 1),
        "stages": {k: round(v, 1) for k, v in report.seconds.items()},
        "notes": figures.notes,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }, indent=1))


if __name__ == "__main__":
    main()
