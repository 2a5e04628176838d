"""What one sandboxed run produced (`Execution`, its `CellError`s) and why it stopped: the stale reason of a cell
error or of the whole run (`classify`), shared by the kernel backend (`sandbox`) and the Pyodide one."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from typing import Any

import nbformat


@dataclass
class CellError:
    """An error output of a fresh run (or the timeout / dead kernel that stopped it at this cell)."""

    index: int
    id: str
    ename: str
    evalue: str
    library: str = ""  # the installed package the innermost traceback frame is in, if any


@dataclass
class Execution:
    """What one sandboxed run produced. `notebook` is the executed in-memory copy (an nbformat node)."""

    notebook: nbformat.NotebookNode | None
    errors: list[CellError] = field(default_factory=list)
    executed: list[int] = field(default_factory=list)  # indices of code cells that ran to a reply
    not_run: list[int] = field(default_factory=list)  # code cells never reached (after a timeout or death)
    timed_out: int | None = None  # the cell index that hit the cell timeout
    died_at: int | None = None  # the cell index running when the kernel died
    notebook_timeout: bool = False
    kernel_died: bool = False
    exit_code: int | None = None  # the kernel's exit status when it died (negative: signal)
    reason: str = ""  # "" when the run completed; else a stale reason (see `classify`)
    stderr: str = ""  # tail of the kernel's own stderr (not the cells')
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def cell_errors(nb: nbformat.NotebookNode, result: Execution) -> list[CellError]:
    errors: list[CellError] = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        cid = str(cell.get("id", ""))
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                errors.append(CellError(index, cid, str(out.get("ename", "")), str(out.get("evalue", "")),
                                        _library(out.get("traceback") or [])))
                break
        else:
            if index == result.timed_out:
                errors.append(CellError(index, cid, "CellTimeoutError", "cell timeout"))
            elif index == result.died_at:
                errors.append(CellError(index, cid, "DeadKernelError", f"kernel died ({_signal_text(result)})"))
    return errors


def _signal(result: Execution) -> int:
    code = result.exit_code
    if code is None:
        return 0
    return -code if code < 0 else code - 128 if code > 128 else 0


def _signal_text(result: Execution) -> str:
    sig = _signal(result)
    if sig:
        try:
            return f"signal {signal.Signals(sig).name}"
        except ValueError:
            return f"signal {sig}"
    return f"exit code {result.exit_code}" if result.exit_code is not None else "exit code unknown"


# ---------------------------------------------------------------------------------------------------------------
# Stale reasons

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FRAME_RE = re.compile(r"(?:File\s+\"?([^\s\":,]+)|Cell In\[\d+\]|<ipython-input-)")
_PACKAGE_RE = re.compile(r"/(?:site|dist)-packages/([A-Za-z0-9_]+)")


def _library(traceback: list[str]) -> str:
    """The package of the innermost traceback frame when it is an installed library ('' for the cell's own code)."""
    frames = list(_FRAME_RE.finditer(_ANSI_RE.sub("", "\n".join(str(t) for t in traceback))))
    if not frames or not frames[-1].group(1):
        return ""
    match = _PACKAGE_RE.search(frames[-1].group(1))
    return match.group(1) if match else ""


_MODULE_RE = re.compile(r"No module named '([^']+)'")
_FROM_RE = re.compile(r"cannot import name '[^']+' from '([^']+)'")
_NETWORK = ("URLError", "ConnectionError", "ConnectionRefusedError", "gaierror", "NewConnectionError",
            "MaxRetryError", "HTTPError", "SSLError", "socket.gaierror", "TimeoutError")


def classify_error(ename: str, evalue: str, library: str = "") -> str:
    """A stale reason for a cell error: `missing file`, `import error: <module>`, `memory`, ..., `error: <name>`
    (`error: <name> in <package>` when an installed library raised it)."""
    if ename == "CellTimeoutError":
        return "timeout"
    if ename == "ModuleNotFoundError" or ename == "ImportError":
        m = _MODULE_RE.search(evalue) or _FROM_RE.search(evalue)
        return f"import error: {m.group(1).split('.')[0] if m else evalue[:60]}"
    if ename in ("FileNotFoundError", "IOError") or (ename == "OSError" and "No such file" in evalue):
        return "missing file"
    if "unable to open database file" in evalue or re.match(r"File `.*` not found", evalue):
        return "missing file"  # sqlite3.connect of a missing folder, IPython %run of a missing script
    if ename == "MemoryError" or "Unable to allocate" in evalue or "_ArrayMemoryError" in ename:
        return "memory"
    if ename in _NETWORK or "Temporary failure in name resolution" in evalue or "Network is unreachable" in evalue:
        return "no network"
    if ename == "KeyboardInterrupt":
        return "timeout"
    return f"error: {ename or 'unknown'}" + (f" in {library}" if library else "")


def classify(result: Execution) -> str:
    """The notebook-level stale reason of a run: that of its first problem in cell order; '' when none."""
    first = result.errors[0] if result.errors else None
    if first is not None and first.ename != "DeadKernelError":
        return classify_error(first.ename, first.evalue, first.library)
    if result.kernel_died:
        if _signal(result) == signal.SIGXCPU:
            return "timeout"  # the CPU-time limit
        if any(s in result.stderr for s in ("MemoryError", "std::bad_alloc", "Cannot allocate memory")):
            return "memory"
        return "kernel died"
    if result.notebook_timeout:
        return "timeout"
    return ""


def describe(result: Execution) -> dict[str, Any]:
    """A JSON-ready summary of an execution (without the notebook)."""
    return {
        "reason": result.reason,
        "errors": [e.__dict__ for e in result.errors],
        "executed": result.executed,
        "not_run": result.not_run,
        "timed_out": result.timed_out,
        "died_at": result.died_at,
        "notebook_timeout": result.notebook_timeout,
        "kernel_died": result.kernel_died,
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 3),
        "notes": result.notes,
    }
