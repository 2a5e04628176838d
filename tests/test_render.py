"""Re-render stage: path mapping, comparison, and sandboxed runs (skipped without bubblewrap).

Sandboxed tests start a real kernel (~2–4 s each on a loaded 2-core machine); every run is bounded by small cell
and notebook timeouts.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from conftest import tool_missing
from nbrecall.config import load_settings
from nbrecall.notebook.model import Output
from nbrecall.notebook.read import read_notebook
from nbrecall.render import text_compare
from nbrecall.render.availability import interpreter_prefixes, sandbox_problem
from nbrecall.render.output_items import comparable, outputs_equal
from nbrecall.render.paths import PathRuleError, map_path, parse_rules, scan_notebook
from nbrecall.render.run import RenderOptions, load_render, render_notebook, write_render
from nbrecall.render.sandbox import Limits

UNC = r"\\srv-calc-01\projects\2017\17-042\inputs\tanks.csv"
RULES = [
    {"from": "\\\\srv-calc-01\\projects", "to": "projects"},
    {"from": "P:\\", "to": "projects"},
    {"from": "/mnt/share", "to": "share"},
]
needs_sandbox = pytest.mark.sandbox
TANKS = "tank,volume_m3\n" + "".join(f"T{i},{100 + 7.5 * i}\n" for i in range(1, 11))


# --------------------------------------------------------------------------------------------------------------
# helpers


def write_nb(path: Path, sources: list[str], outputs: list[list[dict]] | None = None) -> Path:
    cells = []
    for i, src in enumerate(sources):
        cell = v4.new_code_cell(src, id=f"cell-{i}")
        if outputs is not None:
            cell.outputs = [nbformat.from_dict(o) for o in outputs[i]]
            cell.execution_count = i + 1
        cells.append(cell)
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb), encoding="utf-8")
    return path


def make_data(root: Path, tanks: str = TANKS) -> Path:
    data = root / "data"
    (data / "projects/2017/17-042/inputs").mkdir(parents=True)
    (data / "projects/2017/17-042/inputs/tanks.csv").write_text(tanks)
    (data / "share").mkdir()
    (data / "share/x.csv").write_text("a,b\n1,2\n3,4\n")
    return data


def options(tmp: Path, data: Path | None, **limits: float) -> RenderOptions:
    lim = Limits(cell_timeout=limits.get("cell_timeout", 30), notebook_timeout=limits.get("notebook_timeout", 90),
                 memory_mb=int(limits.get("memory_mb", 2048)), startup_timeout=40)
    return RenderOptions(out_dir=tmp / "renders", data_dir=data, rules=parse_rules(RULES), limits=lim,
                         workers=1, hide=[tmp / "index"])


DATA_SOURCES = [
    "import pandas as pd",
    f"tanks = pd.read_csv(r'{UNC}')\nlen(tanks)",  # data-dependent
    "print(sum(range(10)))",
    "tanks['volume_m3'].sum()",  # data-dependent
    "x = pd.read_csv('/mnt/share/x.csv')\nx",
    "print(open(r'p:/2017/17-042/INPUTS/tanks.csv').readline().strip())",  # drive letter, other case
]


# --------------------------------------------------------------------------------------------------------------
# no sandbox needed


def test_path_rules_map_unc_drive_and_posix() -> None:
    rules = parse_rules(RULES)
    assert map_path(UNC, rules) == "/data/projects/2017/17-042/inputs/tanks.csv"
    assert map_path(r"\\SRV-CALC-01\Projects/2017/a.csv", rules) == "/data/projects/2017/a.csv"
    assert map_path("P:/2017/a.csv", rules) == "/data/projects/2017/a.csv"
    assert map_path("/mnt/share/x.csv", rules) == "/mnt/share/x.csv"
    assert map_path("/mnt/shared/x.csv", rules) is None
    assert map_path(r"\\other-server\x\y.csv", rules) is None
    with pytest.raises(PathRuleError, match="shadow"):
        parse_rules([{"from": "/usr/share", "to": "x"}])
    with pytest.raises(PathRuleError, match="relative"):
        parse_rules([{"from": "/mnt/a", "to": "/etc"}])


def test_scan_reports_unmapped_and_missing(tmp_path: Path) -> None:
    data = make_data(tmp_path)
    nb_path = write_nb(tmp_path / "nb" / "a.ipynb", [
        f"pd.read_csv(r'{UNC}')",
        "open('/home/alice/results/run1.csv')",
        "open(r'Q:\\calc\\old.xlsx')\nopen('/mnt/share/gone.csv')",
        "%matplotlib inline\nurl = 'https://example.com/a/b.csv'",
        "print 'python 2', '/srv/py2/data.txt'",
    ])
    scan = scan_notebook(read_notebook(nb_path), parse_rules(RULES), data)
    assert scan.unmapped == ["/home/alice/results/run1.csv", "/srv/py2/data.txt", "Q:\\calc\\old.xlsx"]
    assert scan.missing == ["/mnt/share/gone.csv"]
    assert (UNC, "/data/projects/2017/17-042/inputs/tanks.csv") in scan.mapped


def test_config_reads_render_table(tmp_path: Path) -> None:
    cfg = tmp_path / "nbrecall.toml"
    cfg.write_text(
        "[render]\ndata_dir = '/srv/data'\ncell_timeout = 5\n"
        "[[render.path_map]]\nfrom = '\\\\srv-calc-01\\projects'\nto = 'projects'\n"
        "[[render.path_map]]\nfrom = '/mnt/share'\nto = 'share'\n"
    )
    settings = load_settings(cfg, env={})
    assert settings.render.cell_timeout == 5
    rules = parse_rules(settings.render.path_map)
    assert rules[0].source == r"\\srv-calc-01\projects" and rules[0].windows
    assert RenderOptions.from_settings(settings).data_dir == Path("/srv/data")


def out(**kw: object) -> Output:
    return Output(**kw)  # type: ignore[arg-type]


def test_compare_normalises_and_tolerates() -> None:
    opts = text_compare.CompareOptions()
    a = comparable([out(output_type="stream", name="stdout", text="\x1b[31mtotal\x1b[0m 0.30000000000000004\n"),
                        out(output_type="stream", name="stderr", text="FutureWarning: x\n"),
                        out(output_type="execute_result", data={"text/plain": "<Foo at 0x7f3a2b1c>"})], opts)
    b = comparable([out(output_type="stream", name="stdout", text="total  0.3\n"),
                        out(output_type="execute_result", data={"text/plain": "<Axes: xlabel='t'>"})], opts)
    assert outputs_equal(a, b, opts)
    assert text_compare.normalise_text("run at 2017-03-04 12:01:02, id 1b4e28ba-2fa1-11d2-883f-0016d3cca427") == \
        text_compare.normalise_text("run at 2026-11-29T21:00:00Z, id 6fa459ea-ee8a-3ca4-894e-db77e160355e")
    assert not text_compare.texts_equal("volume 1075.0", "volume 1060.0")
    assert text_compare.texts_equal("1.0000001", "1.0000002")  # within 1e-6 relative
    assert not text_compare.texts_equal("1.00001", "1.00002")
    assert text_compare.normalise_text("CPU times: user 1 s\nWall time: 2 s\n42") == "TIMING\nTIMING\n42"


def test_sandbox_unavailable_is_stale_not_unsandboxed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbrecall.render.run as run_mod

    marker = tmp_path / "ran"
    nb = write_nb(tmp_path / "a.ipynb", [f"open({str(marker)!r}, 'w').write('x')"])
    monkeypatch.setattr(run_mod, "sandbox_problem", lambda: "bwrap not found")
    result, executed = render_notebook(nb, tmp_path, options(tmp_path, None))
    assert (result.status, result.reason, executed) == ("stale", "sandbox unavailable", None)
    assert not marker.exists()


# --------------------------------------------------------------------------------------------------------------
# sandboxed runs


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A notebook whose stored outputs come from one sandboxed run against the data folder."""
    if sandbox_problem():
        tool_missing(f"sandbox unavailable: {sandbox_problem()}")
    tmp = tmp_path_factory.mktemp("ref")
    data = make_data(tmp)
    draft = write_nb(tmp / "draft" / "tanks.ipynb", DATA_SOURCES)
    result, executed = render_notebook(draft, draft.parent, options(tmp, data))
    assert result.status == "fresh", (result.reason, result.cells)
    outputs = [list(c.outputs) for c in executed.cells]
    nb_path = write_nb(tmp / "archive" / "17-042" / "tanks.ipynb", DATA_SOURCES, outputs)
    return nb_path, data


@needs_sandbox
def test_reproduces_stored_outputs_exactly(reference: tuple[Path, Path], tmp_path: Path) -> None:
    nb_path, data = reference
    before = nb_path.read_bytes()
    opts = options(tmp_path, data)
    result, executed = render_notebook(nb_path, nb_path.parent.parent, opts)
    assert result.status == "fresh", (result.reason, result.cells)
    assert [c.status for c in result.cells] == ["same"] * len(DATA_SOURCES)
    json.dumps(result.to_dict())  # JSON-ready
    assert nb_path.read_bytes() == before  # the file on disk is never modified
    stored = write_render(result, executed, opts.out_dir)
    assert stored.name == f"{result.sha256}.json" and stored.with_suffix(".ipynb").is_file()
    loaded = load_render(opts.out_dir, result.sha256)
    assert loaded is not None and loaded.status == "fresh" and loaded.cells[1].id == "cell-1"


@needs_sandbox
def test_input_lost_two_rows_changes_exactly_the_data_cells(reference: tuple[Path, Path], tmp_path: Path) -> None:
    nb_path, _ = reference
    shorter = "".join(TANKS.splitlines(keepends=True)[:-2])
    data = make_data(tmp_path, tanks=shorter)
    result, _ = render_notebook(nb_path, nb_path.parent, options(tmp_path, data))
    assert result.status == "changed"
    assert {c.index for c in result.cells if c.status == "changed"} == {1, 3}
    assert {c.index for c in result.cells if c.status == "same"} == {0, 2, 4, 5}
    assert "-10" in result.cells[0 + 1].detail and "+8" in result.cells[1].detail


@needs_sandbox
def test_sandbox_boundaries(tmp_path: Path) -> None:
    data = make_data(tmp_path)
    secret = tmp_path / "index" / "secret.txt"  # the index folder, inside the tree the notebook lives in
    secret.parent.mkdir()
    secret.write_text("index secret")
    host_file = tmp_path.parent / f"host-{tmp_path.name}.txt"  # outside every bound folder
    host_file.write_text("host secret")
    home = Path.home()  # the host home: only the interpreter's own folder (if it lives there) may show
    visible = sorted({Path(p).relative_to(home).parts[0] for p in interpreter_prefixes(sys.executable)
                      if Path(p).is_relative_to(home)})
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    assert socket.create_connection(("127.0.0.1", port), timeout=3)  # reachable from the host
    thread.join(0.5)
    assert len(accepted) == 1
    accepted.clear()
    try:
        nb = write_nb(tmp_path / "nb.ipynb", [
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)",
            f"open({str(host_file)!r}).read()",
            "open('index/secret.txt').read()",  # hidden: the index folder is under an empty tmpfs
            f"import os\nsorted(os.listdir({str(home)!r})) if os.path.isdir({str(home)!r}) else []",
            "open('/data/share/new.csv', 'w').write('x')",
            "open('/mnt/share/x.csv', 'a').write('x')",
            "open('scratch.txt', 'w').write('ok')",  # the work dir is a writable throw-away copy
            "import os\nsorted(k for k in os.environ if k.startswith(('AWS', 'SSH', 'NBRECALL', 'PYTEST')))",
        ])
        result, executed = render_notebook(nb, tmp_path, options(tmp_path, data))
    finally:
        stop.set()
        thread.join(2)
        listener.close()
    errors = {e["index"]: e["ename"] for e in result.execution["errors"]}
    assert errors[0] in ("ConnectionRefusedError", "OSError", "TimeoutError")
    assert errors[1] == "FileNotFoundError" and errors[2] == "FileNotFoundError"
    assert 3 not in errors and executed.cells[3].outputs[0]["data"]["text/plain"] == repr(visible)
    # read-only file system (or, as the sandbox's own unprivileged user, not its file to write)
    assert errors[4] in ("OSError", "PermissionError") and errors[5] in ("OSError", "PermissionError")
    assert 6 not in errors and 7 not in errors, result.execution["errors"]
    assert executed.cells[7].outputs[0]["data"]["text/plain"] == "[]"
    assert not accepted
    assert not (tmp_path / "scratch.txt").exists() and (tmp_path / "data/share/x.csv").read_text() == "a,b\n1,2\n3,4\n"
    assert result.status == "stale" and result.reason == "no network"


@needs_sandbox
def test_endless_loop_times_out_and_next_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from nbrecall.cli import app

    loop = write_nb(tmp_path / "nbs" / "a_loop.ipynb", ["print('start')", "while True:\n    pass", "print('never')"])
    drift = write_nb(tmp_path / "nbs" / "b_drift.ipynb", ["print(6 * 7)", "print('x')"],
                     [[{"output_type": "stream", "name": "stdout", "text": "41\n"}],
                      [{"output_type": "stream", "name": "stdout", "text": "x\n"}]])
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NBRECALL_CONFIG", raising=False)
    report = tmp_path / "drift.html"
    res = CliRunner().invoke(app, ["render", str(tmp_path / "nbs"), "--workers", "1", "--cell-timeout", "3",
                                   "--report", str(report), "--out", str(tmp_path / "out"),
                                   "--index", str(tmp_path / "index")])
    assert res.exit_code == 0, res.output
    slow = load_render(tmp_path / "out", read_notebook(loop).sha256)
    assert slow is not None and (slow.status, slow.reason) == ("stale", "timeout")
    assert [c.status for c in slow.cells] == ["new", "failed", "failed"]
    changed = load_render(tmp_path / "out", read_notebook(drift).sha256)
    assert changed is not None and changed.status == "changed"
    assert [c.status for c in changed.cells] == ["changed", "same"]
    html = report.read_text()
    assert f"/nb/{changed.sha256}#cell-id=cell-0" in html and "timeout" in html


@needs_sandbox
def test_memory_bomb_hits_the_limit(tmp_path: Path) -> None:
    nb = write_nb(tmp_path / "bomb.ipynb", ["import numpy as np\nblob = np.ones(2 * 1024**3 // 8)", "print('after')"])
    result, _ = render_notebook(nb, tmp_path, options(tmp_path, None, memory_mb=512, notebook_timeout=60))
    assert (result.status, result.reason) == ("stale", "memory")


@needs_sandbox
def test_fork_bomb_hits_the_process_limit_and_the_run_goes_on(tmp_path: Path) -> None:
    bomb = (
        "import os, time\nchildren = []\ntry:\n    for _ in range(5000):\n        pid = os.fork()\n"
        "        if pid == 0:\n            time.sleep(20)\n            os._exit(0)\n        children.append(pid)\n"
        "finally:\n    for pid in children:\n        os.kill(pid, 9)\n        os.waitpid(pid, 0)\n"
    )
    nb = write_nb(tmp_path / "forks.ipynb", [bomb, "print(len(children) < 300, os.getuid() != 0)"])
    result, executed = render_notebook(nb, tmp_path, options(tmp_path, None, notebook_timeout=90))
    errors = {e["index"]: (e["ename"], e["evalue"]) for e in result.execution["errors"]}
    assert errors[0][0] in ("BlockingIOError", "OSError"), errors  # EAGAIN: Resource temporarily unavailable
    assert 1 not in errors, errors  # the kernel lives on and the next cell runs
    expected = "True True\n" if os.geteuid() == 0 else "True False\n"
    assert executed.cells[1].outputs[0]["text"] == expected


@needs_sandbox
def test_missing_module_is_an_import_error(tmp_path: Path) -> None:
    nb = write_nb(tmp_path / "imp.ipynb", ["import nbrecall_no_such_module_xyz.sub"])
    result, _ = render_notebook(nb, tmp_path, options(tmp_path, None, notebook_timeout=60))
    assert (result.status, result.reason) == ("stale", "import error: nbrecall_no_such_module_xyz")


def test_stale_reasons() -> None:
    from nbrecall.render.outcome import _library, classify_error

    tb = ["Cell \x1b[0;32mIn[3], line 1\x1b[0m",
          "File \x1b[0;32m/venv/lib/python3.11/site-packages/matplotlib/animation.py:1050\x1b[0m, in save"]
    assert classify_error("RuntimeError", "MovieWriter ffmpeg unavailable", _library(tb)) == \
        "error: RuntimeError in matplotlib"
    assert _library(tb[:1]) == ""
    assert classify_error("ModuleNotFoundError", "No module named 'helper.sub'") == "import error: helper"
    assert classify_error("ImportError", "cannot import name 'x' from 'scipy.misc' (...)") == "import error: scipy"
    assert classify_error("OperationalError", "unable to open database file") == "missing file"
    assert classify_error("Exception", "File `'phugoid.py'` not found.") == "missing file"
    assert classify_error("URLError", "<urlopen error [Errno -3] Temporary failure in name resolution>") == \
        "no network"
