"""A parsed table as text: its columns' types inferred from the strings shown, its shape, one sentence and a markdown
preview (`tables.py` parses the HTML; this writes what the index and the viewer show of it)."""

from __future__ import annotations

import math
import re
from datetime import datetime

_MISSING = {"", "nan", "NaN", "None", "NaT", "<NA>", "null", "NULL", "NA", "N/A"}
_INT_RE = re.compile(r"[+-]?(?:\d+|\d{1,3}(?:,\d{3})+)")
_FLOAT_RE = re.compile(r"[+-]?(?:(?:\d+|\d{1,3}(?:,\d{3})+)(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf")
_BOOL = {"True", "False", "true", "false"}
_DATE_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)
_MAX_CELL_CHARS = 80


def infer_dtype(values: list[str]) -> str:
    """"int", "float", "bool", "datetime" or "text" from the displayed strings (missing markers ignored)."""
    present = [v.strip() for v in values if v.strip() not in _MISSING]
    if not present:
        return "text"
    if all(_INT_RE.fullmatch(v) for v in present):
        return "int"
    if all(_FLOAT_RE.fullmatch(v) for v in present):
        return "float"
    if all(v in _BOOL for v in present):
        return "bool"
    if all(_is_datetime(v) for v in present):
        return "datetime"
    return "text"


def _is_datetime(value: str) -> bool:
    if not _DATE_RE.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _to_float(value: str) -> float | None:
    text = value.strip().replace(",", "")
    if text in _MISSING:
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def format_number(x: float) -> str:
    """A mean as a person would write it: 1267.7, 0.43355, 2, 123456.7, 1.2346e+15."""
    if x == 0:
        return "0"
    if 1e4 <= abs(x) < 1e12:
        return f"{x:.1f}"
    return f"{x:.5g}"


def shape_text(n_rows: int, n_cols: int) -> str:
    rows = "row" if n_rows == 1 else "rows"
    cols = "column" if n_cols == 1 else "columns"
    return f"{n_rows} {rows} × {n_cols} {cols}"


def table_sentence(n_rows: int, n_cols: int, columns: list[str], dtypes: list[str], values: list[list[str]],
              partial: bool) -> str:
    """`3 rows × 2 columns; volume_m3 mean 1267.7` — means of the first three numeric columns."""
    means: list[str] = []
    for name, dtype, column in zip(columns, dtypes, values, strict=True):
        if dtype not in ("int", "float"):
            continue
        numbers = [n for n in (_to_float(v) for v in column) if n is not None]
        if numbers:
            means.append(f"{name or '(unnamed)'} mean {format_number(sum(numbers) / len(numbers))}")
        if len(means) == 3:
            break
    text = shape_text(n_rows, n_cols)
    if means:
        text += "; " + ", ".join(means)
        if partial:
            text += " (over the rows shown)"
    return text


def _md_cell(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > _MAX_CELL_CHARS:
        text = text[: _MAX_CELL_CHARS - 1] + "…"
    return text.replace("\\", "\\\\").replace("|", "\\|")


def markdown_table(index_names: list[str], column_names: list[str], rows: list[list[str]], width: int) -> str:
    """GitHub table of the displayed rows, index first; "..." rows and columns stay where pandas put them."""
    header = [_md_cell(n) for n in index_names] + [_md_cell(n) for n in column_names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * width]
    for row in rows:
        cells = [_md_cell(row[j] if j < len(row) else "") for j in range(width)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
