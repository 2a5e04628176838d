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

Bounds (a notebook can print a million lines): at most `FactLimits.per_cell` facts per cell (its result and named
values first, then the first and last halves of the rest: a log's last line is its result), `per_table` per table,
and `per_notebook` in all.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from nbrecall.notebook.fact_types import LETTER, CellFacts, Fact, FactLimits
from nbrecall.notebook.kernel_prints import as_printed_in, displayed
from nbrecall.notebook.model import Cell, Notebook, Output
from nbrecall.notebook.outputs import OutputLimits, RenderedOutput, head_tail, stream_text, strip_ansi
from nbrecall.notebook.printed import OBJECT_REPR, latex_row, latex_text, leading_number, timing_reports
from nbrecall.notebook.printing import last_expression, print_calls, timed_statements
from nbrecall.notebook.reprs import displayed_quantity
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
    if quantity := displayed_quantity(plain, data.get("text/html")):
        return quantity
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


def _ends(facts: list[Fact], most: int) -> list[Fact]:
    """The first and last halves of `most`: a log's last line is its result."""
    if len(facts) <= most:
        return facts
    half = most // 2
    return facts[:half] + facts[len(facts) - (most - half):]


def _named(fact: Fact) -> bool:
    """The cell's result, or a value named by words that is one number or one statistic (`0.966 +/- 0.010`): what a
    question asks for, unlike an array's row, an unlabelled number or a list."""
    if fact.origin == "result":
        return True  # what the cell's last expression shows is what the cell is for
    return LETTER.search(fact.label) is not None and leading_number(fact.value) is not None


def _bounded(facts: list[Fact], most: int) -> list[Fact]:
    """At most `most` facts, the cell's result and its named values first (`_named`): a solver's log or a printed
    matrix can fill a cell's bound with unlabelled rows before the one named result between them."""
    if len(facts) <= most:
        return facts
    named: list[Fact] = []
    others: list[Fact] = []
    for fact in facts:
        (named if _named(fact) else others).append(fact)
    kept = {id(f) for f in _ends(named, most)} | {id(f) for f in _ends(others, max(most - len(named), 0))}
    return [f for f in facts if id(f) in kept]


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
    expr = displayed(language, last_expression(cell.source, tree))
    timed = timed_statements(cell.source) if "timeit" in cell.source else []
    for output, shown in zip(cell.outputs, rendered, strict=False):
        if output.output_type == "stream":
            if shown.name != "stderr" and shown.text.strip():
                text = _stream_text(output, shown, limits)
                text = _timing_facts(acc, text, timed) if timed else text
                text_facts(acc, as_printed_in(language, text), "line", prints, expr)
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
            text_facts(acc, as_printed_in(language, _result_text(output, shown)), origin, prints, expr)
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
