"""The cell runner executed *inside Pyodide* by `pyodide_runner/runner.mjs` (not imported on the host).

`pyodide.py` sends this file's source to the runner, which executes it in a namespace of its own and then calls
`setup(json)` once and `await run_cell(index, source, count)` per code cell. Everything a cell produces goes out
through `_nbr_emit` (a JS function the runner puts into this namespace) as nbformat-shaped outputs:

- `stream` outputs from `sys.stdout` / `sys.stderr` (buffered, flushed in order, at the latest when the cell ends);
- `execute_result` for the value of the last expression, like IPython: `None` and a trailing `;` show nothing,
  `text/plain` by IPython's pretty printer (its `lib/pretty.py` source comes from the host), plus the object's
  `_repr_html_` / `_repr_markdown_` / `_repr_latex_` / `_repr_json_` / `_repr_svg_` / `_repr_png_` / `_repr_jpeg_`
  / `_repr_mimebundle_`; `_`, `__`, `___`, `_N` and `Out` are kept;
- `display_data` from `display(...)` (a builtin here, as in IPython; `IPython.display` exists as a small shim);
- `error` with `ename`, `evalue` and a traceback whose frames start at the cell.

IPython syntax (magics, shell escapes, `?` help) was turned into `get_ipython().…` calls on the host; here a
few setup magics that print nothing are skipped with a note (see `SKIPPED_MAGICS`), every other one raises
`UnsupportedMagic` in its cell.
"""

# ruff: noqa: F821  (`_nbr_emit` is injected by the runner)

from __future__ import annotations

import base64
import builtins
import contextlib
import errno
import hashlib
import io
import json
import linecache
import os
import sys
import time
import traceback
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:

    def _nbr_emit(event: str) -> None:
        """Injected by the runner (a JS function): one event, as JSON, to the host."""

SKIPPED_MAGICS = ("matplotlib", "load_ext", "reload_ext", "autoreload", "aimport", "config")
_REPRS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
)

NS: dict = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}
_state: dict = {"cell": None, "count": 0, "pretty": None, "out": {}, "inputs": [""]}


def _send(event: dict) -> None:
    _nbr_emit(json.dumps(event))


def _output(output: dict) -> None:
    _flush_streams()
    _send({"event": "output", "cell": _state["cell"], "output": output})


def note(text: str) -> None:
    _send({"event": "note", "text": text})


class UnsupportedMagic(Exception):  # noqa: N818 - the name users see in the error output
    """IPython syntax the pyodide backend does not run."""


UnsupportedMagic.__module__ = "builtins"  # shown as `UnsupportedMagic: ...` in tracebacks


class _Stream(io.TextIOBase):
    """A text stream whose writes become `stream` outputs of the running cell."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self._parts: list[str] = []
        self._size = 0
        self._last = time.monotonic()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not text:
            return 0
        for other in _STREAMS.values():
            if other is not self:
                other.flush()
        self._parts.append(text)
        self._size += len(text)
        if self._size > 65536 or ("\n" in text and time.monotonic() - self._last > 0.2):
            self.flush()
        return len(text)

    def flush(self) -> None:
        if self._parts:
            text = "".join(self._parts)
            self._parts.clear()
            self._size = 0
            _send({"event": "output", "cell": _state["cell"],
                   "output": {"output_type": "stream", "name": self.name, "text": text}})
        self._last = time.monotonic()


_STREAMS = {"stdout": _Stream("stdout"), "stderr": _Stream("stderr")}


def _flush_streams() -> None:
    for stream in _STREAMS.values():
        stream.flush()


def _safe(obj: object, method: str) -> object:
    if isinstance(obj, type):
        return None  # a class, not an instance: IPython does not call its repr methods either
    try:
        fn = getattr(obj, method, None)
    except Exception:
        return None
    if not callable(fn):
        return None
    try:
        return fn()
    except Exception:
        return None


def _plain(obj: object) -> str:
    pretty = _state["pretty"]
    if pretty is not None:
        try:
            return pretty.pretty(obj, max_width=79, max_seq_length=1000)
        except Exception:
            pass
    return repr(obj)


def format_mime(obj: object) -> dict:
    """The mime bundle IPython's display formatter would produce (the common types)."""
    data: dict = {}
    bundle = _safe(obj, "_repr_mimebundle_")
    if isinstance(bundle, tuple):
        bundle = bundle[0]
    if isinstance(bundle, dict):
        data.update({str(k): v for k, v in bundle.items()})
    for mime, method in _REPRS:
        if mime in data:
            continue
        value = _safe(obj, method)
        if isinstance(value, tuple):
            value = value[0]
        if value is None:
            continue
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode("ascii")
        data[mime] = value
    if "text/plain" not in data:
        data["text/plain"] = _plain(obj)
    return data


def display(*objs: object, raw: bool = False, **_: object) -> None:
    for obj in objs:
        data = obj if raw and isinstance(obj, dict) else format_mime(obj)
        _output({"output_type": "display_data", "data": data, "metadata": {}})


def clear_output(wait: bool = False) -> None:
    """Outputs are compared as produced; clearing is not replayed."""


class _Shell:
    """What `get_ipython()` returns here: enough for transformed magics and `user_ns` lookups."""

    def __init__(self) -> None:
        self.user_ns = NS
        self.user_ns_hidden: dict = {}

    def run_line_magic(self, name: str, line: str, _stack_depth: int = 1) -> None:
        if name in SKIPPED_MAGICS:
            note(f"cell {_state['cell']}: %{name} {line} skipped (an IPython magic: the pyodide backend runs Python)")
            return None
        raise UnsupportedMagic(f"%{name}: IPython magics and shell escapes do not run in the pyodide backend")

    def run_cell_magic(self, name: str, line: str, cell: str) -> None:
        raise UnsupportedMagic(f"%%{name}: IPython magics and shell escapes do not run in the pyodide backend")

    def system(self, cmd: str) -> None:
        word = (cmd.split() or ["?"])[0]
        raise UnsupportedMagic(f"!{word}: IPython magics and shell escapes do not run in the pyodide backend")

    getoutput = system

    def magic(self, line: str) -> None:
        name, _, rest = line.lstrip("%").partition(" ")
        self.run_line_magic(name, rest)


_SHELL = _Shell()


def get_ipython() -> _Shell:
    return _SHELL


def _install_ipython_shim() -> None:
    """`IPython.display.display` & co. and `IPython.get_ipython`, so notebooks that import them still run."""
    if "IPython" in sys.modules:
        return
    ipython = types.ModuleType("IPython")
    ipython.__path__ = []  # a package
    disp = types.ModuleType("IPython.display")

    class _Data:
        mime = "text/plain"

        def __init__(self, data: object = None, **_: object) -> None:
            self.data = data

        def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict:
            return {self.mime: self.data, "text/plain": f"<IPython.core.display.{type(self).__name__} object>"}

    def make(name: str, mime: str) -> type:
        return type(name, (_Data,), {"mime": mime})

    vars(disp).update(
        display=display,
        clear_output=clear_output,
        HTML=make("HTML", "text/html"),
        Markdown=make("Markdown", "text/markdown"),
        Latex=make("Latex", "text/latex"),
        Math=make("Math", "text/latex"),
        JSON=make("JSON", "application/json"),
        SVG=make("SVG", "image/svg+xml"),
    )

    class Pretty(_Data):
        def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict:
            return {"text/plain": str(self.data)}

    vars(disp).update(Pretty=Pretty)
    vars(ipython).update(get_ipython=get_ipython, display=disp)  # module attributes the shim defines
    sys.modules["IPython"] = ipython
    sys.modules["IPython.display"] = disp


def setup(raw: str) -> None:
    job = json.loads(raw)
    if job.get("kernel_paths"):
        code = compile(job["kernel_paths"], "/nbrecall/_kernel_paths.py", "exec")
        exec(code, {"__name__": "_nbrecall_paths"})  # Windows/UNC path rules (they read NBRECALL_PATH_MAP)
    if job.get("pretty"):
        module = types.ModuleType("_nbrecall_pretty")
        try:
            exec(compile(job["pretty"], "IPython/lib/pretty.py", "exec"), module.__dict__)
            _state["pretty"] = module
        except Exception as exc:
            note(f"IPython's pretty printer did not load ({type(exc).__name__}: {exc}); results use repr()")
    cwd = job.get("cwd") or "/"
    try:
        os.chdir(cwd)
    except OSError as exc:
        note(f"could not enter the notebook's folder {cwd}: {exc}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    _install_ipython_shim()
    builtins.display = display  # type: ignore[attr-defined]
    builtins.get_ipython = get_ipython  # type: ignore[attr-defined]
    NS["In"] = _state["inputs"]
    NS["Out"] = _state["out"]
    sys.stdout = _STREAMS["stdout"]
    sys.stderr = _STREAMS["stderr"]


def _error_output(exc: BaseException, filename: str) -> dict:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next  # drop the runner's own frames: the traceback starts at the cell
    lines = traceback.format_exception(type(exc), exc, tb)
    evalue = str(exc)
    if isinstance(exc, ModuleNotFoundError) and exc.name and "Pyodide" in evalue:
        evalue = f"No module named '{exc.name}'"  # Pyodide's hint suggests a download: say what CPython says
        lines[-1] = f"ModuleNotFoundError: {evalue}\n"
    out = {"output_type": "error", "ename": type(exc).__name__, "evalue": evalue,
           "traceback": "".join(lines).rstrip("\n").split("\n")}
    if isinstance(exc, OSError) and isinstance(exc.errno, int):
        out["errno_name"] = errno.errorcode.get(exc.errno, "")  # Emscripten numbers its errnos differently
    return out


async def run_cell(index: int, source: str, count: int) -> None:
    from pyodide.code import eval_code_async

    _state["cell"] = index
    _state["count"] = count
    filename = f"<ipython-input-{count}-{hashlib.sha1(source.encode()).hexdigest()[:12]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    _state["inputs"].append(source)
    NS["_i"] = source
    NS[f"_i{count}"] = source
    try:
        result = await eval_code_async(source, NS, filename=filename, return_mode="last_expr",
                                       quiet_trailing_semicolon=True)
    except BaseException as exc:  # noqa: BLE001 - everything a cell raises is its output, as in IPython
        _flush_streams()
        _output(_error_output(exc, filename))
    else:
        if result is not None:
            NS["___"], NS["__"], NS["_"] = NS.get("__"), NS.get("_"), result
            NS[f"_{count}"] = result
            _state["out"][count] = result
            _output({"output_type": "execute_result", "execution_count": count, "data": format_mime(result),
                     "metadata": {}})
    finally:
        _flush_streams()
        for stream in (sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.flush()
