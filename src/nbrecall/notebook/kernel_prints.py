"""What other kernels print, made readable by the fact reader: R's and Julia's own printing conventions.

The reader (`facts`, `text_facts`) was written for what Python prints: pandas frames with two spaces between
columns, an assignment that displays nothing. An R kernel shows a one-element vector with its index (`[1] 3803`), a
named vector as names over values, a data frame with one space between columns, and a column-types line under a
tibble's names; Julia displays the value of an assignment. Each is rewritten here into what the reader already reads
(or named as Python would name it), for the kernel's language only: the same text from a Python kernel is read as
before.
"""

from __future__ import annotations

import re

from nbrecall.notebook.fact_types import LETTER
from nbrecall.notebook.printed import to_number
from nbrecall.notebook.tables import column_types

# R shows a vector of one element with its index, `[1] 3803` or `[1] "Total: 3803"`: the value is what follows (a
# longer vector, `[1] 1 2 3`, stays as printed).
_R_ONE_ELEMENT = re.compile(r'^\s*\[1\]\s+(?:"(.*)"|(\S+))\s*$')
# Julia displays the value of a closing assignment: `x = 812.5` shows 812.5, which is `x`.
_ASSIGNED = re.compile(r"^([A-Za-z_][\w.!]*)\s*(?:=|<-)\s*(?![=\s]*$)(?!=)")
# A tibble's lines about the table rather than in it: `# A tibble: 2 × 3`, `# Groups: site [2]`, `# ℹ 8 more rows`.
_TIBBLE_NOTE = re.compile(r"^# (?:A tibble|A data frame|Groups|Rowwise|ℹ|…)")
# Julia's DataFrames: `2×3 DataFrame` above the table, `Row │` before the names, a rule of box-drawing characters.
_JULIA_FRAME = re.compile(r"^\s*\d+×\d+ (?:Sub)?DataFrame")
_BOX_RULE = set("─┼┬┴├┤│═╪ ")


def as_printed_in(language: str, text: str) -> str:
    """`text` as the reader expects a printout. For an R kernel: R's index taken off a one-element vector, a
    tibble's notes and line of column types (`<chr> <dbl>`) left out, tables written with two spaces between their
    columns (`_frame_lines`) and named vectors as `name: value` lines (`_named_vector_lines`). For Julia: a
    DataFrame's frame taken off (`_julia_frame_lines`). For MATLAB and Octave: a scalar shown under its name on a
    line of its own brought up beside it (`_matlab_scalar_lines`). Any other kernel's text is returned as it is."""
    if language.lower().startswith("julia") and "│" in text:
        return "\n".join(_julia_frame_lines(text.splitlines()))
    if language.lower() in ("matlab", "octave"):
        return "\n".join(_matlab_scalar_lines(text.splitlines()))
    if language.lower() not in ("r", "ir"):
        return text
    lines = []
    for line in text.splitlines():
        if _TIBBLE_NOTE.match(line) or column_types(line.split()):
            continue
        m = _R_ONE_ELEMENT.match(line)
        lines.append((m.group(1) if m.group(1) is not None else m.group(2)) if m else line)
    return "\n".join(_named_vector_lines(_frame_lines(lines)))


def _frame_lines(lines: list[str]) -> list[str]:
    """R prints a table with one space between its columns and its row names on the left; the reader finds
    columns by runs of two spaces (pandas' layout). A block R printed is written again with two spaces between its
    columns, right-aligned: a data frame or tibble whose every row sets each value under its column's name (ending
    where it ends, or starting where it starts: a tibble left-aligns text), or a table of numbers whose names may
    hold a space, as `summary(lm(...))`'s coefficients (`Std. Error`), read by where its right-aligned values end."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        block = _under_names(lines, i) or _by_value_ends(lines, i)
        if block is None:
            out.append(lines[i])
            i += 1
            continue
        names, rows, i = block
        widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
        widths[1:] = [max(w, len(name)) for w, name in zip(widths[1:], names, strict=True)]
        out.append(" " * widths[0] + "".join("  " + name.rjust(w) for name, w in zip(names, widths[1:], strict=True)))
        out.extend(row[0].ljust(widths[0]) + "".join("  " + cell.rjust(w) for cell, w in zip(row[1:], widths[1:],
                                                                                             strict=True))
                   for row in rows)
    return out


def _spans(line: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", line)]


def _under_names(lines: list[str], i: int) -> tuple[list[str], list[list[str]], int] | None:
    """(names, rows, the line after) of a data frame printed under its column names from line `i`, or None."""
    names = _spans(lines[i])
    rows: list[list[str]] = []
    j = i + 1
    while len(names) >= 2 and j < len(lines):
        tokens = _spans(lines[j])
        if len(tokens) != len(names) + 1 or not all(
                end == name_end or start == name_start
                for (start, end, _), (name_start, name_end, _) in zip(tokens[1:], names, strict=True)):
            break
        rows.append([text for _, _, text in tokens])
        j += 1
    if len(rows) < 2 or any(to_number(name) is not None for _, _, name in names):
        return None
    return [name for _, _, name in names], rows, j


_SIGNIFICANCE = re.compile(r"[*.]{1,3}")  # R's significance codes after a p-value


def _by_value_ends(lines: list[str], i: int) -> tuple[list[str], list[list[str]], int] | None:
    """(names, rows, the line after) of a table of numbers from line `i`: rows that start with their name at the
    line's start and end their values at the same columns, under a line whose text between those columns names
    them; or None."""
    header = lines[i]
    if not LETTER.search(header):
        return None
    rows: list[list[str]] = []
    ends: list[int] | None = None
    j = i + 1
    while j < len(lines):
        tokens = _spans(lines[j])
        if len(tokens) < 2 or tokens[0][0] != 0:
            break
        values = tokens[1:]
        if len(values) > 1 and _SIGNIFICANCE.fullmatch(values[-1][2]):
            values = values[:-1]
        if not all(_R_NUMBER.fullmatch(text.lstrip("<")) for _, _, text in values):
            break
        if ends is None:
            ends = [end for _, end, _ in values]
        elif [end for _, end, _ in values] != ends:
            break
        rows.append([tokens[0][2]] + [text for _, _, text in values])
        j += 1
    if len(rows) < 2 or ends is None or len(ends) < 2:
        return None
    before = max(len(row[0]) for row in rows)
    names = []
    for end in ends:
        name = header[before:end].strip()
        if not name or before > end or (end < len(header) and header[end] != " "):
            return None
        names.append(name)
        before = end
    return (names, rows, j) if not header[before:].strip() else None


_R_NUMBER = re.compile(r"-?(?:\d[\d.]*(?:e[-+]?\d+)?%?|NA|NaN|-?Inf)")


def _named_vector_lines(lines: list[str]) -> list[str]:
    """R prints a named vector (`summary()`, `quantile()`, `coef()`) as a line of names over a line of values, each
    value right-aligned under its name, wrapped into more such pairs when wide: written here as `name: value`
    lines, which the reader names by their label. A pair counts only when every value ends where a name ends (R
    prints an unnamed vector with its `[1]` index and a matrix with `[1,]`, so two such lines are names and values).
    Names must hold a letter: two lines of numbers are as often two rows of a one-column data frame (`1 10` over
    `2 20`) as a vector named by numbers (`quantile()`'s `25%`), and those are left as printed."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        pairs = _name_value_pairs(lines[i], lines[i + 1]) if i + 1 < len(lines) else None
        if pairs is not None and not all(LETTER.search(name) for name, _ in pairs):
            pairs = None
        if pairs is None:
            out.append(lines[i])
            i += 1
            continue
        out.extend(f"{name}: {value}" for name, value in pairs)
        i += 2
    return out


def _name_value_pairs(names: str, values: str) -> list[tuple[str, str]] | None:
    found = [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", values)]
    if len(found) < 2 or not all(_R_NUMBER.fullmatch(text) for _, _, text in found):
        return None
    pairs = []
    before = 0
    for _, end, text in found:
        name = names[before:end].strip()
        closes = end <= len(names) and names[end - 1] != " " and (end == len(names) or names[end] == " ")
        if not closes or not name:
            return None
        pairs.append((name, text))
        before = end
    return pairs if not names[before:].strip() else None


def displayed(language: str, expr: tuple[str, list[str]]) -> tuple[str, list[str]]:
    """The name a result shows the value of: for Julia, which displays the value of a closing assignment, the
    variable assigned, with the line's comment as a constant's label has it (`T (number of observations)`). Not for
    Python, where an assignment displays nothing, nor R, where it is invisible and a result under it is an earlier
    line's."""
    m = _ASSIGNED.match(expr[0]) if language.lower().startswith("julia") else None
    if m is None:
        return expr
    code, _, comment = expr[0].partition("#")
    comment = comment.strip() if code.count('"') % 2 == 0 and code.count("'") % 2 == 0 else ""  # not in a string
    return (f"{m.group(1)} ({comment})" if comment else m.group(1)), expr[1] or [m.group(1)]


def _julia_frame_lines(lines: list[str]) -> list[str]:
    """A Julia DataFrame as the reader reads pandas' print: the `2×3 DataFrame` line, the line of column types and
    the rule left out, the `│` after the row numbers made a space (the `Row` over them too), alignment kept."""
    out = []
    for line in lines:
        if _JULIA_FRAME.match(line) or (line.strip() and set(line.strip()) <= _BOX_RULE):
            continue
        left, bar, right = line.partition("│")
        if bar:
            if column_types(right.split()):
                continue
            line = (" " * len(left) if left.strip() == "Row" else left) + " " + right
        out.append(line)
    return out


_MATLAB_NAME = re.compile(r"^\s*([A-Za-z]\w*) =\s*$")


def _matlab_scalar_lines(lines: list[str]) -> list[str]:
    """MATLAB shows `x = 5.2` as `x =`, a blank line and the value indented on a line of its own: written here as
    `x = 5.2000`, which the reader names. A matrix (more than one number on the line, or more lines) stays as
    printed."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _MATLAB_NAME.match(lines[i])
        j = i + 1
        while m and j < len(lines) and not lines[j].strip():
            j += 1
        following = lines[j + 1].strip() if j + 1 < len(lines) else ""
        value = lines[j].split() if m and j < len(lines) else []
        if m and len(value) == 1 and to_number(value[0]) is not None and not following:
            out.append(f"{m.group(1)} = {value[0]}")
            i = j + 1
            continue
        out.append(lines[i])
        i += 1
    return out
