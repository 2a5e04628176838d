"""The output rules of architecture §5, on outputs read through `read_notebook_bytes` or built directly."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import nbformat.v4 as v4
import pytest

from nbrecall.notebook.model import Cell, Output
from nbrecall.notebook.outputs import (
    FIGURE_PLACEHOLDER_RE,
    OutputLimits,
    collapse_carriage_returns,
    extract_markdown_images,
    figure_caption,
    head_tail,
    render_output,
    render_outputs,
    strip_ansi,
)
from nbrecall.notebook.read import read_notebook_bytes

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 12  # 3080 bytes: "3.0 KB"
PNG_B64 = base64.b64encode(PNG).decode()
RED = "\x1b[0;31m"
RESET = "\x1b[0m"

DATAFRAME_HTML = """<div>
<style scoped>
    .dataframe tbody tr th { vertical-align: top; }
</style>
<table border="1" class="dataframe">
  <thead>
    <tr style="text-align: right;"><th></th><th>tank</th><th>volume_m3</th></tr>
  </thead>
  <tbody>
    <tr><th>0</th><td>fore</td><td>1.50</td></tr>
    <tr><th>1</th><td>aft</td><td>0.950</td></tr>
    <tr><th>...</th><td>...</td><td>...</td></tr>
    <tr><th>4</th><td>mid</td><td>3800.6</td></tr>
  </tbody>
</table>
<p>5 rows × 2 columns</p>
</div>"""


def notebook(*cells: dict[str, Any]) -> list[Cell]:
    """Cells of a v4 notebook made of `cells`, read the way nbrecall reads files."""
    nb = v4.new_notebook(cells=list(cells))
    return read_notebook_bytes(json.dumps(nb).encode(), "x.ipynb").cells


def code_cell(source: str, *outputs: dict[str, Any]) -> dict[str, Any]:
    return v4.new_code_cell(source, outputs=list(outputs), execution_count=1)


def rendered(source: str, *outputs: dict[str, Any], markdown_above: str | None = None):  # noqa: ANN201
    (cell,) = notebook(code_cell(source, *outputs))
    return render_outputs(cell, markdown_above=markdown_above)


# --- text primitives ---------------------------------------------------------------------------------------


def test_strip_ansi_removes_colours_cursor_moves_and_osc() -> None:
    text = f"{RED}Error{RESET} \x1b[1;32mok\x1b[0m\x1b[2K\x1b]0;title\x07done"
    assert strip_ansi(text) == "Error okdone"
    assert strip_ansi("plain [0] text") == "plain [0] text"


def test_collapse_carriage_returns_keeps_last_frame_and_crlf() -> None:
    assert collapse_carriage_returns("a\r\nb\r\n") == "a\nb\n"
    assert collapse_carriage_returns("start\n 10%\r 50%\r100%\nend") == "start\n100%\nend"
    assert collapse_carriage_returns("\rEpoch 1: 3/3 done\r") == "Epoch 1: 3/3 done"
    assert collapse_carriage_returns("abc\b\bX") == "aX"


def test_head_tail_by_lines_chars_and_single_long_line() -> None:
    limits = OutputLimits()
    text = "\n".join(f"line {i}" for i in range(40))
    out, cut = head_tail(text, limits)
    lines = out.splitlines()
    assert cut and lines[:10] == [f"line {i}" for i in range(10)]
    assert lines[10] == "[… 20 lines omitted …]" and lines[11:] == [f"line {i}" for i in range(30, 40)]

    short = "\n".join(f"line {i}" for i in range(30))
    assert head_tail(short, limits) == (short, False)

    out, cut = head_tail("x" * 5000, limits)
    assert cut and "[… 3000 chars omitted …]" in out and len(out) < 2100

    wide = "\n".join(str(i) * 300 for i in range(1, 10))  # 9 lines, 2.7k chars: bounded by chars
    out, cut = head_tail(wide, limits)
    assert cut and out.startswith("1" * 300) and out.endswith("9" * 300) and "lines omitted" in out
    assert len(out) <= 2100


# --- streams ----------------------------------------------------------------------------------------------


def test_stream_strips_ansi_collapses_progress_and_keeps_head_and_tail() -> None:
    log = "".join(f"{RED}step {i}{RESET}\n" for i in range(50))
    progress = "\r".join(f"{p}%|{'#' * (p // 10)}" for p in range(0, 101, 10)) + "\n"
    (out,) = rendered("train()", v4.new_output("stream", name="stderr", text=progress + log))
    assert out.kind == "stream" and out.name == "stderr" and out.truncated
    lines = out.text.splitlines()
    assert lines[0] == "100%|##########"
    assert lines[10] == "[… 31 lines omitted …]"
    assert lines[-1] == "step 49" and "\x1b" not in out.text
    assert len(lines) == 21
    assert out.original_chars == len(progress + log)


def test_short_stream_kept_whole() -> None:
    (out,) = rendered("print(1)", v4.new_output("stream", name="stdout", text=["total = ", "3803.0\n"]))
    assert (out.kind, out.text, out.truncated) == ("stream", "total = 3803.0", False)


# --- errors -----------------------------------------------------------------------------------------------

IPYTHON8_TRACEBACK = [
    f"{RED}---------------------------------------------------------------------------{RESET}",
    f"{RED}ZeroDivisionError{RESET}                         Traceback (most recent call last)",
    f"Cell {RED}In[3], line 2{RESET}\n      1 x = 0\n{RED}----> 2{RESET} ratio(1, x)\n",
    "File /opt/lib/helpers.py:10, in ratio(a, b)\n---> 10 return scale(a) / check(b)\n",
    "File /opt/lib/helpers.py:20, in check(b)\n---> 20 return inner(b)\n",
    "File /opt/lib/helpers.py:30, in inner(b)\n---> 30 return 1 / b\n",
    f"{RED}ZeroDivisionError{RESET}: division by zero",
]


def test_error_keeps_ename_first_then_first_and_last_frames() -> None:
    err = v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero",
                        traceback=IPYTHON8_TRACEBACK)
    (out,) = rendered("x = 0\nratio(1, x)", err)
    lines = out.text.splitlines()
    assert out.kind == "error" and out.truncated
    assert lines[0] == "ZeroDivisionError: division by zero"
    assert lines[1] == "Cell In[3], line 2"
    assert "----> 2 ratio(1, x)" in out.text
    assert "[… 2 frames omitted …]" in lines
    assert lines[-2:] == ["File /opt/lib/helpers.py:30, in inner(b)", "---> 30 return 1 / b"]
    assert "helpers.py:10" not in out.text and "Traceback (most recent call last)" not in out.text
    assert "\x1b" not in out.text and out.text.count("division by zero") == 1


def test_error_with_one_frame_and_old_style_header() -> None:
    tb = [f"{RED}---------------------------------------------------------------------------{RESET}\n"
          f"{RED}NameError{RESET}                                 Traceback (most recent call last)",
          "<ipython-input-2-e83805e8eaea> in <module>()\n----> 1 figsize(12.5, 3)\n",
          f"{RED}NameError{RESET}: name 'figsize' is not defined"]
    (out,) = [render_output(Output("error", ename="NameError", evalue="name 'figsize' is not defined",
                                   traceback=tb))]
    assert out.text.splitlines() == ["NameError: name 'figsize' is not defined",
                                     "<ipython-input-2-e83805e8eaea> in <module>()",
                                     "----> 1 figsize(12.5, 3)"]
    assert not out.truncated


def test_v3_pyerr_is_rendered_as_error() -> None:
    v3 = {"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": [{
        "cell_type": "code", "input": "1/0", "language": "python", "prompt_number": 1, "collapsed": False,
        "metadata": {}, "outputs": [{"output_type": "pyerr", "ename": "ZeroDivisionError",
                                     "evalue": "integer division or modulo by zero",
                                     "traceback": ["Traceback",
                                                   "<ipython-input-1> in <module>()\n----> 1 1/0"]}],
    }]}]}
    (cell,) = read_notebook_bytes(json.dumps(v3).encode(), "old.ipynb").cells
    (out,) = render_outputs(cell)
    assert out.kind == "error"
    assert out.text.startswith("ZeroDivisionError: integer division or modulo by zero\n")


# --- figures ----------------------------------------------------------------------------------------------


def image_output(**extra: str) -> dict[str, Any]:
    return v4.new_output("display_data", data={"image/png": PNG_B64, "text/plain": "<Figure size 640x480>",
                                               **extra})


def test_image_marker_with_caption_from_code() -> None:
    code = "%matplotlib inline\nfig, ax = plt.subplots()\nax.plot(t, v)\nax.set_title('Ballast volume')\n" \
           "ax.set_xlabel('time [h]')\nplt.ylabel(f'volume of {tank}')\n!ls"
    (out,) = rendered(code, image_output(), markdown_above="Ignored, the code has a title.")
    assert out.kind == "figure" and out.mime == "image/png"
    assert out.text == "[figure: image/png, 3.0 KB] Ballast volume (x: time [h], y: volume of {tank})"
    assert out.figure is not None and out.figure.data == PNG and out.figure.size_bytes == len(PNG)
    assert out.figure.source == "output"
    assert out.original_chars == len(PNG_B64) + len("<Figure size 640x480>")


def test_image_caption_from_markdown_above() -> None:
    md = "## Results\n\nWe load the data. The plot below shows **ballast** per [tank](http://x).\n"
    (out,) = rendered("plt.plot(x)\nplt.show()", image_output(), markdown_above=md)
    assert out.text == "[figure: image/png, 3.0 KB] The plot below shows ballast per tank."
    (out,) = rendered("plt.plot(x)", image_output(), markdown_above="# Heading only\n```\ncode\n```")
    assert out.text == "[figure: image/png, 3.0 KB]"  # a heading that is not about the figure is no caption
    (out,) = rendered("plt.plot(x)", image_output(), markdown_above="## Plot of the raw data\n```\ncode\n```")
    assert out.text.endswith("] Plot of the raw data")
    (out,) = rendered("plt.plot(x)", image_output())
    assert out.text == "[figure: image/png, 3.0 KB]"


def test_figure_caption_rules() -> None:
    assert figure_caption("df.plot(title='Daily load')", None) == "Daily load"
    assert figure_caption("fig.suptitle('A')\nax.set(xlabel='t', ylabel='v')", None) == "A (x: t, y: v)"
    assert figure_caption("print 'py2'\nplt.title('Kept')", None) == "Kept"  # offending line masked
    assert figure_caption("def (:\n", "The figure shows the fallback.") == "The figure shows the fallback."
    assert figure_caption("def (:\n", "Fallback sentence.") is None  # not about a figure
    assert figure_caption("plt.plot(x)", None) is None
    assert figure_caption("", "") is None


def test_svg_and_undecodable_images_never_raise() -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg"><text>Pump curve</text><text>0.5</text></svg>'
    out = render_output(Output("display_data", data={"image/svg+xml": svg}))
    assert out.kind == "figure" and out.text.endswith("] Pump curve")
    assert out.figure is not None and out.figure.data == svg.encode()
    bad = render_output(Output("display_data", data={"image/png": "!!!not base64@@@" * 10}))
    assert bad.kind == "figure" and bad.figure is not None and bad.figure.data == b""
    assert bad.figure.size_bytes == len("!!!not base64@@@" * 10) * 3 // 4
    odd = render_output(Output("display_data", data={"image/jpeg": {"not": "a string"}}))
    assert odd.kind == "figure"


# --- tables, html, text, markers --------------------------------------------------------------------------


def test_dataframe_html_becomes_table_with_shape_dtypes_and_summary() -> None:
    out_dict = v4.new_output("execute_result", data={"text/html": DATAFRAME_HTML, "text/plain": "  tank ..."},
                             execution_count=1)
    (out,) = rendered("df", out_dict)
    assert out.kind == "table" and out.table is not None and out.truncated
    lines = out.text.splitlines()
    assert lines[0] == "|  | tank | volume_m3 |"
    assert "| 1 | aft | 0.950 |" in lines and "| ... | ... | ... |" in lines
    assert lines[-2] == "shape: 5 rows × 2 columns (3 rows shown) · dtypes: tank text, volume_m3 float"
    assert lines[-1] == "5 rows × 2 columns; volume_m3 mean 1267.7 (over the rows shown)"
    assert (out.table.n_rows, out.table.n_cols) == (5, 2)


def test_other_html_gives_text_without_scripts_and_media_markers() -> None:
    html = "<div><style>p{}</style><script>alert('x')</script><p>Run   finished</p><ul><li>ok</li></ul></div>"
    out = render_output(Output("display_data", data={"text/html": html}))
    assert (out.kind, out.text) == ("html", "Run finished\n\nok")
    frame = render_output(Output("display_data", data={"text/html": '<iframe src="https://x"></iframe>'}))
    assert (frame.kind, frame.text) == ("marker", "[html output: embedded frame]")
    script = "<script>require(['plotly'])</script>"
    js_only = render_output(Output("display_data", data={"text/html": script}))
    assert js_only.text == "[html output: javascript]"
    big = render_output(Output("display_data", data={"text/html": "<pre>" + "row\n" * 3000 + "</pre>"}))
    assert big.kind == "html" and big.truncated and "lines omitted" in big.text


def test_plain_latex_markdown_kept_when_small_else_head_tail() -> None:
    small = render_output(Output("execute_result", data={"text/plain": "3803.0", "text/html": "<b>3</b>"}))
    assert (small.kind, small.text, small.mime) == ("text", "3803.0", "text/plain")
    latex = render_output(Output("execute_result", data={"text/latex": "$x^2$", "text/plain": "x**2"}))
    assert (latex.text, latex.mime) == ("x**2", "text/plain")  # one line of plain text says it best
    art = render_output(Output("execute_result", data={"text/latex": "$x^2$", "text/plain": " 2\nx "}))
    assert (art.text, art.mime) == ("$x^2$", "text/latex")  # a pretty-printed 2-D form does not
    md = render_output(Output("display_data", data={"text/markdown": "**done**"}))
    assert md.text == "**done**"
    long_text = "\n".join(f"value {i}" for i in range(500))
    big = render_output(Output("execute_result", data={"text/plain": long_text}))
    assert big.truncated and "[… 480 lines omitted …]" in big.text and big.text.startswith("value 0\n")


def test_widget_javascript_and_plotly_markers() -> None:
    widget = v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2},
        "text/plain": "HBox(children=(FloatProgress(value=0.0),))"})
    js = v4.new_output("display_data", data={"application/javascript": "alert(1)",
                                             "text/plain": "<IPython.core.display.Javascript object>"})
    plotly = v4.new_output("display_data", data={
        "application/vnd.plotly.v1+json": {"data": [], "layout": {"title": {"text": "Fuel use"}}},
        "text/html": "<div></div><script>Plotly.newPlot()</script>"})
    outs = rendered("show()", widget, js, plotly)
    assert [o.text for o in outs] == ["[widget output]", "[javascript output]", "[plotly figure] Fuel use"]
    assert all(o.kind == "marker" for o in outs)


@pytest.mark.parametrize("output", [
    Output("display_data", data={}),
    Output("display_data", data={"text/plain": 12}),
    Output("display_data", data={"text/plain": None, "application/x-custom": [1, 2]}),
    Output("execute_result", data={"text/html": "<<<", "text/plain": ["a", "b"]}),
    Output("stream", text=None),  # type: ignore[arg-type]
    Output("error", ename=None, evalue=None, traceback=[None, 3]),  # type: ignore[arg-type]
    Output("clear_output"),
    Output("display_data", data=None),  # type: ignore[arg-type]
])
def test_odd_outputs_never_raise(output: Output) -> None:
    out = render_output(output)
    assert isinstance(out.text, str) and out.kind in {"stream", "error", "text", "html", "marker", "figure"}


# --- markdown images --------------------------------------------------------------------------------------


def test_extract_data_uri_attachment_and_img_tag() -> None:
    md = (f"Before ![Pump layout](data:image/png;base64,{PNG_B64}) middle\n"
          "![sketch](attachment:sketch.png) and a remote ![x](https://example.org/a.png)\n"
          f'<img width="200" alt="Tank plan" src="data:image/png;base64,{PNG_B64}"/> end '
          '<img src="attachment:missing.png">')
    cell = v4.new_markdown_cell(md, attachments={"sketch.png": {"image/png": PNG_B64}})
    (read_cell,) = notebook(cell)
    text, figures = extract_markdown_images(read_cell.source, read_cell.attachments)
    assert [f.source for f in figures] == ["data-uri", "attachment", "data-uri"]
    assert [f.caption for f in figures] == ["Pump layout", "sketch", "Tank plan"]
    assert figures[1].name == "sketch.png"
    assert all(f.data == PNG and f.mime == "image/png" and f.size_bytes == len(PNG) for f in figures)
    assert text == ("Before [figure 1: image/png, 3.0 KB] Pump layout middle\n"
                    "[figure 2: image/png, 3.0 KB] sketch and a remote ![x](https://example.org/a.png)\n"
                    '[figure 3: image/png, 3.0 KB] Tank plan end <img src="attachment:missing.png">')
    assert [m.group(1) for m in FIGURE_PLACEHOLDER_RE.finditer(text)] == ["1", "2", "3"]


def test_extract_svg_data_uri_without_base64_and_bad_input() -> None:
    svg = "%3Csvg xmlns='http://www.w3.org/2000/svg'%3E%3C/svg%3E"
    text, figures = extract_markdown_images(f"![](data:image/svg+xml;utf8,{svg})", {})
    assert text.startswith("[figure 1: image/svg+xml, ") and figures[0].data.startswith(b"<svg")
    assert extract_markdown_images("no images", {}) == ("no images", [])
    assert extract_markdown_images("![a](data:image/png;base64,@@@)", {})[1][0].data == b""
    assert extract_markdown_images(None, None) == ("", [])  # type: ignore[arg-type]


# --- robustness -------------------------------------------------------------------------------------------

_PIECES = [
    "<table>", "</table>", "<tr>", "<td>", "<th colspan='2'>", "<thead>", "<p>3 rows × 2 columns</p>", "...",
    "1.5", "\r", "\n", "\b", "\x1b[31m", "\x00", "<script>", "![a](data:image/png;base64,@@)", "<img src='",
    "attachment:a.png)", "plt.title('t')", "%", "```", "#", "\ud800", "é", " ", "x",
]


def test_rules_never_raise_on_arbitrary_text() -> None:
    """A seeded fuzz over fragments that have broken parsers before (fast and reproducible)."""
    rng = random.Random(7)
    limits = OutputLimits(max_chars=20, stream_max_lines=3, head_lines=1, tail_lines=1)
    for _ in range(150):
        a, b = ("".join(rng.choices(_PIECES, k=rng.randint(0, 25))) for _ in range(2))
        outputs = [Output("stream", text=a), Output("error", ename=a, evalue=b, traceback=[a, b, a]),
                   Output("display_data", data={"text/html": a}),
                   Output("display_data", data={"image/png": a}),
                   Output("display_data", data={"text/plain": a, "image/svg+xml": b})]
        for output in outputs:
            assert not render_output(output, limits=limits).text.startswith("[unreadable output")
        extract_markdown_images(a, {"a.png": {"image/png": b}})
        figure_caption(a, b)


# ---------------------------------------------------------------------------------------------------------
# the informative representation (issue 15)


def test_an_object_repr_loses_to_the_visible_text_of_html() -> None:
    html = v4.new_output("display_data", data={
        "text/html": "<h3>Summary</h3><p>Total load <b>1,284.6 kN</b></p><script>x()</script>",
        "text/plain": "<IPython.core.display.HTML object>"})
    note = v4.new_output("execute_result", execution_count=1, data={
        "text/html": "<div class='note'>Remember the <em>safety factor</em> 1.5</div>",
        "text/plain": "<__main__.Note at 0x7f3a2c1d9e50>"})
    real = v4.new_output("execute_result", execution_count=1, data={
        "text/html": "<b>3803.0</b> m3", "text/plain": "3803.0"})
    outs = rendered("show()", html, note, real)
    assert [(o.kind, o.text) for o in outs] == [
        ("html", "Summary\n\nTotal load 1,284.6 kN"),
        ("html", "Remember the safety factor 1.5"),
        ("text", "3803.0"),  # a real value's own text still wins
    ]


def test_an_object_repr_loses_to_an_image_in_html() -> None:
    """Mathematica's kernel sends `-Graphics-` with the picture as an <img> of its HTML."""
    out = render_output(Output("display_data", data={
        "text/html": f"<img alt='plot' src='data:image/png;base64,{PNG_B64}'>", "text/plain": "-Graphics-"}))
    assert out.kind == "figure" and out.figure is not None and out.figure.data == PNG


def test_an_image_typesetting_latex_gives_the_text() -> None:
    """sympy's init_printing(use_latex='png'): the png only renders the formula; the value is in the text."""
    png_math = Output("execute_result", data={"image/png": PNG_B64, "text/latex": r"$\left\{ A : 4\right\}$",
                                              "text/plain": "{A: 4, B: -2, C: -6}"})
    out = render_output(png_math)
    assert (out.kind, out.text) == ("text", "{A: 4, B: -2, C: -6}")


def test_widgets_keep_a_text_that_says_something() -> None:
    label = v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "m1", "version_major": 2},
        "text/plain": "Label(value='Hello World')"})
    bare = v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "m2", "version_major": 2},
        "text/plain": "IntProgress(value=10, max=10)"})
    outs = rendered("w", label, bare)
    assert [o.text for o in outs] == ["[widget output] Label(value='Hello World')", "[widget output]"]


@pytest.mark.parametrize("payload", ["", "bm90IGFuIGltYWdl", "@@@@"])  # empty, "not an image", not base64
def test_a_broken_image_has_no_data(payload: str) -> None:
    out = render_output(Output("display_data", data={"image/png": payload, "text/plain": "<Figure>"}))
    assert out.kind == "figure" and out.figure is not None and out.figure.broken
    assert "broken image" in out.text


def test_captions_come_from_markdown_only_when_it_is_about_the_figure() -> None:
    plot = "plt.plot(t, load)\nplt.show()"
    off_topic = "Note that the problem is solved when one upgrades to IRKernel 1.0.0."
    assert figure_caption(plot, off_topic) is None
    assert figure_caption("x = 1", "<script>alert('markdown cell')</script>") is None
    assert figure_caption(plot, "We look at the load over time t.") == "We look at the load over time t."
    assert figure_caption(plot, "The chart below compares the two runs.") == "The chart below compares the two runs."
    titled = "plt.plot(t, load)\nplt.title('Hook load')"
    assert figure_caption(titled, off_topic) == "Hook load"  # else from the code's titles
    (out,) = rendered(plot, image_output(), markdown_above=off_topic)
    assert out.text == "[figure: image/png, 3.0 KB]"  # else none
