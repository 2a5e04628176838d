"""Figure captions: what a figure shows, in words, from the code that drew it (titles and axis labels), the
markdown above it (prose, not code), or its SVG's own labels. A caption is a nicety: odd input gives None."""

from __future__ import annotations

import ast
import re
import warnings
from typing import Any

import lxml.etree

from nbrecall.notebook.analysis import mask_magics

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
            elif value and name == "set" and kw.arg:
                labels.append((*pos, kw.arg[0], value))
    ordered_titles = _unique(t for *_, t in sorted(titles))
    ordered_labels = _unique(f"{axis}: {t}" for *_, axis, t in sorted(labels))
    caption = "; ".join(ordered_titles[:3])
    if ordered_labels:
        joined = ", ".join(ordered_labels[:4])
        caption = f"{caption} ({joined})" if caption else joined
    return clip_caption(caption) or None


def _unique(items: Any) -> list[str]:
    out: list[str] = []
    for item in items:
        item = " ".join(str(item).split())
        if item and item not in out:
            out.append(item)
    return out


def clip_caption(text: str, limit: int = _MAX_CAPTION) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_FENCE_RE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_MATH_BLOCK_RE = re.compile(r"\$\$.*?\$\$", re.S)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
_MD_IMAGE_STRIP_RE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MD_LINK_RE = re.compile(r"\[([^\]]*)\]\([^)]*\)")
TAG_RE = re.compile(r"</?[A-Za-z][^<>]*>")
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
    text = TAG_RE.sub(" ", text)
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
            return clip_caption(segment)
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


def svg_labels(svg: str) -> str | None:
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
    return clip_caption("; ".join(found)) or None
