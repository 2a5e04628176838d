"""Turn the HTML of a displayed DataFrame back into a table summary (architecture §5).

A DataFrame output is stored twice: as `text/plain` (column-aligned, wrapped, truncated) and as `text/html`.
The HTML is the only form that keeps the grid, so it is parsed back with lxml: the grid (colspan/rowspan expanded,
hidden cells skipped), which leading cells are index `<th>`s, the index-names header row, the `N rows × M columns`
footer. Cell text is kept exactly as displayed, because the strings users search for ("0.950", "1,204") are the
ones the notebook showed; types are inferred from those strings here, not by a CSV parser.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import lxml.html

from nbrecall.notebook.table_text import infer_dtype, markdown_table, shape_text, table_sentence

__all__ = [
    "TableSummary",
    "column_types",
    "dataframe_html_to_summary",
    "html_table_to_summary",
    "is_dataframe_html",
    "parse_html",
]

_ELLIPSIS = {"...", "…"}
# A column's type as polars writes it under the column's name, in its HTML and its printed frame (`f64`, `str`,
# `datetime[ns]`, `list[i64]`): a line of these is the frame's types, not a second level of names.
_COLUMN_TYPE = re.compile(
    r"(?:[iu](?:8|16|32|64|128)|f(?:16|32|64)|str|bool|date|time|null|object|binary|cat|enum|decimal|"
    r"(?:datetime|duration|list|array|struct|decimal|enum)\[[^\]]*\])"
)
# … and as R writes it (`<chr>`, `<dbl>`, `<fct>`, `<S3: POSIXct>`): in angle brackets, which no name has; as Julia's
# DataFrames writes it (`Int64`, `Float64?`, `String15`, `Union{Missing, Int64}`).
_R_COLUMN_TYPE = re.compile(r"<[A-Za-z][\w:. ]{0,30}>")
_JULIA_COLUMN_TYPE = re.compile(r"(?:U?Int(?:8|16|32|64|128)|Float(?:16|32|64)|String\d*|Bool|Char|Symbol|Date|"
                                r"DateTime|Time|Missing|Any|Categorical\w*|Union\{[^}]*\})\??")
_FOOTER_RE = re.compile(r"([\d,]+)\s+rows?\s*[×xX]\s*([\d,]+)\s+columns?")
_WHITESPACE_RE = re.compile(r"[\r\n]+|\s{2,}")
_ANY_TEXT_RE = re.compile(r"[^\n]")
_MAX_COLSPAN = 1000  # the HTML standard's limits
_MAX_ROWSPAN = 65534
# Grid positions read at most (a frame of 10,000 rows × 20 columns): spans repeat a cell's text, so a 100-byte cell
# 1000 wide and 65534 tall made 65M of them (21 s, 1.1 GB); a displayed frame has about a thousand (pandas shows
# 60 × 20). Past it the grid is cut and the summary says truncated.
_MAX_GRID_CELLS = 200_000
_XML_INCOMPATIBLE_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass
class TableSummary:
    """A parsed table: every column, inferred types, the real shape, a markdown preview and one sentence."""

    columns: list[str]
    dtypes: list[str]
    n_rows: int
    n_cols: int
    index_name: str | None
    markdown: str
    summary: str
    rows_shown: int = 0  # data rows parsed from the HTML (truncated frames show fewer than n_rows)
    truncated: bool = False  # pandas elided rows or columns with "..."
    # The grid of the preview, for value facts: each row's index cells (`depth` of them) then its values, under
    # `header` (index names, then column names); "..." rows and columns stay where pandas put them.
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    depth: int = 0

    def shape_line(self) -> str:
        """`shape: 3 rows × 2 columns · index: id · dtypes: a int, b float` — for chunk and markdown text."""
        parts = [f"shape: {shape_text(self.n_rows, self.n_cols)}"]
        if self.rows_shown < self.n_rows:
            parts[0] += f" ({self.rows_shown} rows shown)"
        if self.index_name:
            parts.append(f"index: {self.index_name}")
        if self.columns:
            parts.append("dtypes: " + ", ".join(f"{c or '(unnamed)'} {t}" for c, t in
                                                 zip(self.columns, self.dtypes, strict=True)))
        return " · ".join(parts)


def parse_html(html: str) -> Any | None:
    """Parse an HTML fragment or document with lxml; None when lxml cannot make a tree of it.

    Returns an `lxml.html.HtmlElement` root (typed `Any` because lxml ships no stubs).
    """
    if not isinstance(html, str) or not html.strip():
        return None
    html = _XML_INCOMPATIBLE_RE.sub("", html)  # lxml refuses to handle text with control characters
    if not html.strip():
        return None
    try:
        return lxml.html.document_fromstring(html)
    except ValueError:  # a str with an XML encoding declaration
        try:
            return lxml.html.document_fromstring(html.encode("utf-8", "surrogatepass"))
        except Exception:
            return None
    except Exception:
        return None


def _classes(el: Any) -> set[str]:
    return set((el.get("class") or "").split())


def _top_tables(root: Any) -> list[Any]:
    return [t for t in root.iter("table") if not any(a.tag == "table" for a in t.iterancestors())]


def _dataframe_table(root: Any) -> Any | None:
    """The first table pandas wrote: `class="dataframe"` (to_html/_repr_html_) or a Styler's `id="T_…"`."""
    for table in _top_tables(root):
        if "dataframe" in _classes(table) or (table.get("id") or "").startswith("T_"):
            return table
    return None


def is_dataframe_html(html: str) -> bool:
    """Cheap test, then a real parse: does this HTML hold a pandas DataFrame (or Styler) table?"""
    if not isinstance(html, str) or ("dataframe" not in html and "T_" not in html):
        return False
    root = parse_html(html)
    return root is not None and _dataframe_table(root) is not None


def html_table_to_summary(html: str, max_rows: int = 10) -> TableSummary | None:
    """Summarise the first pandas table in `html`, else its first table; None when there is no table.

    Never raises: garbage HTML, empty tables and parser failures all give None.
    """
    try:
        if not isinstance(html, str) or "<table" not in html.lower():
            return None
        root = parse_html(html)
        if root is None:
            return None
        table = _dataframe_table(root)
        if table is None:
            tables = _top_tables(root)
            table = tables[0] if tables else None
        return None if table is None else _summarise(table, max(0, int(max_rows)))
    except Exception:
        return None


def dataframe_html_to_summary(html: str, max_rows: int = 10) -> TableSummary | None:
    """Like `html_table_to_summary`, but only for pandas output (plain HTML tables give None)."""
    try:
        root = parse_html(html) if isinstance(html, str) and "<table" in html.lower() else None
        table = _dataframe_table(root) if root is not None else None
        return None if table is None else _summarise(table, max(0, int(max_rows)))
    except Exception:
        return None


# ---------------------------------------------------------------------------------------------------------
# grid extraction


def _body_rows(table: Any) -> list[Any]:
    """Rows that carry data: outside thead and with at least one `<td>`."""
    return [tr for tr in table.iter("tr")
            if not any(a.tag == "thead" for a in tr.iterancestors()) and tr.find("td") is not None]


def _index_depth(table: Any) -> int:
    """Leading `<th>` cells of the first data row: pandas writes the index as `<th>`, values as `<td>`."""
    rows = _body_rows(table)
    if not rows:
        return 0
    depth = 0
    for cell in rows[0]:
        if not isinstance(cell.tag, str):
            continue
        if cell.tag != "th":
            break
        depth += int(cell.get("colspan") or 1) if (cell.get("colspan") or "1").isdigit() else 1
    return depth


def _footer_shape(table: Any) -> tuple[int, int] | None:
    """pandas' `<p>20 rows × 8 columns</p>` after the table (the real shape of a truncated frame)."""
    for sibling in table.itersiblings():
        if not isinstance(sibling.tag, str):
            continue
        match = _FOOTER_RE.fullmatch(" ".join(sibling.text_content().split()))
        if match:
            return int(match.group(1).replace(",", "")), int(match.group(2).replace(",", ""))
        if sibling.tag == "table":
            break
    return None


def _header_rows(table: Any) -> list[Any]:
    """`<thead>` rows, else the leading rows made only of `<th>` (a header in tables without thead)."""
    rows = [tr for tr in table.iter("tr") if any(a.tag == "thead" for a in tr.iterancestors())]
    if rows:
        return rows
    for tr in table.iter("tr"):
        cells = [c for c in tr if isinstance(c.tag, str) and c.tag in ("td", "th")]
        if not cells or any(c.tag == "td" for c in cells):
            break
        rows.append(tr)
    return rows


def _hidden(el: Any) -> bool:
    """Not displayed: a `<style>` element or an inline `display:none` (pandas' Styler hides cells that way)."""
    return el.tag == "style" or "display:none" in (el.get("style") or "").replace(" ", "")


def _span(cell: Any, name: str, most: int) -> int:
    """A cell's colspan/rowspan; a bad value counts 1, and a hostile one is capped as browsers cap it."""
    try:
        return max(0, min(int(cell.get(name) or 1), most))
    except ValueError:
        return 1


def _displayed_text(cell: Any) -> str:
    """The cell's text without hidden elements, line breaks and runs of whitespace collapsed to one space."""
    if any(isinstance(el.tag, str) and _hidden(el) for el in cell.iterdescendants()):
        cell = copy.deepcopy(cell)
        for el in [el for el in cell.iterdescendants() if isinstance(el.tag, str) and _hidden(el)]:
            el.drop_tree()  # keeps the text that follows the element
    return _WHITESPACE_RE.sub(" ", cell.text_content().strip())


def _read_grid(table: Any) -> tuple[list[list[str]], list[list[str]], bool]:
    """(header levels per column, body rows, cut) as displayed strings, the spans expanded into a rectangular grid;
    `cut` when the grid reached `_MAX_GRID_CELLS` and the rest was not read.

    Rows are read in document order (thead, tbody and tfoot alike, not those of nested tables); a cell with
    `colspan`/`rowspan` repeats its text in every grid position it covers, and rows that a rowspan carries past
    the last row are added. Hidden rows and cells are skipped. Read with lxml directly: `pandas.read_html` gave
    the same grids at ten times the cost (a DataFrame's HTML was a fifth of indexing a notebook).
    """
    rows = [tr for tr in table.iter("tr") if next(tr.iterancestors("table")) is table and not _hidden(tr)]
    n_head = len([tr for tr in _header_rows(table) if not _hidden(tr)])
    grid: list[list[str]] = []
    carried: list[tuple[int, str, int]] = []  # (column, text, rows still to fill) from rowspans above
    width = 0  # of the widest row: every row is padded to it
    cut = False
    for tr in rows:
        most = _MAX_GRID_CELLS // (len(grid) + 1)  # the widest this row may be for the padded grid to fit
        if width > most:
            cut = True
            break
        texts: list[str] = []
        below: list[tuple[int, str, int]] = []
        for cell in tr:
            if not isinstance(cell.tag, str) or cell.tag not in ("td", "th") or _hidden(cell):
                continue
            if len(texts) >= most:
                cut = True
                break
            while carried and carried[0][0] <= len(texts):
                column, text, left = carried.pop(0)
                texts.append(text)
                if left > 1:
                    below.append((column, text, left - 1))
            text = _displayed_text(cell)
            rowspan = _span(cell, "rowspan", _MAX_ROWSPAN)
            for _ in range(min(_span(cell, "colspan", _MAX_COLSPAN), most - len(texts))):
                if rowspan > 1:
                    below.append((len(texts), text, rowspan - 1))
                texts.append(text)
        for column, text, left in carried:
            texts.append(text)
            if left > 1:
                below.append((column, text, left - 1))
        grid.append(texts)
        width = max(width, len(texts))
        carried = below
        if cut:
            break
    while carried and not cut:
        if max(width, len(carried)) > _MAX_GRID_CELLS // (len(grid) + 1):
            cut = True
            break
        grid.append([text for _, text, _ in carried])
        width = max(width, len(carried))
        carried = [(column, text, left - 1) for column, text, left in carried if left > 1]
    if not any(any(row) for row in grid) and not any(
        _ANY_TEXT_RE.search(text) for tr in rows for text in tr.xpath(".//text()")
    ):
        return [], [], False  # a table without any text is not a table
    grid = [row + [""] * (width - len(row)) for row in grid]
    levels = [row for row in grid[:n_head] if not column_types(row)]
    body = grid[n_head:]
    if len(levels) < n_head:  # polars: its header's last row holds the types, and it quotes strings in cells
        body = [[_unquoted(text) for text in row] for row in body]
    headers = [[row[j] for row in levels] for j in range(width)]
    return headers, body, cut


def column_types(row: list[str]) -> bool:
    """A header row that gives each column's type (polars' line under the names, in its HTML and its printed frame;
    R's data frames and tibbles, `<dbl>`, in IRkernel's HTML and in print; Julia's DataFrames, `Float64`), not a level
    of names: every cell a type, and one at least that no name looks like (`f64`, `str`, `list[i64]`; a line of
    `date`, `time` is names)."""
    cells = [text for text in row if text]
    if cells and all(_R_COLUMN_TYPE.fullmatch(text) for text in cells):
        return True
    if cells and all(_JULIA_COLUMN_TYPE.fullmatch(text) for text in cells) and any(
            re.search(r"\d|\?|\{", text) for text in cells):
        return True
    return bool(cells) and all(_COLUMN_TYPE.fullmatch(text) for text in cells) and any(
        text == "str" or re.search(r"\d|\[", text) for text in cells)


def _unquoted(text: str) -> str:
    """A string cell as polars' HTML shows it, `"ridge"`, without the quotes it adds."""
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def _summarise(table: Any, max_rows: int) -> TableSummary | None:
    headers, body, cut = _read_grid(table)
    n_grid = len(headers)
    if n_grid == 0:
        return None
    is_pandas = "dataframe" in _classes(table) or (table.get("id") or "").startswith("T_")
    depth = min(_index_depth(table), n_grid)
    if not body and is_pandas:  # an empty frame: its index columns are the leading blank header cells
        depth = next((j for j, h in enumerate(headers) if any(h)), n_grid)

    # pandas writes index names as a last header row whose column cells are all empty
    levels = max((len(h) for h in headers), default=0)
    index_names = [""] * depth
    if depth and levels >= 2:
        last = [h[-1] if h else "" for h in headers]
        if not any(last[depth:]) and any(last[:depth]):
            index_names = last[:depth]
            headers = [h[:-1] for h in headers]
    if depth and not any(index_names) and not is_pandas:
        index_names = [" / ".join(_dedupe(h)) for h in headers[:depth]]  # a plain table's row-header title

    names = [" / ".join(_dedupe(h)) for h in headers]
    data_cols = list(range(depth, n_grid))
    ellipsis_cols = {j for j in data_cols if names[j] in _ELLIPSIS and all(
        (row[j] if j < len(row) else "") in _ELLIPSIS for row in body)}
    value_cols = [j for j in data_cols if j not in ellipsis_cols]

    def is_ellipsis_row(row: list[str]) -> bool:
        cells = [row[j] if j < len(row) else "" for j in data_cols]
        return bool(cells) and all(c in _ELLIPSIS for c in cells)

    ellipsis_rows = [is_ellipsis_row(r) for r in body]
    data_rows = [r for r, skip in zip(body, ellipsis_rows, strict=True) if not skip]

    columns = [names[j] for j in value_cols]
    values = [[(r[j] if j < len(r) else "") for r in data_rows] for j in value_cols]
    dtypes = [infer_dtype(v) for v in values]

    footer = _footer_shape(table)
    n_rows, n_cols = footer if footer else (len(data_rows), len(columns))
    truncated = bool(ellipsis_cols) or any(ellipsis_rows) or n_rows > len(data_rows) or cut
    index_name = " / ".join(n for n in index_names if n) or None

    markdown = markdown_table(index_names, names[depth:], body[:max_rows], n_grid)
    summary = table_sentence(n_rows, n_cols, columns, dtypes, values, partial=n_rows > len(data_rows))
    return TableSummary(columns=columns, dtypes=dtypes, n_rows=n_rows, n_cols=n_cols, index_name=index_name,
                        markdown=markdown, summary=summary, rows_shown=len(data_rows), truncated=truncated,
                        header=[*index_names, *names[depth:]],
                        rows=[[r[j] if j < len(r) else "" for j in range(n_grid)] for r in body[:max_rows]],
                        depth=depth)


def _dedupe(levels: list[str]) -> list[str]:
    """Non-empty header levels; a level repeated by rowspan expansion is kept once."""
    out: list[str] = []
    for level in levels:
        if level and (not out or out[-1] != level):
            out.append(level)
    return out
