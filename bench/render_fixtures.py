"""The render drift fixtures: notebooks built here whose stored outputs differ from a fresh run in one known way
each, rendered in the sandbox, with the class each cell should get and the class it got.

    .venv/bin/python bench/render_fixtures.py [--workers 2]      (or bench/render_corpus.py --fixtures)

Stored outputs are made in this process (matplotlib, nbformat.v4) as another environment would have: a LaTeX
result drawn at another size, a figure at another DPI, an SVG plot at another figure size, numpy 1's scalar
reprs, a number that changed, a moved line, another exception, unseeded random numbers.
"""

from __future__ import annotations

import argparse
import base64
import io
import sys
import tempfile
from pathlib import Path

import nbformat
from nbformat import v4

from nbrecall.render.availability import sandbox_problem
from nbrecall.render.run import RenderOptions, discover, render_many
from nbrecall.render.sandbox import Limits

PLOT = "import numpy as np\nimport matplotlib.pyplot as plt\nt = np.linspace(0, 10, 200)\n"


def _figure(y_expr: str, dpi: float, size: tuple[float, float], fmt: str = "png") -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    t = np.linspace(0, 10, 200)
    y = eval(y_expr, {"np": np, "t": t})  # the fixture's own expression
    fig = plt.figure(figsize=size)
    plt.plot(t, y)
    plt.title("displacement")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    data = buf.getvalue()
    mime = "image/svg+xml" if fmt == "svg" else "image/png"
    value = data.decode() if fmt == "svg" else base64.b64encode(data).decode()
    w, h = round(size[0] * dpi), round(size[1] * dpi)
    return v4.new_output("display_data", data={mime: value, "text/plain": f"<Figure size {w}x{h} with 1 Axes>"})


def _latex_png(tex: str, dpi: float) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(3, 0.6))
    fig.text(0, 0, tex, fontsize=14)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _stream(text: str) -> dict:
    return v4.new_output("stream", name="stdout", text=text)


def _result(data: dict) -> dict:
    return v4.new_output("execute_result", data=data, execution_count=1)


TEX = r"$\frac{1}{s + s_0}$"
LATEX_CELL = (
    "import base64, io\nimport matplotlib.pyplot as plt\nfrom IPython.display import display\n"
    "fig = plt.figure(figsize=(3, 0.6)); fig.text(0, 0, r'" + TEX + "', fontsize=14)\n"
    "buf = io.BytesIO(); fig.savefig(buf, format='png', dpi=140, bbox_inches='tight'); plt.close(fig)\n"
    "display({'text/latex': r'" + TEX + "', 'image/png': base64.b64encode(buf.getvalue()).decode(), "
    "'text/plain': '1/(s + s0)'}, raw=True)"
)


def fixtures() -> list[tuple[str, list[tuple[str, list[dict], str]]]]:
    """(notebook name, [(source, stored outputs, expected class)]); class '' means exactly the same."""
    return [
        ("latex_two_sizes", [(LATEX_CELL, [v4.new_output("display_data", data={
            "text/latex": TEX, "image/png": _latex_png(TEX, 80), "text/plain": "1/(s + s0)"})], "format")]),
        ("changed_number", [("print(6 * 7)", [_stream("41\n")], "values"),
                            ("print('unchanged')", [_stream("unchanged\n")], "")]),
        ("numpy_scalar_repr", [("import numpy as np\nnp.float64(0.5), np.float64(2.0)",
                                [_result({"text/plain": "(0.5, 2.0)"})], "format")]),
        ("figure_changed_line", [(PLOT + "y = np.sin(t); y[100:110] += 0.3\nplt.figure(figsize=(6.4, 4.8))\n"
                                  "plt.plot(t, y); plt.title('displacement');",
                                  [_figure("np.sin(t)", 100, (6.4, 4.8))], "figure")]),
        ("figure_other_dpi", [(PLOT + "plt.figure(figsize=(6.4, 4.8))\n"
                               "plt.plot(t, np.sin(t)); plt.title('displacement')",
                               [_figure("np.sin(t)", 72, (6.4, 4.8))], "format")]),
        ("svg_other_size", [("%config InlineBackend.figure_formats = ['svg']\n" + PLOT +
                             "plt.figure(figsize=(6.4, 4.8))\nplt.plot(t, np.sin(t)); plt.title('displacement')",
                             [_figure("np.sin(t)", 72, (8, 3), fmt="svg")], "format")]),
        ("svg_changed_line", [("%config InlineBackend.figure_formats = ['svg']\n" + PLOT +
                               "plt.figure(figsize=(6.4, 4.8))\n"
                               "plt.plot(t, 1.1 * np.sin(t)); plt.title('displacement')",
                               [_figure("np.sin(t)", 72, (6.4, 4.8), fmt="svg")], "figure")]),
        ("another_error", [("int('x')", [v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                                                       traceback=[])], "error")]),
        ("unseeded_random", [("import numpy as np\nx = np.random.normal(size=3)", [], ""),
                             ("print(x.round(3))", [_stream("[ 0.497 -0.138  0.648]\n")], "random")]),
    ]


def build(folder: Path) -> dict[str, list[str]]:
    expected: dict[str, list[str]] = {}
    for name, cells in fixtures():
        nodes = []
        for i, (source, outputs, _) in enumerate(cells):
            node = v4.new_code_cell(source, id=f"{name}-{i}", execution_count=i + 1)
            node.outputs = outputs
            nodes.append(node)
        nb = v4.new_notebook(cells=nodes)
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        (folder / f"{name}.ipynb").write_text(nbformat.writes(nb), encoding="utf-8")
        expected[name] = [c for _, _, c in cells]
    return expected


def run_fixtures(workers: int = 2) -> int:
    problem = sandbox_problem()
    if problem:
        print(f"sandbox unavailable: {problem}", file=sys.stderr)
        return 3
    tmp = Path(tempfile.mkdtemp(prefix="nbr-fixtures-"))
    folder = tmp / "fixtures"
    folder.mkdir()
    expected = build(folder)
    options = RenderOptions(out_dir=tmp / "renders", workers=workers, hide=[tmp / "renders"],
                            limits=Limits(cell_timeout=60, notebook_timeout=120))
    wrong = 0
    print(f"{'fixture':22s} {'cell':>4s}  {'expected':9s} {'got':9s} status")
    for result in sorted(render_many(discover([folder]), options), key=lambda r: r.path):
        name = Path(result.path).stem
        for cell, want in zip(result.cells, expected[name], strict=False):
            ok = cell.change == want
            wrong += not ok
            print(f"{name:22s} {cell.index:4d}  {want or 'same':9s} {cell.change or cell.status:9s} "
                  f"{cell.status}{'' if ok else '   <-- unexpected: ' + cell.detail[:120]}")
        print(f"{'':22s}       notebook: {result.status} {result.reason}")
    print(f"{sum(len(v) for v in expected.values()) - wrong} of {sum(len(v) for v in expected.values())} "
          "fixture cells got the expected class")
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    return run_fixtures(parser.parse_args(argv).workers)


if __name__ == "__main__":
    sys.exit(main())
