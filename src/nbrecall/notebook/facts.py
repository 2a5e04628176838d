"""Value facts (architecture §9): every value a notebook shows, as a small record that value questions are ranked over.

"What value did we use for X" is answered by one number among the hundreds a notebook prints. A line of output
is the wrong unit for that: `Kp = 5.97 tauI = 2.48 tauD = 0.621` holds three answers, and a bare `0.95` means
nothing without the `print(accuracy)` that made it. So each value becomes a `Fact`: the value as printed, what
names it (the variable or expression of a result, the text before it on a printed line, the row and column of
a table cell, the key of a dict or Series entry), a unit where one is written, the code line that produced it,
and where it sits (heading path, the markdown sentence above, the cell).

How a printed line, a LaTeX block, a repr or a table is read is `printed.py`; here the values of each output
are named by the code that made them (the print call whose literal text the line holds, the cell's closing
expression) and placed (cell, heading path, the sentence above).

Bounds (a notebook can print a million lines): at most `FactLimits.per_cell` facts per cell (its first and last
halves: a log's last line is its result), `per_table` per table, and `per_notebook` in all.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nbrecall.notebook.model import Cell, Notebook, Output
from nbrecall.notebook.outputs import OutputLimits, RenderedOutput, head_tail, stream_text, strip_ansi
from nbrecall.notebook.printed import (
    NOISE,
    NUMBER,
    OBJECT_REPR,
    latex_row,
    latex_text,
    line_facts,
    timing_reports,
    to_number,
)
from nbrecall.notebook.printing import PrintCall, last_expression, match_print, print_calls, timed_statements
from nbrecall.notebook.reprs import (
    aligned_tables,
    call_entries,
    dict_entries,
    drawn_tables,
    grid_values,
    numpy_scalars,
    pipe_table,
    series_entries,
    unit_reprs,
)
from nbrecall.notebook.tables import TableSummary

__all__ = ["Fact", "FactLimits", "cell_facts", "extract_facts"]


@dataclass
class FactLimits:
    per_cell: int = 24
    per_table: int = 40
    per_notebook: int = 400
    value_chars: int = 200  # a longer repr is no "value" (an array, a list of rows)
    # A printout longer than the index keeps (its head and tail lines) is read for values up to this many lines
    # and characters (its head and tail halves beyond): a report's values sit in its middle too
    stream_lines: int = 400
    stream_chars: int = 40_000


@dataclass
class Fact:
    """One value a notebook shows, with what names it and where it is."""

    cell: int
    cell_id: str
    value: str  # as printed: "3803.0", "0.182, 0.218", "{A: 4, B: -2}", "1.12+0.579j"
    label: str  # "total_ballast", "Total ballast aft", "64 · m11", "'n_neighbors'"
    shown: str  # the printed text that holds label and value, as the notebook shows it (what an answer quotes)
    unit: str = ""
    code: str = ""  # the code line that produced it (the print call, the last expression, the assignment)
    names: str = ""  # variables that code line reads, space-separated ("tauI", "ci_95_por2")
    heading: str = ""
    sentence: str = ""  # the markdown sentence just above the cell
    origin: str = "line"  # "result" | "line" | "entry" | "table" | "latex" | "input"
    position: int = 0  # order within the cell
    final: bool = True  # the last fact of its cell with this label (an iteration's result, not its first step)
    number: float | None = None  # the value as a number, when it is one number
    stale: bool = False  # the outputs it comes from could not be re-rendered
    seq: int = 0  # the sequence number of its chunk in the notebook (`ingest.chunk.Chunk.seq`), once chunked

    def statement(self) -> str:
        """`label = value unit`, or the printed text when that is shorter and says the same."""
        unit = f" {self.unit}" if self.unit and self.unit not in self.shown else ""
        return f"{self.shown}{unit}"

    def description(self) -> str:
        """What names the value and where it is: heading, the printed label and value, the variables behind it,
        the sentence above (what keyword search sees of a fact)."""
        parts = [self.heading, self.statement()]
        if self.names and self.names not in self.shown:
            parts.append(self.names)
        if self.sentence:
            parts.append(self.sentence)
        return "\n".join(p for p in parts if p)

    def name(self) -> str:
        """What the value is, without the value or where it is (`Input level dB`, `64 · m11 (% error)`): what a
        fact's vector is made of. Facts of one cell share their place, so their vectors tell them apart only by
        their names; the place is compared through the cell's own chunks (`answer.values`)."""
        named = " ".join(p for p in (self.label, self.unit) if p).strip()
        return named or self.names or self.shown


# --- a cell's facts ----------------------------------------------------------------------------------------------


@dataclass
class _CellFacts:
    cell: Cell
    heading: str
    sentence: str
    stale: bool
    limits: FactLimits
    found: list[Fact] = field(default_factory=list)

    def add(self, label: str, value: str, shown: str, origin: str, unit: str = "", code: str = "",
            names: Iterable[str] = ()) -> None:
        value = value.strip()
        if not value or len(value) > self.limits.value_chars:
            return
        self.found.append(Fact(
            cell=self.cell.index, cell_id=self.cell.id, value=value, label=label.strip()[:160],
            shown=shown.strip().replace("\n", " ")[:300], unit=unit, code=code, names=" ".join(names)[:160],
            heading=self.heading, sentence=self.sentence, origin=origin, number=to_number(value), stale=self.stale,
        ))


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


def _text_facts(acc: _CellFacts, text: str, origin: str, prints: list[PrintCall], expr: tuple[str, list[str]]) -> None:
    lines = [ln.rstrip() for ln in numpy_scalars(unit_reprs(text)).splitlines()]
    content = [ln for ln in lines if ln.strip() and not NOISE.match(ln)]
    if not content:
        return
    code, expr_names = expr
    if origin == "result":
        whole = "\n".join(content).strip()
        if len(content) > 1 and whole.startswith("{") and whole.endswith("}"):
            # IPython pretty-prints a dict wider than the console one entry per line: still one dict. Only a dict
            # of numbers, one entry per line; anything else (nested values, objects' reprs with their settings, a
            # key holding a comma) is read line by line as before, which keeps the numbers inside
            keyed = dict_entries(whole)
            if len(keyed) == len(content) and all(to_number(v) is not None for _, v, _ in keyed):
                for key, value, shown in keyed:
                    acc.add(key, value, shown, "entry", code=code, names=expr_names)
                return
        if len(content) == 1 and NUMBER.search(whole) and len(whole) <= acc.limits.value_chars:
            shown = f"{code} = {whole}" if code else whole
            read = line_facts(whole)
            label, number, unit, whole_line = read[0] if len(read) == 1 else ("", "", "", "")
            if not label and unit and whole_line == whole:
                # a bare quantity (`134.7 kilonewton`, a units library's result): its number is the value, the
                # rest its unit
                acc.add(code, number, shown, "result", unit=unit, code=code, names=expr_names)
                return
            acc.add(code, whole, shown, "result", code=code, names=expr_names)
            keyed = dict_entries(whole)
            for key, value, shown in keyed:
                acc.add(key, value, shown, "entry", code=code, names=expr_names)
            if not keyed and not whole.startswith(("[", "(", "array(")):
                for label, value, unit, shown in read[1:]:
                    acc.add(label, value, shown, "entry", unit=unit, code=code, names=expr_names)
            return
        series = series_entries(content)
        if series is not None:
            entries, name = series
            for key, value in entries:
                label = f"{key} · {name}" if name else key
                acc.add(label, value, f"{key}  {value}", "entry", code=code, names=[*expr_names, name])
            return
    pipes = [ln for ln in content if ln.count("|") >= 1]
    if len(pipes) >= 3 and len(pipes) == len(content):
        table = pipe_table(pipes)
        if table is not None:
            header, rows = table
            for label, value, shown in grid_values(header, rows, 1)[: acc.limits.per_table]:
                acc.add(label, value, shown, "table", code=code, names=expr_names)
            return
    drawn = drawn_tables(content)
    inside = {i for table in drawn for i in range(table.first, table.last + 1)}
    tables = {table.first: table for table in aligned_tables([
        "" if i in inside else line for i, line in enumerate(content)])}  # a drawn table's rows are its own
    tables.update((table.first, table) for table in drawn)
    previous = ""
    block = ""  # the last line that names what follows without a value of its own (a loop's block header)
    blocks: list[str] = []  # for each fact this text adds, the block header above it
    start = len(acc.found)
    skip_to = -1
    for i, line in enumerate(content):
        if i <= skip_to:
            continue
        pr = match_print(line, prints, i, len(content)) if origin == "line" else None
        line_code = pr.code if pr else code
        names = pr.names if pr else expr_names
        if i in tables:  # a table printed as aligned text: each number named by its row and column
            aligned = tables[i]
            for label, value, shown in grid_values(aligned.header, aligned.rows, 1)[: acc.limits.per_table]:
                acc.add(label, value, shown, "table", code=line_code, names=names)
            skip_to, previous = aligned.last, ""
            continue
        stripped = line.strip()
        called = call_entries(stripped)
        if called:  # `KNeighborsClassifier(n_neighbors=13, …)`: the repr as one value, and its arguments
            label = (pr.label if pr else "") or (code if origin == "result" else "")
            acc.add(label, stripped, f"{label} = {stripped}" if label else stripped, origin, code=line_code,
                    names=names)
            for key, value, shown in called:
                acc.add(key, value, shown, "entry", code=line_code, names=names)
            previous = ""
            continue
        if stripped[:1] in "([{" and stripped[-1:] == {"(": ")", "[": "]", "{": "}"}[stripped[:1]]:
            # a repr (`[['0', '3'], …]`, `(0.0, 64.0)`, a dict): one value, and a dict's entries
            if NUMBER.search(stripped):
                label = (pr.label if pr else "") or (code if origin == "result" else "") or previous.rstrip(":")
                acc.add(label, stripped, f"{label} = {stripped}" if label else stripped, origin, code=line_code,
                        names=names)
            for key, value, shown in dict_entries(stripped):
                acc.add(key, value, shown, "entry", code=line_code, names=names)
            previous = ""
            continue
        found = line_facts(line)
        if not found:
            previous = line.strip() if len(line.strip()) <= 80 else ""
            if _LETTER.search(previous) and not NUMBER.search(previous) and "  " not in previous \
                    and not previous.endswith("\\"):  # prose, not a table's header line
                blocks.extend([block] * (len(acc.found) - start - len(blocks)))  # the facts so far stood under it
                block = previous.rstrip(":")
            continue
        for label, value, unit, shown in found:
            if not label:  # a bare value: named by the line above (`Mean accuracy:`), or by what printed it
                label = previous.rstrip(":") if previous.endswith(":") else (pr.label if pr else "") or (
                    code if origin == "result" else "")
                shown = f"{label}: {shown}" if label and label not in shown else shown
            acc.add(label, value, shown, origin, unit=unit, code=line_code, names=names)
        previous = ""
    blocks.extend([block] * (len(acc.found) - start - len(blocks)))
    _name_by_block(acc.found[start:], blocks)


def _name_by_block(facts: list[Fact], headers: list[str]) -> None:
    """A label printed more than once under different block headers (`Integrating High-sensitivity RCM` / `The
    ECS is 3.57 K`, then `Integrating Low-sensitivity RCM` / `The ECS is 2.22 K`) is a loop's printout: each value
    is named by its block's header too (`Integrating High-sensitivity RCM · The ECS`), as a table's value is by
    its row, when the headers come from one template (`_one_template`). Other labels are left as they are. In
    place."""
    under: dict[str, set[str]] = {}
    for fact, header in zip(facts, headers, strict=True):
        if fact.label:
            under.setdefault(fact.label, set()).add(header)
    for fact, header in zip(facts, headers, strict=True):
        if header and _one_template(under.get(fact.label, set())):
            fact.label = f"{header} · {fact.label}"[:160]


def _one_template(headers: set[str]) -> bool:
    """Two headers or more printed from one template: all start with the same word or all end with it
    (`Integrating High-sensitivity RCM`, `Integrating Low-sensitivity RCM`). A training log's generated samples
    between its validation lines share neither and are no headers."""
    if len(headers) < 2 or "" in headers:
        return False
    words = [h.split() for h in headers]
    return len({w[0] for w in words}) == 1 or len({w[-1] for w in words}) == 1


def _timing_facts(acc: _CellFacts, text: str, timed: list[tuple[str, list[str]]]) -> str:
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


def _latex_facts(acc: _CellFacts, latex: str, code: str) -> None:
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


def _formula_fact(acc: _CellFacts, latex: str, expr: tuple[str, list[str]], origin: str) -> None:
    """A formula a cell shows drawn in `text/plain` (`_drawn`): one value, its LaTeX as the notebook holds it (what
    the page renders), named by the expression that printed it."""
    formula = _MATH_DELIMITERS.sub("", latex.strip()).strip()
    code, names = expr
    if formula:
        acc.add(code, formula, f"{code} = {formula}" if code else formula, origin, code=code, names=names)


_CONSTANT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=\s*([-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
                       r"(?:\s*\*\s*u\.(\w+))?\s*(?:#\s*(.*))?$")


def _input_facts(acc: _CellFacts) -> None:
    """`rho = 1025  # sea water, kg/m3`: a constant the notebook used, with its comment."""
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
) -> list[Fact]:
    """The facts of one code cell: its outputs' values and the constants its source sets."""
    limits = limits or FactLimits()
    acc = _CellFacts(cell, heading, sentence, stale, limits)
    prints = print_calls(cell.source, tree) if "print" in cell.source else []
    expr = last_expression(cell.source, tree)
    timed = timed_statements(cell.source) if "timeit" in cell.source else []
    for output, shown in zip(cell.outputs, rendered, strict=False):
        if output.output_type == "stream":
            if shown.name != "stderr" and shown.text.strip():
                text = _stream_text(output, shown, limits)
                text = _timing_facts(acc, text, timed) if timed else text
                _text_facts(acc, text, "line", prints, expr)
        elif output.output_type in ("execute_result", "display_data"):
            if shown.kind == "table" and shown.table is not None:
                _table_facts(acc, shown.table, expr)
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
            _text_facts(acc, _result_text(output, shown), origin, prints, expr)
    _input_facts(acc)
    facts = acc.found
    _mark_final(facts)
    return _bounded(facts, limits.per_cell)


def _table_facts(acc: _CellFacts, table: TableSummary, expr: tuple[str, list[str]]) -> None:
    code, names = expr
    for label, value, shown in grid_values(table.header, table.rows, table.depth)[: acc.limits.per_table]:
        acc.add(label, value, shown, "table", code=code, names=names)


_LETTER = re.compile(r"[^\W\d_]")


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
                                sentence=above, stale=stale, tree=trees.get(cell.source), limits=limits))
    if len(facts) <= limits.per_notebook:
        return facts
    # Over the bound: printed results first (wherever they are: a notebook's last cells hold its conclusions),
    # then constants, then table cells (a table is also its own chunk), then values nothing names (`', '`, a
    # bare `1719/1719`: only their cell can find them, and its chunk holds them). Within each, a loop's last
    # printout of a label (`final`) before its earlier steps (a training log's epochs), then document order.
    rank = {"input": 1, "table": 2}

    def order(i: int) -> tuple[int, bool, int]:
        fact = facts[i]
        return (3 if not _LETTER.search(fact.label) else rank.get(fact.origin, 0), not fact.final, i)

    kept = sorted(range(len(facts)), key=order)[: limits.per_notebook]
    return [facts[i] for i in sorted(kept)]
