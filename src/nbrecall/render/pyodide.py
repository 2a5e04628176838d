"""The Pyodide backend of `nbrecall render` (`--backend pyodide`): a notebook's code cells run in one Pyodide
interpreter (CPython compiled to WebAssembly) under Node.js, inside the same bubblewrap sandbox as the kernel.

How a notebook runs:

- set-up installs the runner once: `npm ci --prefix src/nbrecall/render/pyodide_runner` (`INSTALL_HINT`), from
  the committed package.json + package-lock.json (npm `pyodide`, 14 MB: the interpreter and the standard library,
  no other package). Without Node.js, the runner or bubblewrap nothing runs: `pyodide_problem()` says why and
  every notebook is recorded `stale: sandbox unavailable`;
- the sandbox is `sandbox.PreparedRun.bwrap_args`'s (no network, read-only `/usr`, data folder at `/data`, the tree at
  `/project` with a writable throw-away copy of the notebook's folder, tmpfs home, cleared environment), without
  the Python interpreter's folders, plus read-only `/nbrecall/pyodide_runner` (node_modules), the wheel folder at
  `/nbrecall/wheels` and the job file; limits by `prlimit` (address space needs Node's
  `--disable-wasm-trap-handler`, Node 20.15+/22.2+; without it only the CPU limit applies, with a note);
- inside, `runner.mjs` loads Pyodide from node_modules with `packageBaseUrl`/`packageCacheDir` set to the wheel
  folder (Pyodide's fallback "CDN" is that folder too, and the network is unshared anyway), mounts `/project`,
  `/data` and the POSIX path-rule targets into Pyodide's file system, loads the wheels the notebook's imports
  need, then runs `pyodide_driver.py`, which executes each cell with `eval_code_async(return_mode="last_expr")`
  and sends nbformat outputs back as JSON lines on a pipe of its own;
- here, the outputs are put into the executed copy, a cell that does not finish within the cell timeout stops
  the run (the process group is killed: the cells after it are `not run`), and the result is an `Execution`
  like the kernel's, compared by `compare.py` as usual.

Wheels (`pyodide_wheels.plan_wheels`): the setting `render.pyodide_wheels` names a local folder. An import is
served by (1) a wheel there whose top-level names include it (pure-Python `py3-none-any` wheels, or wasm32 wheels
built for Pyodide 314), its requirements loaded from the same folder when present; (2) a package of Pyodide's own
lock file (numpy, pandas, ...) whose wheel files, dependencies included, are all in the folder (copy them from the
Pyodide release tarball of the same version); (3) the standard library; (4) a module or package in the notebook's
own folder. Anything else is reported as a note and, when the notebook stops on it, `stale: package not available
offline: <module>`.
IPython magics and shell escapes: see `pyodide_driver.py`.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import errno
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import nbformat
from nbformat import v4

from nbrecall.render.availability import SandboxUnavailable, sandbox_problem
from nbrecall.render.outcome import Execution, cell_errors, classify
from nbrecall.render.paths import DATA_MOUNT, PROJECT_MOUNT, posix_binds, windows_rules
from nbrecall.render.pyodide_wheels import (
    OFFLINE,
    RUNNER_DIR,
    WHEELS_MOUNT,
    local_modules,
    plan_wheels,
    stdlib_modules,
)
from nbrecall.render.sandbox import (
    MAX_OUTPUT_CHARS,
    SOURCE_DATE_EPOCH,
    PreparedRun,
    SandboxSpec,
    log_tail,
)

BACKENDS = ("kernel", "pyodide")
DRIVER = Path(__file__).with_name("pyodide_driver.py")
KERNEL_PATHS = Path(__file__).with_name("_kernel_paths.py")
INSTALL_HINT = "npm ci --prefix src/nbrecall/render/pyodide_runner"
RUNNER_MOUNT = "/nbrecall/pyodide_runner"
JOB_MOUNT = "/nbrecall/job.json"
NO_WHEELS = "/tmp/nbrecall-no-wheels"
MAGIC_REASON = "IPython magic not supported"


# ---------------------------------------------------------------------------------------------------------------
# Availability


def _pyodide_package() -> Path:
    return RUNNER_DIR / "node_modules" / "pyodide"


def runner_version() -> str:
    """The installed npm `pyodide` version ('' when the runner is not installed)."""
    try:
        return str(json.loads((_pyodide_package() / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return ""


def _locked_version() -> str:
    try:
        lock = json.loads((RUNNER_DIR / "package-lock.json").read_text())
        return str(lock["packages"]["node_modules/pyodide"]["version"])
    except (OSError, ValueError, KeyError):
        return ""


@lru_cache(maxsize=1)
def node_binary() -> str | None:
    return shutil.which("node")


@lru_cache(maxsize=1)
def node_supports_as_limit() -> bool:
    """Node can run wasm under an address-space limit only without its trap handler (Node >= 20.15)."""
    node = node_binary()
    if node is None:
        return False
    try:
        probe = subprocess.run([node, "--disable-wasm-trap-handler", "-e", "0"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@lru_cache(maxsize=1)
def runner_problem() -> str:
    """'' when Node.js and the installed Pyodide runner are usable, else why not (one line, with the fix)."""
    node = node_binary()
    if node is None:
        return "node not found (the pyodide backend needs Node.js >= 18: apt-get install -y nodejs)"
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
        major = int(out.stdout.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return f"node does not run: {exc}"
    if major < 18:
        return f"node {out.stdout.strip()} is too old for Pyodide (needs >= 18)"
    installed = runner_version()
    if not installed:
        return f"the Pyodide runner is not installed (run in set-up: npm ci --prefix {RUNNER_DIR})"
    locked = _locked_version()
    if locked and installed != locked:
        return (f"the Pyodide runner has pyodide {installed}, package-lock.json says {locked}"
                f" (run: npm ci --prefix {RUNNER_DIR})")
    return ""


def pyodide_problem() -> str:
    """'' when the pyodide backend can run here (bubblewrap, prlimit, Node.js, the runner), else why not."""
    return sandbox_problem() or runner_problem()


# ---------------------------------------------------------------------------------------------------------------
# Magics: IPython's own input transformer turns them into get_ipython() calls (the driver answers those)


@lru_cache(maxsize=1)
def _transformer() -> Any:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython comes with ipykernel
        return None
    return TransformerManager()


_MAGIC_LINE_RE = re.compile(r"^\s*(%%?|!)", re.M)


def transform_source(source: str) -> str:
    """The cell's code as plain Python: magics, shell escapes and `?` help become `get_ipython()` calls."""
    if not _MAGIC_LINE_RE.search(source) and "?" not in source:
        return source
    manager = _transformer()
    if manager is None:
        return source
    try:
        return str(manager.transform_cell(source))
    except Exception:  # a transformer failure leaves the source as it is (it will raise its SyntaxError)
        return source


def _imports(sources: list[str]) -> set[str]:
    """Top-level module names the cells import (absolute imports, at any depth; unparsable cells skipped)."""
    names: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


# ---------------------------------------------------------------------------------------------------------------
# The run


@dataclass
class PyodideExecution(Execution):
    """An `Execution` with what the Pyodide backend knows on top: the modules no wheel served."""

    unavailable: dict[str, str] = field(default_factory=dict)
    fatal: str = ""  # the runner's own error (Pyodide failed to start or crashed)
    version: str = ""  # the Pyodide version that ran
    startup_s: float = 0.0


def _pretty_source() -> str:
    try:
        import IPython.lib.pretty as pretty

        return Path(pretty.__file__).read_text(encoding="utf-8")
    except (ImportError, OSError):
        return ""


class _PyodidePrepared(PreparedRun):
    """The kernel sandbox's folder and bwrap command, running the Node.js runner instead of the kernel."""

    def __init__(self, spec: SandboxSpec, wheels_dir: Path | None) -> None:
        super().__init__(spec)
        self.wheels_dir = wheels_dir if wheels_dir is not None and wheels_dir.is_dir() else None
        self.job_path = self.root / "job.json"

    def mounts(self) -> list[str]:
        """Sandbox folders Pyodide's own file system mounts (NODEFS): the tree, the data, the POSIX rules."""
        out = [PROJECT_MOUNT]
        if self.spec.data_dir is not None:
            out.append(DATA_MOUNT)
        binds, _ = posix_binds(self.spec.rules, self.spec.data_dir)
        out += [target for _, target in binds]
        return out

    def runner_command(self, fd: int) -> list[str]:
        lim = self.spec.limits
        prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
        switch = self.user_switch()
        args = self.bwrap_args(interpreter=False)  # the Python interpreter is not needed here
        node = node_binary() or "node"
        real = os.path.realpath(node)
        if not real.startswith("/usr/"):
            prefix = os.path.dirname(os.path.dirname(real))
            args += ["--ro-bind", prefix, prefix]
            if node != real:
                args += ["--ro-bind", node, node]
        args += ["--ro-bind", str(RUNNER_DIR.resolve()), RUNNER_MOUNT]
        if self.wheels_dir is not None:
            args += ["--ro-bind", str(self.wheels_dir.resolve()), WHEELS_MOUNT]
        args += ["--ro-bind", str(self.job_path), JOB_MOUNT]
        memory = lim.memory_mb * 1024 * 1024
        cpu = max(1, int(lim.cpu_seconds))
        limits = [f"--cpu={cpu}:{cpu + 5}", f"--fsize={lim.file_mb * 1024 * 1024}", "--core=0", self.process_limit()]
        flags = []
        if node_supports_as_limit():
            limits.insert(0, f"--as={memory}")
            flags.append("--disable-wasm-trap-handler")  # else V8 reserves ~10 GB of guard pages per wasm memory
        else:
            self.notes.append("memory limit not applied: this Node.js lacks --disable-wasm-trap-handler"
                              " (Node 20.15+ or 22.2+ has it)")
        return [*args, "--", *switch, prlimit, *limits, "--", node, *flags, "--no-warnings",
                f"{RUNNER_MOUNT}/runner.mjs", JOB_MOUNT, str(fd)]


def _reader(stream: Any, events: queue.Queue[dict[str, Any] | None]) -> None:
    for line in stream:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.put(event)
    events.put(None)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


class _Cells:
    """Collects a cell's outputs as they arrive: streams merged, a per-cell size cap."""

    def __init__(self, nb: nbformat.NotebookNode) -> None:
        self.nb = nb
        self.sizes: dict[int, int] = {}

    def add(self, index: int | None, output: dict[str, Any]) -> None:
        if index is None or not 0 <= index < len(self.nb.cells):
            return
        outs = self.nb.cells[index].outputs
        used = self.sizes.get(index, 0)
        if used > MAX_OUTPUT_CHARS:
            return
        used += len(json.dumps(output))
        self.sizes[index] = used
        if used > MAX_OUTPUT_CHARS:
            outs.append(v4.new_output("stream", name="stderr",
                                      text=f"[nbrecall: output over {MAX_OUTPUT_CHARS:,} characters dropped]\n"))
            return
        kind = output.get("output_type")
        if kind == "stream":
            name, text = str(output.get("name") or "stdout"), str(output.get("text") or "")
            if outs and outs[-1].get("output_type") == "stream" and outs[-1].get("name") == name:
                outs[-1]["text"] += text
            else:
                outs.append(v4.new_output("stream", name=name, text=text))
        elif kind == "execute_result":
            outs.append(v4.new_output("execute_result", data=output.get("data") or {},
                                      execution_count=output.get("execution_count"), metadata={}))
        elif kind == "display_data":
            outs.append(v4.new_output("display_data", data=output.get("data") or {}, metadata={}))
        elif kind == "error":
            evalue, traceback = str(output.get("evalue", "")), [str(t) for t in output.get("traceback") or []]
            linux = getattr(errno, str(output.get("errno_name") or "-"), None)
            if isinstance(linux, int):  # `[Errno 44]` (Emscripten's ENOENT) → `[Errno 2]`, as CPython on Linux
                evalue = re.sub(r"^\[Errno \d+\]", f"[Errno {linux}]", evalue)
                if traceback:
                    traceback[-1] = re.sub(r"\[Errno \d+\]", f"[Errno {linux}]", traceback[-1], count=1)
            outs.append(v4.new_output("error", ename=str(output.get("ename", "")), evalue=evalue,
                                      traceback=traceback))


def execute_notebook_pyodide(nb: nbformat.NotebookNode, spec: SandboxSpec,
                             wheels_dir: Path | None = None) -> PyodideExecution:
    """Run a deep copy of `nb` with Pyodide in a fresh sandbox; the same contract as `sandbox.execute_notebook`."""
    problem = pyodide_problem()
    if problem:
        raise SandboxUnavailable(problem)
    nb = copy.deepcopy(nb)
    started = time.monotonic()
    result = PyodideExecution(notebook=nb)
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    sources = {i: transform_source(nb.cells[i].source) for i in code_cells}
    for i in code_cells:
        nb.cells[i].outputs = []
        nb.cells[i].execution_count = None
    plan = plan_wheels(_imports(list(sources.values())), wheels_dir, local_modules(spec.workdir))
    result.unavailable = dict(plan.unavailable)
    result.notes += plan.notes
    prepared = _PyodidePrepared(spec, wheels_dir)
    if wheels_dir is not None and prepared.wheels_dir is None:
        result.notes.append(f"render.pyodide_wheels {wheels_dir}: not a folder")
    job = {
        "cells": [{"index": i, "source": sources[i], "count": n + 1} for n, i in enumerate(code_cells)],
        "driver": DRIVER.read_text(encoding="utf-8"),
        "pretty": _pretty_source(),
        "kernel_paths": KERNEL_PATHS.read_text(encoding="utf-8") if windows_rules(spec.rules) else "",
        "mounts": prepared.mounts(),
        "cwd": prepared.cwd,
        "wheels": plan.load,
        "package_base": WHEELS_MOUNT if prepared.wheels_dir is not None else NO_WHEELS,
        "env": {"HOME": "/home/pyodide", "USER": "nb", "LANG": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0",
                "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
                "NBRECALL_PATH_MAP": json.dumps(windows_rules(spec.rules))},
    }
    prepared.job_path.write_text(json.dumps(job), encoding="utf-8")
    read_fd, write_fd = os.pipe()
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    cells = _Cells(nb)
    done: set[int] = set()
    lim = spec.limits
    proc: subprocess.Popen[bytes] | None = None
    try:
        cmd = prepared.runner_command(write_fd)
        with open(prepared.log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_fd,),
                                    start_new_session=True)
        os.close(write_fd)
        write_fd = -1
        stream = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        read_fd = -1
        threading.Thread(target=_reader, args=(stream, events), daemon=True).start()
        notebook_deadline = started + lim.notebook_timeout
        deadline = min(notebook_deadline, time.monotonic() + lim.startup_timeout)
        current: int | None = None
        ended = False
        while True:
            now = time.monotonic()
            if now >= deadline:
                if now >= notebook_deadline:
                    result.notebook_timeout = True
                elif current is not None:
                    result.timed_out = current
                else:
                    result.kernel_died = True
                    result.fatal = f"Pyodide did not start within {lim.startup_timeout:g} s"
                _kill(proc)
                break
            try:
                event = events.get(timeout=min(1.0, deadline - now))
            except queue.Empty:
                continue
            if event is None:
                break
            kind = event.get("event")
            if kind == "output":
                cells.add(event.get("cell") if isinstance(event.get("cell"), int) else current,
                          event.get("output") or {})
            elif kind == "raw" and current is None:  # Pyodide's own messages (package loading)
                result.notes.append(f"pyodide {event.get('name')}: {str(event.get('text', '')).strip()[:300]}")
            elif kind == "raw":
                cells.add(current, {"output_type": "stream", "name": event.get("name"), "text": event.get("text")})
            elif kind == "start":
                current = int(event["cell"])
                deadline = min(notebook_deadline, time.monotonic() + lim.cell_timeout)
            elif kind == "done":
                index = int(event["cell"])
                done.add(index)
                nb.cells[index].execution_count = code_cells.index(index) + 1
                current = None
                deadline = notebook_deadline
            elif kind == "ready":
                result.version = str(event.get("version", ""))
                result.startup_s = float(event.get("seconds") or 0.0)
            elif kind == "note":
                result.notes.append(str(event.get("text", ""))[:500])
            elif kind == "fatal":
                result.fatal = str(event.get("error", ""))[-2000:]
            elif kind == "end":
                ended = True
        if proc.poll() is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill(proc)
        if not ended and result.timed_out is None and not result.notebook_timeout:
            result.kernel_died = True
            result.died_at = current
            result.exit_code = proc.returncode
    finally:
        if proc is not None and proc.poll() is None:
            _kill(proc)
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)
        result.stderr = (log_tail(prepared.log_path) + ("\n" + result.fatal if result.fatal else ""))[-4000:]
        result.notes += [n for n in prepared.notes if n not in result.notes]
        prepared.cleanup()
        result.duration_s = time.monotonic() - started
    if result.fatal:
        result.notes.append(f"pyodide runner error: {result.fatal.strip().splitlines()[-1][:300]}")
    result.executed = sorted(done)
    stopped = (result.timed_out, result.died_at)
    result.not_run = [i for i in code_cells if i not in done and i not in stopped]
    result.errors = cell_errors(nb, result)
    result.reason = classify(result)
    return result


# ---------------------------------------------------------------------------------------------------------------
# Reasons


_MODULE_RE = re.compile(r"No module named '([^'.]+)")


def refine_reason(result: Any, execution: Execution) -> None:
    """Pyodide-specific stale reasons on a compared `RenderResult`: `package not available offline: <module>`,
    `IPython magic not supported: %name`, `pyodide did not start`, `memory`."""
    if result.status != "stale" or not isinstance(execution, PyodideExecution):
        return
    failed = next((c for c in result.cells if c.status == "failed"), None)
    error = next((e for e in execution.errors if failed is not None and e.index == failed.index), None)
    if error is not None and error.ename == "ModuleNotFoundError":
        match = _MODULE_RE.search(error.evalue)
        module = match.group(1) if match else ""
        if module and (module in execution.unavailable or module not in stdlib_modules()):
            result.reason = f"{OFFLINE}: {module}"
    elif error is not None and error.ename == "UnsupportedMagic":
        result.reason = f"{MAGIC_REASON}: {error.evalue.split(':')[0]}"
    elif execution.kernel_died:
        text = execution.fatal + execution.stderr
        if any(s in text for s in ("Out of memory", "out of memory", "Cannot allocate", "could not allocate",
                                   "Aborted(OOM)", "MemoryError")):
            result.reason = "memory"
        elif execution.fatal and not execution.executed and execution.died_at is None:
            result.reason = "pyodide did not start"


def describe_pyodide(execution: Execution) -> dict[str, Any]:
    """Extra execution facts for the stored result."""
    if not isinstance(execution, PyodideExecution):
        return {}
    return {"backend": "pyodide", "pyodide": execution.version, "startup_s": round(execution.startup_s, 3),
            "unavailable": execution.unavailable, "fatal": execution.fatal[-500:]}
