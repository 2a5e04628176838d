"""How soon `nbrecall serve ROOT --watch` finds what changes under ROOT, end to end with the real model.

    .venv/bin/python bench/watch_latency.py [--source samples/archive] [--config samples/nbrecall.toml]
                                            [--repeat 5] [--port 8792] [--every 0]

Copies `--source` into a temporary ROOT, starts `nbrecall serve ROOT --watch` (a real server process, index in a
temporary folder) and waits for its first run. Then, `--repeat` times: writes a new notebook with a word no other
holds and measures the seconds until `/api/search` finds it; deletes it and measures until it is gone; finally
writes a malformed notebook and measures until `/api/status` lists it as quarantined, checking that searches
answer throughout. With `--every S` instead of events (`--watch` off): the polling fallback. Prints each figure,
their median and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
from nbformat import v4

REPO = Path(__file__).resolve().parents[1]
NBRECALL = Path(sys.executable).with_name("nbrecall")


def get(base: str, path: str, **params: str) -> dict:  # type: ignore[type-arg]
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def found(base: str, word: str, rel: str) -> bool:
    return any(group["path"] == rel for group in get(base, "/api/search", q=word)["notebooks"])


def wait(check, timeout: float = 120.0) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    while not check():
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"not within {timeout} s")
        time.sleep(0.1)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=REPO / "samples" / "archive")
    parser.add_argument("--config", type=Path, default=REPO / "samples" / "nbrecall.toml")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--port", type=int, default=8792)
    parser.add_argument("--every", type=float, default=0.0, help="poll every S seconds instead of --watch")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="nbrecall-watch-"))
    root, index = work / "share", work / "index"
    shutil.copytree(args.source, root)
    base = f"http://127.0.0.1:{args.port}"
    mode = ["--every", f"{args.every:g}s"] if args.every else ["--watch"]
    command = [str(NBRECALL), "serve", str(root), *mode, "--index", str(index), "--config", str(args.config),
               "--port", str(args.port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    figures: dict[str, list[float]] = {"new notebook searchable": [], "deleted notebook gone": []}
    try:
        def idle() -> bool:
            try:
                live = get(base, "/api/progress")["live"]
            except OSError:
                return False
            return live["state"] == "idle" and live["runs"] >= 1

        print(f"first run (server start to idle): {wait(idle, 600):.1f} s")
        for i in range(args.repeat):
            word, rel = f"zanzibarite{i}", f"new/study_{i}.ipynb"
            nb = v4.new_notebook(cells=[v4.new_markdown_cell(f"# Study {i}\n\nThe {word} coefficient."),
                                        v4.new_code_cell(f"{word} = 0.{i + 1}\nprint({word})")])
            (root / "new").mkdir(exist_ok=True)
            (root / rel).write_text(nbformat.writes(nb))
            figures["new notebook searchable"].append(wait(lambda w=word, r=rel: found(base, w, r)))
            (root / rel).unlink()
            figures["deleted notebook gone"].append(wait(lambda w=word, r=rel: not found(base, w, r)))
        (root / "new" / "broken.ipynb").write_text('{"cells": [{"cell_type": "code", "sou')
        quarantined = wait(lambda: any(q["path"] == "new/broken.ipynb"
                                       for q in get(base, "/api/status")["quarantined"]))
        still = get(base, "/api/search", q="ballast volume aft")["notebooks"]
        for name, values in figures.items():
            shown = ", ".join(f"{v:.1f}" for v in values)
            print(f"{name}: median {statistics.median(values):.1f} s, max {max(values):.1f} s ({shown})")
        print(f"malformed notebook quarantined: {quarantined:.1f} s; searches still answer: {bool(still)}")
        load = os.getloadavg()
        print(f"mode {' '.join(mode)}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
