"""Fuzz the reader, the converter and the indexer with 10,000 hostile files; count crashes (target 0).

    .venv/bin/python bench/faults_fuzz.py [--files 10000] [--batch 1000] [--big-mb 100] [--lines 100000]
                                          [--work /tmp/nbrecall-fuzz] [--keep]

Half of the files come from the hypothesis generator of tests/test_faults_input.py (wrong types in every field,
missing keys, lone surrogates, NUL, truncation, invalid UTF-8, deep nesting, not-a-notebook JSON, ...), half are
the sample notebooks damaged at random (a field replaced by a value of the wrong type or dropped, bytes cut,
flipped or inserted). Beside them, the special cases: a 100 MB output, a 100k-line cell (with distinct names and
with one name), a 20 MB base64 image, FIFOs, symlink loops, broken links, non-UTF-8 and non-ASCII names.

Each batch folder is indexed by its own `run_index` (HashEmbedder, so the figures are about nbrecall, not the
model) into one index, and every file is converted with `convert_file`. A crash is an exception out of
`run_index` or `convert_file`, a file missing from the manifest, or a file quarantined or reported with
"internal error" (a bug caught by the per-notebook safety net).
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import random
import re
import resource
import shutil
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from conftest import HashEmbedder  # noqa: E402
from nbrecall.config import Settings  # noqa: E402
from nbrecall.convert.run import convert_file  # noqa: E402
from nbrecall.index.manifest import SqliteManifest  # noqa: E402
from nbrecall.index.store import LanceStore  # noqa: E402
from nbrecall.ingest.pipeline import run_index  # noqa: E402
from nbrecall.notebook.files import printable_path  # noqa: E402
from test_faults_input import file_names, nested, notebook_bytes  # noqa: E402

WRONG = [None, True, 0, -1, 2**70, 1.5, float("nan"), "", "x", "\ud800", "\x00", [], [1, "a"], {}, {"a": [1]}]


def generated(n: int, batch_seed: int) -> list[tuple[str, bytes]]:
    """`n` (name, bytes) pairs from the test generator (generation phase only, seeded per batch)."""
    out: list[tuple[str, bytes]] = []

    @seed(batch_seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(notebook_bytes(), file_names)
    def collect(data: bytes, name: str) -> None:
        out.append((name, data))

    collect()
    return out


def paths_in(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(paths_in(item, (*prefix, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(paths_in(item, (*prefix, i)))
    return found


def mutate(doc: Any, rng: random.Random) -> bytes:
    """A sample notebook with 1–4 fields replaced by a wrong-typed value or dropped, then maybe byte damage."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 4)):
        path = rng.choice(paths_in(doc)[1:] or [()])
        if not path:
            break
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and rng.random() < 0.3:
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(WRONG))
    data = json.dumps(doc, ensure_ascii=rng.random() < 0.8).encode("utf-8", "surrogatepass")
    roll = rng.random()
    at = rng.randrange(len(data)) if data else 0
    if roll < 0.1:
        data = data[:at]
    elif roll < 0.15:
        data = data[:at] + bytes([rng.randrange(256)]) + data[at:]
    elif roll < 0.2:
        data = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
    return data


def samples() -> list[Any]:
    docs = []
    for path in sorted((ROOT / "samples").rglob("*.ipynb")):
        try:
            docs.append(json.loads(path.read_bytes()))
        except ValueError:
            continue
    return docs


def nb(cells: list[dict[str, Any]]) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})


def code(source: str, outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"cell_type": "code", "id": "c0", "metadata": {}, "source": source, "outputs": outputs or [],
            "execution_count": 1}


def specials(folder: Path, big_mb: int, lines: int) -> None:
    folder.mkdir(parents=True)
    line = "iteration 12345 residual 0.00123 converged False\n"
    with (folder / "100 MB output.ipynb").open("w") as handle:  # streamed: no 100 MB string here
        handle.write('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", '
                     '"id": "c0", "metadata": {}, "source": "run()", "execution_count": 1, "outputs": '
                     '[{"output_type": "stream", "name": "stdout", "text": "')
        chunk = json.dumps(line * 10_000)[1:-1]
        for _ in range(big_mb * 1_000_000 // (len(line) * 10_000)):
            handle.write(chunk)
        handle.write('"}]}]}')
    (folder / "100k lines distinct names.ipynb").write_text(nb([code("".join(f"x{i} = {i}\n" for i in range(lines)))]))
    (folder / "100k lines one name.ipynb").write_text(nb([code("".join(f"x = {i}\n" for i in range(lines)))]))
    image = base64.b64encode(random.Random(1).randbytes(15_000_000)).decode()
    (folder / "20 MB base64.ipynb").write_text(nb([code("plot()", [
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": image, "text/plain": "<Figure>"}}])]))
    (folder / "deep nesting.ipynb").write_text(nested(200_000))
    os.mkfifo(folder / "fifo.ipynb")
    (folder / "loop.ipynb").symlink_to("loop.ipynb")
    (folder / "dangling.ipynb").symlink_to("nowhere.ipynb")
    (folder / "dir loop").mkdir()
    (folder / "dir loop" / "up").symlink_to("..")
    with open(os.fsencode(folder) + b"/latin1 \xe9t\xe9.ipynb", "wb") as handle:
        handle.write(nb([code("x = 1")]).encode())
    (folder / "ñø 日本 spaces.ipynb").write_text(nb([code("y = 2")]))


def entries(folder: Path) -> list[Path]:
    found = []
    for current, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(Path(current) / f for f in sorted(files) if f.endswith(".ipynb") and not f.startswith("."))
    return found


class Timeout(Exception):
    pass


def alarm(_signum: int, _frame: Any) -> None:
    raise Timeout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--big-mb", type=int, default=100)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/nbrecall-fuzz"))
    parser.add_argument("--keep", action="store_true", help="keep the generated files and the index")
    args = parser.parse_args()
    work: Path = args.work
    shutil.rmtree(work, ignore_errors=True)
    share, idx, out = work / "share", work / "idx", work / "out"
    signal.signal(signal.SIGALRM, alarm)
    rng = random.Random(20240611)
    docs = samples()
    started = time.perf_counter()
    n_batches = (args.files + args.batch - 1) // args.batch
    for b in range(n_batches):
        size = min(args.batch, args.files - b * args.batch)
        folder = share / f"batch-{b:02d}"
        folder.mkdir(parents=True)
        items = generated(size // 2, b)
        items += [(f"sample {i}.ipynb", mutate(rng.choice(docs), rng)) for i in range(size - len(items))]
        for i, (name, data) in enumerate(items):
            (folder / f"{i:04d} {name}"[:200]).write_bytes(data)
    specials(share / "special", args.big_mb, args.lines)
    gen_seconds = time.perf_counter() - started
    batches = sorted(p for p in share.iterdir() if p.is_dir())
    files = {p: b for b in batches for p in entries(b)}
    print(f"generated {len(files):,} files in {gen_seconds:.0f} s under {share}", flush=True)

    crashes: list[str] = []
    slow: list[tuple[float, str]] = []
    embedder = HashEmbedder()
    started = time.perf_counter()
    for folder in batches:
        t0 = time.perf_counter()
        signal.alarm(3600)
        try:
            run_index([folder], Settings(index_dir=idx), embedder, LanceStore(idx / "lance", embedder.dim))
        except Exception as exc:
            crashes.append(f"index {folder.name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}")
        except Timeout:
            crashes.append(f"index {folder.name}: still running after an hour")
        finally:
            signal.alarm(0)
        print(f"  indexed {folder.name} in {time.perf_counter() - t0:.1f} s", flush=True)
    index_seconds = time.perf_counter() - started
    manifest = SqliteManifest(idx / "manifest.sqlite", readonly=True)
    recorded = {(root, rel): rec.sha256 for (root, rel), rec in manifest.files().items()}
    status: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for path, folder in files.items():
        key = (str(folder.resolve()), printable_path(path.relative_to(folder).as_posix()))
        sha = recorded.get(key)
        content = manifest.content(sha) if sha else None
        if content is None:
            crashes.append(f"not in the manifest: {key[1]}")
            status["missing"] += 1
            continue
        status[content.status] += 1
        if content.status == "quarantined":
            reasons[re.sub(r"\d+", "N", content.reason.split(":")[0])[:60]] += 1
            if "internal error" in content.reason or not content.reason.strip():
                crashes.append(f"index {key[1]}: {content.reason}")

    started = time.perf_counter()
    converted: Counter[str] = Counter()
    for path, folder in files.items():
        target = out / folder.name
        t0 = time.perf_counter()
        signal.alarm(900)
        try:
            result = convert_file(path, target)
            converted["ok" if result.ok else "unreadable"] += 1
            if result.reason and "internal error" in result.reason:
                crashes.append(f"convert {path.name}: {result.reason}")
        except Timeout:
            crashes.append(f"convert {path.name}: still running after 15 minutes")
        except Exception as exc:
            crashes.append(f"convert {path.name}: {type(exc).__name__}: {exc}")
        finally:
            signal.alarm(0)
        slow.append((time.perf_counter() - t0, printable_path(path.name)))
        shutil.rmtree(target, ignore_errors=True)
    convert_seconds = time.perf_counter() - started
    stats = manifest.stats()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print("\nfuzz figures")
    print(f"  files tried                 {len(files):,}")
    print(f"  indexed                     {status['indexed']:,}")
    print(f"  quarantined (with reason)   {status['quarantined']:,}")
    print(f"  missing from the manifest   {status['missing']:,}")
    print(f"  converted / unreadable      {converted['ok']:,} / {converted['unreadable']:,}")
    print(f"  crashes                     {len(crashes)}")
    print(f"  chunks in the index         {stats['chunks']:,}")
    print(f"  time: generate / index / convert   {gen_seconds:.0f} s / {index_seconds:.0f} s / {convert_seconds:.0f} s")
    print(f"  peak RSS                    {peak:,.0f} MiB")
    print("  slowest conversions:        " + "; ".join(f"{n} {s:.1f} s" for s, n in sorted(slow)[-5:][::-1]))
    print("  quarantine reasons:")
    for reason, count in reasons.most_common(15):
        print(f"    {count:6,}  {reason}")
    for crash in crashes[:20]:
        print(f"CRASH {crash}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if crashes else 0)


if __name__ == "__main__":
    main()
