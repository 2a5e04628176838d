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
import base64
import binascii
import json
import re
import warnings
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

import lxml.etree

from nbrecall.notebook.analysis import mask_magics
from nbrecall.notebook.model import Cell, Output
from nbrecall.notebook.tables import TableSummary, dataframe_html_to_summary, parse_html

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
    "strip_ansi",
]


@dataclass
class OutputLimits:
    """How much of an output survives; the defaults are DESIGN §3's."""

    max_chars: int = 2000
    stream_max_lines: int = 30
    head_lines: int = 10
    tail_lines: int = 10
    table_rows: int = 10


@dataclass
class FigureRef:
    """An image taken out of an output or a markdown cell; `data` is empty when it is broken (empty, base64 that
    does not decode, bytes that are not of its format): then it is reported, never written as a file."""

    mime: str
    size_bytes: int
    caption: str | None
    data: bytes
    source: str  # "output" | "attachment" | "data-uri"
    name: str | None = None

    @property
    def broken(self) -> bool:
        return not self.data


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


# ---------------------------------------------------------------------------------------------------------
# text primitives

_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)


def strip_ansi(text: str) -> str:
    """Remove terminal escape codes (IPython colours its tracebacks, tqdm and loggers colour streams)."""
    return _ANSI_RE.sub("", text).replace("\x1b", "") if "\x1b" in text or "\x9b" in text else text


def collapse_carriage_returns(text: str) -> str:
    """Keep only the last state of each line redrawn with `\\r` (progress bars); `\\r\\n` stays a newline.

    A segment that is blank (a trailing `\\r`) does not erase the state before it, and backspaces delete the
    character before them, as a terminal would show.
    """
    if "\r" not in text and "\b" not in text:
        return text
    text = text.replace("\r\n", "\n")
    lines = []
    for line in text.split("\n"):
        if "\r" in line:
            frames = [f for f in line.split("\r") if f.strip()]
            line = frames[-1].rstrip() if frames else ""
        if "\b" in line:
            kept: list[str] = []
            for ch in line:
                if ch == "\b":
                    if kept:
                        kept.pop()
                else:
                    kept.append(ch)
            line = "".join(kept)
        lines.append(line)
    return "\n".join(lines)


def _lines_marker(n: int) -> str:
    return f"[… {n} line{'s' if n != 1 else ''} omitted …]"


def _chars_marker(n: int) -> str:
    return f"[… {n} chars omitted …]"


def head_tail(text: str, limits: OutputLimits) -> tuple[str, bool]:
    """Bound `text` to its first and last lines; returns (text, truncated).

    More than `stream_max_lines` lines → the first `head_lines`, a `[… N lines omitted …]` line, the last
    `tail_lines`. What remains is then held to about `max_chars`: whole lines from each end while they fit
    half the budget each, and a single line too long for it is cut in the middle with `[… N chars omitted …]`.
    """
    if not isinstance(text, str):
        text = _as_text(text)
    body = text[:-1] if text.endswith("\n") else text
    lines = body.split("\n")
    n = len(lines)
    head_n, tail_n = max(0, limits.head_lines), max(0, limits.tail_lines)
    line_cut = n > limits.stream_max_lines and n > head_n + tail_n
    if line_cut:
        head_idx, tail_idx = list(range(head_n)), list(range(n - tail_n, n))
    else:
        head_idx, tail_idx = list(range(n)), []
    kept_chars = sum(len(lines[i]) + 1 for i in head_idx + tail_idx)
    budget = max(1, limits.max_chars)
    if kept_chars <= budget + 1:
        if not line_cut:
            return body, False
        return "\n".join([*lines[:head_n], _lines_marker(n - head_n - tail_n), *lines[n - tail_n:]]), True

    if n == 1:  # one very long line: cut its middle
        line = lines[0]
        half = budget // 2
        return f"{line[:half]} {_chars_marker(len(line) - 2 * half)} {line[len(line) - half:]}", True

    half = budget // 2
    pool_head = head_idx
    pool_tail = list(reversed(tail_idx if line_cut else range(n)))
    head_out: list[str] = []
    used = 0
    taken_head: set[int] = set()
    for i in pool_head:
        line = lines[i]
        if used + len(line) + 1 > half:
            if not head_out:
                head_out.append(f"{line[:half]} {_chars_marker(len(line) - half)}")
                taken_head.add(i)
            break
        head_out.append(line)
        taken_head.add(i)
        used += len(line) + 1
    tail_out: list[str] = []
    used = 0
    taken_tail: set[int] = set()
    for i in pool_tail:
        if i in taken_head:
            break
        line = lines[i]
        if used + len(line) + 1 > half:
            if not tail_out:
                tail_out.append(f"{_chars_marker(len(line) - half)} {line[len(line) - half:]}")
                taken_tail.add(i)
            break
        tail_out.append(line)
        taken_tail.add(i)
        used += len(line) + 1
    tail_out.reverse()
    omitted = n - len(taken_head) - len(taken_tail)
    parts = head_out + ([_lines_marker(omitted)] if omitted else []) + tail_out
    return "\n".join(parts), True


def _bounded(text: str, limits: OutputLimits) -> tuple[str, bool]:
    """Keep a text whole when it is at most `max_chars`, else its head and tail."""
    if len(text) <= limits.max_chars:
        return text.rstrip("\n"), False
    return head_tail(text, limits)


def human_size(n: int) -> str:
    """`512 B`, `12.3 KB`, `1.2 MB` (binary units, one decimal) for figure markers."""
    if n < 1024:
        return f"{n} B"
    if n < 1024**2:
        return f"{n / 1024:.1f} KB"
    return f"{n / 1024**2:.1f} MB"


def _as_text(value: Any) -> str:
    """Any mime value as text: strings as they are, lists joined, everything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


# ---------------------------------------------------------------------------------------------------------
# reprs that say nothing

# A `text/plain` that only names an object: `<IPython.core.display.HTML object>`, `<__main__.Note at 0x7f…>`,
# `<Figure size 640x480 with 1 Axes>`, Mathematica's `-Graphics-`. Any richer representation says more.
_OBJECT_REPR = re.compile(r"<[^<>\n]{1,200}>|-[A-Z][A-Za-z0-9]{1,40}-")
# Reprs that name no result: plotting handles and objects printed by address (`<Axes ... at 0x7f...>`,
# `Text(0.5, 1.0, 'Loss')`). The chunker keeps them out of its value chunks and the converter drops them.
NOISE_REPR = re.compile(
    r"(?:\bat 0x[0-9a-fA-F]+>|^\[?<matplotlib|^Text\(-?[\d.]+, -?[\d.]+, |^<Figure size)"
)
_NOISE_MAX_CHARS = 160


def is_object_repr(text: Any) -> bool:
    """True for a `text/plain` that is only an object's default repr (see `_OBJECT_REPR`)."""
    return isinstance(text, str) and _OBJECT_REPR.fullmatch(text.strip()) is not None


def names_no_result(text: str) -> bool:
    """A short text output that is only a plotting handle or an address repr (`NOISE_REPR`)."""
    value = text.strip()
    return (len(value) <= _NOISE_MAX_CHARS and value.count("\n") <= 2
            and NOISE_REPR.search(value) is not None)


# ---------------------------------------------------------------------------------------------------------
# HTML → text

_BLOCK_TAGS = {
    "address", "article", "aside", "blockquote", "br", "caption", "dd", "div", "dl", "dt", "figcaption",
    "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol",
    "p", "pre", "section", "table", "tbody", "thead", "tfoot", "tr", "ul",
}
_DROP_TAGS = ("script", "style", "noscript", "template", "head", "title", "meta", "link")
_EMBED_LABELS = {
    "script": "javascript", "iframe": "embedded frame", "video": "video", "audio": "audio",
    "canvas": "canvas", "img": "image", "svg": "svg graphic", "object": "embedded object",
    "embed": "embedded object",
}


def html_to_text(html: str) -> tuple[str, list[str]]:
    """Visible text of an HTML output (scripts and styles dropped), plus the kinds of embedded media it holds.

    Block elements end lines, table cells are separated by ` | `; whitespace is collapsed except in `<pre>`.
    The media list (e.g. ["javascript", "embedded frame"]) lets a text-less output become a useful marker.
    """
    root = parse_html(html)
    if root is None:
        return "", []
    media: list[str] = []
    for el in root.iter():
        tag = el.tag if isinstance(el.tag, str) else ""
        label = _EMBED_LABELS.get(tag)
        if label and label not in media:
            media.append(label)
    for el in list(root.iter(*_DROP_TAGS)):
        el.drop_tree()
    has_pre = next(root.iter("pre"), None) is not None
    for el in root.iter():
        if not isinstance(el.tag, str):
            continue
        inside_pre = has_pre and any(a.tag == "pre" for a in el.iterancestors())
        if not (inside_pre or el.tag == "pre"):
            el.text = _squash(el.text)
        if not inside_pre:
            el.tail = _squash(el.tail)
        if el.tag in ("td", "th"):
            el.tail = " | " + (el.tail or "")
        elif el.tag in _BLOCK_TAGS:
            el.tail = "\n" + (el.tail or "")
            if el.tag != "br":
                el.text = "\n" + (el.text or "")
    text = root.text_content()
    lines = [re.sub(r"^ (?=\S)", "", ln.rstrip().removesuffix("|").rstrip()) for ln in text.split("\n")]
    out: list[str] = []
    for ln in lines:
        if ln or (out and out[-1]):
            out.append(ln)
    return "\n".join(out).strip(), media


def _squash(text: str | None) -> str | None:
    return None if text is None else re.sub(r"\s+", " ", text)


# ---------------------------------------------------------------------------------------------------------
# captions

_TITLE_CALLS = {"title", "set_title", "suptitle"}
_LABEL_CALLS = {"xlabel": "x", "set_xlabel": "x", "ylabel": "y", "set_ylabel": "y"}
_MAX_CAPTION = 200


def _string_value(node: ast.AST) -> str | None:
    """A string literal's text; f-strings keep `{expr}`; `"…" % x`, `"…" + x`, `"…".format(x)` give "…"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.Add):
        return _string_value(node.left)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"):
        return _string_value(node.func.value)
    return None


def _parse_code(code: str) -> ast.Module | None:
    """Parse a cell with magics masked as the dependency analysis does; a few retries mask the offending line
    (py2 `print x`)."""
    lines = mask_magics(code).split("\n")
    for _ in range(4):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes in old code must not cost the caption
                return ast.parse("\n".join(lines))
        except SyntaxError as exc:
            bad = (exc.lineno or 0) - 1
            if not 0 <= bad < len(lines) or not lines[bad].strip():
                return None
            indent = lines[bad][: len(lines[bad]) - len(lines[bad].lstrip())]
            lines[bad] = indent + "pass"
        except (ValueError, RecursionError, MemoryError):
            return None
    return None


def _code_caption(code: str, tree: ast.Module | None = None) -> str | None:
    """Titles and axis labels set by the cell's plotting calls, e.g. `Loss per epoch (x: epoch, y: loss)`."""
    if not isinstance(code, str) or not code.strip():
        return None
    tree = tree or _parse_code(code)
    if tree is None:
        return None
    titles: list[tuple[int, int, str]] = []
    labels: list[tuple[int, int, str, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        pos = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        first = _string_value(node.args[0]) if node.args else None
        if name in _TITLE_CALLS:
            text = first or next((_string_value(k.value) for k in node.keywords if k.arg in ("label", "t")),
                                 None)
            if text:
                titles.append((*pos, text))
        elif name in _LABEL_CALLS:
            text = first or next((_string_value(k.value) for k in node.keywords
                                  if k.arg in ("xlabel", "ylabel")), None)
            if text:
                labels.append((*pos, _LABEL_CALLS[name], text))
        for kw in node.keywords:  # df.plot(title=…), ax.set(title=…, xlabel=…), px.line(…, title=…)
            value = _string_value(kw.value) if kw.arg in ("title", "xlabel", "ylabel") else None
            if value and kw.arg == "title":
                titles.append((*pos, value))
            elif value and name == "set":
                labels.append((*pos, kw.arg[0], value))
    ordered_titles = _unique(t for *_, t in sorted(titles))
    ordered_labels = _unique(f"{axis}: {t}" for *_, axis, t in sorted(labels))
    caption = "; ".join(ordered_titles[:3])
    if ordered_labels:
        joined = ", ".join(ordered_labels[:4])
        caption = f"{caption} ({joined})" if caption else joined
    return _clip(caption) or None


def _unique(items: Any) -> list[str]:
    out: list[str] = []
    for item in items:
        item = " ".join(str(item).split())
        if item and item not in out:
            out.append(item)
    return out


def _clip(text: str, limit: int = _MAX_CAPTION) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_FENCE_RE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_MATH_BLOCK_RE = re.compile(r"\$\$.*?\$\$", re.S)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
_MD_IMAGE_STRIP_RE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MD_LINK_RE = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_TAG_RE = re.compile(r"</?[A-Za-z][^<>]*>")
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


_SCRIPT_RE = re.compile(r"<(script|style)\b.*?(?:</\1\s*>|$)", re.S | re.I)
# Words that say a sentence is about a drawing (any subject): "the plot below", "this histogram shows", ...
_DRAWN_WORD = re.compile(
    r"\b(?:plot|figure|fig|chart|graph|histogram|diagram|visuali[sz]|draw|drew|drawn|show|display|curve|scatter|"
    r"heat ?map|map|image|picture|illustrat|depict|axis|axes|bar|pie|contour|surface|animat|render|legend|"
    r"trajector|distribution|spectrum|spectra|profile|line|lines)",
    re.I,
)
_CALL_LIKE = re.compile(r"[\w.]+\([^()]*\)|[{};=]|^\s*(?:import|from|def|class|return)\b")
_WORD_RE = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])")
_CODE_WORDS_IGNORED = frozenset([
    "self", "none", "true", "false", "import", "from", "print", "range", "list", "dict", "numpy", "pandas",
    "pyplot", "matplotlib", "figsize", "show", "return", "lambda", "with", "class",
])


def _markdown_segments(markdown: str) -> list[tuple[str, bool]]:
    """The markdown's sentences and headings in order, syntax removed: (text, is_heading)."""
    text = _FENCE_RE.sub("\n", markdown.replace("\r\n", "\n"))
    text = _MATH_BLOCK_RE.sub("\n", _COMMENT_RE.sub("", text))
    text = _SCRIPT_RE.sub("\n", text)
    text = _MD_IMAGE_STRIP_RE.sub("", text)
    text = _MD_LINK_RE.sub(r"\1", text)
    text = _TAG_RE.sub(" ", text)
    segments: list[tuple[str, bool]] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            segments.extend((part, False) for part in _SENTENCE_END_RE.split(" ".join(paragraph)))
            paragraph.clear()

    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line.startswith("|") or re.fullmatch(r"[-*_=\s]{3,}", line):
            flush()
            continue
        if line.startswith("#"):
            flush()
            segments.append((line.lstrip("#").strip(), True))
            continue
        line = re.sub(r"^(>\s*)+", "", line)
        line = re.sub(r"^([-*+]|\d+[.)])\s+", "", line)
        paragraph.append(line)
    flush()
    return [(re.sub(r"(\*\*|__|\*|`)", "", seg).strip().rstrip(":").strip(), heading) for seg, heading in segments]


def _code_words(code: str, tree: ast.Module | None = None) -> set[str]:
    """The words of what a cell's code names: variables, attributes and the functions it calls, and its strings
    (`loss_per_epoch` → loss, per, epoch; `pyplot.quiver(…)` → quiver; `'Ballast volume'`), lower-cased."""
    tree = tree or _parse_code(code) if isinstance(code, str) and code.strip() else None
    if tree is None:
        return set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, ast.Attribute):
            found.append(node.attr)
        elif isinstance(node, ast.arg):
            found.append(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= 500:
            found.append(node.value)
    return {w.lower() for text in found for w in _WORD_RE.findall(text) if len(w) >= 4} - _CODE_WORDS_IGNORED


def _is_prose(segment: str) -> bool:
    """A sentence, not code or markup left in a markdown cell (`alert('markdown cell')`)."""
    words = segment.split()
    alphabetic = [w for w in words if re.fullmatch(r"[(\"']?[A-Za-z][A-Za-z'-]*[.,;:!?)\"']*", w)]
    return len(alphabetic) >= 3 and len(alphabetic) >= 0.6 * len(words) and not _CALL_LIKE.search(segment)


def markdown_caption(markdown: str | None, code: str = "", tree: ast.Module | None = None) -> str | None:
    """A sentence (or heading) of the markdown just above a figure's cell that is about what is drawn: prose that
    speaks of a drawing (`_DRAWN_WORD`) or names what the code plots (a word of its names or strings). The last
    such among the final three; None when the markdown is about something else ("Note that the problem is
    solved when one upgrades to IRKernel 1.0.0.")."""
    if not isinstance(markdown, str) or not markdown.strip():
        return None
    code_words = _code_words(code, tree)
    for segment, heading in list(reversed(_markdown_segments(markdown)))[:3]:
        if not re.search(r"[A-Za-z]{2,}", segment) or not (heading or _is_prose(segment)):
            continue
        words = {w.lower() for w in _WORD_RE.findall(segment) if len(w) >= 4}
        if _DRAWN_WORD.search(segment) or words & code_words:
            return _clip(segment)
    return None


def figure_caption(code: str, markdown_above: str | None, tree: ast.Module | None = None) -> str | None:
    """Caption for a cell's figures: the titles and axis labels its code sets (the most exact words: "Ballast
    distribution along the hull (x: …)" where the heading above says "Distribution plot"), else the markdown just
    above when it is about the figure (`markdown_caption`), else None. `tree` is the code's syntax tree when the
    caller has it (`Analysis.trees`)."""
    try:
        return _code_caption(code, tree) or markdown_caption(markdown_above, code, tree)
    except Exception:  # a caption is a nicety; odd input must never stop a conversion
        return None


def _svg_labels(svg: str) -> str | None:
    """Text labels inside an SVG (`<text>`, `<title>`), numbers dropped: a caption of last resort."""
    try:
        parser = lxml.etree.XMLParser(recover=True, resolve_entities=False, no_network=True, huge_tree=False)
        root = lxml.etree.fromstring(svg.encode("utf-8", "replace"), parser)
    except Exception:
        return None
    if root is None:
        return None
    found: list[str] = []
    for el in root.iter():
        tag = el.tag.rsplit("}", 1)[-1] if isinstance(el.tag, str) else ""
        if tag in ("text", "title"):
            text = " ".join("".join(el.itertext()).split())
            if text and re.search(r"[A-Za-z]{2,}", text) and text not in found:
                found.append(text)
        if len(found) >= 5:
            break
    return _clip("; ".join(found)) or None


# ---------------------------------------------------------------------------------------------------------
# figures

_IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/svg+xml",
                "application/pdf")


def _decode_base64(value: str) -> bytes | None:
    try:
        return base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        return None


# How each binary format's files begin: bytes that do not begin so are no image of that format.
_MAGIC = {
    "image/png": (b"\x89PNG",), "image/jpeg": (b"\xff\xd8",), "image/gif": (b"GIF8",),
    "image/webp": (b"RIFF",), "image/bmp": (b"BM",), "application/pdf": (b"%PDF",),
}


def _image_ok(mime: str, data: bytes) -> bool:
    magic = _MAGIC.get(mime)
    return bool(data) and (magic is None or data.lstrip(b"\r\n\t ").startswith(magic))


def _figure_from_value(mime: str, value: Any, caption: str | None, source: str,
                       name: str | None = None) -> FigureRef:
    """Decode one image value; SVG is text, the rest base64. Broken (empty, undecodable, not of its format) →
    no data, the size estimated from the text."""
    text = _as_text(value)
    if mime == "image/svg+xml" and not _looks_base64(text):
        data = text.encode("utf-8", "surrogatepass")
        caption = caption or _svg_labels(text)
        return FigureRef(mime, len(data) if text.strip() else 0, caption, data if text.strip() else b"",
                         source, name)
    decoded = _decode_base64(text) if isinstance(value, str) else None
    if decoded is None or not _image_ok(mime, decoded):
        return FigureRef(mime, len(decoded) if decoded is not None else len(text) * 3 // 4, caption, b"",
                         source, name)
    if mime == "image/svg+xml":
        caption = caption or _svg_labels(decoded.decode("utf-8", "replace"))
    return FigureRef(mime, len(decoded), caption, decoded, source, name)


def _looks_base64(text: str) -> bool:
    head = text.lstrip()[:64]
    return bool(head) and not head.startswith("<") and re.fullmatch(r"[A-Za-z0-9+/=\s]+", head) is not None


def _figure_text(figure: FigureRef) -> str:
    size = "broken image" if figure.broken else human_size(figure.size_bytes)
    text = f"[figure: {figure.mime}, {size}]"
    return f"{text} {figure.caption}" if figure.caption else text


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
        return len(_as_text(output.text))
    if output.output_type == "error":
        return len(str(output.ename)) + len(str(output.evalue)) + sum(len(_as_text(t)) for t in
                                                                   (output.traceback or []))
    data = output.data if isinstance(output.data, dict) else {}
    return sum(len(_as_text(v)) for v in data.values())


def _render_stream(output: Output, limits: OutputLimits, original: int) -> RenderedOutput:
    text = collapse_carriage_returns(strip_ansi(_as_text(output.text)))
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
        lines = strip_ansi(_as_text(raw)).replace("\r\n", "\n").rstrip().split("\n")
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
    return _clip(_TAG_RE.sub(" ", title)) if isinstance(title, str) and title.strip() else None


def _html_image(html: str, caption: str | None) -> FigureRef | None:
    """The first `<img src="data:image/…">` of an HTML output (kernels such as Wolfram's send figures so)."""
    if "data:" not in html:
        return None
    for _start, _end, attrs in _img_tags(html):
        figure = _figure_from_data_uri(attrs.get("src", ""), None)
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
    plain = strip_ansi(_as_text(data["text/plain"])).strip("\n") if "text/plain" in data else None
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

    image = next((m for m in _IMAGE_MIMES if m in data), None)
    image = image or next((m for m in mimes if m.startswith("image/")), None)
    # An image beside a LaTeX form is the formula typeset as a picture (sympy's `init_printing(use_latex="png")`):
    # its text is the content (`{A: 4, B: -2, C: -6}`), the picture only a rendering of it.
    if image is not None and not (isinstance(data.get("text/latex"), str) and data["text/latex"].strip()):
        figure = _figure_from_value(image, data[image], caption, "output")
        return RenderedOutput("figure", _figure_text(figure), original, figure=figure, mime=image)

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
        figure = _html_image(html, caption)
        if figure is not None:
            return RenderedOutput("figure", _figure_text(figure), original, figure=figure, mime="text/html")
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
    return any(isinstance(m, str) and (m.startswith("image/") or m in _IMAGE_MIMES or
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


# ---------------------------------------------------------------------------------------------------------
# images inside markdown cells

FIGURE_PLACEHOLDER_RE = re.compile(r"\[figure (\d+): [^\]]*\]")

_MD_IMAGE_RE = re.compile(
    r"!\[(?P<alt>[^\]\n]*)\]\(\s*<?(?P<url>data:[^)]*?|attachment:[^)\s>]*)>?"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
_DATA_URI_RE = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(?:;[^,;]*)*?),(?P<data>.*)", re.S)


class _ImgTagFinder(HTMLParser):
    """Finds `<img>` start tags with their exact source text and attributes (a real HTML tokenizer)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[int, int, str, dict[str, str]]] = []  # (line, col, raw tag, attributes)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            raw = self.get_starttag_text() or ""
            line, col = self.getpos()
            self.found.append((line, col, raw, {k: v or "" for k, v in attrs}))


def _img_tags(markdown: str) -> list[tuple[int, int, dict[str, str]]]:
    """(start, end, attributes) of every `<img>` tag in a markdown text."""
    if "<img" not in markdown.lower():
        return []
    finder = _ImgTagFinder()
    try:
        finder.feed(markdown)
        finder.close()
    except Exception:
        return []
    starts = [0]
    for i, ch in enumerate(markdown):
        if ch == "\n":
            starts.append(i + 1)
    out = []
    for line, col, raw, attrs in finder.found:
        if not 1 <= line <= len(starts):
            continue
        start = starts[line - 1] + col
        if raw and markdown.startswith(raw, start):
            out.append((start, start + len(raw), attrs))
    return out


def _figure_from_data_uri(uri: str, alt: str | None) -> FigureRef | None:
    match = _DATA_URI_RE.fullmatch(uri.strip())
    if not match:
        return None
    mime = (match.group("mime") or "text/plain").lower()
    if not (mime.startswith("image/") or mime == "application/pdf"):
        return None
    payload = match.group("data")
    if ";base64" in (match.group("params") or "").lower():
        decoded = _decode_base64(re.sub(r"\s+", "", unquote(payload)))
        if decoded is None:
            return FigureRef(mime, len(payload) * 3 // 4, alt, b"", "data-uri")
        data = decoded
    else:
        data = unquote_to_bytes(payload)
    return FigureRef(mime, len(data), alt, data, "data-uri")


def _figure_from_attachment(name: str, attachments: dict[str, dict[str, str]],
                            alt: str | None) -> FigureRef | None:
    bundle = attachments.get(name)
    if bundle is None:
        bundle = attachments.get(unquote(name))
    if not isinstance(bundle, dict) or not bundle:
        return None
    mimes = [m for m in bundle if isinstance(m, str)]
    mime = next((m for m in _IMAGE_MIMES if m in bundle), None)
    mime = mime or next((m for m in mimes if m.startswith("image/")), None) or (mimes[0] if mimes else None)
    if mime is None:
        return None
    return _figure_from_value(mime, bundle[mime], alt, "attachment", name)


def extract_markdown_images(markdown: str,
                            attachments: dict[str, dict[str, str]]) -> tuple[str, list[FigureRef]]:
    """Replace embedded images in a markdown cell with `[figure N: <mime>, <size>] alt` placeholders.

    Handles `![alt](data:…)`, `![alt](attachment:name)` and `<img src="data:…|attachment:…">` (found with
    html.parser, so attribute quoting and order do not matter). N counts the returned figures from 1; a caller
    rewrites each placeholder with `FIGURE_PLACEHOLDER_RE`. Remote images and missing attachments stay as they
    are. Never raises: on odd input the text comes back unchanged with no figures.
    """
    if not isinstance(markdown, str):
        return _as_text(markdown), []
    attachments = attachments if isinstance(attachments, dict) else {}
    try:
        spans: list[tuple[int, int, str, str | None]] = []  # (start, end, url, alt)
        for match in _MD_IMAGE_RE.finditer(markdown):
            spans.append((match.start(), match.end(), match.group("url"), match.group("alt").strip() or None))
        for start, end, attrs in _img_tags(markdown):
            src = attrs.get("src", "").strip()
            if src.startswith(("data:", "attachment:")):
                alt = (attrs.get("alt") or attrs.get("title") or "").strip() or None
                spans.append((start, end, src, alt))
        spans.sort()
        out: list[str] = []
        figures: list[FigureRef] = []
        pos = 0
        for start, end, url, alt in spans:
            if start < pos:
                continue  # an <img> inside a span already replaced
            if url.startswith("data:"):
                figure = _figure_from_data_uri(url, alt)
            else:
                figure = _figure_from_attachment(url[len("attachment:"):], attachments, alt)
            if figure is None:
                continue
            figures.append(figure)
            mark = f"[figure {len(figures)}: {figure.mime}, {human_size(figure.size_bytes)}]"
            out.append(markdown[pos:start])
            out.append(f"{mark} {alt}" if alt else mark)
            pos = end
        out.append(markdown[pos:])
        return "".join(out), figures
    except Exception:
        return markdown, []

