"""Drift that means something: content before rendering, change classes, perceptual figures, render environments.

Fixtures are built here (nbformat.v4, matplotlib drawing into memory); the sandboxed tests start real kernels
(skipped without bubblewrap).
"""

from __future__ import annotations

import base64
import io
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from conftest import import_or_missing
from nbrecall.config import load_settings
from nbrecall.notebook.model import Output
from nbrecall.notebook.read import read_notebook_bytes
from nbrecall.render import compare as cmp
from nbrecall.render import text_compare
from nbrecall.render.environments import (
    EnvironmentRuleError,
    display_defaults,
    figure_formats,
    kernel_config_for,
    parse_environments,
    pick_environment,
)
from nbrecall.render.outcome import Execution
from nbrecall.render.output_items import cell_verdict, comparable
from nbrecall.render.report import report_html
from nbrecall.render.run import RenderOptions, render_notebook, summarise
from nbrecall.render.sandbox import Limits

matplotlib = import_or_missing("matplotlib", "the drift tests draw with matplotlib (the dev extra)")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

needs_sandbox = pytest.mark.sandbox


# --------------------------------------------------------------------------------------------------------------
# fixtures


def png(draw, dpi: float = 100, size: tuple[float, float] = (6.4, 4.8)) -> str:
    """A matplotlib figure as the base64 PNG a notebook stores (tight bounding box, like the inline backend)."""
    fig = plt.figure(figsize=size)
    draw(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def line_plot(y):
    def draw(fig):
        ax = fig.add_subplot()
        ax.plot(np.linspace(0, 10, 200), y)
        ax.set_xlabel("t / s")
        ax.set_title("displacement")
    return draw


T = np.linspace(0, 10, 200)


def latex_png(tex: str, dpi: float) -> str:
    """A LaTeX result drawn as an image, as sympy's printing does (mathtext here)."""
    def draw(fig):
        fig.text(0, 0, tex, fontsize=14)
    return png(draw, dpi=dpi, size=(3, 0.6))


def figure(data: str, size: str = "640x480") -> Output:
    return Output(output_type="display_data",
                  data={"image/png": data, "text/plain": f"<Figure size {size} with 1 Axes>"})


def result(**data: str) -> Output:
    return Output(output_type="execute_result", data=dict(data), execution_count=1)


def stream(text: str) -> Output:
    return Output(output_type="stream", name="stdout", text=text)


def verdict(a: list[Output], b: list[Output], options: text_compare.CompareOptions | None = None) -> str:
    options = options or text_compare.CompareOptions()
    return cell_verdict(comparable(a, options), comparable(b, options), options)[0]


def notebook(cells: list[tuple[str, list[Output]]], path: str = "nb.ipynb"):
    nb = v4.new_notebook(cells=[v4.new_code_cell(src, id=f"c{i}") for i, (src, _) in enumerate(cells)])
    for node, (_, outs) in zip(nb.cells, cells, strict=True):
        node.outputs = [nbformat.from_dict(_as_node(o)) for o in outs]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return read_notebook_bytes(nbformat.writes(nb).encode(), path)


def _as_node(o: Output) -> dict:
    if o.output_type == "stream":
        return {"output_type": "stream", "name": o.name, "text": o.text}
    node = {"output_type": o.output_type, "data": o.data, "metadata": o.metadata or {}}
    if o.output_type == "execute_result":
        node["execution_count"] = 1
    return node


# --------------------------------------------------------------------------------------------------------------
# content before rendering


def test_same_latex_result_drawn_at_two_sizes_is_format_only() -> None:
    tex = r"$\frac{1}{s + s_0}$"
    small, large = latex_png(tex, 80), latex_png(tex, 160)
    assert small != large
    original = [result(**{"text/latex": tex, "image/png": small, "text/plain": "1/(s + s0)"})]
    fresh = [result(**{"text/latex": tex, "image/png": large, "text/plain": "1/(s + s0)"})]
    assert verdict(original, fresh) == "format"
    # the LaTeX decides, not the picture: another formula drawn the same size is a change of text
    other = [result(**{"text/latex": r"$\frac{1}{s - s_0}$", "image/png": small, "text/plain": "1/(s - s0)"})]
    assert verdict(original, other) == "text"


def test_changed_number_is_values_and_a_reworded_message_is_text() -> None:
    assert verdict([stream("total ballast aft: 1075.0 m3\n")], [stream("total ballast aft: 1060.0 m3\n")]) == "values"
    assert verdict([stream("converged after 12 steps\n")], [stream("did not converge\n")]) == "text"
    assert verdict([stream("x = 0.30000000000000004\n")], [stream("x = 0.3\n")]) == "same"  # within tolerance


def test_numpy_scalar_reprs_brackets_and_display_precision_are_format_only() -> None:
    assert verdict([result(**{"text/plain": "[0, 25, -0.5, 1.2]"})],
                   [result(**{"text/plain": "(np.float64(0.0), np.float64(25.0), np.float64(-0.5), "
                                            "np.float64(1.2))"})]) == "format"
    assert verdict([stream("mean 0.3333\n")], [stream("mean 0.33333333\n")]) == "format"  # 4 decimals shown
    assert verdict([stream("mean 0.3333\n")], [stream("mean 0.33346\n")]) == "values"  # does not round to it
    assert verdict([stream("mean 0.33\n")], [stream("mean 0.333\n")]) == "values"  # too few digits to tell
    strict = text_compare.CompareOptions(precision_tolerant=False)  # the notebook set a display precision itself
    assert verdict([stream("mean 0.3333\n")], [stream("mean 0.33333333\n")], strict) == "values"


def test_pretty_printer_wrapping_is_format_only() -> None:
    # a 2-D picture as sympy's pretty printer draws it: every line padded to one width
    top = "".join(f"   {k}     " for k in range(2, 12))
    middle = "".join(f"x  + {k}*" for k in range(2, 12))
    lines = [top, middle + "7*y + 1", ""]
    whole = [line.ljust(max(map(len, lines))) for line in lines]
    old = "\n\n".join("\n".join(line[a:b] for line in whole) for a, b in ((0, 80), (80, 200)))  # sympy < 1.12
    new = "\n\n".join(["\n".join(line[:76] + " ↪" for line in whole),  # sympy >= 1.12, 78 columns
                       "\n".join("↪ " + line[76:] for line in whole)])
    assert text_compare.format_text(old) == text_compare.format_text(new) == text_compare.format_text("\n".join(whole))
    assert verdict([result(**{"text/plain": old})], [result(**{"text/plain": new})]) == "format"
    assert text_compare.unwrap_pretty("first paragraph\n\nsecond one") == "first paragraph\n\nsecond one"
    changed = new.replace("7*y", "8*y")
    assert verdict([result(**{"text/plain": old})], [result(**{"text/plain": changed})]) == "values"


def test_figure_with_a_changed_line_is_figure_and_another_dpi_is_format() -> None:
    base = png(line_plot(np.sin(T)))
    bumped = np.sin(T)
    bumped[100:110] += 0.3
    assert verdict([figure(base)], [figure(png(line_plot(bumped)))]) == "figure"
    assert verdict([figure(base)], [figure(png(line_plot(np.sin(1.1 * T))))]) == "figure"
    assert verdict([figure(base)], [figure(png(line_plot(np.sin(T)), dpi=150), "960x720")]) == "format"
    assert verdict([figure(base)], [figure(png(line_plot(np.sin(T)), dpi=80), "512x384")]) == "format"
    assert verdict([figure(base)], [figure(base)]) == "same"


def test_figure_that_appears_and_another_error() -> None:
    err = Output(output_type="error", ename="ZeroDivisionError", evalue="division by zero", traceback=[])
    other = Output(output_type="error", ename="KeyError", evalue="'x'", traceback=[])
    assert verdict([err], [other]) == "error"
    assert verdict([stream("ok\n")], [stream("ok\n"), figure(png(line_plot(np.sin(T))))]) == "figure"


def test_notebook_statuses_classes_and_unseeded_random() -> None:
    base = png(line_plot(np.sin(T)))
    moved = png(line_plot(np.cos(T)))
    original = notebook([
        ("import numpy as np", []),
        ("print(7 * 6)", [stream("41\n")]),
        ("noise = np.random.normal(size=200)", []),
        ("plot(noise)", [figure(base)]),
        ("rng = np.random.default_rng(3)\nprint(rng.normal())", [stream("0.2\n")]),
        ("show(latex)", [result(**{"text/latex": "$x$", "image/png": latex_png("$x$", 80)})]),
    ])
    fresh = notebook([
        ("import numpy as np", []),
        ("print(7 * 6)", [stream("42\n")]),
        ("noise = np.random.normal(size=200)", []),
        ("plot(noise)", [figure(moved)]),
        ("rng = np.random.default_rng(3)\nprint(rng.normal())", [stream("0.2\n")]),
        ("show(latex)", [result(**{"text/latex": "$x$", "image/png": latex_png("$x$", 120)})]),
    ])
    res = cmp.compare_notebook(original, fresh, Execution(notebook=None))
    by_index = {c.index: (c.status, c.change) for c in res.cells}
    assert by_index[1] == ("changed", "values")
    assert by_index[3] == ("changed", "random") and "without a seed" in res.cells[3].detail
    assert by_index[4] == ("same", "")
    assert by_index[5] == ("same", "format")
    assert res.status == "changed" and res.result_changed() == 1
    assert res.changes()["format"] == 1 and res.changes()["random"] == 1
    only_random = notebook([(c.source, list(fresh.cells[c.index].outputs) if c.index != 3 else list(c.outputs))
                            for c in original.cells])
    res = cmp.compare_notebook(only_random, fresh, Execution(notebook=None))
    assert res.status == "fresh" and res.changes()["random"] == 1  # randomness is named, not drift


# --------------------------------------------------------------------------------------------------------------
# environments and display defaults


def test_environment_rules_parse_and_pick(tmp_path: Path) -> None:
    rules = parse_environments([
        {"name": "legacy", "env": "/opt/envs/py36", "path": "courses/2016/*"},
        {"name": "py2", "python": "/opt/envs/py27/bin/python", "kernel": "python2"},
        {"name": "py38", "python": "/opt/envs/py38/bin/python", "language_version": "3.8"},
    ])
    assert rules[0].python == "/opt/envs/py36/bin/python"
    nb = notebook([("x = 1", [])])
    assert pick_environment(rules, "courses/2016/week1/a.ipynb", nb).name == "legacy"
    assert pick_environment(rules, "courses/2017/a.ipynb", nb) is None
    old = read_notebook_bytes(nbformat.writes(nbformat.from_dict({
        "nbformat": 4, "nbformat_minor": 5, "cells": [],
        "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "P"},
                     "language_info": {"name": "python", "version": "3.8.10"}}})).encode(), "old.ipynb")
    assert pick_environment(rules, "x/old.ipynb", old).name == "py38"
    old.language_version = "3.81.0"
    assert pick_environment(rules, "x/old.ipynb", old) is None  # 3.8 is a version prefix, not a string one
    for bad, message in (({"name": "x"}, "needs python"), ({"python": "bin/python"}, "absolute"),
                         ({"python": "/p", "pathh": "x"}, "unknown key")):
        with pytest.raises(EnvironmentRuleError, match=message):
            parse_environments([bad])
    cfg = tmp_path / "nbrecall.toml"
    cfg.write_text("[[render.environment]]\nname = 'legacy'\nenv = '/opt/envs/py36'\npath = 'old/*'\n")
    assert RenderOptions.from_settings(load_settings(cfg, env={})).environments[0].name == "legacy"


def test_display_defaults_come_from_the_stored_figures(tmp_path: Path) -> None:
    old_default = png(line_plot(np.sin(T)), dpi=72, size=(6, 4))
    nb = notebook([("plt.plot(t, y)", [figure(old_default, "432x288")]),
                   ("plt.figure(figsize=(10, 2)); plt.plot(t, y)",
                    [figure(png(line_plot(T), 72, (10, 2)), "720x144")])])
    assert display_defaults(nb) == {"figure.dpi": 72, "figure.figsize": [6.0, 4.0]}
    assert figure_formats(nb) == {"png"}
    (tmp_path / "course" / "week1").mkdir(parents=True)
    (tmp_path / "course" / "ipython_kernel_config.py").write_text("c.InlineBackend.figure_formats = {'svg'}\n")
    text, notes = kernel_config_for(nb, tmp_path / "course" / "week1", tmp_path / "course", None)
    assert text.index("figure_formats = {'svg'}") < text.index("figure_formats = ['png']")  # the outputs win
    assert "'figure.dpi': 72" in text and any("ipython_kernel_config.py" in n for n in notes)
    assert kernel_config_for(nb, tmp_path, tmp_path, None, pin_display=False) == ("", [])


def test_missing_modules_and_api_errors_are_counted_in_the_report() -> None:
    def stale(path: str, errors: list[tuple[str, str, str]], env: str = "default") -> cmp.RenderResult:
        cells = [cmp.CellComparison(i, f"c{i}", "failed") for i in range(len(errors))]
        r = cmp.RenderResult(path=path, sha256=path, status="stale", reason="import error", cells=cells)
        r.execution = {"errors": [{"index": i, "id": f"c{i}", "ename": e, "evalue": v, "library": lib}
                                  for i, (e, v, lib) in enumerate(errors)]}
        r.environment = {"name": env}
        return r

    no = "ModuleNotFoundError"
    results = [
        stale("a.ipynb", [(no, "No module named 'soundfile'", "")]),
        stale("b.ipynb", [(no, "No module named 'soundfile'", ""), (no, "No module named 'sounddevice'", "")]),
        stale("c.ipynb", [(no, "No module named 'sounddevice'", "")]),
        stale("d.ipynb", [(no, "No module named 'sounddevice'", "")]),
        stale("e.ipynb", [("AttributeError", "'MatplotlibBackend' object has no attribute 'is_3D'", "sympy")]),
        stale("f.ipynb", [("ImportError", "cannot import name 'comb' from 'scipy.misc' (/x)", ""),
                          ("AttributeError", "module 'numpy' has no attribute 'float'", "")]),
        stale("g.ipynb", [(no, "No module named 'sympy.galgebra'", "")], env="py36"),
    ]
    s = summarise(results)
    assert s["missing_modules"] == {"default": [
        {"module": "sounddevice", "needed_by": 3, "brings_back": 2},
        {"module": "soundfile", "needed_by": 2, "brings_back": 2},
    ]}
    libraries = {row["library"]: row["notebooks"] for row in s["api_errors"]}
    assert libraries == {"sympy": 2, "scipy": 1, "numpy": 1}
    html = report_html(results)
    assert "Missing modules" in html and "sounddevice" in html and "API errors by library" in html


# --------------------------------------------------------------------------------------------------------------
# sandboxed runs


def _options(tmp: Path, **kw: object) -> RenderOptions:
    return RenderOptions(out_dir=tmp / "renders", workers=1, hide=[tmp / "renders"],
                         limits=Limits(cell_timeout=30, notebook_timeout=90, startup_timeout=40), **kw)


def _write(path: Path, sources: list[str], outputs: list[list[dict]] | None = None) -> Path:
    nb = v4.new_notebook(cells=[v4.new_code_cell(s, id=f"c{i}") for i, s in enumerate(sources)])
    if outputs is not None:
        for cell, outs in zip(nb.cells, outputs, strict=True):
            cell.outputs = outs
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb), encoding="utf-8")
    return path


RICH = [
    "import numpy as np, pandas as pd\nimport matplotlib.pyplot as plt\n%matplotlib inline",
    "np.float64(0.5) * 3, np.arange(4).mean()",
    "pd.DataFrame({'tank': ['T1', 'T2'], 'volume_m3': [107.5, 115.0]})",
    "t = np.linspace(0, 10, 200)\nplt.plot(t, np.sin(t))\nplt.title('displacement')",
    "from IPython.display import Math, Markdown, display\ndisplay(Math(r'\\frac{1}{s + s_0}'), Markdown('**done**'))",
    "1 / 0",
]


@needs_sandbox
def test_rendering_one_notebook_twice_every_cell_same(tmp_path: Path) -> None:
    draft = _write(tmp_path / "draft" / "rich.ipynb", RICH)
    first, executed = render_notebook(draft, draft.parent, _options(tmp_path))
    assert first.status == "stale"  # the draft had no outputs: 1 / 0 is a new error
    stored = _write(tmp_path / "archive" / "rich.ipynb", RICH, [c.outputs for c in executed.cells])
    again, _ = render_notebook(stored, stored.parent, _options(tmp_path))
    assert again.status == "fresh", [(c.index, c.status, c.detail) for c in again.cells]
    assert [c.status for c in again.cells] == ["same"] * len(RICH)
    assert not any(c.change for c in again.cells)


@needs_sandbox
def test_environment_rule_picks_its_interpreter_and_a_missing_one_is_stale(tmp_path: Path) -> None:
    env = tmp_path / "envs" / "legacy"  # another path to this environment (building one would take minutes)
    env.parent.mkdir()
    os.symlink(Path(sys.prefix), env, target_is_directory=True)
    rules = parse_environments([
        {"name": "legacy", "env": str(env), "path": "old/*"},
        {"name": "gone", "python": str(tmp_path / "envs" / "gone" / "bin" / "python"), "path": "gone/*"},
    ])
    root = tmp_path / "archive"
    old = _write(root / "old" / "a.ipynb", ["import sys\nprint(sys.executable)", "import nbrecall_missing_mod"])
    gone = _write(root / "gone" / "b.ipynb", ["print(1)"])
    opts = _options(tmp_path, environments=rules)
    res, executed = render_notebook(old, root, opts)
    assert res.environment["name"] == "legacy" and res.environment["interpreter"] == str(env / "bin" / "python")
    assert executed.cells[0].outputs[0]["text"].strip() == str(env / "bin" / "python")
    assert (res.status, res.reason) == ("stale", "import error: nbrecall_missing_mod")
    assert summarise([res])["missing_modules"] == {
        "legacy": [{"module": "nbrecall_missing_mod", "needed_by": 1, "brings_back": 1}]}
    res, executed = render_notebook(gone, root, opts)
    assert (res.status, res.reason, executed) == ("stale", "environment unavailable: gone", None)
    assert "no such interpreter" in res.notes[0]


def test_viewer_badge_names_the_class_and_not_format() -> None:
    from markupsafe import Markup

    from nbrecall.web.render import CellView

    cell = CellView(0, "c0", "code", 1, [], Markup(""), render_status="changed", render_change="values")
    assert cell.render_badge == "changed · values"
    cell.render_status, cell.render_change = "same", "format"
    assert cell.render_badge == "same"
