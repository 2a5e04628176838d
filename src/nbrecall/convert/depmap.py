"""An SVG arc diagram of a notebook's static dependency hints (architecture §10).

Code cells sit in document order on a horizontal line, labelled `[index]` and `In[n]`; an arc above the line
runs from the cell that defines a name to the cell that uses it and carries the names. Out-of-order cells are
amber, never-run cells grey, cells with an error output outlined red. A dense notebook shows its busiest
`max_cells` cells (by number of arcs) and says so. The SVG is written by hand: no dependency beyond the
standard library.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import PurePath
from xml.sax.saxutils import escape, quoteattr

from nbrecall.notebook.analysis import Analysis, DepEdge
from nbrecall.notebook.model import Notebook

FONT = "DejaVu Sans, Segoe UI, Helvetica, Arial, sans-serif"
SPACING = 84  # between node centres
MARGIN_X = 60
NODE_R = 11
TOP = 78  # y where the arc area starts
MIN_WIDTH = 720
ARC_AREA = 250  # height available to the tallest arc
ARC_OFFSET = 4  # arcs leave a node this far right of its centre and arrive this far left of it
LABEL_SIZE = 11.5
CAPTION_SIZE = 12.5

AMBER = "#f5a623"
AMBER_STROKE = "#b7791f"
GREY = "#d6d6d6"
GREY_STROKE = "#9a9a9a"
RED = "#d0021b"
BLUE = "#e6effa"
BLUE_STROKE = "#4a78b5"
ARC = "#5b6b82"
TEXT = "#222"
MUTED = "#666"


def render_dependency_svg(nb: Notebook, analysis: Analysis, *, max_cells: int = 16,
                          title: str | None = None) -> str:
    """The dependency arc diagram of `nb` as SVG text (well-formed XML, one `<g class="cell">` per node)."""
    counts = dict(analysis.order.counts)
    all_cells = [index for index, _ in analysis.order.counts]
    edges = [e for e in analysis.edges if e.src in counts and e.dst in counts and e.src != e.dst]
    shown = _busiest(all_cells, edges, max(1, max_cells))
    shown_set = set(shown)
    drawn = [e for e in edges if e.src in shown_set and e.dst in shown_set]

    n = len(shown)
    width = max(MIN_WIDTH, 2 * MARGIN_X + max(0, n - 1) * SPACING)
    x0 = (width - max(0, n - 1) * SPACING) / 2
    xs = {index: x0 + i * SPACING for i, index in enumerate(shown)}
    pos = {index: i for i, index in enumerate(shown)}
    max_span = max((pos[e.dst] - pos[e.src] for e in drawn), default=1)
    step = min(34.0, ARC_AREA / max_span)
    baseline = TOP + 18 + (16 + max_span * step if drawn else 40)

    def ry(edge: DepEdge) -> float:
        return 16 + (pos[edge.dst] - pos[edge.src]) * step

    heading = title or f"Dependencies · {PurePath(nb.path).name or nb.path}"
    subtitle = _subtitle(analysis, len(all_cells), n, len(drawn), len(edges))
    notes = ["Dependency hints are approximate (static analysis). An arc runs from the nearest cell above "
             "that defines a name to the cell that uses it."]
    if analysis.ambient:
        notes.append(_fit("Imported names are ambient, not drawn: " + ", ".join(analysis.ambient), 2 * width))
    if not analysis.cells and all_cells:
        notes.append("No dependency hints: they are computed for Python notebooks only.")
    elif all_cells and not edges:
        notes.append("No dependencies found between code cells.")
    per_line = max(40, int((width - 48) / (CAPTION_SIZE * 0.58)))
    captions = [(line, i == 0) for i, note in enumerate(notes) for line in textwrap.wrap(note, per_line)]

    legend_y = baseline + 76
    legend, legend_rows = _legend(24, legend_y, width - 24)
    caption_y = legend_y + 24 * legend_rows + 10
    height = int(caption_y + 20 * len(captions) + 8)

    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
        f'viewBox="0 0 {width:.0f} {height}" font-family={quoteattr(FONT)} role="img">',
        f"<title>{escape(heading)}</title>",
        f"<desc>{escape(subtitle)}</desc>",
        "<defs>",
        f'<marker id="depmap-arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="8" markerHeight="8" '
        f'markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        f'<path d="M0,0 L8,4 L0,8 z" fill="{ARC}"/></marker>',
        "</defs>",
        f'<rect x="0" y="0" width="{width:.0f}" height="{height}" fill="#ffffff"/>',
        f'<text x="24" y="32" font-size="17" font-weight="bold" fill="{TEXT}">{escape(heading)}</text>',
        f'<text x="24" y="54" font-size="13" fill="{MUTED}">{escape(subtitle)}</text>',
    ]
    if not all_cells:
        out.append(f'<text x="{width / 2:.0f}" y="{baseline:.0f}" font-size="14" text-anchor="middle" '
                   f'fill="{MUTED}">No code cells</text>')

    # baseline and the gaps where hidden cells would be
    if n:
        out.append(f'<line x1="{xs[shown[0]] - 24:.1f}" y1="{baseline:.1f}" x2="{xs[shown[-1]] + 24:.1f}" '
                   f'y2="{baseline:.1f}" stroke="#c8ced6" stroke-width="2"/>')
    order_pos = {index: i for i, index in enumerate(all_cells)}
    for a, b in zip(shown, shown[1:], strict=False):
        hidden = order_pos[b] - order_pos[a] - 1
        if hidden > 0:
            mid = (xs[a] + xs[b]) / 2
            noun = "code cell" if hidden == 1 else "code cells"
            out.append(f'<g class="gap"><title>{hidden} {noun} not shown</title>'
                       f'<rect x="{mid - 9:.1f}" y="{baseline - 5:.1f}" width="18" height="10" '
                       'fill="#ffffff"/>'
                       f'<text x="{mid:.1f}" y="{baseline + 4:.1f}" font-size="13" text-anchor="middle" '
                       f'fill="{MUTED}">…</text></g>')

    # arcs, longest first so short ones stay on top; they leave a node right of centre and arrive left of it
    top_y = baseline - NODE_R - 1
    for edge in sorted(drawn, key=lambda e: -(pos[e.dst] - pos[e.src])):
        x1, x2 = xs[edge.src] + ARC_OFFSET, xs[edge.dst] - ARC_OFFSET
        width_px = 1.3 + 0.35 * min(len(edge.names), 4)
        tip = f"Cell [{edge.dst}] uses {', '.join(edge.names)} from Cell [{edge.src}]"
        out.append(f'<g class="dep" data-src="{edge.src}" data-dst="{edge.dst}"><title>{escape(tip)}</title>'
                   f'<path d="M{x1:.1f},{top_y:.1f} A{(x2 - x1) / 2:.1f},{ry(edge):.1f} 0 0,1 '
                   f'{x2:.1f},{top_y:.1f}" '
                   f'fill="none" stroke="{ARC}" stroke-opacity="0.6" stroke-width="{width_px:.2f}" '
                   f'marker-end="url(#depmap-arrow)"/></g>')
    # arc labels above everything drawn so far, with a white halo, placed so that they do not overlap
    placed: list[tuple[float, float, float, float]] = []
    for edge in sorted(drawn, key=lambda e: (pos[e.dst] - pos[e.src], pos[e.src])):
        label = _names_label(edge.names)
        x1, x2 = xs[edge.src] + ARC_OFFSET, xs[edge.dst] - ARC_OFFSET
        x, y = _place_label(label, (x1 + x2) / 2, (x2 - x1) / 2, ry(edge), top_y, width, placed)
        out.append(f'<text class="dep-label" x="{x:.1f}" y="{y:.1f}" font-size="{LABEL_SIZE}" '
                   f'text-anchor="middle" fill="#1d2b3a" stroke="#ffffff" stroke-width="3.5" '
                   f'stroke-linejoin="round" paint-order="stroke">{escape(label)}</text>')

    # nodes
    out_of_order = set(analysis.order.out_of_order)
    never_run = set(analysis.order.never_run)
    errors = set(analysis.order.error_cells)
    for index in shown:
        count = counts.get(index)
        classes = ["cell"]
        fill, stroke, stroke_width, label_fill = BLUE, BLUE_STROKE, 1.5, TEXT
        states = []
        if index in out_of_order:
            classes.append("out-of-order")
            fill, stroke = AMBER, AMBER_STROKE
            states.append("out of order")
        if index in never_run:
            classes.append("never-run")
            fill, stroke, label_fill = GREY, GREY_STROKE, MUTED
            states.append("never run")
        if index in errors:
            classes.append("error")
            stroke, stroke_width = RED, 3.0
            states.append("error output")
        deps = analysis.cells.get(index)
        if deps is not None and deps.parse_error:
            states.append(f"not parsed: {deps.parse_error}")
        if deps is not None and deps.defines:
            states.append("defines " + _fit(", ".join(deps.defines), 900))
        count_label = f"In[{count}]" if count is not None else "In[ ]"
        tip = f"Cell [{index}] · {count_label}" + (" · " + " · ".join(states) if states else "")
        x = xs[index]
        out.append(
            f'<g class="{" ".join(classes)}" data-cell="{index}"><title>{escape(tip)}</title>'
            f'<circle cx="{x:.1f}" cy="{baseline:.1f}" r="{NODE_R}" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{stroke_width}"/>'
            f'<text x="{x:.1f}" y="{baseline + NODE_R + 18:.1f}" font-size="13" font-weight="bold" '
            f'text-anchor="middle" fill="{label_fill}">[{index}]</text>'
            f'<text x="{x:.1f}" y="{baseline + NODE_R + 34:.1f}" font-size="12" text-anchor="middle" '
            f'fill="{label_fill}">{escape(count_label)}</text></g>'
        )

    out.extend(legend)
    for i, (caption, italic) in enumerate(captions):
        style = ' font-style="italic"' if italic else ""
        out.append(f'<text class="caption" x="24" y="{caption_y + 20 * i:.0f}" font-size="{CAPTION_SIZE}" '
                   f'fill="{MUTED}"{style}>{escape(caption)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _place_label(label: str, cx: float, rx: float, ry: float, base: float, width: float,
                 placed: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """A text position on (or just above) the arc whose box overlaps the placed labels least; records it."""
    w, h = _text_px(label, LABEL_SIZE) + 6, LABEL_SIZE + 3
    candidates = [(cx + rx * math.cos(math.radians(a)), base - ry * math.sin(math.radians(a)) - 4)
                  for a in (90, 66, 114, 48, 132)]
    candidates.append((cx, base - ry - 4 - h))

    def box(x: float, y: float) -> tuple[float, float, float, float]:
        return (x - w / 2, y - h + 3, x + w / 2, y + 3)

    def overlap(b: tuple[float, float, float, float]) -> float:
        total = 0.0
        for o in placed:
            dx = min(b[2], o[2]) - max(b[0], o[0])
            dy = min(b[3], o[3]) - max(b[1], o[1])
            if dx > 0 and dy > 0:
                total += dx * dy
        if b[0] < 2 or b[2] > width - 2 or b[1] < TOP - 16:
            total += w * h  # off the canvas or into the subtitle
        return total

    best = min(candidates, key=lambda c: (overlap(box(*c)), candidates.index(c)))
    placed.append(box(*best))
    return best


def _busiest(cells: list[int], edges: list[DepEdge], limit: int) -> list[int]:
    """The `limit` cells with most arcs (ties: earlier first), back in document order."""
    if len(cells) <= limit:
        return list(cells)
    degree = dict.fromkeys(cells, 0)
    for edge in edges:
        degree[edge.src] += 1
        degree[edge.dst] += 1
    position = {index: i for i, index in enumerate(cells)}
    keep = sorted(cells, key=lambda index: (-degree[index], position[index]))[:limit]
    return sorted(keep, key=position.__getitem__)


def _subtitle(analysis: Analysis, total: int, shown: int, drawn: int, edges: int) -> str:
    parts = []
    if shown < total:
        parts.append(f"Showing the {shown} busiest of {total} code cells ({drawn} of {edges} arcs)")
    else:
        parts.append(f"{total} code cell{'s' if total != 1 else ''}, {edges} arc{'s' if edges != 1 else ''}")
    order = analysis.order
    if order.out_of_order:
        parts.append(f"{len(order.out_of_order)} out of order")
    if order.never_run:
        parts.append(f"{len(order.never_run)} never run")
    if order.error_cells:
        parts.append(f"{len(order.error_cells)} with errors")
    parts.append(f"health {analysis.health:.2f}")
    return " · ".join(parts)


_ARC_LEGEND = "defined in → used in (names on the arc)"


def _legend(x: float, y: float, right: float) -> tuple[list[str], int]:
    """The legend items, wrapped onto as many rows as the width needs; returns (elements, rows)."""
    items: list[tuple[str | None, str, float, str]] = [
        (BLUE, BLUE_STROKE, 1.5, "ran in order"),
        (AMBER, AMBER_STROKE, 1.5, "out of order (runs below a higher In[n])"),
        (GREY, GREY_STROKE, 1.5, "never run"),
        ("#ffffff", RED, 3.0, "error output"),
        (None, ARC, 1.6, _ARC_LEGEND),
    ]
    out = ['<g class="legend">']
    cursor, row = x, 0
    for fill, stroke, stroke_width, label in items:
        swatch = 30 if fill is None else 14
        item_width = swatch + 8 + _text_px(label, 12.5)
        if cursor > x and cursor + item_width > right:
            cursor, row = x, row + 1
        cy = y + 24 * row
        if fill is None:
            out.append(f'<path d="M{cursor:.1f},{cy:.1f} A14,10 0 0,1 {cursor + 28:.1f},{cy:.1f}" '
                       f'fill="none" stroke="{stroke}" stroke-width="{stroke_width}" '
                       'marker-end="url(#depmap-arrow)"/>')
        else:
            out.append(f'<circle cx="{cursor + 7:.1f}" cy="{cy - 4:.1f}" r="7" fill="{fill}" '
                       f'stroke="{stroke}" stroke-width="{stroke_width}"/>')
        out.append(f'<text x="{cursor + swatch + 8:.1f}" y="{cy:.1f}" font-size="12.5" '
                   f'fill="{TEXT}">{escape(label)}</text>')
        cursor += item_width + 24
    out.append("</g>")
    return out, row + 1


def _text_px(text: str, size: float) -> float:
    """A rough width for DejaVu Sans-like fonts: enough to keep neighbours apart."""
    return len(text) * size * 0.58


def _names_label(names: list[str], max_chars: int = 13) -> str:
    """'df, x +3': the most leading names that fit in `max_chars` with the count of the others."""
    if not names:
        return ""
    for k in range(len(names), 0, -1):
        rest = len(names) - k
        text = ", ".join(names[:k]) + (f" +{rest}" if rest else "")
        if len(text) <= max_chars:
            return text
    suffix = f" +{len(names) - 1}" if len(names) > 1 else ""
    room = max(4, max_chars - len(suffix))
    return names[0][: room - 1] + "…" + suffix


def _fit(text: str, width_px: float, size: float = 12.5) -> str:
    limit = max(10, int(width_px / (size * 0.58)))
    return text if len(text) <= limit else text[: limit - 1] + "…"
