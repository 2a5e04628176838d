"""The output rules of DESIGN §3: what of a cell's outputs survives into markdown, chunks and answers.

Outputs are where notebooks hide both their answers (a printed total, a DataFrame) and their bulk (base64
PNGs, 10,000-line training logs, widget state, plotly JSON). These rules run before any token is counted, so
that the converter and the chunker see the same bounded, script-free text: figures become a marker with size
and caption, streams and long texts keep head and tail, errors keep `ename: evalue` and the frames that
matter, DataFrames become markdown tables with shape and types.

Figure placeholders in markdown (see `extract_markdown_images`) have the stable form
``[figure N: <mime>, <size>] <alt>`` where N counts the figures returned, from 1; `FIGURE_PLACEHOLDER_RE`
matches the bracketed part so a caller can swap it for a link to the extracted file.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from nbrecall.notebook.captions import TAG_RE, clip_caption, figure_caption, markdown_caption
from nbrecall.notebook.figures import (
    FIGURE_PLACEHOLDER_RE,
    IMAGE_MIMES,
    FigureRef,
    as_text,
    extract_markdown_images,
    figure_from_data_uri,
    figure_from_value,
    figure_text,
    human_size,
    img_tags,
)
from nbrecall.notebook.model import Cell, Output
from nbrecall.notebook.output_text import (
    NOISE_REPR,
    OutputLimits,
    collapse_carriage_returns,
    head_tail,
    html_to_text,
    is_object_repr,
    names_no_result,
    strip_ansi,
)
from nbrecall.notebook.tables import TableSummary, dataframe_html_to_summary

__all__ = [
    "FIGURE_PLACEHOLDER_RE",
    "NOISE_REPR",
    "FigureRef",
    "OutputLimits",
    "RenderedOutput",
    "collapse_carriage_returns",
    "extract_markdown_images",
    "figure_caption",
    "head_tail",
    "html_to_text",
    "human_size",
    "is_object_repr",
    "markdown_caption",
    "names_no_result",
    "render_output",
    "render_outputs",
    "stream_text",
    "strip_ansi",
]


@dataclass
class RenderedOutput:
    """One output after the rules: the text that goes into markdown and chunks, plus what it was made from."""

    kind: str  # "stream" | "error" | "table" | "figure" | "text" | "html" | "marker"
    text: str
    original_chars: int
    truncated: bool = False
    table: TableSummary | None = None
    figure: FigureRef | None = None
    mime: str | None = None  # the representation chosen from a mime bundle
    name: str | None = None  # stream name (stdout/stderr); for an error, its ename


def _bounded(text: str, limits: OutputLimits) -> tuple[str, bool]:
    """Keep a text whole when it is at most `max_chars`, else its head and tail."""
    if len(text) <= limits.max_chars:
        return text.rstrip("\n"), False
    return head_tail(text, limits)


# ---------------------------------------------------------------------------------------------------------
# render one output

_MARKERS: tuple[tuple[str, str], ...] = (
    ("application/vnd.jupyter.widget-view+json", "[widget output]"),
    ("application/vnd.jupyter.widget-state+json", "[widget output]"),
    ("application/vnd.plotly.v1+json", "[plotly figure]"),
    ("application/vnd.bokehjs_exec.v0+json", "[bokeh output]"),
    ("application/vnd.bokehjs_load.v0+json", "[bokeh output]"),
    ("application/vnd.holoviews_exec.v0+json", "[holoviews output]"),
    ("application/vnd.holoviews_load.v0+json", "[holoviews output]"),
    ("application/vnd.vegalite", "[vega-lite chart]"),
    ("application/vnd.vega.", "[vega chart]"),
    ("application/geo+json", "[geojson output]"),
    ("application/vnd.dataresource+json", "[data resource output]"),
    ("application/javascript", "[javascript output]"),
    ("text/javascript", "[javascript output]"),
)
_QUOTED_WORDS = re.compile(r"'[^'\n]*\w[^'\n]*'|\"[^\"\n]*\w[^\"\n]*\"")
_WIDGET_MIMES = ("application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")


def _marker_for(mime: str) -> str | None:
    for prefix, marker in _MARKERS:
        if mime.startswith(prefix):
            return marker
    return None


def _original_chars(output: Output) -> int:
    if output.output_type == "stream":
        return len(as_text(output.text))
    if output.output_type == "error":
        return len(str(output.ename)) + len(str(output.evalue)) + sum(len(as_text(t)) for t in
                                                                   (output.traceback or []))
    data = output.data if isinstance(output.data, dict) else {}
    return sum(len(as_text(v)) for v in data.values())


def stream_text(output: Output) -> str:
    """A stream as a terminal shows it: escape codes removed, lines redrawn with `\\r` at their last state."""
    return collapse_carriage_returns(strip_ansi(as_text(output.text)))


def _render_stream(output: Output, limits: OutputLimits, original: int) -> RenderedOutput:
    text = stream_text(output)
    kept, truncated = head_tail(text, limits)
    name = output.name if isinstance(output.name, str) else None
    return RenderedOutput("stream", kept, original, truncated, name=name or "stdout")


_HEADER_LINE_RE = re.compile(r"\s*(?:-{5,}|(?:\S+\s+)?Traceback \(most recent call last\):?)\s*")


def _render_error(output: Output, limits: OutputLimits, original: int) -> RenderedOutput:
    """`ename: evalue` first, then the first real frame (the user's line) and the last, middle dropped."""
    ename = strip_ansi(str(output.ename or "")).strip() or "Error"
    evalue = strip_ansi(str(output.evalue or "")).strip()
    heading = f"{ename}: {evalue}" if evalue else ename
    heading, cut = _bounded(heading, limits)
    frames: list[str] = []
    for raw in output.traceback or []:
        lines = strip_ansi(as_text(raw)).replace("\r\n", "\n").rstrip().split("\n")
        kept = [ln.rstrip() for ln in lines if not _HEADER_LINE_RE.fullmatch(ln)]
        while kept and not kept[0].strip():
            kept.pop(0)
        if kept:
            frames.append("\n".join(kept))
    if frames and _norm(frames[-1]) in (_norm(heading), _norm(ename)):
        frames.pop()  # the closing `ename: evalue` line repeats the heading
    frame_limits = OutputLimits(max_chars=max(200, limits.max_chars // 2),
                                stream_max_lines=limits.stream_max_lines, head_lines=limits.head_lines,
                                tail_lines=limits.tail_lines)
    parts = [heading]
    shown = frames if len(frames) <= 2 else [frames[0], frames[-1]]
    for i, frame in enumerate(shown):
        text, frame_cut = head_tail(frame, frame_limits)
        cut = cut or frame_cut
        parts.append(text)
        if i == 0 and len(frames) > 2:
            n = len(frames) - 2
            parts.append(f"[… {n} frame{'s' if n != 1 else ''} omitted …]")
    return RenderedOutput("error", "\n".join(parts), original, cut or len(frames) > 2, name=ename)


def _norm(text: str) -> str:
    return " ".join(text.split()).rstrip(":")


def _plotly_title(value: Any) -> str | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    layout = value.get("layout") if isinstance(value, dict) else None
    title = layout.get("title") if isinstance(layout, dict) else None
    if isinstance(title, dict):
        title = title.get("text")
    return clip_caption(TAG_RE.sub(" ", title)) if isinstance(title, str) and title.strip() else None


def _html_image(html: str, caption: str | None) -> FigureRef | None:
    """The first `<img src="data:image/…">` of an HTML output (kernels such as Wolfram's send figures so)."""
    if "data:" not in html:
        return None
    for _start, _end, attrs in img_tags(html):
        figure = figure_from_data_uri(attrs.get("src", ""), None)
        if figure is not None:
            figure.caption = caption or (attrs.get("alt") or attrs.get("title") or "").strip() or None
            figure.source = "output"
            return figure
    return None


def _render_display(output: Output, caption: str | None, limits: OutputLimits,
                    original: int) -> RenderedOutput:
    """Pick the most informative representation: widget marker (with the widget's own text) > DataFrame >
    image (unless it typesets a LaTeX form) > markdown > latex/json (a one-line plain text beats LaTeX: `0.5`,
    not `$\\displaystyle 0.5$`) > interactive marker > plain text that is more than an object's repr > the
    visible text of HTML (or its image) > an object repr > marker for whatever else."""
    data = output.data if isinstance(output.data, dict) else {}
    mimes = [m for m in data if isinstance(m, str)]
    if not mimes:
        return RenderedOutput("marker", "[empty output]", original)
    plain = strip_ansi(as_text(data["text/plain"])).strip("\n") if "text/plain" in data else None
    informative = plain if plain and plain.strip() and not is_object_repr(plain) else None
    for mime in _WIDGET_MIMES:
        if mime in data:
            text = "[widget output]"
            if informative and _QUOTED_WORDS.search(informative):
                # `Label(value='Hello World')`: the widget's own state, as the kernel printed it (not a bare
                # `HBox(children=(FloatProgress(value=0.0),))`, which says no more than the marker)
                kept, cut = _bounded(informative, limits)
                return RenderedOutput("marker", f"{text} {kept}", original, cut, mime=mime)
            return RenderedOutput("marker", text, original, mime=mime)

    html = data.get("text/html")
    if isinstance(html, str) and html.strip():
        summary = dataframe_html_to_summary(html, limits.table_rows)
        if summary is not None:
            text = f"{summary.markdown}\n\n{summary.shape_line()}\n{summary.summary}"
            return RenderedOutput("table", text, original, summary.truncated, table=summary, mime="text/html")

    image = next((m for m in IMAGE_MIMES if m in data), None)
    image = image or next((m for m in mimes if m.startswith("image/")), None)
    # An image beside a LaTeX form is the formula typeset as a picture (sympy's `init_printing(use_latex="png")`):
    # its text is the content (`{A: 4, B: -2, C: -6}`), the picture only a rendering of it.
    if image is not None and not (isinstance(data.get("text/latex"), str) and data["text/latex"].strip()):
        figure = figure_from_value(image, data[image], caption, "output")
        return RenderedOutput("figure", figure_text(figure), original, figure=figure, mime=image)

    def rich(mime: str) -> RenderedOutput:
        value = data[mime]
        raw = value if isinstance(value, str) else json.dumps(value, indent=1, default=str)
        text, cut = _bounded(raw, limits)
        return RenderedOutput("text", text, original, cut, mime=mime)

    if "text/markdown" in data:
        return rich("text/markdown")
    if "text/latex" in data and informative is not None and "\n" not in informative.strip():
        text, cut = _bounded(informative.strip(), limits)
        return RenderedOutput("text", text, original, cut, mime="text/plain")
    for mime in ("text/latex", "application/json"):
        if mime in data:
            return rich(mime)

    for mime in mimes:
        marker = _marker_for(mime)
        if marker is not None:
            if mime == "application/vnd.plotly.v1+json":
                title = _plotly_title(data[mime]) or caption
                marker = f"{marker} {title}" if title else marker
            return RenderedOutput("marker", marker, original, mime=mime)

    if informative is not None:
        text, cut = _bounded(informative, limits)
        return RenderedOutput("text", text, original, cut, mime="text/plain")

    if isinstance(html, str):
        text, media = html_to_text(html)
        if text:
            kept, cut = _bounded(text, limits)
            return RenderedOutput("html", kept, original, cut, mime="text/html")
        in_html = _html_image(html, caption)
        if in_html is not None:
            return RenderedOutput("figure", figure_text(in_html), original, figure=in_html, mime="text/html")
        if plain is None or not plain.strip():
            label = media[0] if media else "empty"
            return RenderedOutput("marker", f"[html output: {label}]", original, mime="text/html")

    if plain is not None:
        text, cut = _bounded(plain, limits)
        return RenderedOutput("text", text, original, cut, mime="text/plain")

    mime = mimes[0]
    return RenderedOutput("marker", f"[{mime} output]", original, mime=mime)


def render_output(output: Output, *, caption: str | None = None,
                  limits: OutputLimits = OutputLimits()) -> RenderedOutput:  # noqa: B008 - immutable use
    """Apply the output rules to one output. Never raises: anything unexpected becomes a marker."""
    try:
        original = _original_chars(output)
    except Exception:
        original = 0
    try:
        kind = output.output_type
        if kind == "stream":
            return _render_stream(output, limits, original)
        if kind == "error":
            return _render_error(output, limits, original)
        if kind in ("display_data", "execute_result", "update_display_data"):
            return _render_display(output, caption, limits, original)
        return RenderedOutput("marker", f"[{kind or 'unknown'} output]", original)
    except Exception as exc:  # odd data must never stop a conversion or an index run
        return RenderedOutput("marker", f"[unreadable output: {type(exc).__name__}]", original)


def _has_image(output: Output) -> bool:
    data = output.data if isinstance(output.data, dict) else {}
    return any(isinstance(m, str) and (m.startswith("image/") or m in IMAGE_MIMES or
                                       m == "application/vnd.plotly.v1+json") for m in data)


def render_outputs(cell: Cell, *, markdown_above: str | None = None,
                   limits: OutputLimits = OutputLimits(),  # noqa: B008
                   tree: ast.Module | None = None) -> list[RenderedOutput]:
    """Render every output of a cell; the figure caption is computed once, and only if a figure needs it (from
    `tree`, the cell's syntax tree, when the caller has it)."""
    outputs = cell.outputs or []
    caption = None
    if any(_has_image(o) for o in outputs):
        caption = figure_caption(cell.source, markdown_above, tree)
    return [render_output(o, caption=caption, limits=limits) for o in outputs]


