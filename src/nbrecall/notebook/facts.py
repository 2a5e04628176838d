"""Value facts (architecture §9): every value a notebook shows, as a small record that value questions are ranked over.

"What value did we use for X" is answered by one number among the hundreds a notebook prints. A line of output
is the wrong unit for that: `Kp = 5.97 tauI = 2.48 tauD = 0.621` holds three answers, and a bare `0.95` means
nothing without the `print(accuracy)` that made it. So each value becomes a `Fact`: the value as printed, what
names it (the variable or expression of a result, the text before it on a printed line, the row and column of
a table cell, the key of a dict or Series entry), a unit where one is written, the code line that produced it,
and where it sits (heading path, the markdown sentence above, the cell).

How a printed line, a LaTeX block, a repr or a table is read is `printed.py` and `reprs.py`, and a printed text's
values are named by what printed them in `text_facts.py`; here each output of a cell is given to its reader (streams,
results, LaTeX, tables, `%timeit` reports, the constants the source sets) and the facts are placed (cell, heading
path, the sentence above) and bounded. The records are `fact_types.py`'s.

Bounds (a notebook can print a million lines): at most `FactLimits.per_cell` facts per cell (its first and last
halves: a log's last line is its result), `per_table` per table, and `per_notebook` in all.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from nbrecall.notebook.fact_types import LETTER, CellFacts, Fact, FactLimits
from nbrecall.notebook.model import Cell, Notebook, Output, is_python_language
from nbrecall.notebook.outputs import OutputLimits, RenderedOutput, head_tail, stream_text, strip_ansi
from nbrecall.notebook.printed import OBJECT_REPR, latex_row, latex_text, timing_reports, to_number
from nbrecall.notebook.printing import last_expression, print_calls, timed_statements
from nbrecall.notebook.tables import column_types
from nbrecall.notebook.text_facts import text_facts

__all__ = ["Fact", "FactLimits", "cell_facts", "extract_facts"]


# --- a cell's facts ----------------------------------------------------------------------------------------------


def _stream_text(output: Output, shown: RenderedOutput, limits: FactLimits) -> str:
    """A stream's text for its values: what the index keeps, or when that is only its head and tail, the stream
    itself up to `limits.stream_lines` and `stream_chars`, bounded as the index bounds it (`head_tail`: head and
    tail halves, the lines between replaced by a marker that reads as no value)."""
    if not shown.truncated:
        return shown.text
    half = limits.stream_lines // 2
    bounds = OutputLimits(max_chars=limits.stream_chars, stream_max_lines=limits.stream_lines, head_lines=half,
                          tail_lines=half)
    return head_tail(stream_text(output), bounds)[0]


def _result_text(output: Output, rendered: RenderedOutput) -> str:
    """The text a result shows: `text/plain` unless it is an object's repr, else its LaTeX or HTML as text."""
    data = output.data if isinstance(output.data, dict) else {}
    plain = data.get("text/plain")
    plain = strip_ansi(plain if isinstance(plain, str) else "".join(plain) if isinstance(plain, list) else "")
    if plain.strip() and not OBJECT_REPR.match(plain.strip()):
        return plain
    latex = data.get("text/latex")
    if isinstance(latex, list):
        latex = "".join(latex)
    if isinstance(latex, str) and latex.strip():
        return latex_text(latex)
    return rendered.text if rendered.kind in ("text", "html") else ""


def _timing_facts(acc: CellFacts, text: str, timed: list[tuple[str, list[str]]]) -> str:
    """`%timeit` reports in a stream become one fact each (the mean or best duration, named by the statement timed:
    the k-th report is the k-th `%timeit` still unread); the text is returned without them for the other rules.
    `timed` is consumed, since a cell's reports may come in several stream outputs."""
    reports = timing_reports(text)
    if not reports:
        return text
    for report in reports:
        code, names = timed.pop(0) if timed else ("", [])
        acc.add("time per loop", report.value, report.shown, "line", unit=report.unit, code=code, names=names)
    kept, start = [], 0
    for report in reports:
        kept.append(text[start : report.start])
        start = report.end
    kept.append(text[start:])
    return "".join(kept)


def _latex_facts(acc: CellFacts, latex: str, code: str) -> None:
    for row in latex_text(latex).splitlines():
        fact = latex_row(row)
        if fact is not None:
            label, value, unit, shown = fact
            acc.add(label, value, shown, "latex", unit=unit, code=code)


def _drawn(plain: object) -> bool:
    """A `text/plain` that draws a formula over several lines (sympy's pretty print: a fraction bar, a root, an
    exponent raised a line): read line by line it is fragments (`⋅ℯ  ⋅sin(2`), never values."""
    text = "".join(plain) if isinstance(plain, list) else plain if isinstance(plain, str) else ""
    return len([ln for ln in text.splitlines() if ln.strip()]) > 1


# LaTeX in math mode (sympy writes `$\displaystyle …$`), not a `tabular` a version table or a frame writes.
_MATH = re.compile(r"^\s*(?:\$|\\\[|\\\(|\\begin\{(?:equation|align|gather|multline)\*?\})")
_MATH_DELIMITERS = re.compile(r"^\s*(?:\$\$?|\\\[|\\\()\s*(?:\\displaystyle\s*)?|\s*(?:\$\$?|\\\]|\\\))\s*$")


def _formula_fact(acc: CellFacts, latex: str, expr: tuple[str, list[str]], origin: str) -> None:
    """A formula a cell shows drawn in `text/plain` (`_drawn`): one value, its LaTeX as the notebook holds it (what
    the page renders), named by the expression that printed it."""
    formula = _MATH_DELIMITERS.sub("", latex.strip()).strip()
    code, names = expr
    if formula:
        acc.add(code, formula, f"{code} = {formula}" if code else formula, origin, code=code, names=names)


_CONSTANT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:=|<-)\s*([-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
                       r"(?:\s*\*\s*u\.(\w+))?\s*(?:#\s*(.*))?$")


# Kernels other than Python print by their own conventions. R shows a vector of one element with its index,
# `[1] 3803` or `[1] "Total: 3803"`: the value is what follows (a longer vector, `[1] 1 2 3`, stays as printed).
_R_ONE_ELEMENT = re.compile(r'^\s*\[1\]\s+(?:"(.*)"|(\S+))\s*$')
# Julia (and R with parentheses) display the value of an assignment: `x = 812.5` shows 812.5, which is `x`.
_ASSIGNED = re.compile(r"^([A-Za-z_][\w.!]*)\s*(?:=|<-)\s*(?![=\s]*$)(?!=)")


# A tibble's lines about the table rather than in it: `# A tibble: 2 × 3`, `# Groups: site [2]`, `# ℹ 8 more rows`.
_TIBBLE_NOTE = re.compile(r"^# (?:A tibble|A data frame|Groups|Rowwise|ℹ|…)")


def _as_printed_in(language: str, text: str) -> str:
    """`text` as the reader expects a printout, for an R kernel: R's index taken off a one-element vector, and a
    tibble's notes and line of column types (`<chr> <dbl>`) left out, so that its names sit above its rows."""
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
    prints an unnamed vector with its `[1]` index and a matrix with `[1,]`, so two such lines are names and values)."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        pairs = _name_value_pairs(lines[i], lines[i + 1]) if i + 1 < len(lines) else None
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
        if not closes or not LETTER.search(name):  # names that are numbers (`quantile()`'s `25%`) read as before
            return None
        pairs.append((name, text))
        before = end
    return pairs if not names[before:].strip() else None


def _displayed(language: str, expr: tuple[str, list[str]]) -> tuple[str, list[str]]:
    """The name a result shows the value of: for a kernel that displays assignments (not Python, where an
    assignment displays nothing), the variable assigned by the closing line, with the line's comment as a
    constant's label has it (`T (number of observations)`)."""
    m = None if is_python_language(language) else _ASSIGNED.match(expr[0])
    if m is None:
        return expr
    code, _, comment = expr[0].partition("#")
    comment = comment.strip() if code.count('"') % 2 == 0 and code.count("'") % 2 == 0 else ""  # not in a string
    return (f"{m.group(1)} ({comment})" if comment else m.group(1)), expr[1] or [m.group(1)]


def _input_facts(acc: CellFacts) -> None:
    """`rho = 1025  # sea water, kg/m3` (or R's `rho <- 1025`): a constant the notebook used, with its comment."""
    for line in acc.cell.source.splitlines():
        m = _CONSTANT.match(line)
        if m:
            name, value, unit, comment = m.groups()
            label = f"{name} ({comment.strip()})" if comment and comment.strip() else name
            acc.add(label, value, line.strip(), "input", unit=unit or "", code=line.strip(), names=[name])


def _mark_final(facts: list[Fact]) -> None:
    """Within a cell, only the last fact of each label is `final` (a loop's last line is its result)."""
    last: dict[str, int] = {}
    for i, fact in enumerate(facts):
        fact.position = i
        last[re.sub(r"\d+", "#", fact.label.lower())] = i
    for i, fact in enumerate(facts):
        fact.final = last[re.sub(r"\d+", "#", fact.label.lower())] == i


def _bounded(facts: list[Fact], most: int) -> list[Fact]:
    if len(facts) <= most:
        return facts
    half = most // 2
    return facts[:half] + facts[-(most - half):]


def cell_facts(
    cell: Cell,
    rendered: list[RenderedOutput],
    *,
    heading: str = "",
    sentence: str = "",
    stale: bool = False,
    tree: ast.Module | None = None,
    limits: FactLimits | None = None,
    language: str = "python",
) -> list[Fact]:
    """The facts of one code cell: its outputs' values and the constants its source sets. `language`: the
    kernel's, whose printing conventions the outputs follow."""
    limits = limits or FactLimits()
    acc = CellFacts(cell, heading, sentence, stale, limits)
    prints = print_calls(cell.source, tree) if "print" in cell.source else []
    expr = _displayed(language, last_expression(cell.source, tree))
    timed = timed_statements(cell.source) if "timeit" in cell.source else []
    for output, shown in zip(cell.outputs, rendered, strict=False):
        if output.output_type == "stream":
            if shown.name != "stderr" and shown.text.strip():
                text = _stream_text(output, shown, limits)
                text = _timing_facts(acc, text, timed) if timed else text
                text_facts(acc, _as_printed_in(language, text), "line", prints, expr)
        elif output.output_type in ("execute_result", "display_data"):
            if shown.kind == "table" and shown.table is not None:
                acc.add_table(shown.table.header, shown.table.rows, shown.table.depth, *expr)
                continue
            if shown.kind == "marker":
                continue
            data = output.data if isinstance(output.data, dict) else {}
            if shown.kind == "figure" and "text/latex" not in data:
                continue  # a plot; a sympy result drawn as PNG keeps its text/latex and text/plain twins
            plain = data.get("text/plain")
            latex = data.get("text/latex")
            latex = "".join(latex) if isinstance(latex, list) else latex
            if isinstance(latex, str) and "aligned" in latex and (
                not isinstance(plain, str) or OBJECT_REPR.match(plain.strip())
            ):
                _latex_facts(acc, latex, expr[0])
                continue
            origin = "result" if output.output_type == "execute_result" else "line"
            if isinstance(latex, str) and _MATH.match(latex) and _drawn(plain):
                _formula_fact(acc, latex, expr, origin)
                continue
            text_facts(acc, _as_printed_in(language, _result_text(output, shown)), origin, prints, expr)
    _input_facts(acc)
    facts = acc.found
    _mark_final(facts)
    return _bounded(facts, limits.per_cell)



def _first_sentences(markdown: str, limit: int = 240) -> str:
    """The prose of a markdown cell without headings, images or code, clipped to a sentence or two."""
    kept = []
    for line in markdown.splitlines():
        s = line.strip()
        if not s or s.startswith(("#", "![", "```", "<img", "|")):
            continue
        kept.append(s)
    text = " ".join(" ".join(kept).split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    end = max(cut.rfind(". "), cut.rfind("? "), cut.rfind(": "))
    return cut[: end + 1] if end > limit // 3 else cut.rstrip() + "…"


def extract_facts(
    nb: Notebook,
    rendered: Mapping[int, list[RenderedOutput]],
    *,
    headings: Mapping[int, str] | None = None,
    trees: Mapping[str, ast.Module] | None = None,
    stale: bool = False,
    limits: FactLimits | None = None,
) -> list[Fact]:
    """Every fact of a notebook in cell order, within `limits`. `rendered` is the output rules' rendering of each
    code cell (`ingest.chunk.render_cells`), `headings` each cell's heading path."""
    limits = limits or FactLimits()
    headings = headings or {}
    trees = trees or {}
    facts: list[Fact] = []
    above = ""
    for cell in nb.cells:
        if cell.is_markdown and cell.source.strip():
            above = _first_sentences(cell.source)
            continue
        if not cell.is_code or not cell.source.strip():
            continue
        facts.extend(cell_facts(cell, rendered.get(cell.index, []), heading=headings.get(cell.index, ""),
                                sentence=above, stale=stale, tree=trees.get(cell.source), limits=limits,
                                language=nb.language))
    if len(facts) <= limits.per_notebook:
        return facts
    # Over the bound: printed results first (wherever they are: a notebook's last cells hold its conclusions),
    # then constants, then table cells (a table is also its own chunk), then values nothing names (`', '`, a
    # bare `1719/1719`: only their cell can find them, and its chunk holds them). Within each, a loop's last
    # printout of a label (`final`) before its earlier steps (a training log's epochs), then document order.
    rank = {"input": 1, "table": 2}

    def order(i: int) -> tuple[int, bool, int]:
        fact = facts[i]
        return (3 if not LETTER.search(fact.label) else rank.get(fact.origin, 0), not fact.final, i)

    kept = sorted(range(len(facts)), key=order)[: limits.per_notebook]
    return [facts[i] for i in sorted(kept)]
