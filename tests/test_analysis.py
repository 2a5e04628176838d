"""Execution order, health and static dependency hints."""

from __future__ import annotations

import ast

import nbformat
from nbformat import v4

from nbrecall.notebook.analysis import (
    Analysis,
    analyse,
    analyse_order,
    mask_magics,
)
from nbrecall.notebook.model import Notebook
from nbrecall.notebook.read import read_notebook_bytes


def _code(source: str, count: int | None = None,
          error: tuple[str, str] | None = None) -> nbformat.NotebookNode:
    cell = v4.new_code_cell(source, execution_count=count)
    if error:
        cell.outputs = [v4.new_output("error", ename=error[0], evalue=error[1], traceback=[])]
    return cell


def _nb(*cells: nbformat.NotebookNode, language: str | None = None) -> Notebook:
    nb = v4.new_notebook(cells=list(cells))
    if language:
        nb.metadata["language_info"] = {"name": language}
    return read_notebook_bytes(nbformat.writes(nb).encode(), "x.ipynb")


def _edges(analysis: Analysis) -> dict[tuple[int, int], list[str]]:
    return {(e.src, e.dst): e.names for e in analysis.edges}


# ---------------------------------------------------------------------------------------------------- order


def test_clean_run_is_monotonic_and_top_to_bottom() -> None:
    nb = _nb(v4.new_markdown_cell("# t"), _code("a = 1", 1), _code("b = a", 2), _code("", None),
             _code("b", 3))
    order = analyse_order(nb)
    assert order.counts == [(1, 1), (2, 2), (4, 3)]  # the empty code cell is not counted
    assert order.monotonic and order.ran_top_to_bottom
    assert order.out_of_order == [] and order.never_run == []
    assert order.executed_fraction == 1.0
    assert not order.has_errors and order.warnings == []
    assert analyse(nb).health == 1.0


def test_non_monotonic_and_null_counts_are_flagged() -> None:
    nb = _nb(_code("a = 1", 1), _code("b = 2", 5), _code("c = 3", 2), _code("d = 4", None),
             _code("e = 5", 6), _code("f = 6", 5), _code("g = 7", None), _code("h = 8", None))
    order = analyse_order(nb)
    assert not order.monotonic and not order.ran_top_to_bottom
    assert order.out_of_order == [2, 5]  # In[2] below In[5]; a repeated In[5] below In[6]
    assert order.never_run == [3, 6, 7]
    assert order.executed_fraction == 5 / 8
    assert "Cell [2] In[2] runs below Cell [1] In[5]" in order.warnings
    assert "Cell [5] In[5] runs below Cell [4] In[6]" in order.warnings
    assert "3 code cells never run: [3], [6], [7]" in order.warnings


def test_gaps_are_monotonic_but_not_top_to_bottom() -> None:
    order = analyse_order(_nb(_code("a = 1", 3), _code("b = 2", 7)))
    assert order.monotonic and not order.ran_top_to_bottom
    assert any("not 1, 2, 3" in w for w in order.warnings)


def test_error_outputs_are_found() -> None:
    nb = _nb(_code("a = 1", 1), _code("a / 0", 2, error=("ZeroDivisionError", "division by zero")))
    order = analyse_order(nb)
    assert order.has_errors and order.error_cells == [1]
    assert "Cell [1] raised ZeroDivisionError: division by zero" in order.warnings


def test_no_code_cells() -> None:
    nb = _nb(v4.new_markdown_cell("only prose"))
    analysis = analyse(nb)
    assert analysis.order.executed_fraction == 1.0 and analysis.order.monotonic
    assert analysis.health == 1.0 and analysis.cells == {} and analysis.edges == []


def test_health_orders_clean_above_draft() -> None:
    clean = analyse(_nb(_code("a = 1", 1), _code("b = a", 2), _code("c = b", 3)))
    gaps = analyse(_nb(_code("a = 1", 4), _code("b = a", 9), _code("c = b", 12)))
    unrun = analyse(_nb(_code("a = 1", 1), _code("b = a", 2), _code("c = b", None)))
    shuffled = analyse(_nb(_code("a = 1", 3), _code("b = a", 1), _code("c = b", 2)))
    draft = analyse(_nb(_code("a = 1", 7), _code("b = a", 2), _code("c = b", None),
                        _code("d = c", 4, error=("NameError", "name 'c' is not defined"))))
    assert clean.health == 1.0
    assert 1.0 > gaps.health > unrun.health > shuffled.health > draft.health >= 0.0


# ---------------------------------------------------------------------------------------------------- masking


def test_mask_magics_keeps_lines_and_assignment_targets() -> None:
    source = ("%matplotlib inline\n!pip install x\nfiles = !ls\nt = %time f()\ndf.head?\n?df\nz = 1\n"
              "%time y = g(z)\nnames = %who_ls\n")
    masked = mask_magics(source)
    assert masked.count("\n") == source.count("\n")
    assert masked.splitlines() == ["pass", "pass", "files = None", "t = f()", "pass", "pass", "z = 1",
                                   "y = g(z)", "names = None"]
    ast.parse(masked)


def test_mask_magics_keeps_blocks_valid_and_leaves_python_alone() -> None:
    source = ('for i in range(3):\n    !echo $i\n'
              's = ("%s"\n     % name)\n'
              'doc = """\n%not a magic\n!nor this\n"""\n'
              'x = 1  # is this a help line?\n')
    masked = mask_magics(source)
    assert masked.splitlines()[1] == "    pass"
    assert masked.splitlines()[2:] == source.splitlines()[2:]
    ast.parse(masked)


def test_cell_magic_masks_whole_cell_except_python_bodies() -> None:
    assert mask_magics("%%timeit\nx = 1\ny = 2") == "\n\n"
    assert mask_magics("%%bash\necho 'hi\n") == "\n\n"
    assert mask_magics("%%time\nx = 1") == "\nx = 1"


def test_magics_in_a_notebook_do_not_break_analysis() -> None:
    nb = _nb(_code("%matplotlib inline\nimport numpy as np"), _code("!pip install x"),
             _code("%%timeit\nslow = np.sum(range(10))"), _code("files = !ls"), _code("print(files, slow)"))
    analysis = analyse(nb)
    assert all(d.parse_error is None for d in analysis.cells.values())
    assert analysis.cells[2].defines == []  # the %%timeit body is not executed in the user namespace
    assert analysis.cells[3].defines == ["files"]
    assert _edges(analysis) == {(3, 4): ["files"]}
    assert analysis.warnings == ["Cell [4] uses slow, defined nowhere in the notebook"]


# ---------------------------------------------------------------------------------------------------- names


def test_defines_and_uses_for_binding_forms() -> None:
    source = "\n".join([
        "def f(a, b=default):",
        "    global G",
        "    G = a + free_in_f",
        "    return helper(a)",
        "class C(Base):",
        "    k = 1",
        "    def m(self):",
        "        return self.k + free_in_m",
        "for i, (j, k2) in enumerate(items):",
        "    pass",
        "with open(path) as fh, lock:",
        "    text = fh.read()",
        "if (n := len(text)) > 3:",
        "    pass",
        "total += n",
        "ys = [y for y in range(n) if (last := y)]",
        "try:",
        "    pass",
        "except ValueError as err:",
        "    pass",
        "print(f, C, i, j, k2, G, last, ys, err)",
        "def helper(x):",
        "    return x",
    ])
    deps = analyse(_nb(_code(source))).cells[0]
    assert deps.parse_error is None
    assert set(deps.defines) == {"f", "G", "C", "i", "j", "k2", "fh", "text", "n", "total", "last", "ys",
                                 "err", "helper"}
    # `helper` is called inside f but defined later in the same cell: functions run later, so not a use;
    # `total += n` reads total before this cell binds it
    assert set(deps.uses) == {"default", "Base", "items", "path", "lock", "total", "free_in_f", "free_in_m"}
    assert "print" not in deps.uses and "len" not in deps.uses  # builtins


def test_local_names_and_comprehension_variables_are_not_uses() -> None:
    source = ("def g(x):\n    y = x * 2\n    return [z + y for z in range(x)]\n"
              "w = lambda q: q + 1\nv = [a for a in vs]")
    deps = analyse(_nb(_code(source))).cells[0]
    assert deps.defines == ["g", "w", "v"]
    assert deps.uses == ["vs"]


def test_attribute_and_subscript_assignment_is_a_use() -> None:
    deps = analyse(_nb(_code("df['x'] = 1\nobj.attr = 2"))).cells[0]
    assert deps.defines == [] and deps.uses == ["df", "obj"]


def test_syntax_error_is_noted_not_fatal() -> None:
    nb = _nb(_code("a = 1", 1), _code("x = (\nprint 'hi'", 2), _code("b = a + x", 3))
    analysis = analyse(nb)
    assert analysis.cells[1].parse_error is not None and analysis.cells[1].parse_error.startswith("line ")
    assert analysis.cells[1].defines == [] and analysis.cells[1].uses == []
    assert _edges(analysis) == {(0, 2): ["a"]}
    assert analysis.warnings == ["Cell [2] uses x, defined nowhere in the notebook "
                                 "(Cell [1] above did not parse and may define it)"]
    assert "[1]" in analysis.limits and "not parse" in analysis.limits


def test_leading_indent_is_removed_like_ipython() -> None:
    deps = analyse(_nb(_code("    a = 1\n    b = a\n"))).cells[0]
    assert deps.parse_error is None and deps.defines == ["a", "b"]


# ---------------------------------------------------------------------------------------------------- edges


def test_edge_goes_to_nearest_definer_above() -> None:
    nb = _nb(_code("x = 1"), v4.new_markdown_cell("text"), _code("x = 2\ny = 3"), _code("print(x, y)"),
             _code("x = x + y"), _code("z = x"))
    analysis = analyse(nb)
    assert _edges(analysis) == {(2, 3): ["x", "y"], (2, 4): ["x", "y"], (4, 5): ["x"]}
    assert analysis.warnings == []


def test_imports_are_ambient_by_default_and_edges_on_request() -> None:
    nb = _nb(_code("from __future__ import division\nimport numpy as np\nimport os.path\n"
                   "from math import pi as PI"),
             _code("a = np.ones(3)"),
             _code("b = a * PI + len(os.sep)"), _code("c = later_import.x"), _code("import later_import"))
    ambient = analyse(nb)
    assert _edges(ambient) == {(1, 2): ["a"]}
    assert ambient.ambient == ["np", "os", "PI", "later_import"]
    assert ambient.warnings == []
    assert ambient.cells[0].imports == ["np", "os", "PI"] and ambient.cells[0].defines == []

    edges = analyse(nb, imports_as_edges=True)
    assert _edges(edges) == {(0, 1): ["np"], (0, 2): ["PI", "os"], (1, 2): ["a"]}
    assert edges.ambient == []
    assert edges.warnings == ["Cell [3] uses later_import defined later in Cell [4]"]


def test_warnings_for_later_and_undefined_names_once_per_cell_and_name() -> None:
    nb = _nb(_code("a = b + b\nprint(nowhere, nowhere)"), _code("b = 1"), _code("c = c + 1"))
    analysis = analyse(nb)
    assert analysis.warnings == [
        "Cell [0] uses b defined later in Cell [1]",
        "Cell [0] uses nowhere, defined nowhere in the notebook",
        "Cell [2] uses c before defining it (no earlier definition)",
    ]


def test_star_import_and_pylab_names_are_ambient() -> None:
    nb = _nb(_code("x = linspace(0, 1)"), _code("from pylab import *"), _code("plot(linspace(0, 1))"))
    analysis = analyse(nb)
    assert analysis.ambient == ["pylab.*"]
    # above the star import a missing name is still flagged; below it, it may come from there
    assert analysis.warnings == ["Cell [0] uses linspace, defined nowhere in the notebook"]
    assert "star import" in analysis.limits

    measured = analyse(nb, imports_as_edges=True)
    assert measured.warnings[1] == ("Cell [2] uses plot, defined nowhere in the notebook "
                                    "(may come from the star import in Cell [1])")

    pylab = analyse(_nb(_code("%pylab inline"), _code("y = np.sin(linspace(0, 1))\nplt.plot(y)")))
    assert {"np", "plt", "numpy.*"} <= set(pylab.cells[0].imports)
    assert pylab.warnings == [] and pylab.edges == []


def test_other_languages_get_order_analysis_only() -> None:
    nb = _nb(_code("x <- 1", 2), _code("y <- x", 1), language="R")
    analysis = analyse(nb)
    assert analysis.cells == {} and analysis.edges == [] and analysis.ambient == []
    assert analysis.order.out_of_order == [1]
    assert "Python notebooks only" in analysis.limits


def test_limits_paragraph_states_what_is_not_seen() -> None:
    limits = analyse(_nb(_code("a = 1"))).limits
    for phrase in ("static", "approximate", "exec", "star import", "%run", "df['x']"):
        assert phrase in limits


def test_never_raises_on_hostile_sources() -> None:
    deep = "x = " + "(" * 400 + "1" + ")" * 400
    nb = _nb(_code(deep), _code("a = 1\x00"), _code("'''unterminated"), _code("\t\tif x:\n  y"),
             _code("def f(:"),
             _code("match p:\n    case {'k': v, **rest}:\n        pass\n    case [*xs]:\n        pass"))
    analysis = analyse(nb)
    assert set(analysis.cells) == {0, 1, 2, 3, 4, 5}
    assert analysis.cells[5].defines == ["v", "rest", "xs"]
