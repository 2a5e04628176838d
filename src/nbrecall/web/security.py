"""HTTP hardening for the web app: headers, host and token checks, bounded and strictly decoded requests.

Everything a notebook carries (markdown, HTML and SVG outputs) is untrusted: it is cleaned by `sanitize` before it
reaches a page, and the Content-Security-Policy below forbids inline scripts and styles, so even a sanitizer miss
cannot run code.

Every check on a request is linear in its size and runs before any route: the sign-in cookie is found by one
scan of the Cookie header (no `http.cookies`, whose parser is quadratic on backslashes), query strings and JSON
bodies must be valid UTF-8 without lone surrogates, and the token never reaches a route, a log line or a
redirect.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import unquote_to_bytes

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
TOKEN_PARAM = "token"
MIN_TOKEN = 16
MAX_BODY = 64 * 1024
MAX_QUERY_STRING = 64 * 1024  # q ≤ 2,000 characters is checked per field (422); this bounds the rest
MAX_HEADERS = 100  # header lines per request (uvicorn bounds their total size: UVICORN_OPTIONS)
MAX_COOKIE_HEADER = 8 * 1024  # browsers keep a cookie under 4 KB; a longer Cookie header is not read at all
MAX_AUTHORIZATION = 1024
PUBLIC_PREFIXES = ("/static/",)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
# The Host header values the tokenless loopback server answers (anything else is a 400: DNS rebinding).
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "localhost.localdomain"]
WILDCARD_BINDS = {"0.0.0.0", "::", "[::]", ""}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and the usual names of them; anything else (0.0.0.0, a LAN address) is not."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def token_problem(token: str | None) -> str | None:
    """Why `token` cannot protect a server (too short, blank, spaces or non-ASCII), or None when it can.

    A token travels in `Authorization: Bearer …` and in a URL once, so it must be visible ASCII; 16 characters is
    the least that resists guessing over the network (`secrets.token_urlsafe(24)` gives 32).
    """
    if token is None:
        return None
    hint = "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(24))'"
    if not token.strip():
        return f"the token is blank; {hint}"
    if any(not ("\x21" <= ch <= "\x7e") for ch in token):
        return f"the token may hold only visible ASCII characters (no spaces); {hint}"
    if len(token) < MIN_TOKEN:
        return f"the token has {len(token)} characters, at least {MIN_TOKEN} are needed; {hint}"
    return None


def bind_refusal(host: str, token: str | None) -> str | None:
    """Why `serve` must not start on `host` with this token (a bad token, or none off loopback), or None.
    An empty token (`NBRECALL_TOKEN=`) counts as none."""
    token = token or None
    problem = token_problem(token)
    if problem:
        return f"refusing to serve: {problem}"
    if is_loopback(host) or token:
        return None
    return (
        f"refusing to serve on {host}: that address is reachable from other machines, and without a token "
        "anyone who can reach it can read the whole archive. Pass --token T (or set NBRECALL_TOKEN), "
        "or bind to 127.0.0.1."
    )


def allowed_hosts(bind: str, configured: Iterable[str] = ()) -> list[str]:
    """The Host header values to answer: the loopback names, the configured public names, and the address the
    server binds (for a wildcard bind: this machine's host name and the addresses it resolves to)."""
    hosts = list(LOOPBACK_HOSTS)
    extra = [h.strip().lower() for h in configured if h and h.strip()]
    name = bind.strip().lower()
    if name in WILDCARD_BINDS:
        with contextlib.suppress(OSError):
            for candidate in {socket.gethostname(), socket.getfqdn()}:
                extra.append(candidate.lower())
                for info in socket.getaddrinfo(candidate, None):
                    extra.append(str(info[4][0]))
    elif name:
        extra.append(name)
    for host in extra:
        if ":" in host and not host.startswith("[") and host != "*":
            host = f"[{host}]"  # an IPv6 literal is sent in brackets
        if host not in hosts:
            hosts.append(host)
    return hosts


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


def sign_in_cookie(raw: str) -> str | None:
    """The value of nbrecall's own cookie in a Cookie header, found in one linear pass (None when absent).

    Only that one cookie is read, as RFC 6265 sends it (`name=value; name=value`, the value maybe quoted); the
    header's other cookies are never parsed. A header over `MAX_COOKIE_HEADER` is not read at all.
    """
    if len(raw) > MAX_COOKIE_HEADER:
        return None
    for part in raw.split(";"):
        name, sep, value = part.partition("=")
        if sep and name.strip() == TOKEN_COOKIE:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            return value
    return None


def authorized(scope: Scope, token: str) -> bool:
    """The request carries `Authorization: Bearer <token>` or the sign-in cookie; compared in constant time."""
    headers = _headers(scope)
    auth = headers.get(b"authorization", b"")
    if auth and len(auth) <= MAX_AUTHORIZATION:
        text = auth.decode("latin-1")
        if text[:7].lower() == "bearer ":
            return token_matches(token, text[7:].strip())
    cookie = sign_in_cookie(headers.get(b"cookie", b"").decode("latin-1"))
    if cookie is not None:
        return token_matches(cookie_value(token), cookie)
    return False


def _query_pairs(query: bytes) -> list[tuple[bytes, bytes]]:
    pairs = []
    for part in query.split(b"&"):
        if part:
            name, _sep, value = part.partition(b"=")
            pairs.append((name, value))
    return pairs


def _decode_component(raw: bytes) -> str:
    """A query-string name or value, percent-decoded; UnicodeDecodeError unless it is valid UTF-8."""
    return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")


def _without_param(query: bytes, name: str) -> bytes:
    return b"&".join(
        part for part in query.split(b"&") if part and _safe_name(part.partition(b"=")[0]) != name
    )


def _safe_name(raw: bytes) -> str:
    try:
        return _decode_component(raw)
    except UnicodeDecodeError:
        return ""


def strict_query_problem(query: bytes) -> tuple[str, str] | None:
    """(parameter, message) for the first query parameter that is not valid UTF-8 once percent-decoded."""
    for name, value in _query_pairs(query):
        try:
            shown = _decode_component(name)
        except UnicodeDecodeError:
            return "?", "a query parameter name is not valid UTF-8"
        try:
            _decode_component(value)
        except UnicodeDecodeError:
            return shown, "not valid UTF-8 (invalid bytes or a lone surrogate)"
    return None


def strict_json_problem(body: bytes) -> str | None:
    """Why a JSON body cannot be taken as text (invalid UTF-8, or a `\\udXXX` escape of a lone surrogate), or
    None; a body that is not JSON at all is left to the route, which answers 422 as for any other mistake."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the body is not valid UTF-8 (byte {exc.start})"
    if "\\u" not in text:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "the body holds a lone surrogate (a \\ud800-\\udfff escape that is not half of a pair)"
    except (ValueError, RecursionError):
        return None
    return None


def _is_json(headers: dict[bytes, bytes]) -> bool:
    kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    return kind == b"application/json" or kind.endswith(b"+json")


def scrub_text(value: Any) -> Any:
    """`value` with every string made encodable as UTF-8 (lone surrogates as `\\udXXX`): for error replies
    that echo the input."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {scrub_text(k): scrub_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_text(v) for v in value]
    return value


async def _send_simple(send: Send, status: int, body: str, content_type: bytes, extra=()) -> None:  # noqa: ANN001
    data = body.encode("utf-8")
    headers = [(b"content-type", content_type), (b"content-length", str(len(data)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def _is_api(scope: Scope) -> bool:
    return scope.get("path", "").startswith("/api/") or scope.get("path") == "/openapi.json"


async def _reject(scope: Scope, send: Send, status: int, message: str, extra=()) -> None:  # noqa: ANN001
    if _is_api(scope):
        await _send_simple(send, status, json.dumps({"detail": message}), b"application/json", extra)
    else:
        page = (
            "<!doctype html><html lang=en><meta charset=utf-8><title>nbrecall</title>"
            f"<link rel=stylesheet href=/static/app.css><main class=page><h1>{status}</h1>"
            f"<p>{_escape(message)}</p></main></html>"
        )
        await _send_simple(send, status, page, b"text/html; charset=utf-8", extra)


async def _reject_input(scope: Scope, send: Send, where: list[str], message: str) -> None:
    """A 422 shaped like FastAPI's own validation errors (`detail` is a list), so clients see one format."""
    if _is_api(scope):
        detail = [{"type": "string_unicode", "loc": where, "msg": message}]
        await _send_simple(send, 422, json.dumps({"detail": detail}), b"application/json")
    else:
        await _reject(scope, send, 422, f"{'.'.join(where)}: {message}")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class SecurityHeadersMiddleware:
    """Outermost layer: adds the CSP and the other security headers to every response (errors, the host
    check's 400 and static files included), and drops a `token` parameter from any redirect's Location."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = []
                for key, value in message.get("headers") or []:
                    if key.lower() == b"location" and b"?" in value:
                        path, _sep, query = value.partition(b"?")
                        kept = _without_param(query, TOKEN_PARAM)
                        value = path + (b"?" + kept if kept else b"")
                    headers.append((key, value))
                present = {k.lower() for k, _ in headers}
                message["headers"] = headers + [(k, v) for k, v in SECURITY_HEADERS if k not in present]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class SecurityMiddleware:
    """Pure ASGI middleware (so streaming responses pass through untouched) applied to every request.

    - rejects a path with a NUL byte or a `..` segment (after percent-decoding) or one that is not UTF-8, an
      oversized query string, too many header lines (431), and query strings or JSON bodies that are not valid
      UTF-8 or hold lone surrogates (422);
    - reads request bodies up to `MAX_BODY` bytes (413 beyond) and replays them to the app;
    - when a token is configured, requires it on every route except static assets; `/?token=…` with the right
      token sets an HttpOnly cookie (`Secure` over HTTPS) and redirects to `/`. A `token` query parameter never
      reaches a route (so no page, redirect or error can echo it), nor does the Cookie header.
    """

    def __init__(self, app: ASGIApp, token: str | None = None, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.token = token or None
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        path: str = scope.get("path", "")
        segments = path.split("/")
        if "\x00" in path or ".." in segments or "\\" in path or not _utf8_path(scope):
            await _reject(scope, send, 400, "invalid path")
            return
        query: bytes = scope.get("query_string") or b""
        if len(query) > MAX_QUERY_STRING:
            await _reject(scope, send, 414, "query string too long")
            return
        if len(scope.get("headers") or []) > MAX_HEADERS:
            await _reject(scope, send, 431, f"more than {MAX_HEADERS} header lines")
            return
        problem = strict_query_problem(query)
        if problem is not None:
            await _reject_input(scope, send, ["query", problem[0]], problem[1])
            return

        from_url: str | None = None
        if b"token" in query:
            values = [_safe_name(v) for n, v in _query_pairs(query) if _safe_name(n) == TOKEN_PARAM]
            if values:
                from_url = values[0]
                query = _without_param(query, TOKEN_PARAM)
                scope = dict(scope, query_string=query)

        if self.token and not path.startswith(PUBLIC_PREFIXES):
            if path == "/" and from_url is not None and token_matches(self.token, from_url):
                await self._sign_in(scope, send)
                return
            if not authorized(scope, self.token):
                await _reject(
                    scope,
                    send,
                    401,
                    "a token is required: send 'Authorization: Bearer <token>' or open /?token=<token> once",
                    [(b"www-authenticate", b"Bearer")],
                )
                return

        # No route reads a cookie: the Cookie header stops here, so nothing behind this layer parses it
        # (Starlette's cookie parser, which FastAPI runs on every request on the event loop, takes 47 s on
        # 80,000 backslashes).
        headers = scope.get("headers") or []
        if any(k.lower() == b"cookie" for k, _ in headers):
            scope = dict(scope, headers=[(k, v) for k, v in headers if k.lower() != b"cookie"])

        declared = _headers(scope).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_body
            except ValueError:
                await _reject(scope, send, 400, "invalid Content-Length")
                return
            if too_big:
                await _reject(scope, send, 413, f"request body over {self.max_body} bytes")
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
                    await _reject(scope, send, 413, f"request body over {self.max_body} bytes")
                    return
                chunks.append(chunk)
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
            if _is_json(_headers(scope)):
                problem_text = strict_json_problem(body)
                if problem_text is not None:
                    await _reject_input(scope, send, ["body"], problem_text)
                    return
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)

    async def _sign_in(self, scope: Scope, send: Send) -> None:
        """Trade the token in the URL for the cookie (its digest), and send the browser to `/` without it."""
        assert self.token is not None
        cookie = f"{TOKEN_COOKIE}={cookie_value(self.token)}; Path=/; HttpOnly; SameSite=Strict"
        if scope.get("scheme") == "https":
            cookie += "; Secure"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [(b"location", b"/"), (b"set-cookie", cookie.encode()), (b"content-length", b"0")],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _utf8_path(scope: Scope) -> bool:
    raw = scope.get("raw_path")
    if not raw:
        return True
    try:
        unquote_to_bytes(raw.split(b"?")[0]).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class AccessLogFilter(logging.Filter):
    """For uvicorn's access log: the request path without its query string, so neither a token (`/?token=…`)
    nor what users searched for is written to the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True
