"""HTML pages: the search page, the notebook viewer, the fidelity report and the dependency map."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from nbrecall.index.terms import NO_TERMS, has_terms
from nbrecall.ingest.renders import render_label
from nbrecall.records import ContentRecord, SearchFilters
from nbrecall.search.families import family_members
from nbrecall.web.api import search_payload
from nbrecall.web.cell_html import pygments_css
from nbrecall.web.diff import safe as safe_diff
from nbrecall.web.heavy import RenderBusy, RenderFailed
from nbrecall.web.live import progress_payload
from nbrecall.web.models import MAX_FILTER, MAX_QUERY, PlainInt
from nbrecall.web.render import highlight_terms, notebook_view
from nbrecall.web.state import NotFound, WebState, get_state

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
router = APIRouter(include_in_schema=False)
State = Annotated[WebState, Depends(get_state)]
Text = Annotated[str | None, Query(max_length=MAX_QUERY)]
Filter = Annotated[str | None, Query(max_length=MAX_FILTER)]


def _page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return TEMPLATES.TemplateResponse(request, name, context, status_code=status)


def _missing(request: Request, message: str = "No notebook with this id is in the index.") -> HTMLResponse:
    return _page(request, "error.html", 404, title="Not found", message=message)


@router.get("/", response_class=HTMLResponse)
def search_page(
    request: Request,
    state: State,
    q: Text = None,
    year: Filter = None,
    project: Filter = None,
    author: Filter = None,
    tag: Filter = None,
    include_deprecated: bool = False,
    all_versions: bool = False,
    k: Annotated[PlainInt, Query(ge=1, le=100)] = 20,
) -> HTMLResponse:
    form = {
        "q": q or "",
        "year": year or "",
        "project": project or "",
        "author": author or "",
        "tag": tag or "",
        "include_deprecated": include_deprecated,
        "all_versions": all_versions,
    }
    error = None
    groups: list[dict[str, Any]] = []
    searched = bool((q or "").strip())
    if searched and not has_terms(q or ""):
        error = NO_TERMS
    elif searched:
        try:
            filters = SearchFilters.from_options(year, project, author, tag, include_deprecated)
        except ValueError as exc:
            error = str(exc)
        else:
            result = state.search(q or "", filters, max_notebooks=k, all_versions=all_versions)
            payload = search_payload(result, k, state.render_summaries([nb.nb_sha for nb in result.notebooks]))
            groups = payload["notebooks"]
            for group in groups:
                group["render_label"] = render_label(group["render_status"], group["render_reason"])
                for hit in group["hits"]:
                    snippet = re.sub(r"\n\s*\n+", "\n", hit["snippet"].strip())  # no blank lines in a snippet
                    hit["snippet_html"] = highlight_terms(snippet, q or "")
    with state.lock:
        stats = state.archive.manifest.stats()
    progress = progress_payload(state) if state.live is not None else None  # `serve ROOT`: how far it is
    return _page(
        request,
        "search.html",
        422 if error else 200,
        form=form,
        groups=groups,
        searched=searched,
        error=error,
        stats=stats,
        progress=progress,
    )


def _busy(request: Request) -> HTMLResponse:
    page = _page(
        request,
        "error.html",
        503,
        title="Busy",
        message="Every render process is busy with other notebooks; try again in a few seconds.",
    )
    page.headers["retry-after"] = "5"
    return page


@router.get("/nb/{nb_id}", response_class=HTMLResponse)
def viewer(
    request: Request,
    state: State,
    nb_id: str,
    page: Annotated[PlainInt | None, Query(ge=1, le=10**9, description="1-based page of cells")] = None,
    cell: Annotated[str | None, Query(max_length=MAX_FILTER, description="open the page with this cell id")] = None,
) -> HTMLResponse:
    """One page of a notebook's cells (`page`, or the page holding cell `cell`), rendered by a render worker
    within its budget; past the budget, the page as plain text with a notice."""
    serve = state.settings.serve
    per_page = max(1, serve.page_cells)
    with state.lock:  # every lookup in one turn: a page waits behind at most one search, not one per lookup
        try:
            content = state.content(nb_id)
        except NotFound:
            return _missing(request)
        n_cells = content.n_cells
        pages = max(1, -(-n_cells // per_page))
        number = (page or 1) - 1
        if cell:
            found = state.cell_index(nb_id, cell)
            if found is not None:
                number = found // per_page
        number = min(max(0, number), pages - 1)
        start = number * per_page
        records = state.cells(nb_id, start, start + per_page)
        path = state.notebook_file(content)
        paths = state.paths(nb_id)
        _family, members = family_members(state.archive.manifest, nb_id)
    meta = dict(content.meta or {})
    figure_cache = state.figure_cache()
    task = {
        "path": str(path) if path is not None else None,
        "sha": content.sha256,
        "rel": content.rel,
        "records": records,
        "language": str(meta.get("language") or "python"),
        "meta": meta,
        "renders": state.renders_folder(content),
        "figures": figure_cache,
    }
    figures_at = figure_cache["mtime"] if figure_cache else None  # a new description shows at once
    key = ("page", content.sha256, number, per_page, state.version(path, content.sha256), figures_at)
    result, degraded = None, None
    try:
        result = state.pool.run(key, "page", task, serve.render_timeout)
    except RenderBusy as exc:
        degraded = f"the render processes are busy ({exc})"
    except RenderFailed as exc:
        degraded = exc.reason
    view = notebook_view(
        content,
        paths,
        result,
        records,
        n_cells=n_cells,
        page_number=number,
        page_cells=per_page,
        degraded=degraded,
    )
    return _page(request, "notebook.html", view=view, title=view.path, members=members)


@router.get("/nb/{nb_id}/diff/{other_id}", response_class=HTMLResponse)
def diff(request: Request, state: State, nb_id: str, other_id: str) -> HTMLResponse:
    """What differs between two indexed notebooks (two versions of one family, as the viewer links them), cell
    by cell, computed by a render worker within `report_timeout` from the cells the index holds."""
    with state.lock:
        try:
            left, right = state.content(nb_id), state.content(other_id)
        except NotFound:
            return _missing(request)
        a, b = state.cells(nb_id), state.cells(other_id)
        family, members = family_members(state.archive.manifest, nb_id)
    task = {"a": a, "b": b}
    key = ("diff", left.sha256, right.sha256)
    notice, result = None, None
    try:
        result = state.pool.run(key, "diff", task, state.settings.serve.report_timeout)
    except RenderBusy:
        return _busy(request)
    except RenderFailed as exc:
        notice = f"No diff for these two notebooks: {exc.reason}. They are too large or too different to compare here."
    return _page(
        request,
        "diff.html",
        title=f"Diff · {left.rel} · {right.rel}",
        left=left,
        right=right,
        same_family=any(m["nb_id"] == other_id for m in members),
        body=safe_diff(result["html"]) if result else None,
        counts=(result or {}).get("counts") or {},
        truncated=bool((result or {}).get("truncated")),
        notice=notice,
    )


def _indexed(request: Request, state: State, nb_id: str) -> tuple[ContentRecord, Path | None] | HTMLResponse:
    """The indexed content and where its file is, or the 404 page."""
    try:
        content = state.content(nb_id)
    except NotFound:
        return _missing(request)
    return content, state.notebook_file(content)


def _whole_notebook_task(
    request: Request, state: State, nb_id: str, name: str
) -> tuple[ContentRecord, dict[str, Any], tuple[str, str, Any]] | HTMLResponse:
    """A render-worker task on the whole notebook (`report`, `deps`): the content, the task's arguments and its
    cache key (per notebook hash and file version); or the 404 page."""
    found = _indexed(request, state, nb_id)
    if isinstance(found, HTMLResponse):
        return found
    content, path = found
    task = {"path": str(path) if path is not None else None, "sha": content.sha256, "rel": content.rel}
    return content, task, (name, content.sha256, state.version(path, content.sha256)[0])


_CHANGED = "The file of this notebook is missing or has changed since it was indexed."


@router.get("/nb/{nb_id}/report", response_class=HTMLResponse)
def report(request: Request, state: State, nb_id: str) -> HTMLResponse:
    """The fidelity report, built once per notebook hash by a render worker within `report_timeout`."""
    found = _whole_notebook_task(request, state, nb_id, "report")
    if isinstance(found, HTMLResponse):
        return found
    content, task, key = found
    notice = None
    try:
        html = state.pool.run(key, "report", task, state.settings.serve.report_timeout)
    except RenderBusy:
        return _busy(request)
    except RenderFailed as exc:
        html = None
        notice = (
            f"No fidelity report for this notebook: {exc.reason}. It is too large or too complex to report on "
            f"here; `nbrecall convert` on the file writes the report without a time limit."
        )
    if html is None and notice is None:
        return _missing(request, _CHANGED)
    body = Markup(html) if html is not None else Markup("")  # sanitized by the worker (render_markdown)
    return _page(
        request, "report.html", title=f"Report · {content.rel}", body=body, nb_id=nb_id, path=content.rel,
        notice=notice,
    )


@router.get("/nb/{nb_id}/deps.svg")
def deps_svg(request: Request, state: State, nb_id: str) -> Response:
    """The dependency map, built once per notebook hash by a render worker within `report_timeout`."""
    found = _whole_notebook_task(request, state, nb_id, "deps")
    if isinstance(found, HTMLResponse):
        return found
    _content, task, key = found
    try:
        svg = state.pool.run(key, "deps", task, state.settings.serve.report_timeout)
    except RenderBusy:
        return Response("busy", status_code=503, media_type="text/plain", headers={"retry-after": "5"})
    except RenderFailed as exc:
        svg = _message_svg(f"No dependency map: {exc.reason}")
    if svg is None:
        return _missing(request, _CHANGED)
    return Response(svg, media_type="image/svg+xml")


def _message_svg(text: str) -> str:
    from markupsafe import escape

    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="640" height="40" viewBox="0 0 640 40">'
        f'<text x="8" y="24" font-family="sans-serif" font-size="13">{escape(text)}</text></svg>'
    )


@router.get("/static/pygments.css")
def pygments_stylesheet() -> Response:
    return Response(pygments_css(), media_type="text/css", headers={"Cache-Control": "max-age=3600"})
