"""Output text rules (architecture §5): the text primitives the output rules are made of. Terminal escapes and
progress redraws removed, head and tail of a long text, reprs that name no result, the visible text of HTML.

`notebook.outputs` applies them to each output (and re-exports the public names); the viewer, the re-render
comparison and the value facts use the same primitives, so all of them see one cleaned text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbrecall.notebook.figures import as_text
from nbrecall.notebook.tables import parse_html


@dataclass
class OutputLimits:
    """How much of an output survives; the defaults are DESIGN §3's."""

    max_chars: int = 2000
    stream_max_lines: int = 30
    head_lines: int = 10
    tail_lines: int = 10
    table_rows: int = 10


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


def _take_lines(
    lines: list[str], order: list[int], budget: int, stop: set[int], cut: Callable[[str], str]
) -> tuple[list[str], set[int]]:
    """Whole lines in `order` while they fit `budget` chars (a newline each), up to one in `stop`; when not even
    the first fits, that line `cut`. The lines kept and their indices."""
    out: list[str] = []
    taken: set[int] = set()
    used = 0
    for i in order:
        if i in stop:
            break
        line = lines[i]
        if used + len(line) + 1 > budget:
            if not out:
                out.append(cut(line))
                taken.add(i)
            break
        out.append(line)
        taken.add(i)
        used += len(line) + 1
    return out, taken


def head_tail(text: str, limits: OutputLimits) -> tuple[str, bool]:
    """Bound `text` to its first and last lines; returns (text, truncated).

    More than `stream_max_lines` lines → the first `head_lines`, a `[… N lines omitted …]` line, the last
    `tail_lines`. What remains is then held to about `max_chars`: whole lines from each end while they fit
    half the budget each, and a single line too long for it is cut in the middle with `[… N chars omitted …]`.
    """
    if not isinstance(text, str):
        text = as_text(text)
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
    head_out, taken_head = _take_lines(lines, pool_head, half, set(),
                                       lambda line: f"{line[:half]} {_chars_marker(len(line) - half)}")
    tail_out, taken_tail = _take_lines(lines, pool_tail, half, taken_head,
                                       lambda line: f"{_chars_marker(len(line) - half)} {line[len(line) - half:]}")
    tail_out.reverse()
    omitted = n - len(taken_head) - len(taken_tail)
    parts = head_out + ([_lines_marker(omitted)] if omitted else []) + tail_out
    return "\n".join(parts), True


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
