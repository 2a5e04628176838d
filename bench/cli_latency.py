"""End-to-end latency of the CLI: `nbrecall search`, `ask` and `status` as a person runs them, one process each.

    .venv/bin/python bench/cli_latency.py --index DIR [--config FILE] [--runs 7] [--cold-runs 3]
                                          [--modes direct,server] [--port 8791] [--importtime]

Each command runs as its own process (`.venv/bin/nbrecall ...`, output to a pseudo-terminal, as at a shell), timed
from spawn to exit, in
two modes:

- `direct`: the command opens the index itself (`NBRECALL_SERVER=off`): Python start-up, imports, the model, the
  store, the search;
- `server`: a `nbrecall serve --index DIR` started by this script is running, so `search` and `ask` are answered by
  it (`web.local_server`); `status` always reads the manifest itself.

`cold`: before each run the page cache is emptied of this run's files (`posix_fadvise(DONTNEED)` on the index
folder, the model cache and the virtualenv's packages; the whole machine's cache is not dropped: it is shared),
so the files are read from disk again, as after a reboot or a long idle; `warm`: the same command again at once.
Queries rotate through a fixed list. The commands run without `PYTHONDONTWRITEBYTECODE`, as at a user's shell.
Prints p50/p95 per (mode, command, cold/warm) and the load average
before and after; with `--importtime`, the heaviest imports of one direct `search` (`python -X importtime`).
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NBRECALL = Path(sys.executable).with_name("nbrecall")
QUERIES = [
    "what ballast volume did we use aft for the 130 m PSV",
    "KeyError pile_diameter",
    "free surface effect",
    "which load case governs the deck beam",
    "mooring line pretension",
]


def evict(paths: list[Path]) -> int:
    """Drop these files' pages from the page cache (clean pages only; no root-wide drop_caches)."""
    count = 0
    for base in paths:
        files = [base] if base.is_file() else (p for p in base.rglob("*") if p.is_file())
        for path in files:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                count += 1
            finally:
                os.close(fd)
    return count


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = share * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def command_args(command: str, query: str, index: Path, config: Path | None) -> list[str]:
    common = ["--index", str(index)] + (["--config", str(config)] if config else [])
    if command == "search":
        return [str(NBRECALL), "search", query, "-k", "5", *common]
    if command == "ask":
        return [str(NBRECALL), "ask", query, "--extractive", *common]
    return [str(NBRECALL), "status", *common]


CPU: list[float] = []  # CPU seconds (user + system) of each timed command, in order


def timed(args: list[str], env: dict[str, str]) -> float:
    """Seconds from spawn to exit, stdout on a pseudo-terminal as for a person at a shell (rich styles it, and
    `search` highlights the query's words), drained by a thread so the command never blocks on it. The command's
    own CPU seconds go to `CPU`: on a shared machine they say what the wall time would be on an idle one."""
    master, slave = pty.openpty()
    drained = threading.Thread(target=_drain, args=(master,), daemon=True)
    drained.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        result = subprocess.run(args, env={**env, "COLUMNS": "120"}, stdout=slave, stderr=subprocess.PIPE,
                                timeout=600)
        seconds = time.perf_counter() - started
    finally:
        os.close(slave)
        drained.join(5)
        os.close(master)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr.decode()[-2000:]}")
    return seconds


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # the other end closed
        pass


def start_server(index: Path, config: Path | None, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    args = [str(NBRECALL), "serve", "--index", str(index), "--port", str(port)]
    args += ["--config", str(config)] if config else []
    server = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"nbrecall serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/search?q=warm+up", timeout=30) as response:
                if response.status == 200 and (index / "serve.json").is_file():
                    return server
        except OSError:
            pass
        time.sleep(0.5)
    server.kill()
    raise SystemExit("nbrecall serve did not come up in 180 s")


def importtime(index: Path, config: Path | None, env: dict[str, str]) -> list[tuple[str, float, float]]:
    """(module, self ms, cumulative ms) of the heaviest imports of one direct `search`."""
    args = [sys.executable, "-X", "importtime", "-m", "nbrecall.cli", *command_args("search", QUERIES[0], index,
                                                                                    config)[1:]]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    rows = []
    for line in result.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if not line.startswith("import time:") or len(parts) != 3:
            continue
        try:
            rows.append((parts[2].strip(), int(parts[0]) / 1000, int(parts[1]) / 1000))
        except ValueError:  # the header line
            continue
    return sorted(rows, key=lambda row: -row[2])[:25]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--runs", type=int, default=7, help="warm runs per command and mode")
    parser.add_argument("--cold-runs", type=int, default=3, help="cold runs per command and mode")
    parser.add_argument("--modes", default="direct,server")
    parser.add_argument("--commands", default="search,ask,status")
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--importtime", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    index = args.index.resolve()
    # As at a user's shell: bytecode is written (a sandbox that sets PYTHONDONTWRITEBYTECODE would otherwise
    # recompile every module changed since its .pyc was written, in every run)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    model_cache = Path(env.get("NBRECALL_MODEL_CACHE") or index / "models")
    packages = Path(sys.executable).resolve().parents[1] / "lib"
    venv_lib = Path(sys.prefix) / "lib"
    cold_files = [index, model_cache, venv_lib if venv_lib.exists() else packages]
    load_before = os.getloadavg()
    figures: list[dict[str, object]] = []
    print(f"index {index}; load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    for mode in args.modes.split(","):
        server = None
        run_env = {**env, "NBRECALL_SERVER": "off"} if mode == "direct" else {**env, "NBRECALL_SERVER": "auto"}
        if mode == "server":
            server = start_server(index, args.config, args.port, {**env})
        try:
            for command in args.commands.split(","):
                for temperature, runs in (("cold", args.cold_runs), ("warm", args.runs)):
                    seconds, cpu = [], []
                    for i in range(runs):
                        query = QUERIES[i % len(QUERIES)]
                        cmd = command_args(command, query, index, args.config)
                        if temperature == "cold":
                            evict(cold_files)
                        else:
                            timed(cmd, run_env) if i == 0 else None  # warm: the first, unmeasured, fills the cache
                        seconds.append(timed(cmd, run_env))
                        cpu.append(CPU[-1])
                    row = {"mode": mode, "command": command, "cache": temperature, "runs": runs,
                           "p50": percentile(seconds, 0.5), "p95": percentile(seconds, 0.95),
                           "min": min(seconds), "max": max(seconds), "mean": statistics.fmean(seconds),
                           "cpu_p50": percentile(cpu, 0.5), "load": os.getloadavg()[0]}
                    figures.append(row)
                    print(f"{mode:7s} {command:7s} {temperature:5s} n={runs:<3d} p50 {row['p50']:.2f} s  "
                          f"p95 {row['p95']:.2f} s  (min {row['min']:.2f}, max {row['max']:.2f}; CPU p50 "
                          f"{row['cpu_p50']:.2f} s; load {row['load']:.1f})", flush=True)
        finally:
            if server is not None:
                server.send_signal(signal.SIGINT)
                try:
                    server.wait(30)
                except subprocess.TimeoutExpired:
                    server.kill()
    load_after = os.getloadavg()
    print(f"load average after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    imports = importtime(index, args.config, {**env, "NBRECALL_SERVER": "off"}) if args.importtime else []
    if imports:
        print("\nheaviest imports of one direct `search` (python -X importtime; ms, self / cumulative):")
        for name, own, total in imports:
            print(f"  {total:8.1f} {own:8.1f}  {name}")
    if args.json:
        args.json.write_text(json.dumps({"index": str(index), "load_before": load_before, "load_after": load_after,
                                         "figures": figures, "imports": imports}, indent=1) + "\n")


if __name__ == "__main__":
    main()
