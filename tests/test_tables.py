"""DataFrame HTML → TableSummary: shape, types, display strings, truncation, garbage that must not raise."""

from __future__ import annotations

import pandas as pd
import pytest

from nbrecall.notebook.tables import TableSummary, column_types, dataframe_html_to_summary, html_table_to_summary

STYLE = """<style scoped>
    .dataframe tbody tr th:only-of-type {
        vertical-align: middle;
    }
    .dataframe thead th {
        text-align: right;
    }
</style>"""

# As pandas' _repr_html_ writes it for a frame with a named index.
VOLUMES = f"""<div>
{STYLE}
<table border="1" class="dataframe">
  <thead>
    <tr style="text-align: right;"><th></th><th>tank</th><th>volume_m3</th><th>full</th><th>checked</th></tr>
    <tr><th>id</th><th></th><th></th><th></th><th></th></tr>
  </thead>
  <tbody>
    <tr><th>10</th><td>A|1</td><td>1.50</td><td>True</td><td>2021-03-01</td></tr>
    <tr><th>11</th><td>B2</td><td>0.950</td><td>False</td><td>2021-03-02 12:30:00</td></tr>
    <tr><th>12</th><td>C3</td><td>3800.6</td><td>True</td><td>NaT</td></tr>
  </tbody>
</table>
</div>"""

# A 5000 × 8 frame truncated by pandas to 4 rows and 4 columns, with its shape footer.
TRUNCATED = f"""<div>
{STYLE}
<table border="1" class="dataframe">
  <thead>
    <tr style="text-align: right;"><th></th><th>a</th><th>b</th><th>...</th><th>g</th><th>h</th></tr>
  </thead>
  <tbody>
    <tr><th>0</th><td>1</td><td>0.5</td><td>...</td><td>x</td><td>1,204</td></tr>
    <tr><th>1</th><td>2</td><td>1.5</td><td>...</td><td>y</td><td>7</td></tr>
    <tr><th>...</th><td>...</td><td>...</td><td>...</td><td>...</td><td>...</td></tr>
    <tr><th>4998</th><td>3</td><td>2.5</td><td>...</td><td>z</td><td>9</td></tr>
    <tr><th>4999</th><td>4</td><td>3.5</td><td>...</td><td>w</td><td>11</td></tr>
  </tbody>
</table>
<p>5000 rows × 8 columns</p>
</div>"""


def test_named_index_frame_keeps_display_strings_and_infers_types() -> None:
    s = html_table_to_summary(VOLUMES)
    assert isinstance(s, TableSummary)
    assert s.columns == ["tank", "volume_m3", "full", "checked"]
    assert s.dtypes == ["text", "float", "bool", "datetime"]
    assert (s.n_rows, s.n_cols, s.index_name) == (3, 4, "id")
    assert s.markdown.splitlines()[0] == "| id | tank | volume_m3 | full | checked |"
    assert "| 11 | B2 | 0.950 | False | 2021-03-02 12:30:00 |" in s.markdown  # "0.950" not reformatted
    assert "A\\|1" in s.markdown  # pipes escaped
    assert s.summary == "3 rows × 4 columns; volume_m3 mean 1267.7"
    assert not s.truncated


def test_truncated_frame_takes_shape_from_footer_and_drops_ellipsis_columns() -> None:
    s = html_table_to_summary(TRUNCATED)
    assert s is not None
    assert (s.n_rows, s.n_cols) == (5000, 8)
    assert s.columns == ["a", "b", "g", "h"]
    assert s.dtypes == ["int", "float", "text", "int"]  # "1,204" is an int as displayed
    assert s.truncated and s.rows_shown == 4
    assert "| ... | ... | ... | ... | ... | ... |" in s.markdown  # the elision stays visible
    assert "| 0 | 1 | 0.5 | ... | x | 1,204 |" in s.markdown
    assert s.summary.startswith("5000 rows × 8 columns; a mean 2.5, b mean 2, h mean 307.75")
    assert "over the rows shown" in s.summary
    assert "(4 rows shown)" in s.shape_line()


def test_real_pandas_truncated_output_round_trips() -> None:
    df = pd.DataFrame({f"c{i}": [j * 1.25 for j in range(40)] for i in range(30)})
    with pd.option_context("display.max_rows", 10, "display.max_columns", 6, "display.show_dimensions", True):
        html = df._repr_html_()
    s = html_table_to_summary(html, max_rows=4)
    assert s is not None
    assert (s.n_rows, s.n_cols) == (40, 30)
    assert s.columns[:3] == ["c0", "c1", "c2"] and "..." not in s.columns
    assert set(s.dtypes) == {"float"}
    assert len(s.markdown.splitlines()) == 2 + 4  # header, rule, max_rows rows


def test_multiindex_columns_and_index() -> None:
    columns = pd.MultiIndex.from_product([["A", "B"], ["x", "y"]])
    index = pd.MultiIndex.from_tuples([("r", 1), ("r", 2), ("s", 1)], names=["k", "n"])
    values = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    html = pd.DataFrame(values, columns=columns, index=index)._repr_html_()
    s = html_table_to_summary(html)
    assert s is not None
    assert s.columns == ["A / x", "A / y", "B / x", "B / y"]
    assert s.index_name == "k / n"
    assert s.markdown.splitlines()[0] == "| k | n | A / x | A / y | B / x | B / y |"
    assert "| r | 2 | 4 | 5 | 6 | 7 |" in s.markdown  # rowspan'd index label repeated
    assert s.summary == "3 rows × 4 columns; A / x mean 4, A / y mean 5, B / x mean 6"  # first three only


def test_footer_on_untruncated_frame_and_missing_values_ignored() -> None:
    df = pd.DataFrame({"n": [1, None, 3], "label": ["a", None, "c"]})
    with pd.option_context("display.show_dimensions", True):
        html = df._repr_html_()
    s = html_table_to_summary(html)
    assert s is not None
    assert (s.n_rows, s.n_cols) == (3, 2)
    assert s.dtypes == ["float", "text"]
    assert "n mean 2" in s.summary and "over the rows shown" not in s.summary


def test_plain_html_table_and_styler() -> None:
    plain = "<table><tr><th>Software</th><th>Version</th></tr><tr><td>Python</td><td>3.11.4</td></tr></table>"
    s = html_table_to_summary(plain)
    assert s is not None and s.columns == ["Software", "Version"] and s.dtypes == ["text", "text"]
    assert dataframe_html_to_summary(plain) is None  # not pandas output
    styled = pd.DataFrame({"v": [1.5, 2.5]}).style.format("{:.3f}").to_html()
    s = dataframe_html_to_summary(styled)
    assert s is not None and s.columns == ["v"] and "1.500" in s.markdown


def test_max_rows_and_empty_frame() -> None:
    html = pd.DataFrame({"x": range(30)})._repr_html_()
    s = html_table_to_summary(html, max_rows=3)
    assert s is not None and s.n_rows == 30 and len(s.markdown.splitlines()) == 5
    empty = html_table_to_summary(pd.DataFrame({"a": []})._repr_html_())
    assert empty is not None and (empty.n_rows, empty.n_cols, empty.columns) == (0, 1, ["a"])


@pytest.mark.parametrize("html", [
    "", "   ", "no table here", "<table", "<table></table>", "<table><tr><td></td></tr></table>",
    "<<<>>>&&&", "\x00\x01<table>\x00</table>", "<?xml version='1.0' encoding='utf-8'?><p>x</p>",
    None, 42, b"<table><tr><td>1</td></tr></table>",
])
def test_garbage_gives_none_and_never_raises(html: object) -> None:
    assert html_table_to_summary(html) is None  # type: ignore[arg-type]


def test_spans_hidden_cells_and_hostile_spans() -> None:
    # a rowspan that runs past the last row adds the rows it covers; a colspan repeats its text
    spans = ("<table><thead><tr><th>k</th><th colspan='2'>pair</th></tr></thead><tbody>"
             "<tr><th rowspan='3'>r</th><td>1</td><td>2</td></tr><tr><td>3</td><td>4</td></tr></tbody></table>")
    s = html_table_to_summary(spans)
    assert s is not None and s.columns == ["pair", "pair"] and s.rows_shown == 3
    assert s.markdown.splitlines()[-1] == "| r |  |  |"  # the row the rowspan carries past the end
    # hidden cells (a Styler's `display:none`) and <style> inside a cell are not part of what was displayed
    hidden = ("<table><tr><th>a</th><th style='display: none'>secret</th><th>b</th></tr>"
              "<tr><td>1<span style='display:none'>99</span></td><td style='display:none'>x</td><td>2"
              "<style>td {color: red}</style></td></tr></table>")
    s = html_table_to_summary(hidden)
    assert s is not None and s.columns == ["a", "b"] and "| 1 | 2 |" in s.markdown
    # a hostile colspan is capped as browsers cap it (1000), a malformed one counts 1
    hostile = "<table><tr><th colspan='999999999'>x</th><th colspan='two'>y</th></tr><tr><td>1</td></tr></table>"
    s = html_table_to_summary(hostile)
    assert s is not None and s.n_cols == 1001


def test_spans_cannot_blow_up_the_grid() -> None:
    # 100 bytes of HTML that spans 1000 columns and 65,534 rows: 65M grid positions before the bound
    bomb = "<table class='dataframe'><tr><th>a</th></tr><tr><td colspan=1000 rowspan=65534>x</td></tr></table>"
    s = html_table_to_summary(bomb)
    assert s is not None and s.truncated and s.n_rows * max(s.n_cols, 1) <= 200_000
    wide = "<table><tr>" + "<td colspan=1000>x</td>" * 2000 + "</tr><tr><td>1</td></tr></table>"
    s = html_table_to_summary(wide)
    assert s is not None and s.truncated and s.n_cols <= 200_000


@pytest.mark.parametrize(("row", "types"), [
    (["str", "f64", "i64"], True),  # polars' line under the column names
    (["datetime[ns]", "f64"], True),
    (["date", "time"], False),  # names a table may well have
    (["model", "rmse"], False),
    (["", ""], False),
])
def test_a_line_of_column_types_is_told_from_a_line_of_names(row: list[str], types: bool) -> None:
    assert column_types(row) is types
