"""Notebook → HTML for the read-only viewer: markdown, highlighted code and outputs, all sanitized.

The viewer shows the indexed content of a notebook. It reads the file the manifest names for the notebook's
hash and checks that the bytes still hash to it; when the file is gone or has changed since indexing, it shows
the cells the manifest recorded (sources and filtered outputs) and says so.

When the notebook content has a stored re-render (`nbrecall render`), the page carries a notebook-level badge
(fresh / changed / stale + reason), every compared code cell a badge (same / changed / failed / new), and, when
the render ran, the original and the re-rendered outputs side by side; both go through `render_output`
(`cell_html`, which turns one cell's pieces into HTML), so the fresh outputs are sanitized exactly like the
originals.

Every piece is bounded: HTML (in an output or in markdown) nested deeper than `MAX_HTML_DEPTH` is shown as
escaped text, long text outputs head and tail, a page holds `PAGE_BYTES` of outputs at most. This module builds
pages one range of cells at a time (`page_views`); `nbrecall.web.worker` runs it in a separate process within a
time and memory budget, and `degraded_views` is the plain-text page shown when even that is exceeded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from nbrecall.ingest.renders import render_label, render_summary, render_warning
from nbrecall.notebook.model import Cell, Notebook, Output
from nbrecall.records import CellRecord, ContentRecord
from nbrecall.web.cell_html import output_marker, preformatted, render_code, render_markdown, render_output

PAGE_BYTES = 8_000_000  # outputs of one viewer page; past it, the page's further outputs are markers

if TYPE_CHECKING:
    from nbrecall.render.compare import RenderResult

# ----------------------------------------------------------------------------------------------------------
# notebooks


@dataclass
class CellView:
    index: int
    cell_id: str
    cell_type: str
    execution_count: int | None
    tags: list[str]
    body: Markup
    outputs: list[Markup] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    render_status: str | None = None  # same / changed / failed / new, when a stored render compared this cell
    render_detail: str = ""  # the fresh error or a short diff
    render_change: str = ""  # values / text / figure / error / random / format (render.compare.CHANGE_CLASSES)
    fresh_outputs: list[Markup] | None = None  # set when the page shows original and re-rendered side by side
    fresh_prompts: list[str] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return f"cell-id={self.cell_id}"

    @property
    def render_badge(self) -> str:
        """The cell badge: `changed · values`, `changed · random`; a format-only cell is just `same`."""
        if self.render_status == "changed" and self.render_change:
            return f"changed · {self.render_change}"
        return self.render_status or ""

    @property
    def side_by_side(self) -> bool:
        return self.fresh_outputs is not None and bool(self.outputs or self.fresh_outputs or self.render_status)


@dataclass
class RenderView:
    """The notebook-level render badge and what the page says about the render."""

    status: str
    reason: str
    rendered_at: str
    warning: str | None
    counts: dict[str, int]
    notes: list[str]
    side_by_side: bool
    indexed_status: str | None  # what the index used; None when indexed without a render
    notice: str | None = None

    @property
    def label(self) -> str:
        return render_label(self.status, self.reason)


@dataclass
class NotebookView:
    """One page of the viewer: the notebook's header and the cells `start`..`stop` of `n_cells`."""

    sha: str
    path: str
    paths: list[str]
    meta: dict[str, Any]
    cells: list[CellView]
    order_warnings: list[str]
    notes: list[str]
    from_file: bool
    notice: str | None = None
    render: RenderView | None = None
    n_cells: int = 0
    page: int = 0
    pages: int = 1
    start: int = 0
    stop: int = 0
    simplified: list[str] = field(default_factory=list)  # what this page shows as text instead, and why
    degraded: str | None = None  # set when the whole page is plain text (the render ran out of its budget)

    @property
    def page_numbers(self) -> list[int]:
        """The pages the pager links to: the first, the last, and a few around this one."""
        near = range(max(0, self.page - 3), min(self.pages, self.page + 4))
        return sorted({0, self.pages - 1, *near})


@dataclass
class PageResult:
    """What a render worker sends back for one page: the cells, rendered and sanitized, and what it found."""

    cells: list[CellView]
    from_file: bool
    simplified: list[str] = field(default_factory=list)
    render: RenderView | None = None


CHANGED_NOTICE = (
    "The file on disk is missing or has changed since it was indexed: showing the indexed cells "
    "(sources and filtered outputs). Re-index to see the current file."
)


def cells_from_records(records: list[CellRecord]) -> list[Cell]:
    return [
        Cell(index=r.idx, id=r.cell_id, cell_type=r.cell_type, source=r.source, execution_count=r.execution_count)
        for r in records
    ]


def page_views(
    cells: list[Cell] | None,
    records: list[CellRecord],
    language: str,
    meta: dict[str, Any],
    render: RenderResult | None = None,
    fresh: Notebook | None = None,
    matched: dict[int, Cell] | None = None,
    describe: Callable[[list[str]], dict[str, str]] | None = None,
) -> PageResult:
    """One page of cells as views: from the file's cells when it still has the indexed content (`cells`), else
    from the index's records of them; with the stored re-render (`render`, and the executed copy's cells matched
    to this page's, `matched`) when there is one. Sanitized, and bounded by `PAGE_BYTES`."""
    simplified: list[str] = []
    budget = [PAGE_BYTES]
    views: list[CellView] = []
    if cells is not None:
        for cell in cells:
            views.append(_cell_view(cell, language, simplified, budget))
    else:
        by_index = {r.idx: r for r in records}
        for cell in cells_from_records(records):
            view = _cell_view(cell, language, simplified, budget)
            stored = by_index[cell.index].outputs
            if stored.strip():
                view.outputs = [preformatted(stored, "output-text")]
            views.append(view)
    if cells is not None and describe is not None:
        _add_descriptions(cells, views, describe)
    result = PageResult(cells=views, from_file=cells is not None, simplified=simplified)
    if render is not None:
        result.render = _attach_render(views, meta, render, matched if cells is not None and fresh else None,
                                       simplified, budget)
    return result


def _add_descriptions(
    cells: list[Cell], views: list[CellView], describe: Callable[[list[str]], dict[str, str]]
) -> None:
    """Under each output image, its machine-made description from the index's figure cache (`describe` maps image
    hashes to the chunk's description line)."""
    from nbrecall.notebook.outputs import render_output as rule_output
    from nbrecall.vision.describe import describable, image_sha

    found: dict[tuple[int, int], str] = {}
    for position, cell in enumerate(cells):
        for n, output in enumerate(cell.outputs or []):
            if not isinstance(output.data, dict) or not any(str(m).startswith("image/") for m in output.data):
                continue
            figure = rule_output(output).figure
            if figure is not None and not figure.broken and describable(figure.mime, figure.data):
                found[(position, n)] = image_sha(figure.data)
    if not found:
        return
    lines = describe(sorted(set(found.values())))
    for (position, n), sha in found.items():
        view = views[position]
        if sha in lines and n < len(view.outputs):
            view.outputs[n] = view.outputs[n] + Markup('<div class="figure-description">{}</div>').format(lines[sha])


def degraded_views(records: list[CellRecord]) -> list[CellView]:
    """The page as plain escaped text from the index's records (sources and filtered outputs): what the viewer
    shows when rendering the page ran out of its time or memory budget. Linear in the records' size."""
    views: list[CellView] = []
    for r in records:
        view = CellView(r.idx, r.cell_id, r.cell_type, r.execution_count, [], preformatted(r.source, "raw simplified"))
        if r.outputs.strip():
            view.outputs, view.prompts = [preformatted(r.outputs, "output-text simplified")], [""]
        views.append(view)
    return views


def notebook_view(
    content: ContentRecord,
    paths: list[str],
    page: PageResult | None,
    records: list[CellRecord],
    *,
    n_cells: int,
    page_number: int = 0,
    page_cells: int = 100,
    degraded: str | None = None,
) -> NotebookView:
    """The viewer's model of one page of an indexed notebook, from what a render worker sent (`page`), or, when
    it could not (`degraded` says why), the page as plain text from the index's records."""
    meta = dict(content.meta or {})
    start = page_number * page_cells
    pages = max(1, -(-n_cells // page_cells))
    if page is None:
        cells, from_file, simplified, render = degraded_views(records), False, [], None
    else:
        cells, from_file, simplified, render = page.cells, page.from_file, page.simplified, page.render
    notice = None if page is None or from_file else CHANGED_NOTICE
    return NotebookView(
        sha=content.sha256,
        path=content.rel,
        paths=paths,
        meta=meta,
        cells=cells,
        order_warnings=[str(w) for w in meta.get("order_warnings") or []],
        notes=[str(n) for n in meta.get("notes") or []],
        from_file=from_file,
        notice=notice,
        render=render,
        n_cells=n_cells,
        page=page_number,
        pages=pages,
        start=start,
        stop=min(n_cells, start + page_cells),
        simplified=simplified,
        degraded=degraded,
    )


def _attach_render(
    views: list[CellView],
    meta: dict[str, Any],
    render: RenderResult,
    matched: dict[int, Cell] | None,
    simplified: list[str],
    budget: list[int],
) -> RenderView:
    """Badges on the cells the render compared; the re-rendered outputs beside the originals when it ran."""
    compared = {c.id: c for c in render.cells}
    for cell in views:
        comparison = compared.get(cell.cell_id)
        if comparison is not None:
            cell.render_status, cell.render_detail = comparison.status, comparison.detail
            cell.render_change = comparison.change
    side_by_side = False
    if matched is not None:
        for cell in views:
            other = matched.get(cell.index)
            if cell.cell_type == "code" and other is not None:
                notes: list[str] = []
                cell.fresh_outputs, cell.fresh_prompts = _outputs_html(other.outputs, notes, budget)
                simplified.extend(f"Cell [{cell.index}] (re-rendered): {n}" for n in notes)
                side_by_side = True
    indexed = render_summary(meta)["render_status"]
    notice = None
    if indexed != render.status or str(meta.get("rendered_at") or "") != render.rendered_at:
        notice = (
            "This render is newer than the index: search still uses "
            + (f"the {indexed} render" if indexed else "the file's own outputs")
            + ". Run `nbrecall index` to use it."
        )
    return RenderView(
        status=render.status,
        reason=render.reason,
        rendered_at=render.rendered_at,
        warning=render_warning(render.status, render.reason),
        counts={k: v for k, v in render.counts().items() if v},
        notes=[str(n) for n in render.notes],
        side_by_side=side_by_side,
        indexed_status=indexed,
        notice=notice,
    )


def _outputs_html(
    outputs: list[Output], notes: list[str] | None = None, budget: list[int] | None = None
) -> tuple[list[Markup], list[str]]:
    """Outputs as sanitized HTML with their `Out[n]` prompts (the same rules for original and fresh outputs).

    `budget` (one number, in a list so callers share it) is what the page may still hold; an output that does
    not fit becomes a marker."""
    html_outputs: list[Markup] = []
    prompts: list[str] = []
    for output in outputs:
        if budget is not None and budget[0] <= 0:
            html_outputs.append(output_marker("[output not shown: this page already holds the most a page shows; "
                                        "the cell's outputs are in /api/notebooks/…/cells/…]"))
        else:
            try:
                html = render_output(output, notes)
            except Exception as exc:  # odd data must never break the page
                html = output_marker(f"[unreadable output: {type(exc).__name__}]")
            if budget is not None:
                budget[0] -= len(html)
            html_outputs.append(html)
        prompt = ""
        if output.output_type == "execute_result" and output.execution_count is not None:
            prompt = f"Out[{output.execution_count}]"
        prompts.append(prompt)
    return html_outputs, prompts


def _cell_view(
    cell: Cell, language: str, simplified: list[str] | None = None, budget: list[int] | None = None
) -> CellView:
    notes: list[str] = []
    if cell.cell_type == "markdown":
        body = render_markdown(cell.source, cell.attachments, notes)
    elif cell.cell_type == "code":
        body = render_code(cell.source, language)
    else:
        body = Markup('<pre class="raw">{}</pre>').format(cell.source)
    view = CellView(cell.index, cell.id, cell.cell_type, cell.execution_count, list(cell.tags), body)
    if budget is not None:
        budget[0] -= len(body)
    view.outputs, view.prompts = _outputs_html(cell.outputs, notes, budget)
    if simplified is not None:
        simplified.extend(f"Cell [{cell.index}]: {n}" for n in notes)
    return view


# ----------------------------------------------------------------------------------------------------------
# search results


def highlight_terms(text: str, query: str) -> Markup:
    """`text` escaped, with every query term wrapped in `<mark>` (case-insensitive, at word starts)."""
    from nbrecall.index.terms import query_terms  # here: render workers never load the terms (snowballstemmer)

    terms = sorted(query_terms(query), key=len, reverse=True)
    if not terms:
        return escape(text)
    pattern = re.compile(r"(?<![\w])(" + "|".join(re.escape(t) for t in terms) + ")", re.IGNORECASE)
    out: list[Markup] = []
    last = 0
    for match in pattern.finditer(text):
        out.append(escape(text[last : match.start()]))
        out.append(Markup("<mark>{}</mark>").format(match.group(0)))
        last = match.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)
