"""The SVG arc diagram of dependency hints."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import nbformat
from nbformat import v4

from nbrecall.convert.depmap import _names_label, render_dependency_svg
from nbrecall.notebook.analysis import analyse
from nbrecall.notebook.model import Notebook
from nbrecall.notebook.read import read_notebook_bytes

SVG = "{http://www.w3.org/2000/svg}"


def _nb(*cells: nbformat.NotebookNode) -> Notebook:
    nb = v4.new_notebook(cells=list(cells))
    return read_notebook_bytes(nbformat.writes(nb).encode(), "dir/sample & <odd>.ipynb")


def _cells(root: ET.Element) -> dict[int, list[str]]:
    return {int(g.get("data-cell", "-1")): (g.get("class") or "").split()
            for g in root.iter(f"{SVG}g") if "cell" in (g.get("class") or "").split()}


def _text(root: ET.Element) -> str:
    return " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))


def test_small_notebook_renders_well_formed_svg() -> None:
    error = v4.new_code_cell("1 / 0", execution_count=6)
    error.outputs = [v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                                   traceback=[])]
    nb = _nb(v4.new_markdown_cell("# Title"),
             v4.new_code_cell("import pandas as pd\ndf = pd.DataFrame()", execution_count=1),
             v4.new_code_cell("x = df.shape", execution_count=5),
             v4.new_code_cell("y = x, df", execution_count=2),
             v4.new_code_cell("z = y", execution_count=None),
             error)
    analysis = analyse(nb)
    svg = render_dependency_svg(nb, analysis)
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    for attr in ("width", "height", "viewBox"):
        assert root.get(attr)
    title = root.find(f"{SVG}title")
    assert title is not None and "sample & <odd>.ipynb" in (title.text or "")

    cells = _cells(root)
    assert sorted(cells) == [1, 2, 3, 4, 5]
    assert "out-of-order" in cells[3] and "out-of-order" not in cells[2]
    assert "never-run" in cells[4]
    assert "error" in cells[5]
    text = _text(root)
    assert "[3]" in text and "In[2]" in text and "In[ ]" in text
    assert "Dependency hints are approximate (static analysis)" in text
    assert "busiest" not in text
    assert "pd" in text  # the ambient caption
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "dep-label"]
    assert sorted(labels) == ["df", "df", "x", "y"]  # 1→2 df, 1→3 df, 2→3 x, 3→4 y
    assert len([g for g in root.iter(f"{SVG}g") if g.get("class") == "dep"]) == len(analysis.edges) == 4
    amber = [c for c in root.iter(f"{SVG}circle") if c.get("fill") == "#f5a623"]
    assert amber  # the out-of-order node and its legend swatch


def test_dense_notebook_shows_16_busiest_and_says_so() -> None:
    cells = [v4.new_code_cell("v0 = 1", execution_count=1)]
    for i in range(1, 40):
        # every cell reads the hub v0; every fifth cell also defines a name that the next cells read
        reads = "v0" + (f" + w{i - i % 5}" if i % 5 else "")
        body = f"v{i} = {reads}" + (f"\nw{i} = v{i}" if i % 5 == 0 else "")
        cells.append(v4.new_code_cell(body, execution_count=i + 1 if i != 20 else 3))
    nb = _nb(*cells)
    analysis = analyse(nb)
    svg = render_dependency_svg(nb, analysis)
    root = ET.fromstring(svg)
    shown = _cells(root)
    assert len(shown) == 16
    assert svg.count('class="cell') == 16
    assert 0 in shown  # the hub has the highest degree
    text = _text(root)
    assert "Showing the 16 busiest of 40 code cells" in text
    assert "Dependency hints are approximate (static analysis)" in text
    drawn = [g for g in root.iter(f"{SVG}g") if g.get("class") == "dep"]
    assert all(int(g.get("data-src", -1)) in shown and int(g.get("data-dst", -1)) in shown for g in drawn)
    assert drawn


def test_amber_class_on_out_of_order_cells() -> None:
    nb = _nb(v4.new_code_cell("a = 1", execution_count=4), v4.new_code_cell("b = a", execution_count=2),
             v4.new_code_cell("c = b", execution_count=3))
    analysis = analyse(nb)
    root = ET.fromstring(render_dependency_svg(nb, analysis, title="My map"))
    cells = _cells(root)
    assert analysis.order.out_of_order == [1, 2]
    assert [i for i, cls in cells.items() if "out-of-order" in cls] == [1, 2]
    assert root.find(f"{SVG}title").text == "My map"  # type: ignore[union-attr]


def test_empty_and_non_python_notebooks_still_render() -> None:
    empty = _nb(v4.new_markdown_cell("nothing to run"))
    root = ET.fromstring(render_dependency_svg(empty, analyse(empty)))
    assert _cells(root) == {}
    assert "No code cells" in _text(root)

    nb = v4.new_notebook(cells=[v4.new_code_cell("x <- 1", execution_count=1)])
    nb.metadata["language_info"] = {"name": "R"}
    r = read_notebook_bytes(nbformat.writes(nb).encode(), "r.ipynb")
    root = ET.fromstring(render_dependency_svg(r, analyse(r)))
    assert list(_cells(root)) == [0]
    assert "Python notebooks only" in _text(root)


def test_names_label_truncates_long_lists() -> None:
    assert _names_label(["df", "x", "threshold", "alpha", "beta"]) == "df, x +3"
    assert _names_label(["a_really_long_variable_name"]) == "a_really_lon…"
    assert _names_label(["posterior_alpha", "beta"]) == "posterior… +1"
    assert _names_label(["temperature_", "x"]) == "temperatu… +1"
    assert _names_label(["df"]) == "df"
