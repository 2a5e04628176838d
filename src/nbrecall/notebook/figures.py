"""Figures: an image taken out of an output or a markdown cell (`FigureRef`), checked (base64 that decodes, bytes
of its format) and described by a marker; images inside markdown cells (links, `<img>` tags, attachments, data
URIs) become placeholders ``[figure N: <mime>, <size>] <alt>`` (`FIGURE_PLACEHOLDER_RE`)."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

from nbrecall.notebook.captions import svg_labels


def human_size(n: int) -> str:
    """`512 B`, `12.3 KB`, `1.2 MB` (binary units, one decimal) for figure markers."""
    if n < 1024:
        return f"{n} B"
    if n < 1024**2:
        return f"{n / 1024:.1f} KB"
    return f"{n / 1024**2:.1f} MB"


def as_text(value: Any) -> str:
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


IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/svg+xml",
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


def figure_from_value(mime: str, value: Any, caption: str | None, source: str,
                       name: str | None = None) -> FigureRef:
    """Decode one image value; SVG is text, the rest base64. Broken (empty, undecodable, not of its format) →
    no data, the size estimated from the text."""
    text = as_text(value)
    if mime == "image/svg+xml" and not _looks_base64(text):
        data = text.encode("utf-8", "surrogatepass")
        caption = caption or svg_labels(text)
        return FigureRef(mime, len(data) if text.strip() else 0, caption, data if text.strip() else b"",
                         source, name)
    decoded = _decode_base64(text) if isinstance(value, str) else None
    if decoded is None or not _image_ok(mime, decoded):
        return FigureRef(mime, len(decoded) if decoded is not None else len(text) * 3 // 4, caption, b"",
                         source, name)
    if mime == "image/svg+xml":
        caption = caption or svg_labels(decoded.decode("utf-8", "replace"))
    return FigureRef(mime, len(decoded), caption, decoded, source, name)


def _looks_base64(text: str) -> bool:
    head = text.lstrip()[:64]
    return bool(head) and not head.startswith("<") and re.fullmatch(r"[A-Za-z0-9+/=\s]+", head) is not None


def figure_text(figure: FigureRef) -> str:
    size = "broken image" if figure.broken else human_size(figure.size_bytes)
    text = f"[figure: {figure.mime}, {size}]"
    return f"{text} {figure.caption}" if figure.caption else text


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


def img_tags(markdown: str) -> list[tuple[int, int, dict[str, str]]]:
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


def figure_from_data_uri(uri: str, alt: str | None) -> FigureRef | None:
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
    mime = next((m for m in IMAGE_MIMES if m in bundle), None)
    mime = mime or next((m for m in mimes if m.startswith("image/")), None) or (mimes[0] if mimes else None)
    if mime is None:
        return None
    return figure_from_value(mime, bundle[mime], alt, "attachment", name)


def extract_markdown_images(markdown: str,
                            attachments: dict[str, dict[str, str]]) -> tuple[str, list[FigureRef]]:
    """Replace embedded images in a markdown cell with `[figure N: <mime>, <size>] alt` placeholders.

    Handles `![alt](data:…)`, `![alt](attachment:name)` and `<img src="data:…|attachment:…">` (found with
    html.parser, so attribute quoting and order do not matter). N counts the returned figures from 1; a caller
    rewrites each placeholder with `FIGURE_PLACEHOLDER_RE`. Remote images and missing attachments stay as they
    are. Never raises: on odd input the text comes back unchanged with no figures.
    """
    if not isinstance(markdown, str):
        return as_text(markdown), []
    attachments = attachments if isinstance(attachments, dict) else {}
    try:
        spans: list[tuple[int, int, str, str | None]] = []  # (start, end, url, alt)
        for match in _MD_IMAGE_RE.finditer(markdown):
            spans.append((match.start(), match.end(), match.group("url"), match.group("alt").strip() or None))
        for start, end, attrs in img_tags(markdown):
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
                figure = figure_from_data_uri(url, alt)
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
