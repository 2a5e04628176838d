"""Notebook-aware chunking (architecture §6): groups under headings within a token budget, plus typed chunks.

A code cell alone has few words, so it is grouped with the markdown above it, under the heading path. Beside
the groups, outputs that answer questions on their own become typed chunks: `table`, `scalar`, `error`,
`figure`. Every chunk names its notebook, cells and heading so a hit always links to a cell.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from nbrecall.ingest.context import notebook_context
from nbrecall.notebook.analysis import Analysis
from nbrecall.notebook.facts import Fact
from nbrecall.notebook.headings import heading_of
from nbrecall.notebook.headings import heading_paths as cell_heading_paths
from nbrecall.notebook.model import Cell, Notebook
from nbrecall.notebook.outputs import (
    NOISE_REPR,
    FigureRef,
    OutputLimits,
    RenderedOutput,
    extract_markdown_images,
    render_outputs,
)

TokenCounter = Callable[[list[str]], list[int]]

# Bump when chunk texts change: the next index run re-chunks every notebook (unchanged texts keep their vectors).
# 3: a cell under its window budget is never split (counted whole, not line by line)
# 4: keyword text carries the notebook's context line (title, data paths, compound classes)
# 5: informative output reprs (HTML over object reprs, widgets' text), figure captions
# 6: value facts (`fact` chunks)
# 7: images pasted into markdown (attachments, data URIs) are figure chunks; figures' image hashes
# 8: facts in a table of their own (`index.fact_table`), their keyword text without notebook path and context line;
#    an index of 7 or older is re-chunked by its next run, which moves its facts out of the chunk table
# 9: a fact whose name an earlier fact of its notebook has shares that fact's vector (`ChunkRow.vector_of`),
#    fact vectors stored as bytes; the fact table of an index of 8 is made anew by its next run
# 10: a formula drawn over several lines (sympy's pretty print) is one fact in its LaTeX, not fragments; a printed
#     value whose own segment names nothing is named by the line before it; over the notebook bound a loop's
#     earlier steps and values nothing names give way first; a date or timestamp names a row, it is no value
# 11: a `%timeit` report is one fact (its duration, named by the statement timed), not four fragments
# 12: a table printed as aligned text (`print(df)`, a classification report, a regression summary) gives a fact per
#     number, named by its row and column, instead of one value per line with its numbers run together
# 13: a value followed by its unit and a comma ends a clause (`user 1.2 s, sys: …` keeps 1.2); a `%timeit` over a
#     minute is one duration (`1min 3s`), not its seconds; a timed statement is named by the names its code reads
# 14: a Series with a MultiIndex (a `groupby` on two keys) is read as a Series, each entry named by all its levels
# 15: a printout longer than the index keeps is read for values whole (up to `FactLimits.stream_lines`), not only
#     its head and tail
# 16: … bounded by the index's own `head_tail` (its head and tail halves past the bound, a marker between)
# 17: a label a loop prints under several block headers of one template is named by each value's header too
#     (`Integrating High-sensitivity RCM · The ECS`)
# 18: a spread printed without spaces (`0.170+/-0.002`) is one value with its unit, not two
# 19: a number with a unit symbol glued to it (`20ms`, `5kg`, `12.12s`) is a value with that unit; a unit may start
#     with any letter (`1.35 Å`)
# 20: … a number ending in four digits before `s` is a decade only when it is a bare four-digit integer (`1990s`,
#     not `0.8212654160161037s`)
# 21: a compound unit is read whole (`RB/(D-psi)`, `ft-lbf`), and a range printed `between 3 and 5` is one value
# 22: a quantity of something that ends a clause is a value, shown with what it is of (`21.88 roods of wheat.`)
# 23: a scale word takes the unit after it (`848.57 million STB`)
# 24: a dot between unit symbols is a product (`mPa.s`, `kN.m`, `W/m2.K`)
# 25: a units library's repr (`<Quantity(134.7, 'kilonewton')>`) is a value with its unit; a glued unit may be a
#     product (`312.56N.m`, `3819.72Nm`); a negative power may be written with a hyphen (`9.7e+09 cm-3`); a capital
#     letter alone after a stated number is a unit symbol (`is 0.808 A.`), not the article
# 26: a NumPy 2 scalar repr (`np.float64(0.93)`) is read as its number
# 27: a table drawn with borders (tabulate, prettytable, rich and Keras 3 summaries, polars) is read as a table, its
#     numbers named by row and column; polars' line of column types is no level of names (text and HTML); a pipe
#     table's header is the lines above its `|---|` rule; a word followed by `'s` after a value is no unit
# 28: a dict of numbers IPython pretty-prints one entry per line (`{'x1': 0.40,\n 'x2': 0.30}`) is read as one dict
# 29: kernels' own printing: an R vector of one element is read without its index (`[1] 3803` is 3803), R's `<-` sets
#     a constant, a kernel that displays assignments (Julia) names the value by the variable assigned; R's named
#     vectors (`summary()`, `coef()`: names over values) are read name by name, and R's line of column types
#     (`<dbl>`, IRkernel's HTML and a tibble's print) and a tibble's notes are no names, and a data frame printed with
#     one space between its columns, or a regression's coefficients (`summary(lm(...))`), is read as a table; a Julia
#     DataFrame (printed or HTML) is read without its line of column types (`Float64`) and rule; a MATLAB scalar shown
#     under its name is named by it
# 30: a units library's result whose HTML (what Jupyter shows) holds more digits than its rounded repr is read from
#     the HTML (`5450.100916496868 m/s` for pint's `<Quantity(5450.10092, 'meter / second')>`); `cubic` and `square`
#     take the unit after them (`46.7 cubic meters`); a cell's bound keeps its result and its named values before
#     unlabelled ones (a solver's log or a printed matrix filled it before the one named result between them)
# 31: a table row whose index is a number under a header name is named by that name and number (`EbNo [dB] 2.0 ·
#     BER`, `time 1.0 · GAGE1`: a sweep's parameter), and a text the same in every row (a status column) names none
# 32: what counts as a named value in a cell's bound is `printed.leading_number`'s one number, spread or range (two
#     numbers of a table row, `51   1`, no longer count)
CHUNKER_VERSION = 32

_SCALAR_MAX_CHARS = 160
# Reprs that say nothing (`<Axes ... at 0x7f...>`, `Text(0.5, …)`): the converter drops the same (outputs.py).
_NOISE_VALUE = NOISE_REPR


@dataclass
class Chunk:
    """One retrievable unit. `text` is what keyword search and snippets see; `embed_text` what gets a vector."""

    kind: str  # "text" | "code" | "table" | "scalar" | "error" | "figure" | "fact"
    cells: list[int]
    cell_ids: list[str]
    anchor: int
    heading: str
    text: str
    embed_text: str
    seq: int = 0
    images: list[str] = field(default_factory=list)  # SHA-256 of the raster images a figure chunk shows

    @property
    def anchor_id(self) -> str:
        return self.cell_ids[self.cells.index(self.anchor)] if self.anchor in self.cells else ""


@dataclass
class _Group:
    heading: str
    cells: list[Cell] = field(default_factory=list)
    tokens: int = 0


def _clean_markdown(cell: Cell) -> str:
    text, _figures = extract_markdown_images(cell.source, cell.attachments)
    return text.strip()


def _output_text(items: list[RenderedOutput]) -> str:
    return "\n".join(item.text for item in items if item.text)


def chunk_notebook(
    nb: Notebook,
    analysis: Analysis,
    *,
    count_tokens: TokenCounter,
    budget: int,
    limits: OutputLimits | None = None,
    rendered: dict[int, list[RenderedOutput]] | None = None,
    facts: list[Fact] | None = None,
) -> list[Chunk]:
    """Cut one notebook into grouped and typed chunks; `budget` is in the embedder's tokens.

    `rendered` is `render_cells(nb, limits)` when the caller already has it (the indexer stores it per cell too:
    rendering outputs is a quarter of the indexing time, so it is done once). Each of `facts` (`extract_facts`)
    becomes a `fact` chunk, and learns its chunk's `seq`."""
    if rendered is None:
        rendered = render_cells(nb, limits or OutputLimits(), analysis.trees)
    header = nb.path
    counted = _count_cells(nb, count_tokens)
    groups = _group_cells(nb, counted, budget)
    chunks: list[Chunk] = []
    for group in groups:
        chunks.extend(_group_chunks(header, group, rendered, analysis, counted, count_tokens, budget))
    chunks.extend(_typed_chunks(nb, header, groups, rendered, counted))
    first_fact = len(chunks)
    chunks.extend(fact_chunk(fact) for fact in facts or [])
    context = notebook_context(nb, analysis.trees).line
    if context:  # keyword text only, in the header (snippets skip it); vectors keep the cell's own meaning
        for chunk in chunks[:first_fact]:  # a fact's cell chunks carry it already
            head, sep, body = chunk.text.partition("\n\n")
            chunk.text = f"{head}\n{context}{sep}{body}"
    for seq, chunk in enumerate(chunks):
        chunk.seq = seq
    for fact, chunk in zip(facts or [], chunks[first_fact:], strict=True):
        fact.seq = chunk.seq
    return chunks


def heading_paths(nb: Notebook) -> dict[int, str]:
    """Every cell's heading path (`Ballast › Aft tanks`, `notebook.headings.heading_paths`)."""
    return cell_heading_paths((cell.index, cell.is_markdown, cell.source) for cell in nb.cells)


def fact_chunk(fact: Fact) -> Chunk:
    """A value fact as a chunk: keyword text sees what names the value and where it is in its notebook
    (`Fact.description`: heading path, label and value, the variables behind it, the sentence above), not the rest
    of its line (each value of `Kp = 5.97 tauI = 2.48` is its own fact), and not the notebook path and context line
    its cell's chunks carry. Measured (bench/README.md, issue 13): without the heading path too, a fact printed as
    `tau_d = 4.61` under "Fitting First Order plus Time Delay to Step Response" shares no word with "fitted dead
    time for the … step test" and is not found; the path and context line, repeated in every fact, were half of
    the fact table's text. Its vector is of its name alone (`Fact.name`)."""
    return Chunk("fact", [fact.cell], [fact.cell_id], fact.cell, fact.heading, fact.description(), fact.name())


def render_cells(
    nb: Notebook, limits: OutputLimits, trees: Mapping[str, ast.Module] | None = None
) -> dict[int, list[RenderedOutput]]:
    """Every code cell's outputs by the output rules; a figure's caption may come from the markdown just above.
    `trees` are the cells' syntax trees by source when the caller has them (`Analysis.trees`)."""
    trees = trees or {}
    rendered: dict[int, list[RenderedOutput]] = {}
    markdown_above: str | None = None
    for cell in nb.cells:
        if cell.is_code:
            rendered[cell.index] = render_outputs(
                cell, markdown_above=markdown_above, limits=limits, tree=trees.get(cell.source)
            )
        if cell.is_markdown and cell.source.strip():
            markdown_above = cell.source
        elif cell.is_code and cell.source.strip():
            markdown_above = None
    return rendered


@dataclass
class _Counted:
    """Each cell's text as chunks show it (markdown without its images, else the source) and its word pieces,
    whole and per line; made once per notebook by `_count_cells`."""

    text: dict[int, str]
    tokens: dict[int, int]
    lines: dict[int, list[int]]


def _count_cells(nb: Notebook, count_tokens: TokenCounter) -> _Counted:
    """Clean every cell once and count its lines' word pieces in one tokenizer call.

    A cell over the window budget is cut at line boundaries, which needs every line's cost; counting the lines
    once and adding them up replaces counting the whole cell and then its lines again (the tokenizer was a third
    of a worker's time). The sum is exact for the bundled WordPiece tokenizer, whose pre-tokenizer splits at
    whitespace: a text costs its special tokens (the cost of an empty text) plus its lines' other pieces."""
    texts = {cell.index: _clean_markdown(cell) if cell.is_markdown else cell.source for cell in nb.cells}
    lines = {index: text.splitlines() for index, text in texts.items()}
    counted = count_tokens([" ", *(line or " " for text_lines in lines.values() for line in text_lines)])
    specials = counted[0]
    result = _Counted(texts, {}, {})
    at = 1
    for index, text_lines in lines.items():
        costs = counted[at : at + len(text_lines)]
        at += len(text_lines)
        result.lines[index] = costs
        result.tokens[index] = specials + sum(cost - specials for cost in costs)
    return result


def _group_cells(nb: Notebook, counted: _Counted, budget: int) -> list[_Group]:
    """Walk cells in order; start a group at a heading or when the budget would be passed.

    When the budget forces a cut, markdown at the end of the full group moves to the next group so that
    the code it explains stays with it.
    """
    costs = counted.tokens
    stack: list[tuple[int, str]] = []
    groups: list[_Group] = []
    current = _Group("")
    for cell in nb.cells:
        if not cell.source.strip() and not cell.outputs:
            continue
        cost = costs[cell.index]
        heading = heading_of(cell)
        if heading is not None:
            level, text = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
            if current.cells:
                groups.append(current)
            current = _Group(" › ".join(t for _, t in stack), [cell], cost)
            continue
        if current.cells and current.tokens + cost > budget:
            carried: list[Cell] = []
            while current.cells and current.cells[-1].is_markdown and heading_of(current.cells[-1]) is None:
                carried.insert(0, current.cells.pop())
            if current.cells:
                groups.append(current)
            carried_cost = sum(costs[c.index] for c in carried)
            current = _Group(current.heading, carried, carried_cost)
        current.cells.append(cell)
        current.tokens += cost
    if current.cells:
        groups.append(current)
    return groups


def _group_chunks(
    header: str,
    group: _Group,
    rendered: dict[int, list[RenderedOutput]],
    analysis: Analysis,
    counted: _Counted,
    count_tokens: TokenCounter,
    budget: int,
) -> list[Chunk]:
    prose = "\n\n".join(counted.text[c.index] for c in group.cells if c.is_markdown and c.source.strip())
    raw = "\n\n".join(c.source.strip("\n") for c in group.cells if c.cell_type == "raw" and c.source.strip())
    code_cells = [c for c in group.cells if c.is_code and c.source.strip()]
    defines: dict[str, None] = {}  # ordered set: a 100k-line cell defines 100k names
    for cell in code_cells:
        deps = analysis.cells.get(cell.index)
        if deps is not None:
            defines.update(dict.fromkeys(deps.defines))
    outputs = "\n".join(_output_text(rendered.get(c.index, [])) for c in group.cells if c.is_code).strip()
    head = f"{header}\n{group.heading}".rstrip()
    kind = "code" if code_cells else "text"
    indices = [c.index for c in group.cells]
    ids = [c.id for c in group.cells]
    anchor = code_cells[0].index if code_cells else indices[0]
    code = "\n\n".join(c.source.strip("\n") for c in code_cells)
    defines_line = f"defines: {', '.join(defines)}" if defines else ""
    body = "\n\n".join(p for p in (prose, raw, defines_line, code, outputs) if p)
    text = f"{head}\n\n{body}"
    if group.tokens <= budget:
        return [Chunk(kind, indices, ids, anchor, group.heading, text, text)]
    # Over budget (one very long cell, or code carried with its markdown): one chunk per window of lines, so
    # nothing is silently truncated. Keyword text and vectors both see every window.
    chunks: list[Chunk] = []
    head_cost = count_tokens([head])[0]
    for cell in group.cells:
        if not cell.source.strip():
            continue
        cell_text = counted.text[cell.index]
        cell_outputs = _output_text(rendered.get(cell.index, [])) if cell.is_code else ""
        room = max(budget - head_cost, 32)
        if counted.tokens[cell.index] <= room:
            windows = [cell_text]
        else:
            windows = split_lines(cell_text, count_tokens, room, counted.lines[cell.index])
        for n, window in enumerate(windows):
            extra = f"\n\n{cell_outputs}" if cell_outputs and n == len(windows) - 1 else ""
            piece = f"{head}\n\n{window}{extra}"
            chunks.append(
                Chunk(
                    "code" if cell.is_code else "text",
                    [cell.index],
                    [cell.id],
                    cell.index,
                    group.heading,
                    piece,
                    piece,
                )
            )
    if len(chunks) > 1 and prose:
        # keep the prose with the code it explains: first code window gets the markdown prepended
        for chunk in chunks:
            if chunk.kind == "code":
                chunk.text = chunk.embed_text = f"{head}\n\n{prose}\n\n{chunk.text[len(head) + 2 :]}"
                chunk.cells = sorted({*chunk.cells, *[c.index for c in group.cells if c.is_markdown]})
                chunk.cell_ids = [ids[indices.index(i)] for i in chunk.cells]
                break
    return chunks


def split_lines(
    text: str, count_tokens: TokenCounter, budget: int, costs: list[int] | None = None
) -> list[str]:
    """Split on line boundaries into pieces of at most `budget` tokens (a single longer line is cut by chars).

    `costs` are the lines' word pieces when the caller has counted them already (`_count_cells`)."""
    lines = text.splitlines()
    if not lines:
        return [text]
    if costs is None or len(costs) != len(lines):
        costs = count_tokens([line or " " for line in lines])
    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for line, cost in zip(lines, costs, strict=True):
        if cost > budget:
            if current:
                pieces.append("\n".join(current))
                current, used = [], 0
            step = max(1, len(line) * budget // cost)
            pieces.extend(line[i : i + step] for i in range(0, len(line), step))
            continue
        if current and used + cost > budget:
            pieces.append("\n".join(current))
            current, used = [], 0
        current.append(line)
        used += cost
    if current:
        pieces.append("\n".join(current))
    return pieces


def _last_expression(source: str) -> str:
    lines = [ln for ln in source.strip().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return lines[-1].strip() if lines else ""


def _comment_text(source: str, limit: int = 200) -> str:
    """The code's own comments, a fallback caption for a figure drawn without a title."""
    lines = [ln.strip().lstrip("#").strip() for ln in source.splitlines() if ln.strip().startswith("#")]
    return " ".join(ln for ln in lines if ln)[:limit]


def _typed_chunks(
    nb: Notebook, header: str, groups: list[_Group], rendered: dict[int, list[RenderedOutput]], counted: _Counted
) -> list[Chunk]:
    heading_by_cell = {c.index: g.heading for g in groups for c in g.cells}
    prose_by_cell: dict[int, str] = {}
    last_prose = ""
    for cell in nb.cells:
        if cell.is_markdown and cell.source.strip():
            last_prose = counted.text[cell.index]
        prose_by_cell[cell.index] = last_prose
    chunks: list[Chunk] = []
    for cell in nb.cells:
        if cell.is_markdown and (cell.attachments or "data:" in cell.source):
            chunks.extend(_markdown_figure_chunks(cell, header, heading_by_cell.get(cell.index, ""), counted))
        if not cell.is_code:
            continue
        heading = heading_by_cell.get(cell.index, "")
        head = f"{header}\n{heading}".rstrip()
        ref = ([cell.index], [cell.id])
        for item in rendered.get(cell.index, []):
            context = prose_by_cell.get(cell.index, "")[:400]
            if item.kind == "table" and item.table is not None:
                expr = _last_expression(cell.source)
                columns = ", ".join(item.table.columns)
                text = f"{head}\n\ntable from `{expr}`: columns {columns}\n{item.text}\n\n{context}"
                chunks.append(Chunk("table", *ref, cell.index, heading, text, text))
            elif item.kind == "error":
                text = f"{head}\n\n{item.text}\n\ncode:\n{cell.source.strip()}"
                chunks.append(Chunk("error", *ref, cell.index, heading, text, f"{head}\n\n{item.text}"))
            elif item.kind == "figure" and item.figure is not None:
                caption = item.figure.caption or _comment_text(cell.source)
                text = f"{head}\n\nfigure: {caption}\n{context}\n\ncode:\n{cell.source.strip()}"
                chunks.append(Chunk("figure", *ref, cell.index, heading, text, text, images=_images(item.figure)))
            elif item.kind in ("text", "stream") and item.name != "stderr":
                value = item.text.strip()
                if (
                    value
                    and len(value) <= _SCALAR_MAX_CHARS
                    and value.count("\n") <= 2
                    and not _NOISE_VALUE.search(value)
                ):
                    expr = _last_expression(cell.source) if item.kind == "text" else ""
                    shown = f"{expr} = {value}" if expr and "=" not in expr.split("(")[0] else value
                    text = f"{head}\n\n{shown}\n\n{context}\n\ncode:\n{cell.source.strip()}"
                    chunks.append(
                        Chunk("scalar", *ref, cell.index, heading, text, f"{head}\n\n{shown}\n{context}")
                    )
    return chunks


def _images(figure: FigureRef) -> list[str]:
    """The image hash of a figure a describer can read (raster, not broken); [] for SVG, PDF, broken ones."""
    from nbrecall.vision.describe import describable, image_sha

    return [image_sha(figure.data)] if not figure.broken and describable(figure.mime, figure.data) else []


def _markdown_figure_chunks(cell: Cell, header: str, heading: str, counted: _Counted) -> list[Chunk]:
    """Images pasted into a markdown cell (attachments, data URIs: drawings, screenshots, scans) as figure chunks
    anchored at that cell: caption = the image's alt text, else the cell's own words."""
    _text, figures = extract_markdown_images(cell.source, cell.attachments)
    prose = counted.text.get(cell.index, "")
    head = f"{header}\n{heading}".rstrip()
    chunks = []
    for figure in figures:
        if figure.broken:
            continue
        caption = figure.caption or " ".join(prose.split())[:200]
        text = f"{head}\n\nfigure: {caption}\n{prose[:400]}"
        chunks.append(Chunk("figure", [cell.index], [cell.id], cell.index, heading, text, text,
                            images=_images(figure)))
    return chunks


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
