"""`nbrecall serve` against hostile requests and hostile notebooks (issue 14): prints the figures.

    python bench/web_hostile.py [--work DIR] [--corpus ../shared/corpus] [--reuse] [--skip-index-kill]

Builds two indexes with `nbrecall index` (real model): the bundled sample archive plus a notebook whose HTML
output nests 300,000 <div>s (and a markdown cell 60,000), with vectors; and a copy of it to which a 60,000-cell
notebook and one with a 50 MB output are added (keyword-searchable only). Then runs real servers (`nbrecall
serve`, one with a token, two without) and measures through HTTP:

- the 80,000-backslash cookie on the token server (401, and how long);
- `Host: attacker.example` on the tokenless server, `{"q": "\\ud800"}`, cell index `1.0`, blank and short tokens;
- whether the token shows in any log line or response header after signing in and redirects;
- the deep notebook's viewer page while searches run beside it on the sample index (one client: 20 in a row;
  four clients: 5 each), against 20 searches alone;
- the 60,000-cell notebook's first page: time, and memory growth of the server and its render processes;
- four concurrent fidelity reports of the 50 MB-output notebook: peak memory of the server and its processes;
- SIGTERM with a heavy render in flight: how long until the server and its render processes are gone;
- kill -9 of `nbrecall index` on the corpus mid-run: how long until no process of that run is alive, and that
  the next run finishes the index.

Memory is resident set size (VmRSS) summed over the server process and all its descendants, sampled every 50 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
from nbformat import v4

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
NBRECALL = str(Path(sys.executable).parent / "nbrecall")
TOKEN = "bench-token-0123456789abcdef"
SEARCHES = [
    "what ballast volume did we use aft for the 130 m PSV",
    "KeyError pile_diameter",
    "free surface effect",
    "mooring line tension",
    "pile capacity skin friction",
]


# ---------------------------------------------------------------------------------------------------------
# the archive


def deep_notebook(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    deep = v4.new_notebook(cells=[
        v4.new_markdown_cell("# Deep HTML\n\nAn output of 300,000 nested divs."),
        v4.new_code_cell("show()", execution_count=1, outputs=[v4.new_output(
            "display_data", data={"text/html": "<div>" * 300_000 + "payload" + "</div>" * 50_000,
                                  "text/plain": "<deep>"})]),
        v4.new_markdown_cell("<div>" * 60_000 + "deep markdown"),
        v4.new_code_cell("print('after')", execution_count=2,
                         outputs=[v4.new_output("stream", name="stdout", text="after the deep ones\n")]),
    ])
    path = folder / "deep_html.ipynb"
    path.write_text(nbformat.writes(deep), encoding="utf-8")
    return path


def big_notebooks(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    cells = []
    for i in range(60_000):
        if i % 2:
            cells.append(v4.new_code_cell(f"x{i} = {i} * 0.5\nprint(x{i})", execution_count=i,
                                          outputs=[v4.new_output("stream", name="stdout", text=f"{i * 0.5}\n")]))
        else:
            cells.append(v4.new_markdown_cell(f"## Step {i}\n\nLoad case {i}: the value below."))
    long = v4.new_notebook(cells=cells)
    line = "iteration 0000000 loss 0.123456 accuracy 0.987654 lr 0.0001 grad-norm 1.2345\n"
    big_text = "".join(line.replace("0000000", f"{i:07d}") for i in range(50_000_000 // len(line)))
    big = v4.new_notebook(cells=[
        v4.new_markdown_cell("# Training log\n\nA cell that printed 50 MB."),
        v4.new_code_cell("train()", execution_count=1, outputs=[v4.new_output("stream", name="stdout",
                                                                             text=big_text)]),
        v4.new_code_cell("print('done')", execution_count=2,
                         outputs=[v4.new_output("stream", name="stdout", text="done\n")]),
    ])
    out = {"cells60k": folder / "cells_60000.ipynb", "output50mb": folder / "output_50mb.ipynb"}
    out["cells60k"].write_text(nbformat.writes(long), encoding="utf-8")
    out["output50mb"].write_text(nbformat.writes(big), encoding="utf-8")
    return out


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


HOSTILE = {"deep": "hostile/deep_html.ipynb", "cells60k": "hostile/cells_60000.ipynb",
           "output50mb": "hostile/output_50mb.ipynb"}


def _shas(index: Path, keys: list[str]) -> dict[str, str] | None:
    if not (index / "manifest.sqlite").is_file():
        return None
    from nbrecall.index.manifest import SqliteManifest

    manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
    try:
        shas = {key: manifest.find_by_path(HOSTILE[key]) for key in keys}
    finally:
        manifest.close()
    return {k: str(v) for k, v in shas.items()} if all(shas.values()) else None


def existing_index(work: Path) -> tuple[Path, Path, dict[str, str]] | None:
    """The indexes a previous run built in `work` (`--reuse`)."""
    small = _shas(work / "index-sample", ["deep"])
    full = _shas(work / "index", list(HOSTILE))
    return (work / "index-sample", work / "index", full) if small and full else None


def build_index(work: Path) -> tuple[Path, Path, dict[str, str], dict[str, float]]:
    """`index-sample`: the sample archive (with vectors) and the deep notebook; `index`: that, plus the 60,000-cell
    and the 50 MB-output notebooks (added keyword-only)."""
    archive, small, index = work / "archive", work / "index-sample", work / "index"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(SAMPLES / "archive", archive)
    deep_notebook(archive / "hostile")
    times: dict[str, float] = {}
    config = ["--config", str(SAMPLES / "nbrecall.toml")]
    started = time.perf_counter()
    first = run([NBRECALL, "index", str(archive), *config, "--index", str(small)])
    times["sample + deep notebook index (with vectors)"] = time.perf_counter() - started
    if first.returncode != 0:
        sys.exit(f"indexing the sample failed:\n{first.stderr[-2000:]}")
    shutil.copytree(small, index)
    big_notebooks(archive / "hostile")
    started = time.perf_counter()
    second = run([NBRECALL, "index", str(archive), *config, "--index", str(index), "--defer-vectors"])
    times["60,000-cell and 50 MB-output notebooks added (keyword only)"] = time.perf_counter() - started
    if second.returncode != 0:
        sys.exit(f"indexing the hostile notebooks failed:\n{second.stderr[-2000:]}")
    shas = _shas(index, list(HOSTILE))
    if shas is None or _shas(small, ["deep"]) is None:
        sys.exit("the hostile notebooks were not indexed")
    return small, index, shas, times


# ---------------------------------------------------------------------------------------------------------
# processes and memory


def descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            todo.extend(children - found)
            found |= children
    return found


def rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(pid: int) -> tuple[int, int]:
    """(the process's own RSS, the RSS of it and every descendant)."""
    own = rss(pid)
    return own, own + sum(rss(p) for p in descendants(pid))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Peak:
    """Samples the server tree's memory every 50 ms while in the `with` block."""

    def __init__(self, pid: int) -> None:
        self.pid, self.own, self.tree = pid, 0, 0
        self._stop = threading.Event()

    def __enter__(self) -> Peak:
        self.before = tree_rss(self.pid)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            own, tree = tree_rss(self.pid)
            self.own, self.tree = max(self.own, own), max(self.tree, tree)
            time.sleep(0.05)

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.after = tree_rss(self.pid)


def mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


# ---------------------------------------------------------------------------------------------------------
# servers and requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, index: Path, log: Path, token: str | None = None) -> None:
        self.port = free_port()
        cmd = [NBRECALL, "serve", "--index", str(index), "--config", str(SAMPLES / "nbrecall.toml"),
               "--port", str(self.port)]
        env = {**os.environ, "NBRECALL_TOKEN": token or ""}
        self.log = log
        self.handle = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self.handle, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if self.get("/static/app.css")[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
        time.sleep(2)  # the render processes load their libraries

    def request(self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None,
                timeout: float = 300) -> tuple[int, dict[str, str], bytes, float]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        started = time.perf_counter()
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - started
        conn.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data, elapsed

    def get(self, path: str, headers: dict[str, str] | None = None, timeout: float = 300):  # type: ignore[no-untyped-def]
        status, head, data, elapsed = self.request("GET", path, headers, timeout=timeout)
        return status, head, data, elapsed

    def stop(self) -> float:
        """SIGTERM; the seconds until the server and its render processes are gone (killed after 30 s)."""
        family = descendants(self.proc.pid) | {self.proc.pid}
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        while any(alive(p) for p in family) and time.monotonic() - started < 30:
            time.sleep(0.05)
        self.handle.close()
        return time.monotonic() - started


def searches_beside(server: Server, heavy_path: str, clients: int, per_client: int,
                    headers: dict[str, str] | None = None) -> tuple[float, int, bytes, list[float]]:
    """The heavy request and `clients` × `per_client` searches started at the same moment."""
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    heavy: dict[str, object] = {}

    def client(offset: int) -> None:
        start.wait()
        for i in range(per_client):
            q = SEARCHES[(offset + i) % len(SEARCHES)]
            status, _h, _d, elapsed = server.get("/api/search?" + _q(q), headers)
            assert status == 200, status
            with lock:
                latencies.append(elapsed)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    status, _h, data, elapsed = server.get(heavy_path, headers)
    heavy.update(status=status, data=data, elapsed=elapsed)
    for t in threads:
        t.join()
    return float(heavy["elapsed"]), int(heavy["status"]), bytes(heavy["data"]), latencies  # type: ignore[arg-type]


def _q(text: str) -> str:
    from urllib.parse import urlencode

    return urlencode({"q": text, "k": 10})


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


# ---------------------------------------------------------------------------------------------------------
# the measurements


def measure_servers(small: Path, index: Path, shas: dict[str, str], work: Path) -> None:
    print("\n## Requests (token server)")
    locked = Server(index, work / "serve-token.log", token=TOKEN)
    try:
        cookie = {"Cookie": 'a="' + "\\" * 80_000 + '"'}
        results = [locked.get("/api/status", cookie) for _ in range(5)]
        times = [r[3] * 1000 for r in results]
        print(f"80,000-backslash cookie: status {sorted({r[0] for r in results})}, "
              f"median {statistics.median(times):.1f} ms, max {max(times):.1f} ms (5 requests)")
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        with_cookie = locked.get("/api/status", {**bearer, **cookie})
        print(f"the same cookie with a valid bearer token: status {with_cookie[0]}, {with_cookie[3] * 1000:.1f} ms")
        headers_seen: list[str] = []
        for path, head in [(f"/?token={TOKEN}", {}), (f"/api/status/?token={TOKEN}", bearer),
                           (f"/nb/{shas['deep']}/?token={TOKEN}", bearer), (f"/?q=ballast&token={TOKEN}", bearer)]:
            status, h, _d, _e = locked.get(path, head)
            headers_seen += [f"{k}: {v}" for k, v in h.items()]
        sign_in = locked.get(f"/?token={TOKEN}")
        print(f"sign-in /?token=…: status {sign_in[0]}, Location {sign_in[1].get('location')!r}, "
              f"cookie flags {sign_in[1].get('set-cookie', '').split(';', 1)[1].strip()!r}")
        surrogate = locked.request("POST", "/api/ask", {**bearer, "content-type": "application/json"},
                                   b'{"q": "\\ud800"}')
        print(f'POST /api/ask {{"q": "\\ud800"}}: status {surrogate[0]}')
        dotted = locked.get(f"/api/notebooks/{shas['deep']}/cells/1.0", bearer)
        plus = locked.get(f"/api/notebooks/{shas['deep']}/cells/+1", bearer)
        print(f"cell index 1.0: status {dotted[0]}; +1: status {plus[0]}")
    finally:
        locked.stop()
    log_text = (work / "serve-token.log").read_text()
    access = [ln for ln in log_text.splitlines() if "HTTP/1.1" in ln]
    print(f"token in the server's log: {log_text.count(TOKEN)} times in {len(log_text.splitlines())} lines "
          f"({len(access)} access-log lines); in response headers: {sum(TOKEN in h for h in headers_seen)}")

    for bad in (" ", "short-token"):
        refused = run([NBRECALL, "serve", "--index", str(index), "--token", bad, "--port", str(free_port())],
                      timeout=60)
        print(f"serve --token {bad!r}: exit code {refused.returncode}")

    print("\n## The deep notebook and searches (tokenless loopback server, sample index + the deep notebook)")
    server = Server(small, work / "serve-sample.log")
    try:
        attacker = server.get("/api/status", {"Host": "attacker.example"})
        print(f"Host: attacker.example: status {attacker[0]}")
        print(f"server at start: {mb(tree_rss(server.proc.pid)[0])} (with render processes "
              f"{mb(tree_rss(server.proc.pid)[1])})")
        for q in SEARCHES:  # the model loads on the first search
            server.get("/api/search?" + _q(q))
        warm = [server.get("/api/search?" + _q(q))[3] for q in SEARCHES * 4]
        print(f"20 searches alone (one client): p50 {statistics.median(warm) * 1000:.0f} ms, p95 "
              f"{pct(warm, 95) * 1000:.0f} ms, max {max(warm) * 1000:.0f} ms")

        elapsed, status, data, lat = searches_beside(server, f"/nb/{shas['deep']}", clients=1, per_client=20)
        print(f"deep notebook (300,000 nested divs) viewer page: {elapsed:.2f} s, status {status}, notice "
              f"{'shown as text' in data.decode()}, {len(data) / 1e6:.1f} MB page; 20 searches beside it (one "
              f"client): p50 {statistics.median(lat) * 1000:.0f} ms, p95 {pct(lat, 95) * 1000:.0f} ms, max "
              f"{max(lat) * 1000:.0f} ms")
        elapsed, status, data, lat = searches_beside(server, f"/nb/{shas['deep']}?page=1", clients=4,
                                                     per_client=5)
        print(f"  again (cached), with 4 clients × 5 searches: page {elapsed:.2f} s; searches p50 "
              f"{statistics.median(lat) * 1000:.0f} ms, p95 {pct(lat, 95) * 1000:.0f} ms")
    finally:
        print(f"SIGTERM: gone after {server.stop():.2f} s")

    print("\n## Large notebooks (tokenless loopback server, + the 60,000-cell and 50 MB-output notebooks)")
    server = Server(index, work / "serve.log")
    try:
        for q in SEARCHES:  # as a server in use: the model and the index loaded
            server.get("/api/search?" + _q(q))

        with Peak(server.proc.pid) as peak:
            status, _h, data, elapsed = server.get(f"/nb/{shas['cells60k']}")
        print(f"60,000-cell notebook, first page: {elapsed:.2f} s, status {status}, {len(data) / 1e6:.2f} MB page; "
              f"server {mb(peak.before[0])} → peak {mb(peak.own)} (+{mb(peak.own - peak.before[0])}), with render "
              f"processes {mb(peak.before[1])} → peak {mb(peak.tree)} (+{mb(peak.tree - peak.before[1])})")
        status, _h, data, elapsed = server.get(f"/nb/{shas['cells60k']}?page=300")
        linked = server.get(f"/nb/{shas['cells60k']}?cell={_cell_id(index, shas['cells60k'], 45_678)}")
        holds = 'data-index="45678"' in linked[2].decode()
        print(f"  page 300 of 600: {elapsed:.2f} s; the page of a #cell-id link (?cell=…, cell 45,678): "
              f"{linked[3]:.2f} s, holds it: {holds}")
        with Peak(server.proc.pid) as peak:
            status, _h, data, elapsed = server.get(f"/nb/{shas['cells60k']}/report")
        print(f"60,000-cell notebook, fidelity report: {elapsed:.1f} s, status {status}, notice "
              f"{'No fidelity report' in data.decode()}; peak with render processes {mb(peak.tree)} "
              f"(+{mb(peak.tree - peak.before[1])})")

        results: list[tuple[int, float]] = []
        lock = threading.Lock()

        def report() -> None:
            status, _h, _d, elapsed = server.get(f"/nb/{shas['output50mb']}/report")
            with lock:
                results.append((status, elapsed))

        with Peak(server.proc.pid) as peak:
            threads = [threading.Thread(target=report) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        print(f"four concurrent reports of the 50 MB-output notebook: statuses {sorted(s for s, _ in results)}, "
              f"slowest {max(e for _, e in results):.1f} s; server peak {mb(peak.own)}, with render processes "
              f"{mb(peak.before[1])} → peak {mb(peak.tree)}")
        with Peak(server.proc.pid) as peak:
            status, _h, data, elapsed = server.get(f"/nb/{shas['output50mb']}")
        print(f"50 MB-output notebook viewer page: {elapsed:.2f} s, status {status}, {len(data) / 1e6:.2f} MB page; "
              f"peak with render processes {mb(peak.tree)}")
        busy = threading.Thread(target=lambda: _ignore_errors(server.get, f"/nb/{shas['cells60k']}/deps.svg"))
        busy.start()  # a heavy render in flight (the 60,000-cell notebook's dependency map) when the stop comes
        time.sleep(1.0)
    finally:
        print(f"SIGTERM with a heavy render in flight: server and render processes gone after {server.stop():.2f} s")


def _ignore_errors(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return fn(*args)
    except OSError:
        return None


def _cell_id(index: Path, sha: str, idx: int) -> str:
    from nbrecall.index.manifest import SqliteManifest

    manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
    try:
        return manifest.cells(sha, idx, idx + 1)[0].cell_id
    finally:
        manifest.close()


def measure_index_kill(corpus: Path, work: Path) -> None:
    print("\n## kill -9 of `nbrecall index` mid-run")
    index = work / "kill-index"
    shutil.rmtree(index, ignore_errors=True)
    cmd = [NBRECALL, "index", str(corpus), "--index", str(index), "--no-vectors", "--executor", "local"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    family: set[int] = set()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # mid-run: workers busy, and some batches already written
        family |= descendants(proc.pid)
        if len(family) >= 2 and _notebooks(index) >= 100:
            break
        time.sleep(0.2)
    family |= descendants(proc.pid)
    sizes = {p: rss(p) for p in family}
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    while any(alive(p) for p in family) and time.monotonic() - killed < 30:
        time.sleep(0.05)
    left = [p for p in family if alive(p)]
    print(f"processes of the run at the kill: {len(family)} (largest {mb(max(sizes.values(), default=0))}); "
          f"alive 5 s later: {sum(1 for p in left)}; all gone after {time.monotonic() - killed:.2f} s")
    before = _notebooks(index)
    started = time.perf_counter()
    again = run(cmd, timeout=3600)
    done = re.search(r"notebooks indexed\D+([\d,]+)", again.stderr)
    print(f"next run: exit code {again.returncode} in {time.perf_counter() - started:.1f} s; the index held "
          f"{before} notebooks after the kill, the next run indexed {done.group(1) if done else '?'} more: "
          f"{_notebooks(index)} in all")


def _notebooks(index: Path) -> int:
    if not (index / "manifest.sqlite").is_file():
        return 0
    from nbrecall.index.manifest import SqliteManifest

    manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
    try:
        return int(manifest.stats()["notebooks"])
    finally:
        manifest.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "nbrecall-web-hostile")
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    parser.add_argument("--skip-index-kill", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="reuse the index a previous run left in --work")
    parser.add_argument("--only-index-kill", action="store_true", help="only the kill -9 of `nbrecall index`")
    args = parser.parse_args()
    if args.only_index_kill:
        measure_index_kill(args.corpus, args.work)
        return
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    found = existing_index(args.work) if args.reuse else None
    if found is not None:
        small, index, shas = found
        print(f"reusing {small} and {index}")
    else:
        small, index, shas, times = build_index(args.work)
        for label, seconds in times.items():
            print(f"{label}: {seconds:.1f} s")
    measure_servers(small, index, shas, args.work)
    if not args.skip_index_kill and args.corpus.is_dir():
        measure_index_kill(args.corpus, args.work)
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(json.dumps({"work": str(args.work)}))


if __name__ == "__main__":
    main()
