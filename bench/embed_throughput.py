"""Throughput of the default embedder (all-MiniLM-L6-v2 on onnxruntime): chunks/s on code-like text.

Why: embedding is the slowest stage of indexing on a CPU-only machine, so thread and batch settings and the
max-token budget should be chosen by measurement. Texts are code cells from ../shared/corpus (read-only),
joined per notebook into chunks long enough to hit the 256 word-piece cap, i.e. the worst case; without the
corpus, deterministic synthetic code is used.

Run from the repo root:  .venv/bin/python bench/embed_throughput.py [--n 1000] [--batch-sizes 16,32,64]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nbrecall.index.embed import OnnxMiniLM

CORPUS = Path("../shared/corpus")
MIN_TOKENS = 300  # > 256 so every chunk is cut at the cap: full-length work for the model


def _cell_sources(nb_path: Path) -> list[str]:
    """Code cell sources of a notebook, nbformat 4 or 3, read as plain JSON (no side effects)."""
    try:
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    cells = nb.get("cells")
    if cells is None:  # nbformat 3
        cells = [c for ws in nb.get("worksheets", []) for c in ws.get("cells", [])]
    out = []
    for c in cells:
        if c.get("cell_type") != "code":
            continue
        src = c.get("source", c.get("input", ""))
        text = "".join(src) if isinstance(src, list) else str(src)
        if text.strip():
            out.append(text)
    return out


def corpus_chunks(n: int, embedder: OnnxMiniLM) -> list[str] | None:
    """Consecutive code cells of each notebook, in sorted path order, joined to >= MIN_TOKENS word pieces."""
    if not CORPUS.is_dir():
        return None
    chunks: list[str] = []
    for nb_path in sorted(CORPUS.rglob("*.ipynb")):
        current: list[str] = []
        for src in _cell_sources(nb_path):
            current.append(src)
            text = "\n\n".join(current)
            if embedder.count_tokens([text])[0] >= MIN_TOKENS:
                chunks.append(text)
                current = []
                if len(chunks) == n:
                    return chunks
    return chunks if len(chunks) == n else None


def synthetic_chunks(n: int) -> list[str]:
    """Deterministic pandas/numpy-flavoured code, for when the corpus is not there."""
    rng = random.Random(0)
    names = ["df", "vessel", "ballast", "draft", "speed", "power", "resistance", "x", "y", "result", "ax"]
    cols = ["length_m", "beam_m", "draft_m", "dwt_t", "speed_kn", "fuel_t", "co2_kg", "date", "route"]
    lines = [
        "{a} = pd.read_csv('data/{b}_{i}.csv', parse_dates=['date'])",
        "{a}['{c}'] = {b}['{c}'].fillna(0) * {f:.3f}",
        "fig, ax = plt.subplots(figsize=({i}, 4))\nax.scatter({a}['{c}'], {b}['{c}'], s={i})",
        "for i, row in {a}.iterrows():\n    total += row['{c}'] / {f:.2f}",
        "def compute_{a}({b}, eps={f:.1e}):\n    return np.sqrt(({b} ** 2).sum(axis=1) + eps)",
        "{a} = {b}.groupby('{c}').agg(mean_{c}=('{c}', 'mean'), n=('{c}', 'size'))",
        "print(f'{a}: {{ {b}.shape }} rows, max {c} = {{ {b}[\"{c}\"].max():.2f }}')",
    ]
    out = []
    for _ in range(n):
        body = [
            rng.choice(lines).format(
                a=rng.choice(names),
                b=rng.choice(names),
                c=rng.choice(cols),
                i=rng.randint(1, 99),
                f=rng.random(),
            )
            for _ in range(rng.randint(18, 30))
        ]
        out.append("import numpy as np\nimport pandas as pd\n" + "\n".join(body))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--max-tokens", default="256,128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batch-sizes", default="32")
    args = ap.parse_args()
    max_tokens = [int(v) for v in args.max_tokens.split(",")]
    threads = [int(v) for v in args.threads.split(",")]
    batch_sizes = [int(v) for v in args.batch_sizes.split(",")]

    with tempfile.TemporaryDirectory(prefix="nbrecall-bench-") as tmp:
        cache = Path(tmp)
        t0 = time.perf_counter()
        first = OnnxMiniLM.bundled(cache)
        t1 = time.perf_counter()
        first.prepare()
        t2 = time.perf_counter()
        again = OnnxMiniLM.bundled(cache)
        again.prepare()
        t3 = time.perf_counter()
        print(f"construct (hash-check files, load tokenizer): {t1 - t0:.2f} s")
        print(f"first use (build ONNX {first.build_seconds:.2f} s + session): {t2 - t1:.2f} s")
        print(f"later use (hash-check cached .onnx + session): {t3 - t2:.2f} s")
        onnx_path = first.cached_onnx_path
        assert onnx_path is not None
        print(f"cached model: {onnx_path.name} ({onnx_path.stat().st_size / 1e6:.1f} MB)")

        texts = corpus_chunks(args.n, first)
        source = f"code cells of {CORPUS}"
        if texts is None:
            texts, source = synthetic_chunks(args.n), "synthetic code"
        counts = first.count_tokens(texts)
        print(
            f"texts: {len(texts)} from {source}; word pieces untruncated: "
            f"median {statistics.median(counts):.0f}, min {min(counts)}, max {max(counts)}"
        )
        print()
        # Wall-clock rate is what a user sees; the CPU-time rate and load average tell whether other processes
        # were competing for the two cores during the run.
        print(
            f"{'max_tokens':>10} {'threads':>7} {'batch':>5} {'seconds':>8} {'chunks/s':>9} "
            f"{'cpu s':>7} {'chunks/cpu-s':>12} {'load1':>6}"
        )
        for mt in max_tokens:
            for th in threads:
                for bs in batch_sizes:
                    emb = OnnxMiniLM.bundled(cache, batch_size=bs, threads=th, max_tokens=mt)
                    emb.embed(texts[:bs])  # warm-up: session creation, first-run allocations
                    start, cpu_start = time.perf_counter(), time.process_time()
                    emb.embed(texts)
                    secs, cpu = time.perf_counter() - start, time.process_time() - cpu_start
                    print(
                        f"{mt:>10} {th:>7} {bs:>5} {secs:>8.1f} {len(texts) / secs:>9.1f} "
                        f"{cpu:>7.1f} {len(texts) / cpu:>12.1f} {os.getloadavg()[0]:>6.1f}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
