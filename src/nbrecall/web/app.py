"""The web app: `create_app(settings, token)` wires the archive, the API, the pages and the security layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from nbrecall.config import Settings
from nbrecall.service import Archive
from nbrecall.web import api, pages
from nbrecall.web.security import MAX_BODY, SecurityMiddleware
from nbrecall.web.state import WebState

STATIC = Path(__file__).parent / "static"
# uvicorn settings for serving the app (the CLI and the tests use the same): no Server header, no trust in
# X-Forwarded-* headers, and room for a 2,000-character non-ASCII query (~18 KB percent-encoded) in the URL.
UVICORN_OPTIONS: dict[str, Any] = {
    "server_header": False,
    "proxy_headers": False,
    "h11_max_incomplete_event_size": 96 * 1024,
}


class NbrecallApp(FastAPI):
    """FastAPI with the security layer outermost: around the error handler too, so even a 500 carries the CSP."""

    security_token: str | None = None
    security_max_body: int = MAX_BODY

    def build_middleware_stack(self) -> Any:
        inner = super().build_middleware_stack()
        return SecurityMiddleware(inner, token=self.security_token, max_body=self.security_max_body)


def create_app(
    settings: Settings, token: str | None = None, *, archive: Archive | None = None, max_body: int = MAX_BODY
) -> FastAPI:
    """The ASGI app serving one index folder.

    Raises `nbrecall.service.IndexMissing` when the folder has no index. `token`: when set, every route except
    the static assets requires it. `archive`: an already opened archive (tests pass one with a stand-in
    embedder); by default one is opened from `settings`.
    """
    archive = archive or Archive(settings)
    app = NbrecallApp(
        title="nbrecall",
        summary="Search and read an archive of Jupyter notebooks.",
        version=_version(),
        docs_url=None,  # the interactive docs load scripts from a CDN, which the CSP (rightly) forbids
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.web = WebState(settings, archive)
    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.security_token = token or None
    app.security_max_body = max_body
    return app


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("nbrecall")
    except Exception:
        return "0"
