"""Indexing at archive scale: every stage's time and throughput, peak RSS and index size, for a generated archive.

    .venv/bin/python bench/scale_corpus.py 10000                      # writes /tmp/nbrecall-scale/10000
    .venv/bin/python bench/scale_index.py /tmp/nbrecall-scale/10000 --index /tmp/nbrecall-scale-idx/10000

Runs, each a separate process measured with `/usr/bin/time` (wall, CPU, peak RSS):
1. full run, phase 1 only (`defer_vectors`): discover, parse, chunk, keyword index, write — everything
   keyword-searchable;
2. a run with nothing changed;
3. a run after 1% of the notebooks changed (a markdown cell appended, deterministic choice);
4. phase 2 on a sample of the queue (`--embed-sample` chunks, highest priority first): embedded chunks/s and word
   pieces per chunk, against the model's ceiling measured in the same process (texts of the model's full
   length, batched as the embedder batches). The full queue of an archive this size is hours of embedding on 2
   cores (the ceiling × chunks says how many); it is resumable, and search fuses what exists meanwhile.

Prints one table. The archive is modified by step 3 (one cell appended to 1% of the notebooks).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

CONFIG = """[metadata]
path_rules = ['projects/(?P<year>\\d{4})/(?P<project>\\d{2}-\\d{3})/']
deprecated_tags = ["deprecated"]
"""


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def child(args: argparse.Namespace) -> None:
    """In a fresh process: one indexing run (or a phase-2 sample); print its report as JSON."""
    from contextlib import closing
    from dataclasses import asdict

    from nbrecall.config import load_settings
    from nbrecall.executor import make_executor
    from nbrecall.index.cache import EmbeddingCache
    from nbrecall.index.embedder_from_settings import make_embedder
    from nbrecall.index.manifest import SqliteManifest
    from nbrecall.ingest.build import IndexReport
    from nbrecall.ingest.pipeline import run_index
    from nbrecall.ingest.vectors import fill_vectors
    from nbrecall.service import open_store

    settings = load_settings(args.config, env={**os.environ, "NBRECALL_INDEX": str(args.index)})
    embedder = make_embedder(settings)
    store = open_store(settings, embedder.dim)
    if args.child == "index":
        with make_executor(settings.executor.kind, args.workers, settings.executor.retries) as executor:
            report = run_index([args.root], settings, embedder, store, defer_vectors=True, executor=executor)
        out = asdict(report)
        out["quarantined"] = len(report.quarantined)
        print(json.dumps(out))
        return
    # phase-2 sample, then the ceiling: the same model on texts of its full length
    report = IndexReport()
    with (
        closing(SqliteManifest(settings.index_dir / "manifest.sqlite")) as manifest,
        closing(EmbeddingCache(settings.index_dir / "embeddings.sqlite")) as cache,
    ):
        queued = manifest.pending_count()
        sample = sorted({item.text for item in manifest.pending(args.embed_sample)})
        embedder.embed(["warm-up: the model session is built or loaded at its first use"])  # not the rate
        started = time.perf_counter()
        fill_vectors(embedder, store, manifest, cache, report, limit=args.embed_sample)
        seconds = time.perf_counter() - started
    # The ceiling: the model alone (tokenise + ONNX, length-sorted batches) on the very texts phase 2 embedded,
    # right after it, in the same process: what phase 2 adds (cache, queue, writes) is the difference.
    begun = time.perf_counter()
    embedder.embed(sample)
    ceiling = len(sample) / (time.perf_counter() - begun)
    words = ["the", "ballast", "volume", "of", "the", "aft", "tanks", "was", "computed", "from", "soundings"]
    full = [f"{i} " + " ".join(words[(i + j) % len(words)] for j in range(embedder.max_tokens)) for i in range(128)]
    begun = time.perf_counter()
    embedder.embed(full)
    full_rate = len(full) / (time.perf_counter() - begun)
    print(json.dumps({
        "queued": queued,
        "embedded": report.texts_embedded,
        "cache_hits": report.embed_cache_hits,
        "tokens": report.embedded_tokens,
        "seconds": seconds,
        "embed_seconds": report.seconds.get("embed", 0.0),
        "write_seconds": report.seconds.get("write vectors", 0.0),
        "ceiling_chunks_per_s": ceiling,
        "full_length_per_s": full_rate,
        "max_tokens": embedder.max_tokens,
    }))


def measured(mode: str, root: Path, index: Path, config: Path, extra: list[str]) -> tuple[dict, dict]:
    cmd = ["/usr/bin/time", "-f", "TIME %e %U %S %M", sys.executable, __file__, str(root), "--index", str(index),
           "--config", str(config), "--child", mode, *extra]  # %M: the largest process (workers are separate)
    with open(index.parent / f"{index.name}.{mode}.err", "w+") as err:
        child_proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        tree_peak = 0
        while child_proc.poll() is None:  # the whole process tree (the run and its workers), every 0.5 s
            tree_peak = max(tree_peak, tree_rss_kib(child_proc.pid))
            time.sleep(0.5)
        stdout = child_proc.stdout.read() if child_proc.stdout else ""
        err.seek(0)
        proc = subprocess.CompletedProcess(cmd, child_proc.returncode, stdout, err.read())
    if proc.returncode:
        raise SystemExit(f"{mode} run failed:\n{proc.stderr[-3000:]}")
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("TIME "))
    wall, user, system, rss = (float(x) for x in line.split()[1:])
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return report, {"wall": wall, "cpu": user + system, "rss_mib": rss / 1024, "tree_mib": tree_peak / 1024}


def tree_rss_kib(pid: int) -> int:
    """Resident memory of `pid` and all its descendants, from /proc."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        parents[int(entry.name)] = int(fields.get("PPid", "0").strip() or 0)
        rss[int(entry.name)] = int((fields.get("VmRSS", "0 kB").split() or ["0"])[0])
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo += [child for child, parent in parents.items() if parent == current]
    return total


def change_one_percent(root: Path, seed: int) -> int:
    """Append a markdown cell to 1% of the readable notebooks (deterministic); returns how many changed."""
    files = sorted(p for p in root.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    rng = random.Random(seed)
    chosen = rng.sample(files, max(1, len(files) // 100))
    changed = 0
    for path in chosen:
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
            nb["cells"].append({"cell_type": "markdown", "metadata": {},
                                "source": f"Checked again on run {time.time():.0f}."})
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
            continue  # a malformed notebook of the generated archive stays as it is
        path.write_text(json.dumps(nb), encoding="utf-8")
        changed += 1
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the generated archive (bench/scale_corpus.py)")
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=None, help="nbrecall.toml (default: path rules of the "
                        "generated archive)")
    parser.add_argument("--embed-sample", type=int, default=3000, help="chunks embedded in step 4")
    parser.add_argument("--keep", action="store_true", help="reuse the index folder (default: start fresh)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=0, help="parse/chunk processes (0: one per core; 1: inline)")
    parser.add_argument("--phase1-only", action="store_true", help="measure the full run (phase 1) only: no "
                        "no-change or 1%%-changed run (the archive is left as it is), no phase-2 sample")
    parser.add_argument("--no-families", action="store_true", help="index with [families] enabled = false (the "
                        "generated config only): what notebook families cost is the difference to a run without")
    parser.add_argument("--child", choices=["index", "embed"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if not args.keep and args.index.exists():
        shutil.rmtree(args.index)
    args.index.mkdir(parents=True, exist_ok=True)
    config = args.config or args.index.parent / f"{args.index.name}.toml"
    if args.config is None:
        config.write_text(CONFIG + ("\n[families]\nenabled = false\n" if args.no_families else ""), encoding="utf-8")
    models = os.environ.get("NBRECALL_MODEL_CACHE")
    print(f"archive {args.root}; index {args.index}; model cache {models or '<index>/models'}; "
          f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}", flush=True)
    rows: list[tuple[str, str]] = []

    workers = ["--workers", str(args.workers)]
    full, m = measured("index", args.root, args.index, config, workers)
    n = full["notebooks_indexed"]
    rows += [("notebooks (files seen)", f"{full['files']:,}"),
             ("notebooks indexed / quarantined", f"{n:,} / {full['quarantined']:,}"),
             ("chunks", f"{full['chunks_written']:,}"),
             ("full run, phase 1 (keyword-searchable): wall", f"{m['wall']:.0f} s ({m['wall'] / 60:.1f} min)"),
             ("  notebooks/s (wall)", f"{full['files'] / max(m['wall'], 1e-9):.1f}"),
             ("  CPU seconds (all processes of the run)", f"{m['cpu']:.0f}"),
             ("  peak RSS: largest process / whole process tree", f"{m['rss_mib']:.0f} / {m['tree_mib']:.0f} MiB")]
    for stage, seconds in full["seconds"].items():
        rows.append((f"  stage: {stage}", f"{seconds:.1f} s"))
    if full.get("families"):
        fam = full["families"]
        rows.append(("  family step (end of run; also in stage: families)", f"{fam['seconds']:.1f} s"))
    rows.append(("index size after phase 1", f"{folder_size(args.index) / 1024**2:,.0f} MiB"))
    if args.phase1_only:
        _print_rows(rows)
        return

    same, m = measured("index", args.root, args.index, config, workers)
    rows += [("no-change run: wall", f"{m['wall']:.1f} s"),
             ("  notebooks re-indexed / files hashed", f"{same['notebooks_indexed']} / {same['hashed']}"),
             ("  peak RSS: largest process / tree", f"{m['rss_mib']:.0f} / {m['tree_mib']:.0f} MiB")]

    changed = change_one_percent(args.root, args.seed)
    again, m = measured("index", args.root, args.index, config, workers)
    rows += [(f"1% changed ({changed:,} notebooks): wall", f"{m['wall']:.1f} s"),
             ("  notebooks re-indexed", f"{again['notebooks_indexed']:,}"),
             ("  peak RSS: largest process / tree", f"{m['rss_mib']:.0f} / {m['tree_mib']:.0f} MiB")]
    for stage, seconds in again["seconds"].items():
        rows.append((f"  stage: {stage}", f"{seconds:.1f} s"))

    if args.embed_sample > 0:
        emb, m = measured("embed", args.root, args.index, config, ["--embed-sample", str(args.embed_sample)])
        rate = emb["embedded"] / max(emb["embed_seconds"], 1e-9)
        rows += [("phase 2 sample: chunks given a vector", f"{emb['embedded'] + emb['cache_hits']:,} "
                  f"(of {emb['queued']:,} queued)"),
                 ("  embedded chunks/s (phase 2, model + cache + queue)", f"{rate:.1f}"),
                 ("  chunks/s including vector writes", f"{emb['embedded'] / max(emb['seconds'], 1e-9):.1f}"),
                 ("  word pieces per embedded chunk", f"{emb['tokens'] / max(emb['embedded'], 1):.0f} "
                  f"(model max {emb['max_tokens']})"),
                 ("  ceiling: the model alone on the same texts, chunks/s", f"{emb['ceiling_chunks_per_s']:.1f}"),
                 ("  phase 2 share of the ceiling", f"{rate / max(emb['ceiling_chunks_per_s'], 1e-9):.0%}"),
                 (f"  the model on {emb['max_tokens']}-piece texts, chunks/s", f"{emb['full_length_per_s']:.1f}"),
                 ("  whole queue at this rate", f"{emb['queued'] / max(rate, 1e-9) / 3600:.1f} h"),
                 ("  peak RSS", f"{m['rss_mib']:.0f} MiB")]
    rows.append(("index size", f"{folder_size(args.index) / 1024**2:,.0f} MiB"))
    _print_rows(rows)


def _print_rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"\n| {'what'.ljust(width)} | value |\n|{'-' * (width + 2)}|------:|")
    for key, value in rows:
        print(f"| {key.ljust(width)} | {value} |")
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
    sys.exit(0)
