"""The web app: `create_app(settings, token)` wires the archive, the API, the pages and the security layer."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from nbrecall.config import Settings
from nbrecall.service import Archive
from nbrecall.web import api, pages
from nbrecall.web import live as live_routes
from nbrecall.web.local_server import INSTANCE_HEADER
from nbrecall.web.security import (
    LOOPBACK_HOSTS,
    MAX_BODY,
    SecurityHeadersMiddleware,
    SecurityMiddleware,
    scrub_text,
    token_problem,
)
from nbrecall.web.state import WebState

if TYPE_CHECKING:
    from nbrecall.ingest.live import LiveIndexer

STATIC = Path(__file__).parent / "static"
# uvicorn settings for serving the app (the CLI and the tests use the same): no Server header, no trust in
# X-Forwarded-* headers, room for a 2,000-character non-ASCII query (~18 KB percent-encoded) in the URL (this also
# bounds the whole header block), and a stop (SIGTERM, Ctrl-C) that waits at most 10 s for requests in flight.
UVICORN_OPTIONS: dict[str, Any] = {
    "server_header": False,
    "proxy_headers": False,
    "h11_max_incomplete_event_size": 96 * 1024,
    "timeout_graceful_shutdown": 10,
}


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's logging set-up with the access log written without query strings (`AccessLogFilter`): a
    `/?token=…` sign-in, or what users searched for, never lands in a log file."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["no_query"] = {"()": "nbrecall.web.security.AccessLogFilter"}
    config["handlers"]["access"]["filters"] = ["no_query"]
    config["loggers"]["uvicorn.access"]["filters"] = ["no_query"]
    return config


class NbrecallApp(FastAPI):
    """FastAPI with the security layers outermost, around the error handler too, so even a 500 carries the CSP:
    security headers, then the Host allow-list (DNS rebinding), then the request checks and the token."""

    security_token: str | None = None
    security_max_body: int = MAX_BODY
    security_hosts: list[str] = LOOPBACK_HOSTS

    server_instance: str | None = None  # `serve` names itself in every response (`web.local_server`)

    def build_middleware_stack(self) -> Any:
        inner = super().build_middleware_stack()
        checked = SecurityMiddleware(inner, token=self.security_token, max_body=self.security_max_body)
        hosts = TrustedHostMiddleware(checked, allowed_hosts=list(self.security_hosts), www_redirect=False)
        return _InstanceHeader(SecurityHeadersMiddleware(hosts), self)


class _InstanceHeader:
    """Adds `X-Nbrecall-Instance: <id>` to every response of a server that announced itself in
    `<index>/serve.json`: the CLI uses a server only when it answers with the id the file names."""

    def __init__(self, app: Any, owner: NbrecallApp) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        instance = self.owner.server_instance
        if scope["type"] != "http" or not instance:
            await self.app(scope, receive, send)
            return

        async def named(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (INSTANCE_HEADER.encode(), instance.encode())]
            await send(message)

        await self.app(scope, receive, named)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422, with the echoed input made encodable (its own handler fails on a lone surrogate: a 500)."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    return JSONResponse({"detail": scrub_text(jsonable_encoder(errors))}, status_code=422)


def create_app(
    settings: Settings,
    token: str | None = None,
    *,
    archive: Archive | None = None,
    max_body: int = MAX_BODY,
    allowed_hosts: list[str] | None = None,
    live: LiveIndexer | None = None,
) -> FastAPI:
    """The ASGI app serving one index folder.

    Raises `nbrecall.service.IndexMissing` when the folder has no index, ValueError for a token too weak to
    protect anything (`security.token_problem`). `token`: when set, every route except the static assets
    requires it. `allowed_hosts`: the Host header values answered (default: the loopback names; see
    `security.allowed_hosts`). `archive`: an already opened archive (tests pass one with a stand-in embedder); by
    default one is opened from `settings`. `live`: the background indexing of `serve ROOT` (not started here:
    the caller starts it, and `WebState.close` stops it), shown on the search page and at `/api/progress`.
    """
    problem = token_problem(token or None)
    if problem:
        raise ValueError(problem)
    archive = archive or Archive(settings)
    app = NbrecallApp(
        title="nbrecall",
        summary="Search and read an archive of Jupyter notebooks.",
        version=_version(),
        docs_url=None,  # the interactive docs load scripts from a CDN, which the CSP (rightly) forbids
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.web = WebState(settings, archive, live=live)
    app.include_router(api.router)
    app.include_router(live_routes.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.security_token = token or None
    app.security_max_body = max_body
    app.security_hosts = list(allowed_hosts) if allowed_hosts is not None else list(LOOPBACK_HOSTS)
    return app


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("nbrecall")
    except Exception:
        return "0"
