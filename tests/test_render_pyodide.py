"""The Pyodide backend of the re-render stage (`nbrecall render --backend pyodide`).

The runs need Node.js, bubblewrap + prlimit and the installed runner
(`npm ci --prefix src/nbrecall/render/pyodide_runner`); without them they skip and say which is missing.
Each run starts one Pyodide (~3-4 s).
"""

from __future__ import annotations

import json
import socket
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbformat import v4
from typer.testing import CliRunner

from nbrecall.render import pyodide as pyo
from nbrecall.render.paths import parse_rules
from nbrecall.render.run import RenderOptions, render_notebook
from nbrecall.render.sandbox import Limits

REPO = Path(__file__).resolve().parents[1]
needs_pyodide = pytest.mark.sandbox(pyodide=True)


def stream(text: str, name: str = "stdout") -> dict:
    return {"output_type": "stream", "name": name, "text": text}


def result(text: str, count: int = 1) -> dict:
    return {"output_type": "execute_result", "execution_count": count, "data": {"text/plain": text}, "metadata": {}}


def write_nb(path: Path, cells: list[tuple[str, list[dict]]]) -> Path:
    nb = v4.new_notebook()
    for i, (source, outputs) in enumerate(cells):
        cell = v4.new_code_cell(source, id=f"cell-{i}")
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        cell.execution_count = i + 1
        nb.cells.append(cell)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb), encoding="utf-8")
    return path


def make_wheel(folder: Path, name: str = "nbr_tiny", body: str = "def double(x):\n    return 2 * x\n") -> Path:
    """A pure-Python wheel built here (nothing is downloaded)."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-0.1.dist-info"
    path = folder / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}/__init__.py", body)
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.1\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/top_level.txt", f"{name}\n")
        zf.writestr(f"{dist}/RECORD", "")
    return path


def options(tmp: Path, data: Path | None = None, wheels: Path | None = None, rules: list[dict] | None = None,
            **limits: float) -> RenderOptions:
    lim = Limits(cell_timeout=limits.get("cell_timeout", 20), notebook_timeout=limits.get("notebook_timeout", 60),
                 memory_mb=int(limits.get("memory_mb", 2048)), startup_timeout=30)
    return RenderOptions(out_dir=tmp / "renders", data_dir=data, rules=parse_rules(rules or []), limits=lim,
                         workers=1, hide=[tmp / "index"], backend="pyodide", pyodide_wheels=wheels)


# A pure-Python notebook with the outputs an IPython kernel stored for it.
PURE = [
    ("print('hello')\nprint(1 + 2)", [stream("hello\n3\n")]),
    ("x = {'b': 2, 'a': [1, 2, 3]}\nx", [result("{'b': 2, 'a': [1, 2, 3]}", 2)]),
    ("def area(w, h):\n    return w * h", []),
    ("area(3, 4.5)", [result("13.5", 4)]),
    ("for i in range(3):\n    print(i, area(i, 2))", [stream("0 0\n1 2\n2 4\n")]),
    ("y = sorted(x);", []),
    ("import json, math\njson.dumps({'pi': round(math.pi, 4)})", [result("'{\"pi\": 3.1416}'", 7)]),
    ("{'tanks': list(range(25)), 'names': ['aft', 'fore']}",
     [result("{'tanks': [0,\n  1,\n  2,\n  3,\n  4,\n  5,\n  6,\n  7,\n  8,\n  9,\n  10,\n  11,\n  12,\n  13,\n  14,\n"
             "  15,\n  16,\n  17,\n  18,\n  19,\n  20,\n  21,\n  22,\n  23,\n  24],\n 'names': ['aft', 'fore']}", 8)]),
    ("import sys\nprint('warn', file=sys.stderr)\nNone", [stream("warn\n", "stderr")]),
    ("class P:\n    def _repr_html_(self):\n        return '<b>p</b>'\nP()",
     [{"output_type": "execute_result", "execution_count": 10, "metadata": {},
       "data": {"text/plain": "<__main__.P at 0x7f00deadbeef>", "text/html": "<b>p</b>"}}]),
]


# --------------------------------------------------------------------------------------------------------------
# without a run


def test_missing_runner_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pyo, "RUNNER_DIR", tmp_path / "pyodide_runner")
    pyo.runner_problem.cache_clear()
    try:
        problem = pyo.runner_problem()
    finally:
        pyo.runner_problem.cache_clear()
    if pyo.node_binary() is None:
        assert problem.startswith("node not found")
    else:
        assert "not installed" in problem and f"npm ci --prefix {tmp_path / 'pyodide_runner'}" in problem


def test_magics_become_get_ipython_calls() -> None:
    assert pyo.transform_source("x = 1\nx") == "x = 1\nx"
    out = pyo.transform_source("%matplotlib inline\n!ls -l\nfiles = !ls")
    assert "run_line_magic('matplotlib', 'inline')" in out and "system('ls -l')" in out and "getoutput('ls')" in out
    assert "run_cell_magic('time'" in pyo.transform_source("%%time\nx = 1")


def test_wheel_plan(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels)
    (wheels / "fast-1.0-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"")
    plan = pyo.plan_wheels({"nbr_tiny", "json", "numpy", "helper", "unknown_pkg"}, wheels, local={"helper"})
    assert plan.load == [f"{pyo.WHEELS_MOUNT}/nbr_tiny-0.1-py3-none-any.whl"]
    assert set(plan.unavailable) == {"numpy", "unknown_pkg"}
    assert any("manylinux" in n and "not usable" in n for n in plan.notes)


# --------------------------------------------------------------------------------------------------------------
# runs


@needs_pyodide
def test_pure_python_notebook_renders_same(tmp_path: Path) -> None:
    path = write_nb(tmp_path / "proj/pure.ipynb", PURE)
    started = time.monotonic()
    res, executed = render_notebook(path, tmp_path / "proj", options(tmp_path))
    elapsed = time.monotonic() - started
    assert res.status == "fresh", (res.reason, [(c.index, c.status, c.detail) for c in res.cells], res.notes)
    assert [c.status for c in res.cells] == ["same"] * len(PURE)
    assert res.environment["backend"] == "bwrap+pyodide"
    assert res.execution["backend"] == "pyodide" and res.execution["pyodide"] == pyo.runner_version()
    assert executed.cells[3].outputs[0]["data"]["text/plain"] == "13.5"
    assert executed.cells[3].execution_count == 4
    assert elapsed < 30


@needs_pyodide
def test_numpy_without_wheels_is_stale_not_a_crash(tmp_path: Path) -> None:
    path = write_nb(tmp_path / "proj/np.ipynb", [
        ("print('before')", [stream("before\n")]),
        ("import numpy as np", []),
        ("np.arange(4).sum()", [result("6", 3)]),
        ("print('after')", [stream("after\n")]),
    ])
    res, executed = render_notebook(path, tmp_path / "proj", options(tmp_path))
    assert res.status == "stale"
    assert res.reason == "package not available offline: numpy"
    assert [c.status for c in res.cells] == ["same", "failed", "failed", "same"]
    assert executed.cells[1].outputs[0]["evalue"] == "No module named 'numpy'"
    assert res.execution["unavailable"].keys() == {"numpy"} and not res.execution["fatal"]
    assert any("package not available offline: numpy" in n for n in res.notes)


@needs_pyodide
def test_wheels_come_from_the_local_folder(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels)
    path = write_nb(tmp_path / "proj/w.ipynb", [
        ("%matplotlib inline\nimport nbr_tiny\nnbr_tiny.double(21)", [result("42")]),
        ("!ls", [stream("w.ipynb\n")]),
    ])
    res, _ = render_notebook(path, tmp_path / "proj", options(tmp_path, wheels=wheels))
    assert [c.status for c in res.cells] == ["same", "failed"], res.cells
    assert res.reason == "IPython magic not supported: !ls"
    assert any("%matplotlib inline skipped" in n for n in res.notes)


@needs_pyodide
def test_sandboxed_host_files_network_and_data(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.csv").write_text("a,b\n1,2\n")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    cells = [
        ("open('/etc/passwd').read()", []),
        ("import os, pyodide_js\npyodide_js.mountNodeFS('/host', '/')\n'work' in os.listdir('/host')", []),
        (f"open('/host{secret}').read()", []),
        (f"open('/host{REPO / 'pyproject.toml'}').read()", []),
        ("open('/host/etc/passwd').read().startswith('root:')", []),
        (f"import js\nawait js.fetch('http://127.0.0.1:{port}/')", []),
        ("open('/data/x.csv').read()", []),
        ("open('/data/new.csv', 'w')", []),
        ("open('mine.txt', 'w').write('scratch')", []),
        ("import pyodide_js\nawait pyodide_js.loadPackage('numpy')\nimport numpy", []),
        ("open(r'\\\\srv-calc-01\\projects\\X.CSV').read() == open('/mnt/share/x.csv').read()", []),
    ]
    path = write_nb(tmp_path / "proj/nb/s.ipynb", cells)
    rules = [{"from": "\\\\srv-calc-01\\projects", "to": "."}, {"from": "/mnt/share", "to": "."}]
    res, executed = render_notebook(path, tmp_path / "proj", options(tmp_path, data=data, rules=rules))
    outs = [c.outputs for c in executed.cells]

    def error(i: int) -> str:
        return next((f"{o['ename']}: {o['evalue']}" for o in outs[i] if o["output_type"] == "error"), "")

    def value(i: int) -> str:
        return next((o["data"]["text/plain"] for o in outs[i] if o["output_type"] == "execute_result"), "")

    assert error(0).startswith("FileNotFoundError"), outs[0]
    assert value(1) == "False", outs[1]  # the Node.js file system seen through Pyodide is the sandbox's
    assert error(2).startswith("FileNotFoundError") and error(3).startswith("FileNotFoundError")
    assert value(4) == "False"  # the sandbox's own passwd, not the host's
    assert error(5), outs[5]  # no network
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()
    assert value(6) == "'a,b\\n1,2\\n'"
    assert error(7).startswith("OSError: [Errno 30] Read-only file system")
    assert value(8) == "7"
    assert not (tmp_path / "proj/nb/mine.txt").exists()  # the notebook's folder was a throw-away copy
    # Pyodide's fallback "CDN" is a local folder: a package missing there is not fetched from anywhere
    loading = "".join(o.get("text", "") for o in outs[9] if o["output_type"] == "stream")
    assert f"attempting to load from {pyo.NO_WHEELS}/" in loading and "http" not in loading, loading
    assert error(9) == "ModuleNotFoundError: No module named 'numpy'"
    assert value(10) == "True", outs[10]  # UNC (case-insensitive) and POSIX path rules onto the data folder


@needs_pyodide
def test_endless_loop_times_out(tmp_path: Path) -> None:
    path = write_nb(tmp_path / "proj/loop.ipynb", [
        ("print('start')", [stream("start\n")]),
        ("while True:\n    pass", []),
        ("print('never')", [stream("never\n")]),
    ])
    started = time.monotonic()
    res, _ = render_notebook(path, tmp_path / "proj", options(tmp_path, cell_timeout=3))
    assert time.monotonic() - started < 20
    assert res.status == "stale" and res.reason == "timeout"
    assert [c.status for c in res.cells] == ["same", "failed", "failed"]


@needs_pyodide
def test_cli_backend_pyodide(tmp_path: Path) -> None:
    from nbrecall.cli import app

    write_nb(tmp_path / "proj/pure.ipynb", PURE[:4])
    write_nb(tmp_path / "proj/np.ipynb", [("import numpy", [])])
    out = tmp_path / "renders"
    run = CliRunner().invoke(app, ["render", str(tmp_path / "proj"), "--backend", "pyodide", "--out", str(out),
                                   "--index", str(tmp_path / "index"), "--workers", "2"])
    assert run.exit_code == 0, run.output
    stored = {Path(d["path"]).name: d for d in (json.loads(p.read_text()) for p in out.glob("*.json"))}
    assert stored["pure.ipynb"]["status"] == "fresh"
    assert stored["np.ipynb"]["status"] == "stale"
    assert stored["np.ipynb"]["reason"] == "package not available offline: numpy"
    bad = CliRunner().invoke(app, ["render", str(tmp_path / "proj"), "--backend", "wasm", "--out", str(out)])
    assert bad.exit_code == 2
