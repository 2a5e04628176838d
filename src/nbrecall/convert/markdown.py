"""Render one notebook as LLM-addressable markdown (DESIGN §8).

Every cell sits under a header such as ``## Cell [5] · type:code · In[7] · id:d4e5f6`` so that "fix the error in
cell 5" means something to a model and to a person. Sources are written in full; outputs go through the output
rules of `nbrecall.notebook.outputs`; images (outputs, attachments, data URIs) become files in ``NAME_files/``
referenced by ``[Figure: …]`` placeholders. Dependency hints come from static analysis and say so.
"""

from __future__ import annotations

import re
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
    parts = [f"## Cell [{cell.index}]", f"type:{cell.cell_type}"]
    if cell.is_code:
        parts.append(f"In[{cell.execution_count if cell.execution_count is not None else ' '}]")
    parts.append(f"id:{cell.id}")
    return " · ".join(parts)


class _FigureWriter:
    """Names figure files `cell<index>-<n>.<ext>` and rewrites placeholders to point at them."""

    def __init__(self, files_dir: str) -> None:
        self.files_dir = files_dir
        self.files: dict[str, bytes] = {}

    def add(self, cell: Cell, figure: FigureRef) -> str:
        ext = _EXTENSIONS.get(figure.mime, "bin")
        stem = f"cell{cell.index}-{len([f for f in self.files if f.startswith(f'cell{cell.index}-')]) + 1}"
        name = f"{stem}.{ext}"
        self.files[name] = figure.data
        return f"{self.files_dir}/{name}"

    def placeholder(self, cell: Cell, figure: FigureRef, with_caption: bool = True) -> str:
        """`[Figure: NAME_files/cell5-1.png · image/png, 12.3 KB] caption` (the caption only for outputs:
        markdown images keep their alt text in place after the mark)."""
        link = self.add(cell, figure)
        text = f"[Figure: {link} · {figure.mime}, {human_size(figure.size_bytes)}]"
        caption = figure.caption if with_caption else None
        return f"{text} {caption}" if caption else text


def _markdown_above(nb: Notebook, index: int) -> str | None:
    for cell in reversed(nb.cells[:index]):
        if cell.is_markdown and cell.source.strip():
            return cell.source
        if cell.is_code and cell.source.strip():
            return None
    return None


def _render_output(rendered: RenderedOutput, cell: Cell, figures: _FigureWriter) -> str:
    if rendered.figure is not None:
        return figures.placeholder(cell, rendered.figure)
    if rendered.kind == "table":
        return rendered.text
    if rendered.kind == "marker":
        return rendered.text
    label = {"stream": rendered.name or "stream", "error": "error"}.get(rendered.kind, "output")
    return f"*{label}:*\n{fenced(rendered.text, 'text')}"


def _cell_order_notes(nb: Notebook, analysis: Analysis) -> dict[int, list[str]]:
    notes: dict[int, list[str]] = {}
    order = analysis.order
    counts = dict(order.counts)
    for index in order.out_of_order:
        above = [(i, c) for i, c in order.counts if i < index and c is not None]
        highest = max(above, key=lambda item: item[1]) if above else None
        text = f"execution order: In[{counts.get(index)}] runs below"
        text += f" Cell [{highest[0]}] In[{highest[1]}]" if highest else " a later-numbered cell"
        notes.setdefault(index, []).append(text)
    for index in order.never_run:
        notes.setdefault(index, []).append("never run in the saved notebook (no execution count)")
    return notes


def _dependency_line(index: int, analysis: Analysis) -> str | None:
    incoming = sorted((e for e in analysis.edges if e.dst == index), key=lambda e: e.src)
    if not incoming:
        return None
    parts = [f"{', '.join(e.names)} (defined in Cell [{e.src}])" for e in incoming]
    return "> depends on: " + "; ".join(parts) + " — approximate"


def convert_notebook(
    nb: Notebook, name: str, options: ConvertOptions | None = None, analysis: Analysis | None = None
) -> ConvertedNotebook:
    """Convert one parsed notebook; never raises on odd content (bad outputs become markers)."""
    options = options or ConvertOptions()
    analysis = analysis or analyse(nb)
    limits = OutputLimits(max_chars=options.max_output_chars)
    figures = _FigureWriter(options.files_dir or f"{name}_files")
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
        lines.append(cell_header(cell))
        lines.append("")
        record = CellRecord(
            cell.index, cell.id, cell.cell_type, cell.execution_count, len(cell.source), 0, 0, 0
        )
        if cell.is_code:
            _code_cell(nb, cell, analysis, limits, figures, order_notes, dep_warnings, lines, record)
        else:
            text, found = extract_markdown_images(cell.source, cell.attachments)
            for number, figure in enumerate(found, start=1):
                text = _replace_mark(text, number, figures.placeholder(cell, figure, with_caption=False))
            record.figures = len(found)
            lines.append(text if cell.cell_type == "markdown" else fenced(text, "raw"))
        lines.append("")
        records.append(record)

    warnings = list(analysis.order.warnings) + list(analysis.warnings)
    warnings += [
        f"Cell [{c.index}]: cell id {c.id} is synthetic (file older than nbformat 4.5)"
        for c in nb.cells[:1]
        if c.id_is_synthetic
    ]
    warnings += list(nb.notes)
    return ConvertedNotebook(
        name, "\n".join(lines).rstrip() + "\n", figures.files, analysis, records, warnings
    )


def _replace_mark(text: str, number: int, replacement: str) -> str:
    for match in FIGURE_PLACEHOLDER_RE.finditer(text):
        if int(match.group(1)) == number:
            return text[: match.start()] + replacement + text[match.end() :]
    return text


def _preamble(nb: Notebook, analysis: Analysis, name: str) -> list[str]:
    counts: dict[str, int] = {}
    for cell in nb.cells:
        counts[cell.cell_type] = counts.get(cell.cell_type, 0) + 1
    kinds = ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
    kernel = nb.kernel_name or nb.language
    version = f" {nb.language_version}" if nb.language_version else ""
    out = [
        f"> nbformat {nb.nbformat}.{nb.nbformat_minor} · kernel {kernel} ({nb.language}{version}) · "
        f"{len(nb.cells)} cells ({kinds or 'none'}) · sha256 {nb.sha256[:12]}"
    ]
    order = analysis.order
    state = "ran top to bottom" if order.ran_top_to_bottom else "did NOT run top to bottom"
    out.append(
        f"> Execution: {state}; {order.executed_fraction:.0%} of code cells executed; "
        f"health {analysis.health:.2f}"
    )
    for warning in order.warnings:
        out.append(f"> ⚠ {warning}")
    if analysis.ambient:
        out.append(f"> Imported names (ambient, not dependency edges): {', '.join(analysis.ambient)}")
    out.append(f"> Dependency hints are approximate (static analysis); limits in {name}.report.md")
    out.append("")
    return out


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
    for warning in dep_warnings.get(cell.index, []):
        lines.append(f"> ⚠ {warning} — approximate")
    deps = analysis.cells.get(cell.index)
    if deps is not None and deps.parse_error:
        lines.append(f"> ⚠ not parsed as Python ({deps.parse_error}); no dependency hints for this cell")
    if dep or cell.index in order_notes or cell.index in dep_warnings or (deps and deps.parse_error):
        lines.append("")
    lines.append(fenced(cell.source, nb.language or ""))
    rendered = render_outputs(cell, markdown_above=_markdown_above(nb, cell.index), limits=limits)
    for item in rendered:
        text = _render_output(item, cell, figures)
        record.output_chars_before += item.original_chars
        record.output_chars_after += len(text)
        record.figures += item.figure is not None
        lines.append("")
        lines.append(text)
