"""Render one notebook as LLM-addressable markdown (architecture §10).

Every cell sits under a compact header such as ``## Cell 5 code In[7]`` (plus ``id:d4e5f6`` when the id is the
notebook's own; derived ids are in the report's cell map) so that "fix the error in cell 5" means something to a
model and to a person. Sources are written in full; outputs go through the output rules of
`nbrecall.notebook.outputs`, in fences labelled `output`, `stderr` or `error`; images (outputs, attachments, data
URIs) become files in ``NAME_files/`` referenced as markdown images. Dependency hints come from static analysis
and say so once. What costs tokens and says nothing new is left out: the never-run note (``In[ ]`` says it),
warnings repeated in the preamble, imported names (the sources hold them), empty output blocks and reprs that name
no result (``<matplotlib.lines.Line2D at 0x…>``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from nbrecall.notebook.analysis import Analysis, analyse
from nbrecall.notebook.model import Cell, Notebook
from nbrecall.notebook.outputs import (
    FIGURE_PLACEHOLDER_RE,
    FigureRef,
    OutputLimits,
    RenderedOutput,
    extract_markdown_images,
    human_size,
    markdown_caption,
    names_no_result,
    render_outputs,
)

_EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/svg+xml": "svg",
    "application/pdf": "pdf",
}


@dataclass
class ConvertOptions:
    """How much of each output to keep, and where figure files are referenced from."""

    max_output_chars: int = 2000
    files_dir: str = ""  # relative folder for extracted figures; "" → "<name>_files"
    # `convert --describe-figures`: a figure's machine-made description (None: none), added after its image
    describe_figure: Callable[[FigureRef], str | None] | None = None


@dataclass
class CellRecord:
    """One row of the fidelity report's cell map."""

    index: int
    cell_id: str
    cell_type: str
    execution_count: int | None
    source_chars: int
    output_chars_before: int
    output_chars_after: int
    figures: int
    notes: list[str] = field(default_factory=list)
    derived_id: bool = False  # made from index and source: the notebook has none (or a duplicate) for the cell


@dataclass
class ConvertedNotebook:
    """The markdown text, the figure files to write beside it, and what the report needs."""

    name: str
    markdown: str
    files: dict[str, bytes]
    analysis: Analysis
    cells: list[CellRecord]
    warnings: list[str]


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run inside `text`, so sources are never cut short."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def fenced(text: str, info: str = "") -> str:
    fence = fence_for(text)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{info}\n{body}{fence}"


def cell_header(cell: Cell) -> str:
    """The header of a cell in answer contexts (`nbrecall.answer.context`): every part spelled out."""
    parts = [f"## Cell [{cell.index}]", f"type:{cell.cell_type}"]
    if cell.is_code:
        parts.append(f"In[{cell.execution_count if cell.execution_count is not None else ' '}]")
    parts.append(f"id:{cell.id}")
    return " · ".join(parts)


def compact_header(cell: Cell) -> str:
    """The converter's cell header: `## Cell 5 code In[7]`, with `id:…` only when the id is the notebook's
    own (a derived one would look like a real id; the report's cell map lists it); a raw cell names its format."""
    parts = [f"## Cell {cell.index}", cell.cell_type]
    if cell.is_code:
        parts.append(f"In[{cell.execution_count if cell.execution_count is not None else ' '}]")
    if cell.unknown_type:
        parts.append(f"(unknown cell type {cell.unknown_type!r}, shown raw)")
    elif cell.cell_type == "raw" and cell.raw_mimetype:
        parts.append(cell.raw_mimetype)
    if not cell.id_is_synthetic:
        parts.append(f"id:{cell.id}")
    return " ".join(parts)


def fence_label(language: str) -> str:
    """One word for a fence's info string: `wolfram language` → `wolfram` (a renderer reads the first word)."""
    words = re.findall(r"[\w+#.-]+", language.lower())
    return words[0] if words else ""


def _alt_text(caption: str | None) -> str:
    """A caption as an image's alt text: one line; brackets kept when balanced (`(x: time [h])`), else escaped."""
    text = " ".join((caption or "").split()) or "figure"
    depth = 0
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth < 0:
            break
    return text if depth == 0 else text.replace("[", "\\[").replace("]", "\\]")


class _FigureWriter:
    """Names figure files `cell<index>-<n>.<ext>` and rewrites placeholders to point at them."""

    def __init__(self, files_dir: str, describe: Callable[[FigureRef], str | None] | None = None) -> None:
        self.files_dir = files_dir
        self.describe = describe
        self.files: dict[str, bytes] = {}
        self.broken: list[str] = []  # warnings: images that were not written

    def add(self, cell: Cell, figure: FigureRef) -> str:
        ext = _EXTENSIONS.get(figure.mime, "bin")
        stem = f"cell{cell.index}-{len([f for f in self.files if f.startswith(f'cell{cell.index}-')]) + 1}"
        name = f"{stem}.{ext}"
        self.files[name] = figure.data
        return f"{self.files_dir}/{name}"

    def placeholder(self, cell: Cell, figure: FigureRef, said_above: str | None = None) -> str:
        """`![caption](NAME_files/cell5-1.png)`: an output's caption, a markdown image's alt text; a caption that is
        `said_above` (the markdown cell right above, already in the document) is not repeated. A broken image
        (empty, undecodable) is reported and not written."""
        if figure.broken:
            where = "an attachment" if figure.source == "attachment" else f"an {figure.source.replace('-', ' ')}"
            self.broken.append(f"Cell [{cell.index}]: {where} {figure.mime} image is empty or not valid "
                               f"({human_size(figure.size_bytes)} of data): reported, not written")
            return f"[broken {figure.mime} image, not written]"
        link = self.add(cell, figure)
        caption = figure.caption if figure.caption != said_above else None
        image = f"![{_alt_text(caption)}]({link})"
        described = self.describe(figure) if self.describe is not None else None
        return f"{image} ({' '.join(described.split())})" if described else image


def _markdown_above(nb: Notebook, index: int) -> str | None:
    """The markdown cell right above (empty cells skipped), the one a figure's caption may come from."""
    for cell in reversed(nb.cells[:index]):
        if cell.is_markdown and cell.source.strip():
            return cell.source
        if cell.is_code and cell.source.strip():
            return None
    return None


def _render_output(rendered: RenderedOutput, cell: Cell, figures: _FigureWriter,
                   said_above: str | None = None) -> str | None:
    """One output as markdown; None when it says nothing (empty, or a repr that names no result)."""
    if rendered.figure is not None:
        return figures.placeholder(cell, rendered.figure, said_above)
    if not rendered.text.strip():
        return None
    if rendered.kind in ("table", "marker"):
        return rendered.text
    if rendered.kind in ("text", "stream") and names_no_result(rendered.text):
        return None
    label = "error" if rendered.kind == "error" else "stderr" if rendered.name == "stderr" else "output"
    return fenced(rendered.text, label)


def _cell_order_notes(nb: Notebook, analysis: Analysis) -> dict[int, list[str]]:
    """Per cell, where its execution count breaks the document order (never-run cells show `In[ ]`)."""
    notes: dict[int, list[str]] = {}
    order = analysis.order
    counts = dict(order.counts)
    for index in order.out_of_order:
        above = [(i, c) for i, c in order.counts if i < index and c is not None]
        highest = max(above, key=lambda item: item[1]) if above else None
        text = f"out of order: In[{counts.get(index)}] runs below"
        text += f" Cell {highest[0]} In[{highest[1]}]" if highest else " a later-numbered cell"
        notes.setdefault(index, []).append(text)
    return notes


def _dependency_line(index: int, analysis: Analysis) -> str | None:
    """`> uses x, y (Cell 3); z (Cell 5)`: where the names a cell reads come from (static, approximate).
    Names from the code cell right above are left out: reading down, one sees them defined there."""
    above = max((i for i in analysis.cells if i < index), default=None)
    incoming = sorted((e for e in analysis.edges if e.dst == index and e.src != above), key=lambda e: e.src)
    if not incoming:
        return None
    return "> uses " + "; ".join(f"{', '.join(e.names)} (Cell {e.src})" for e in incoming)


def convert_notebook(
    nb: Notebook, name: str, options: ConvertOptions | None = None, analysis: Analysis | None = None
) -> ConvertedNotebook:
    """Convert one parsed notebook; never raises on odd content (bad outputs become markers)."""
    options = options or ConvertOptions()
    analysis = analysis or analyse(nb)
    limits = OutputLimits(max_chars=options.max_output_chars)
    figures = _FigureWriter(options.files_dir or f"{name}_files", options.describe_figure)
    order_notes = _cell_order_notes(nb, analysis)
    dep_warnings: dict[int, list[str]] = {}
    for warning in analysis.warnings:
        match = re.match(r"Cell \[(\d+)\]", warning)
        if match:
            dep_warnings.setdefault(int(match.group(1)), []).append(warning)

    lines: list[str] = [f"# {nb.path}", ""]
    lines.extend(_preamble(nb, analysis, name))
    records: list[CellRecord] = []
    for cell in nb.cells:
        lines.append(compact_header(cell))
        lines.append("")
        record = CellRecord(
            cell.index, cell.id, cell.cell_type, cell.execution_count, len(cell.source), 0, 0, 0,
            derived_id=cell.id_is_synthetic,
        )
        if cell.is_code:
            _code_cell(nb, cell, analysis, limits, figures, order_notes, dep_warnings, lines, record)
        else:
            text, found = extract_markdown_images(cell.source, cell.attachments)
            for number, figure in enumerate(found, start=1):
                text = _replace_mark(text, number, figures.placeholder(cell, figure), figure.caption)
            record.figures = len(found)
            if not text.strip():
                lines.pop()  # an empty cell: its header says all there is
            elif cell.cell_type == "markdown":
                lines.append(text)
            else:
                lines.append(fenced(text, fence_label(cell.raw_mimetype.rpartition("/")[2]) or "raw"))
        lines.append("")
        records.append(record)

    warnings = list(analysis.order.warnings) + list(analysis.warnings)
    derived = [c for c in nb.cells if c.id_is_synthetic]
    if derived:
        why = "the file is older than nbformat 4.5" if (nb.nbformat, nb.nbformat_minor) < (4, 5) else \
            "the file has none or a duplicate for them"
        warnings.append(f"{len(derived)} cell id(s) derived from cell index and source ({why}); the cell map "
                        "lists them")
    warnings += figures.broken
    warnings += list(nb.notes)
    return ConvertedNotebook(
        name, "\n".join(lines).rstrip("\n") + "\n", figures.files, analysis, records, warnings
    )


def _replace_mark(text: str, number: int, replacement: str, alt: str | None = None) -> str:
    """Put `replacement` where mark N is; the alt text after the mark is in the image itself (`![alt](…)`)."""
    for match in FIGURE_PLACEHOLDER_RE.finditer(text):
        if int(match.group(1)) == number:
            end = match.end()
            if alt and text.startswith(f" {alt}", end):
                end += len(alt) + 1
            return text[: match.start()] + replacement + text[end:]
    return text


def _preamble(nb: Notebook, analysis: Analysis, name: str) -> list[str]:
    """Facts that hold for every notebook, on one line: format, kernel (or "unknown"), cells; how it ran only when
    it has code (health only when below 1). Per-cell warnings are at their cells and in the report."""
    counts: dict[str, int] = {}
    for cell in nb.cells:
        counts[cell.cell_type] = counts.get(cell.cell_type, 0) + 1
    kinds = ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
    language = " ".join(p for p in (nb.language, nb.language_version) if p)
    kernel = nb.kernel_name or ("" if nb.language else "unknown")
    described = " ".join(p for p in (kernel, f"({language})" if language and kernel else language) if p)
    facts = [f"nbformat {nb.nbformat}.{nb.nbformat_minor}", f"kernel {described}",
             f"{len(nb.cells)} cells" + (f" ({kinds})" if kinds else "")]
    order = analysis.order
    if order.counts:  # non-empty code cells: otherwise there is no run to describe
        if order.ran_top_to_bottom:
            facts.append("ran top to bottom")
        else:
            why = [f"{len(order.out_of_order)} out of order" if order.out_of_order else "",
                   f"{len(order.never_run)} never run" if order.never_run else ""]
            facts.append("did NOT run top to bottom" + (f" ({', '.join(w for w in why if w)})" if any(why) else ""))
            facts.append(f"{order.executed_fraction:.0%} of code cells executed")
        if order.error_cells:
            shown = ", ".join(str(i) for i in order.error_cells[:5])
            facts.append(f"errors in cells {shown}" + (" …" if len(order.error_cells) > 5 else ""))
        if analysis.health < 1.0:
            facts.append(f"health {analysis.health:.2f}")
    if analysis.edges or analysis.warnings:
        facts.append("`uses` lines: static hints, approximate")
    return ["> " + " · ".join(facts), ""]


def _code_cell(
    nb: Notebook,
    cell: Cell,
    analysis: Analysis,
    limits: OutputLimits,
    figures: _FigureWriter,
    order_notes: dict[int, list[str]],
    dep_warnings: dict[int, list[str]],
    lines: list[str],
    record: CellRecord,
) -> None:
    dep = _dependency_line(cell.index, analysis)
    if dep:
        lines.append(dep)
    for note in order_notes.get(cell.index, []):
        lines.append(f"> ⚠ {note}")
        record.notes.append(note)
    if cell.index in analysis.order.never_run:
        record.notes.append("never run in the saved notebook")  # the header's `In[ ]` says it there
    for warning in dep_warnings.get(cell.index, []):
        lines.append("> ⚠ " + re.sub(r"Cell \[(\d+)\]", r"Cell \1", warning.removeprefix(f"Cell [{cell.index}] ")))
    deps = analysis.cells.get(cell.index)
    if deps is not None and deps.parse_error:
        lines.append(f"> ⚠ not parsed as Python ({deps.parse_error}): no hints")
    if dep or cell.index in order_notes or cell.index in dep_warnings or (deps and deps.parse_error):
        lines.append("")
    if cell.source.strip():
        lines.append(fenced(cell.source, fence_label(nb.language)))
    else:
        lines.pop()  # an empty cell: its header says all there is
    above = _markdown_above(nb, cell.index)
    tree = analysis.trees.get(cell.source)
    rendered = render_outputs(cell, markdown_above=above, limits=limits, tree=tree)
    said_above = markdown_caption(above, cell.source, tree) if any(r.figure for r in rendered) else None
    for item in rendered:
        text = _render_output(item, cell, figures, said_above)
        record.output_chars_before += item.original_chars
        record.figures += item.figure is not None and not item.figure.broken
        if text is None:
            continue
        record.output_chars_after += len(text)
        lines.append("")
        lines.append(text)
