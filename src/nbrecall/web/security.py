"""HTTP hardening for the web app: headers, token auth, bounded requests, and HTML/SVG sanitizing.

Everything a notebook carries (markdown, HTML and SVG outputs) is untrusted: it is cleaned here with `nh3`
(HTML) and an lxml allowlist pass (SVG) before it reaches a page, and the Content-Security-Policy below forbids
inline scripts and styles, so even a sanitizer miss cannot run code.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import lxml.etree
import nh3

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
TOKEN_COOKIE = "nbrecall_token"  # a namespaced name: cookies on localhost are shared by every port
MAX_BODY = 64 * 1024
MAX_QUERY_STRING = 64 * 1024  # q ≤ 2,000 characters is checked per field (422); this bounds the rest
PUBLIC_PREFIXES = ("/static/",)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and the usual names of them; anything else (0.0.0.0, a LAN address) is not."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def bind_refusal(host: str, token: str | None) -> str | None:
    """Why `serve` must not start on `host` without a token, or None when it may."""
    if is_loopback(host) or token:
        return None
    return (
        f"refusing to serve on {host}: that address is reachable from other machines, and without a token "
        "anyone who can reach it can read the whole archive. Pass --token T (or set NBRECALL_TOKEN), "
        "or bind to 127.0.0.1."
    )


def token_matches(expected: str, given: str | None) -> bool:
    """Constant-time comparison of a presented token with the configured one."""
    if not given:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8", "surrogateescape"))


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers") or []}


def cookie_value(token: str) -> str:
    """What the sign-in cookie holds: a digest of the token, never the token itself (and always cookie-safe)."""
    return hashlib.sha256(b"nbrecall-cookie\0" + token.encode("utf-8")).hexdigest()


def authorized(scope: Scope, token: str) -> bool:
    """The request carries `Authorization: Bearer <token>` or the sign-in cookie; compared in constant time."""
    headers = _headers(scope)
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if auth[:7].lower() == "bearer ":
        return token_matches(token, auth[7:].strip())
    raw = headers.get(b"cookie", b"").decode("latin-1")
    if raw:
        try:
            cookie = SimpleCookie(raw)
        except Exception:
            return False
        if TOKEN_COOKIE in cookie:
            return token_matches(cookie_value(token), cookie[TOKEN_COOKIE].value)
    return False


async def _send_simple(send: Send, status: int, body: str, content_type: bytes, extra=()) -> None:  # noqa: ANN001
    data = body.encode("utf-8")
    headers = [(b"content-type", content_type), (b"content-length", str(len(data)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _reject(scope: Scope, send: Send, status: int, message: str, extra=()) -> None:  # noqa: ANN001
    if scope.get("path", "").startswith("/api/") or scope.get("path") == "/openapi.json":
        await _send_simple(send, status, json.dumps({"detail": message}), b"application/json", extra)
    else:
        page = (
            "<!doctype html><html lang=en><meta charset=utf-8><title>nbrecall</title>"
            f"<link rel=stylesheet href=/static/app.css><main class=page><h1>{status}</h1>"
            f"<p>{_escape(message)}</p></main></html>"
        )
        await _send_simple(send, status, page, b"text/html; charset=utf-8", extra)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class SecurityMiddleware:
    """Pure ASGI middleware (so streaming responses pass through untouched) applied to every request.

    - adds the CSP and the other security headers to every response, errors and static files included;
    - rejects a path with a NUL byte or a `..` segment (after percent-decoding) and an oversized query string;
    - reads request bodies up to `MAX_BODY` bytes (413 beyond) and replays them to the app;
    - when a token is configured, requires it on every route except static assets; `/?token=…` with the right
      token sets an HttpOnly cookie and redirects to a URL without the token.
    """

    def __init__(self, app: ASGIApp, token: str | None = None, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.token = token or None
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers") or []}
                message["headers"] = list(message.get("headers") or []) + [
                    (k, v) for k, v in SECURITY_HEADERS if k not in present
                ]
            await send(message)

        path: str = scope.get("path", "")
        segments = path.split("/")
        if "\x00" in path or ".." in segments or "\\" in path:
            await _reject(scope, send_with_headers, 400, "invalid path")
            return
        if len(scope.get("query_string") or b"") > MAX_QUERY_STRING:
            await _reject(scope, send_with_headers, 414, "query string too long")
            return

        if self.token and not path.startswith(PUBLIC_PREFIXES) and not authorized(scope, self.token):
            if path == "/":
                query = parse_qs((scope.get("query_string") or b"").decode("latin-1"))
                from_url = (query.get("token") or [None])[0]
                if from_url is not None and token_matches(self.token, from_url):
                    value = cookie_value(self.token)
                    cookie = f"{TOKEN_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict".encode()
                    await send_with_headers(
                        {
                            "type": "http.response.start",
                            "status": 303,
                            "headers": [(b"location", b"/"), (b"set-cookie", cookie), (b"content-length", b"0")],
                        }
                    )
                    await send_with_headers({"type": "http.response.body", "body": b""})
                    return
            await _reject(
                scope,
                send_with_headers,
                401,
                "a token is required: send 'Authorization: Bearer <token>' or open /?token=<token> once",
                [(b"www-authenticate", b"Bearer")],
            )
            return

        declared = _headers(scope).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_body
            except ValueError:
                await _reject(scope, send_with_headers, 400, "invalid Content-Length")
                return
            if too_big:
                await _reject(scope, send_with_headers, 413, f"request body over {self.max_body} bytes")
                return
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body:
                    await _reject(scope, send_with_headers, 413, f"request body over {self.max_body} bytes")
                    return
                chunks.append(chunk)
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


# ----------------------------------------------------------------------------------------------------------
# HTML and SVG sanitizing

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


def sanitize_html(html: str) -> str:
    """Clean untrusted HTML: no script, style, iframe/object/embed, event handlers, `javascript:` or ids."""
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
        for attr in list(element.attrib):
            if _unsafe_svg_attribute(attr, element.attrib[attr].strip()):
                del element.attrib[attr]
    return lxml.etree.tostring(root, encoding="unicode")


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
