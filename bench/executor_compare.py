"""Index (and re-render) through each executor and check they agree: in-process, the local process pool, and a Ray
cluster of a head and two one-CPU worker nodes started on this machine (loopback only).

    nice -n 10 .venv/bin/python bench/executor_compare.py ../shared/corpus --work /tmp/nbr-exec \
        [--vectors-from /tmp/idx2] [--render samples/archive] [--only inline,local,ray]

Without --vectors-from, embedding is off (parse/analyse/chunk and writes only: the part an executor spreads).
With it, each index folder starts with a copy of that folder's embeddings.sqlite and models/ (vectors come from
the cache; texts it lacks are embedded in the main process). Prints wall time, notebooks/s, and whether manifests
(files, contents: status, reason, counts, metadata) and chunk rows are identical; renders in notebooks/min.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from nbrecall.config import Settings
from nbrecall.executor import Executor, InlineExecutor, ProcessExecutor, RayExecutor
from nbrecall.index.embedder_from_settings import make_embedder
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index


def start_cluster(object_store: int = 100 * 1024 * 1024) -> Any:
    """A head without CPUs and two worker nodes of one CPU each, advertising 127.0.0.1 (see tests/test_executor)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    ray_constants.ENABLE_RAY_CLUSTER = False
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                             "object_store_memory": object_store})
    for _ in range(2):
        cluster.add_node(num_cpus=1, object_store_memory=object_store)
    return cluster


def snapshot(index: Path) -> dict[str, Any]:
    with closing(SqliteManifest(index / "manifest.sqlite", readonly=True)) as manifest:
        files = {f"{root}|{rel}": f.sha256 for (root, rel), f in manifest.files().items()}
        contents = {c.sha256: [c.status, c.reason, c.rel, c.n_cells, c.n_chunks, c.n_embedded, c.meta]
                    for c in manifest.contents()}
    columns = ["chunk_id", "nb_sha", "notebook", "kind", "cells", "anchor", "heading", "text", "year", "project",
               "stale", "deprecated", "health"]
    rows = LanceStore(index / "lance", 384).table.search().select(columns).limit(None).to_arrow().to_pylist()
    return {"files": files, "contents": contents, "chunks": sorted(rows, key=lambda r: r["chunk_id"])}


def index_once(name: str, roots: list[Path], work: Path, executor: Executor, vectors_from: Path | None) -> dict:
    index = work / f"idx-{name}"
    shutil.rmtree(index, ignore_errors=True)
    index.mkdir(parents=True)
    settings = Settings(index_dir=index)
    settings.embed.enabled = vectors_from is not None
    if vectors_from is not None:
        shutil.copy2(vectors_from / "embeddings.sqlite", index / "embeddings.sqlite")
        shutil.copytree(vectors_from / "models", index / "models")
    embedder = make_embedder(settings)
    store = LanceStore(index / "lance", 384)
    started = time.perf_counter()
    report = run_index(roots, settings, embedder, store, executor=executor)
    wall = time.perf_counter() - started
    done = report.notebooks_indexed + len(report.quarantined)
    out = {"executor": name, "wall_s": round(wall, 1), "notebooks": done, "indexed": report.notebooks_indexed,
           "quarantined": len(report.quarantined), "chunks": report.chunks_written,
           "notebooks_per_s": round(done / wall, 2), "texts_embedded": report.texts_embedded,
           "cache_hits": report.embed_cache_hits,
           "stage_seconds": {k: round(v, 1) for k, v in report.seconds.items()}}
    print(json.dumps(out), flush=True)
    return out


def render_once(name: str, root: Path, work: Path, executor: Executor | None, workers: int) -> dict:
    from nbrecall.render.run import RenderOptions, discover, render_many

    out_dir = work / f"renders-{name}"
    shutil.rmtree(out_dir, ignore_errors=True)
    options = RenderOptions(out_dir=out_dir, workers=workers, hide=[out_dir])
    items = discover([root])
    started = time.perf_counter()
    results = list(render_many(items, options, executor=executor))
    wall = time.perf_counter() - started
    statuses = {r.path: (r.status, r.reason) for r in results}
    out = {"render": name, "notebooks": len(results), "wall_s": round(wall, 1),
           "notebooks_per_min": round(len(results) * 60 / wall, 1),
           "status": {s: sum(1 for v in statuses.values() if v[0] == s) for s in ("fresh", "changed", "stale")}}
    print(json.dumps(out), flush=True)
    return {"summary": out, "statuses": statuses}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/nbr-exec"))
    parser.add_argument("--vectors-from", type=Path, default=None)
    parser.add_argument("--render", type=Path, default=None, help="a folder of notebooks to re-render")
    parser.add_argument("--only", default="inline,local,ray")
    parser.add_argument("--compare-only", action="store_true", help="only compare the index folders of a past run")
    args = parser.parse_args()
    which = args.only.split(",")
    roots = [r.resolve() for r in args.roots]
    print(json.dumps({"load_average": os.getloadavg(), "cpus": os.cpu_count()}), flush=True)
    results: dict[str, dict] = {}
    if args.compare_only:
        results = {name: {} for name in which}
        which = []
    if "inline" in which:
        with InlineExecutor() as ex:
            results["inline"] = index_once("inline", roots, args.work, ex, args.vectors_from)
    if "local" in which:
        with ProcessExecutor(2) as ex:
            results["local"] = index_once("local", roots, args.work, ex, args.vectors_from)
    renders: dict[str, dict] = {}
    if args.render is not None and "local" in which:
        renders["local"] = render_once("local", args.render.resolve(), args.work, None, 2)
    if "ray" in which:
        started = time.perf_counter()
        cluster = start_cluster()
        print(json.dumps({"ray_cluster_start_s": round(time.perf_counter() - started, 1),
                          "address": cluster.address}), flush=True)
        try:
            with RayExecutor(cluster.address) as ex:
                results["ray"] = index_once("ray", roots, args.work, ex, args.vectors_from)
                if args.render is not None:
                    renders["ray"] = render_once("ray", args.render.resolve(), args.work, ex, 2)
        finally:
            cluster.shutdown()
    names = list(results)
    if len(names) > 1:
        base = snapshot(args.work / f"idx-{names[0]}")
        for name in names[1:]:
            other = snapshot(args.work / f"idx-{name}")
            same = {key: other[key] == base[key] for key in base}
            print(json.dumps({"compare": f"{name} vs {names[0]}", "identical": same,
                              "n_chunks": [len(base["chunks"]), len(other["chunks"])],
                              "n_contents": [len(base["contents"]), len(other["contents"])],
                              "n_files": [len(base["files"]), len(other["files"])]}), flush=True)
    if len(renders) > 1:
        same = renders["ray"]["statuses"] == renders["local"]["statuses"]
        print(json.dumps({"render_statuses_equal": same}), flush=True)
    print(json.dumps({"load_average_end": os.getloadavg()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
