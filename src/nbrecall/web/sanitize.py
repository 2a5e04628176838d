"""HTML and SVG sanitizing for the web pages, and `data:` URIs for the images notebooks carry.

Everything a notebook carries (markdown, HTML and SVG outputs) is untrusted: it is cleaned here with `nh3` (HTML)
and an lxml allowlist pass (SVG) before it reaches a page; the Content-Security-Policy (`security.CSP`) forbids
inline scripts and styles besides, so even a sanitizer miss cannot run code.
"""

from __future__ import annotations

import base64
import binascii
import re

import lxml.etree
import nh3

IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif")
_DATA_IMAGE = re.compile(r"^data:image/(png|jpeg|jpg|gif|webp);base64,[A-Za-z0-9+/=\s]+$", re.I)
_SAFE_HREF = re.compile(r"^(https?:|mailto:|#)", re.I)

_TAGS = (set(nh3.ALLOWED_TAGS) | {"tfoot"}) - {"map", "area"}
_ATTRIBUTES: dict[str, set[str]] = {tag: set(attrs) for tag, attrs in nh3.ALLOWED_ATTRIBUTES.items()}
_ATTRIBUTES.setdefault("img", set()).update({"src", "alt", "title", "width", "height"})
_ATTRIBUTES.setdefault("a", set()).update({"href", "title"})
_ATTRIBUTES.setdefault("th", set()).update({"colspan", "rowspan"})
_ATTRIBUTES.setdefault("td", set()).update({"colspan", "rowspan"})


def _attribute_filter(tag: str, attr: str, value: str) -> str | None:
    """`data:` URLs only as image sources; links only to http(s), mailto and in-page anchors."""
    if attr == "src":
        return value if tag == "img" and _DATA_IMAGE.match(value) else None
    if attr in ("href", "cite"):
        return value if _SAFE_HREF.match(value.strip()) else None
    return value


MAX_HTML_DEPTH = 256  # deeper HTML is shown as text: the sanitizer's time grows with depth × size
_VOID = {
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr",
    "keygen", "basefont", "bgsound", "frame",
}  # fmt: skip
_TAG = re.compile(r"<(/?)([A-Za-z][^\s/>]*)")


def html_nesting_exceeds(html: str, limit: int = MAX_HTML_DEPTH) -> bool:
    """True when the elements of `html` may nest deeper than `limit`; one linear scan, stopped at the limit.

    An over-estimate by design (every non-void start tag opens an element; a closing tag closes only an element
    that is open, as an HTML parser ignores the others), so that no input the parser nests deeply passes.
    """
    if html.count("<") <= limit:
        return False
    stack: list[str] = []
    open_count: dict[str, int] = {}
    start = 0
    while start < len(html):  # a block of tags at a time: fast, and stopped soon after the limit is passed
        end = html.find("<", start + 65_536)
        end = len(html) if end < 0 else end
        for closing, name in _TAG.findall(html, start, end):
            name = name.lower()
            if closing:
                if open_count.get(name):
                    while stack:
                        top = stack.pop()
                        open_count[top] -= 1
                        if top == name:
                            break
                continue
            if name in _VOID:
                continue
            stack.append(name)
            open_count[name] = open_count.get(name, 0) + 1
            if len(stack) > limit:
                return True
        start = end
    return False


def sanitize_html(html: str) -> str:
    """Clean untrusted HTML: no script, style, iframe/object/embed, event handlers, `javascript:` or ids.

    Callers check `html_nesting_exceeds` first (the viewer shows deeper HTML as text): `nh3`'s time grows with
    nesting depth times size (300,000 nested `<div>`s never finish).
    """
    return nh3.clean(
        html,
        tags=_TAGS,
        clean_content_tags={"script", "style", "iframe", "object", "embed", "noscript", "template", "svg", "math"},
        attributes=_ATTRIBUTES,
        attribute_filter=_attribute_filter,
        url_schemes={"http", "https", "mailto", "data"},
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


_SVG_NS = "http://www.w3.org/2000/svg"
_XLINK_NS = "http://www.w3.org/1999/xlink"
_SVG_DROP = {
    "script",
    "foreignObject",
    "iframe",
    "object",
    "embed",
    "handler",
    "listener",
    "set",
    "animate",
    "animateMotion",
    "animateTransform",
    "animateColor",
    "discard",
    "audio",
    "video",
    "canvas",
}


def sanitize_svg(svg: str) -> str | None:
    """An SVG with scripts, foreign content, animations, event handlers and external references removed.

    The result is still only ever shown through `<img src="data:image/svg+xml;base64,…">`, where browsers run no
    script and fetch nothing: this pass is a second line of defence. None when the text is not parseable SVG.
    """
    parser = lxml.etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_comments=True, recover=False
    )
    try:
        root = lxml.etree.fromstring(svg.strip().encode("utf-8"), parser)
    except (lxml.etree.XMLSyntaxError, ValueError):
        return None
    if root is None or lxml.etree.QName(root).localname != "svg":
        return None
    for element in list(root.iter()):
        if not isinstance(element.tag, str):  # processing instructions, entities
            parent = element.getparent()
            if parent is not None:
                parent.remove(element)
            continue
        qname = lxml.etree.QName(element)
        if qname.namespace not in (None, _SVG_NS) or qname.localname in _SVG_DROP:
            parent = element.getparent()
            if parent is not None:
                parent.remove(element)
            continue
        if qname.localname == "style" and _unsafe_css("".join(element.itertext())):
            parent = element.getparent()
            if parent is not None:
                parent.remove(element)
            continue
        for attr in list(element.attrib):
            if _unsafe_svg_attribute(attr, element.attrib[attr].strip()):
                del element.attrib[attr]
    return lxml.etree.tostring(root, encoding="unicode")


def _unsafe_css(css: str) -> bool:
    """A stylesheet that can reach outside the document: at-rules (`@import`, `@font-face`), `url(…)` beyond
    `#id`, CSS escapes (which can spell either) or legacy script hooks."""
    lowered = css.lower()
    if "@" in css or "\\" in css or "expression(" in lowered or "binding" in lowered:
        return True
    targets = re.findall(r"url\s*\(\s*['\"]?\s*([^)'\"\s]*)", css, re.I)
    return any(not t.startswith("#") for t in targets)


def _unsafe_svg_attribute(attr: str, value: str) -> bool:
    """Event handlers, links out of the document, foreign-namespace attributes and `url(…)` beyond `#id`."""
    name = lxml.etree.QName(attr)
    local = name.localname.lower()
    if local.startswith("on"):
        return True
    if local == "href":
        return not (value.startswith("#") or _DATA_IMAGE.match(value))
    if name.namespace not in (None, _XLINK_NS, "http://www.w3.org/XML/1998/namespace"):
        return True
    targets = re.findall(r"url\s*\(\s*['\"]?\s*([^)'\"\s]*)", value, re.I)
    return any(not t.startswith("#") for t in targets) or "\\" in value  # no CSS escapes


def data_uri(mime: str, payload: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(payload).decode('ascii')}"


def image_data_uri(mime: str, value: str) -> str | None:
    """A `data:` URI for a base64 image stored in a notebook, or None when it does not decode."""
    if mime not in IMAGE_MIMES:
        return None
    compact = re.sub(r"\s+", "", value)
    try:
        raw = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data_uri(mime, raw) if raw else None
