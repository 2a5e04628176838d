"""Reading values out of structured printouts: dict, Series and constructor reprs, and tables printed as text
(`print(df)`, a classification report, a regression summary, a pipe table).

As in `printed.py`, by notation only: braces and `key: value`, a Series' aligned `index    value` lines and its
`Name: …, dtype: …` footer, columns aligned under a line of names, pipes. A table's numbers are named by their row
and column (`grid_values`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice

from nbrecall.notebook.printed import NUMBER, to_number
from nbrecall.notebook.tables import column_types

__all__ = ["AlignedTable", "aligned_tables", "call_entries", "dict_entries", "drawn_tables", "grid_values",
           "numpy_scalars", "pipe_table", "series_entries", "unit_reprs"]


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


# The reprs of the units libraries engineering notebooks use, each a magnitude and a unit: pint's
# `<Quantity(134.7, 'kilonewton')>` and `134.7 <Unit('kilonewton')>` (a rounded quantity), astropy's
# `<Quantity 134.7 kN>`, unyt's `unyt_quantity(134.7, 'kN')`. Read as they print with a format (`134.7 kilonewton`),
# the value is the magnitude and the unit is the unit's name, which `printed.line_facts` reads.
_UNIT_REPRS = (
    re.compile(r"<Quantity\(\s*(?P<value>[^,<>()'\n]+?),\s*'(?P<unit>[^'\n]*)'\s*\)>"),
    re.compile(r"(?P<value>(?<![\w.])[-+]?[\d.]+(?:[eE][-+]?\d+)?) ?<Unit\('(?P<unit>[^'\n]*)'\)>"),
    re.compile(r"<Quantity (?P<value>[-+]?[\d.]+(?:[eE][-+]?\d+)?)(?: (?P<unit>[^<>\n]+?))?>"),
    re.compile(r"unyt_quantity\(\s*(?P<value>[^,()'\n]+?),\s*'(?P<unit>[^'\n]*)'\s*\)"),
)


def _magnitude_and_unit(match: re.Match[str]) -> str:
    unit = (match.group("unit") or "").strip()
    value = match.group("value").strip()
    return value if unit in ("", "dimensionless") else f"{value} {unit}"


def _may_hold_unit_repr(text: str) -> bool:
    return "Quantity" in text or "<Unit(" in text or "unyt_quantity" in text


def unit_reprs(text: str) -> str:
    """`text` with each units-library repr written as its magnitude and unit (`134.7 kilonewton`), the way the
    quantity prints with a format; 'dimensionless' is no unit. Text without such a repr is returned unchanged."""
    if not _may_hold_unit_repr(text):
        return text
    for pattern in _UNIT_REPRS:
        text = pattern.sub(_magnitude_and_unit, text)
    return text


def displayed_quantity(plain: str, html: object) -> str | None:
    """The quantity a result's HTML (`html`: the output's `text/html`, a string or a list of lines) shows
    (`5450.100916496868 m/s`) when its `text/plain` is a units library's repr of the same magnitude rounded (pint's
    `<Quantity(5450.10092, 'meter / second')>`). Jupyter shows the HTML, so that is what a reader of the notebook
    sees and quotes, with every digit; the repr rounds to nine. None when the HTML holds markup, is long, or shows
    another number."""
    if not _may_hold_unit_repr(plain) or not isinstance(html, (str, list)):
        return None
    repr_match = next((m for pattern in _UNIT_REPRS if (m := pattern.fullmatch(plain.strip()))), None)
    shown = "".join(map(str, html)).strip() if isinstance(html, list) else html.strip()
    if repr_match is None or not shown or len(shown) > 200 or "<" in shown or "\n" in shown:
        return None
    magnitude, number = to_number(repr_match.group("value").strip()), NUMBER.search(shown)
    if magnitude is None or number is None or shown[: number.start()].strip():
        return None
    value = to_number(number.group(0))
    if value is None or len(number.group(0)) <= len(repr_match.group("value").strip()):
        return None
    if float(f"{value:.12g}") == magnitude:
        return None  # the extra digits are a float's noise (`4839.999999999999` for `4840.0`): the repr is exact
    return shown if abs(value - magnitude) <= 1e-6 * max(abs(magnitude), 1e-300) else None


# A NumPy scalar as NumPy 2 prints it (`np.float64(0.93)`, `np.int64(7)`): the number it holds.
_NUMPY_SCALAR = re.compile(r"\bnp\.(?:float|int|uint|complex|longdouble|bool_?)\d*\(([^()]*)\)")


def numpy_scalars(text: str) -> str:
    """`text` with each NumPy scalar repr written as its value (`np.float64(0.93)` → `0.93`), as NumPy 1 printed it:
    read as printed, the value would have no number, and what its number says (its digits, its size) would be
    lost."""
    return _NUMPY_SCALAR.sub(r"\1", text) if "np." in text else text


def call_entries(text: str) -> list[tuple[str, str, str]]:
    """(name, value, shown) of the keyword arguments with numbers of a constructor repr
    `KNeighborsClassifier(n_neighbors=13, weights='uniform')`."""
    m = re.fullmatch(r"[A-Za-z_][\w.]*\((.*)\)", text.strip(), re.S)
    if not m:
        return []
    out = []
    for part in _split_top(m.group(1)):
        key, sep, value = part.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_]\w*", key.strip()) and NUMBER.search(value):
            out.append((key.strip(), value.strip(), part))
    return out


def dict_entries(text: str) -> list[tuple[str, str, str]]:
    """(key, value, shown) of a one-level dict repr `{'rows': 6, A: 4}` whose values hold numbers."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")) or ":" not in body:
        return []
    out = []
    for part in _split_top(body[1:-1]):
        key, sep, value = part.partition(":")
        if sep and key.strip() and NUMBER.search(value) and len(key) <= 60:
            out.append((key.strip(), value.strip(), part))
    return out


_SERIES_LINE = re.compile(r"^(\S(?:.*?\S)?)\s{2,}(\S+)$")
_SERIES_FOOTER = re.compile(r"^(?:Freq: [^,]+, )?(?:Name: (?P<name>.*?), )?(?:Length: \d+, )?(?:dtype: \w+)$")


def series_entries(lines: list[str]) -> tuple[list[tuple[str, str]], str] | None:
    """A pandas Series repr (`Thursday    160131` lines, then `Name: x, dtype: int64`): its entries and name.

    A Series with a MultiIndex (`groupby(['learner', 'sim_mode'])[col].median()`) prints its levels' names on a
    line of their own and each outer level once, on the first row of its group; a row that starts further right
    takes the outer levels of the row above it (`S-Learner 2`, not `2`)."""
    if len(lines) < 2:
        return None
    footer = _SERIES_FOOTER.match(lines[-1].strip())
    body = lines[:-1] if footer else lines
    if footer and len(body) > 2 and (not _SERIES_LINE.match(body[0].strip()) or not NUMBER.search(body[0])):
        body = body[1:]  # the index's name on a line of its own (`Date/Time`), or its levels' names
    entries = []
    above: list[tuple[int, str]] = []  # the levels of the row above, each with the column it starts at
    for line in body:
        m = _SERIES_LINE.match(line.strip())
        if not m or to_number(m.group(2)) is None:
            if line.strip() in ("...", "…") or not line.strip():
                continue
            return None
        indent = len(line) - len(line.lstrip())
        levels = [(indent + start, text) for start, _end, text in _fields(m.group(1))]
        if above and levels and levels[0][0] > above[0][0]:
            levels = [level for level in above if level[0] < levels[0][0]] + levels
        above = levels
        entries.append((" ".join(text for _, text in levels), m.group(2)))
    if not entries or (not footer and len(entries) < 3):
        return None
    return entries, (footer.group("name") or "") if footer else ""


def grid_values(header: list[str], rows: list[list[str]], depth: int) -> list[tuple[str, str, str]]:
    """(label, value, shown) of a table's numeric cells: the row named by its index (or its text cells when
    the index is a plain row number) and the column. A numeric index under a header name is a parameter of the row
    (a sweep's `EbNo [dB]`): the row is named by that name and its value, then by its text cells unless every row
    has the same ones (a status column names no row)."""
    out = []
    index_name = " ".join(h.strip() for h in header[:depth] if h.strip())
    kept = [row for row in rows if not all(c.strip() in ("...", "…", "") for c in row[depth:])]
    row_texts = [[c for c in row[depth:] if c.strip() and to_number(c) is None and len(c) <= 40] for row in kept]
    same_texts = len(kept) > 1 and all(texts == row_texts[0] for texts in row_texts)
    for row, texts in zip(kept, row_texts, strict=True):
        index = [c for c in row[:depth] if c.strip()]
        if index and index_name and all(to_number(c) is not None for c in index):
            named = " ".join([index_name, *index, *([] if same_texts else texts[:2])])
        elif not index or all(to_number(c) is not None for c in index):
            named = " ".join(texts[:2]) or " ".join(index)
        else:
            named = " ".join(index)
        for j in range(depth, min(len(row), len(header))):
            cell = row[j].strip()
            if to_number(cell) is None or not header[j].strip():
                continue
            label = f"{named} · {header[j]}".strip(" ·")
            out.append((label, cell, f"{label}: {cell}"))
    return out


# --- tables printed as aligned text ---------------------------------------------------------------------------

# A field of an aligned line: text between runs of two or more spaces (`std err`, `macro avg` stay one field).
_FIELD = re.compile(r"\S+(?: \S+)*")
_RULE = re.compile(r"^[\s\-=+|:_~]+$")


@dataclass
class AlignedTable:
    """A table printed as aligned text (`print(df)`, a classification report, a regression or fit summary)."""

    first: int  # the header line's index in the lines read
    last: int  # the last row's index
    header: list[str]  # "" for the row names' column, then each column's name
    rows: list[list[str]]  # each row's name ("" when it has none), then its cell under each column ("" if none)


def _fields(line: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in _FIELD.finditer(line)]


def _header_fields(line: str) -> list[tuple[int, int, str]] | None:
    """A line that names columns: two fields or more, none of them a number, most of them holding a letter."""
    fields = _fields(line)
    if len(fields) < 2 or any(to_number(text) is not None for _, _, text in fields):
        return None
    if sum(1 for _, _, text in fields if re.search(r"[^\W\d_]", text)) * 2 < len(fields):
        return None
    if any(text.endswith((":", "=")) for _, _, text in fields):
        return None  # `Dep. Variable:    y` pairs, not column names
    return fields


def _aligned_row(line: str, header: list[tuple[int, int, str]]) -> list[str] | None:
    """The row's name and a cell per column, each field placed under the one column whose name it overlaps; None
    when a field sits under no column or under several, or the row holds no number."""
    cells = [""] * (len(header) + 1)
    for n, (start, end, text) in enumerate(_fields(line)):
        under = [k for k, (hs, he, _) in enumerate(header) if start < he and hs < end]
        if not under and n == 0 and end <= header[0][0]:
            cells[0] = text  # the row's name, left of every column
        elif len(under) == 1 and not cells[under[0] + 1]:
            cells[under[0] + 1] = "" if text in ("...", "…") else text  # pandas' elided columns
        else:
            return None
    return cells if any(to_number(c) is not None for c in cells[1:]) else None


def _index_name(line: str, header: list[tuple[int, int, str]]) -> bool:
    """pandas' line for the index's name under the column names: one field, no number, left of every column."""
    fields = _fields(line)
    return len(fields) == 1 and fields[0][1] <= header[0][0] and to_number(fields[0][2]) is None


def aligned_tables(lines: list[str]) -> list[AlignedTable]:
    """Tables printed as aligned text: a line of column names, then rows whose fields sit under those names (at
    least two). Columns are told apart by position, not by a separator: pandas, scikit-learn's
    `classification_report` and statsmodels' summaries align each number under its column's name (right-aligned
    or left), which is what makes `x1   0.4512   0.023   19.601` read as coef, std err and t."""
    expanded = [line.expandtabs() for line in lines]
    found: list[AlignedTable] = []
    i = 0
    while i < len(expanded):
        header = _header_fields(expanded[i])
        if header is None:
            i += 1
            continue
        j = i + 1
        while j < len(expanded) and (_RULE.match(expanded[j]) or (j == i + 1 and _index_name(expanded[j], header))):
            j += 1  # a rule under the names, and pandas' line for the index's name
        rows: list[list[str]] = []
        last = j - 1
        while j < len(expanded):
            row = _aligned_row(expanded[j], header)
            if row is None:
                break
            rows.append(row)
            last = j
            j += 1
        if len(rows) >= 2:
            found.append(AlignedTable(i, last, ["", *(text for _, _, text in header)], rows))
            i = last + 1
        else:
            i += 1
    return found


def _elided(row: list[str]) -> bool:
    """A row of `…` (the printer left rows out)."""
    return all(c in ("...", "…", "") for c in row)


def _rule_row(row: list[str]) -> bool:
    """A row that only draws a rule (`|---|:--:|`, `+===+`)."""
    return set("".join(row)) <= set("-:+= ")


def _numbered(row: list[str]) -> bool:
    """A row with a number after its first cell: a row of the body."""
    return any(to_number(c) is not None for c in row[1:])


def pipe_table(lines: list[str], header_lines: int | None = None) -> tuple[list[str], list[list[str]]] | None:
    """A table printed with `|` between its columns: (header, rows). The body rows share one width. The lines above
    the table's first rule are its header (a markdown table's `|---|` rule, or, given as `header_lines`, a drawn
    table's first rule inside its frame: `drawn_tables`), and the last of them of the body's width names the columns
    (polars' line of column types excepted); without a rule the header is the lines above the first row that hold
    no number after their first cell, and the first of them names the columns (the others are as likely rows without
    a number, `Memory address | 0x07fbe29d69cf8`, as more names). A header line of another width spans the columns
    (`% error` over `m11 | m22`) and is added to each name; rows of `…` are left out."""
    rows = [[c.strip() for c in line.strip().split("|")] for line in lines]
    # an outer rule is one every line has: a row that alone ends in `|` has an empty last cell (lines are stripped)
    lead = all(line.lstrip().startswith("|") for line in lines)
    trail = all(line.rstrip().endswith("|") for line in lines)
    rows = [r[1 if lead and len(r) > 1 else 0 : -1 if trail and len(r) > 2 else None] for r in rows]
    if header_lines is None:
        header_lines = next((k for k, r in enumerate(rows) if k and r and _rule_row(r)), None)
    if header_lines is None:
        rows = [r for r in rows if not _elided(r)]
        body = [r for r in rows if _numbered(r) and not _rule_row(r)]
        above = rows[: rows.index(body[0])] if body else []
        headers = [r for r in above if not _numbered(r) and not _rule_row(r)]
    else:
        body = [r for r in rows[header_lines:] if not _elided(r) and _numbered(r) and not _rule_row(r)]
        headers = [r for r in rows[:header_lines] if not _elided(r) and not _rule_row(r)]
    if len(body) < 2:
        return None
    width = len(body[0])
    if width < 2 or any(len(r) != width for r in body):
        return None
    named = [r for r in headers if len(r) == width and not column_types(r)]
    if not named:
        return None
    spanning = " ".join(c for r in headers if len(r) != width for c in r if c and not _rule_row([c]))
    names = named[-1] if header_lines is not None else named[0]
    header = [f"{name} ({spanning})" if spanning and name and j else name for j, name in enumerate(names)]
    return header, body


# --- tables drawn with borders --------------------------------------------------------------------------------

# The column rules of tables drawn with box-drawing characters (tabulate's `fancy_grid`, rich tables and Keras 3's
# model summary, polars' printed frames, which put `┆` between columns): read as `|`.
_COLUMN_RULES = str.maketrans(dict.fromkeys("│┃┆┇┊┋║╎╏", "|"))


def _ruled(line: str) -> bool:
    """Every `|` of a row is a column rule: at either end of it, or with a space beside it (`ridge | 1.234`); a `|`
    inside a value, as in BLAST's `gi|262205317|ref|`, is none."""
    text = line.strip()
    return all(k in (0, len(text) - 1) or text[k - 1] == " " or text[k + 1] == " "
               for k, c in enumerate(text) if c == "|")


def _border(line: str) -> bool:
    """A line that only draws: `+-----+-----+`, `├─────┼─────┤`, `╞═════╪═════╡`, `|:----|----:|`."""
    text = line.strip()
    return bool(text) and all(c in " -=+|:_~" or "\u2500" <= c <= "\u257f" for c in text) and any(
        c in "-=_~" or "\u2500" <= c <= "\u257f" for c in text)


def drawn_tables(lines: list[str]) -> list[AlignedTable]:
    """Tables drawn with borders: a run of lines that are either borders or rows whose every `|` is a column rule,
    holding at least one border with no `|` in it (`+---+---+`, `┌───┬───┐`: a frame, not a pipe table's `|---|`
    rule). The rows are read as a pipe table (`pipe_table`), the borders left out, polars' line of column types too;
    the lines above the first rule inside the frame are the header (a header may hold numbers, `DataLoader 0`, and a
    first row may hold none, `0 │ _backbone │ 42.4 K`). `first` and `last` are the run's first and last lines, so
    that the reader skips them all. A run that does not read as a table (boxes around `key = value` pairs, a drawn
    tree) is not returned and its lines are read one by one as before.

    Why: tabulate, prettytable, rich (Keras 3's `model.summary()`) and polars print tables this way; read line by
    line, `│ ridge │ 1.234 │ 10 │` named 10 `ridge | 1.234 |` instead of `ridge · n`."""
    found: list[AlignedTable] = []
    i = 0
    while i < len(lines):
        rows: list[tuple[str, bool]] = []  # the run's lines with their rules read as `|`, and whether each only draws
        for printed in islice(lines, i, None):
            line = printed.translate(_COLUMN_RULES)
            border = _border(line)
            if not border and "|" not in line:
                break
            rows.append((line, border))
        content = [line for line, border in rows if not border]
        framed = any(border and "|" not in line for line, border in rows)
        if len(rows) >= 3 and framed and all(_ruled(line) for line in content):
            # the first rule inside the frame, under a line of content, ends the header; a rule under every line of
            # content is the frame's bottom, and the header is then found as a pipe table's is
            seen = 0
            header_lines = None
            for _, border in rows:
                if not border:
                    seen += 1
                elif seen:
                    header_lines = seen if seen < len(content) else None
                    break
            table = pipe_table(content, header_lines)
            if table is not None:
                header, body = table
                found.append(AlignedTable(i, i + len(rows) - 1, header, body))
                i += len(rows)
                continue
        i += max(len(rows), 1)
    return found
