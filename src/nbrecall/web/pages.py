"""HTML pages: the search page, the notebook viewer, the fidelity report and the dependency map."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from nbrecall.index.store import SearchFilters
from nbrecall.ingest.renders import render_label
from nbrecall.web.api import search_payload
from nbrecall.web.models import MAX_FILTER, MAX_QUERY
from nbrecall.web.render import highlight_terms, notebook_view, pygments_css, render_markdown
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
    k: Annotated[int, Query(ge=1, le=100)] = 20,
) -> HTMLResponse:
    form = {
        "q": q or "",
        "year": year or "",
        "project": project or "",
        "author": author or "",
        "tag": tag or "",
        "include_deprecated": include_deprecated,
    }
    error = None
    groups: list[dict[str, Any]] = []
    searched = bool((q or "").strip())
    if searched:
        try:
            filters = SearchFilters.from_options(year, project, author, tag, include_deprecated)
        except ValueError as exc:
            error = str(exc)
        else:
            result = state.search(q or "", filters, max_notebooks=k)
            payload = search_payload(result, k, state.render_summaries([nb.nb_sha for nb in result.notebooks]))
            groups = payload["notebooks"]
            for group in groups:
                group["render_label"] = render_label(group["render_status"], group["render_reason"])
                for hit in group["hits"]:
                    snippet = re.sub(r"\n\s*\n+", "\n", hit["snippet"].strip())  # no blank lines in a snippet
                    hit["snippet_html"] = highlight_terms(snippet, q or "")
    with state.lock:
        stats = state.archive.manifest.stats()
    return _page(
        request,
        "search.html",
        422 if error else 200,
        form=form,
        groups=groups,
        searched=searched,
        error=error,
        stats=stats,
    )


@router.get("/nb/{nb_id}", response_class=HTMLResponse)
def viewer(request: Request, state: State, nb_id: str) -> HTMLResponse:
    try:
        content = state.content(nb_id)
    except NotFound:
        return _missing(request)
    loaded = state.notebook(content)
    render, fresh = state.render(content)
    view = notebook_view(
        content, state.paths(nb_id), loaded[0] if loaded else None, state.cells(nb_id), render, fresh
    )
    return _page(request, "notebook.html", view=view, title=view.path)


def _indexed_file(request: Request, state: State, nb_id: str):  # type: ignore[no-untyped-def]
    """The indexed content and its file as it was indexed, or the 404 page that says why not."""
    try:
        content = state.content(nb_id)
    except NotFound:
        return _missing(request)
    loaded = state.notebook(content)
    if loaded is None:
        return _missing(request, "The file of this notebook is missing or has changed since it was indexed.")
    return content, loaded


@router.get("/nb/{nb_id}/report", response_class=HTMLResponse)
def report(request: Request, state: State, nb_id: str) -> HTMLResponse:
    from nbrecall.convert.markdown import convert_notebook
    from nbrecall.convert.report import measure, render_report

    found = _indexed_file(request, state, nb_id)
    if isinstance(found, Response):
        return found
    content, (nb, raw) = found
    converted = convert_notebook(nb, Path(content.rel).stem)
    text = render_report(nb, converted, measure(raw, converted))
    body: Markup = render_markdown(text)
    return _page(request, "report.html", title=f"Report · {content.rel}", body=body, nb_id=nb_id, path=content.rel)


@router.get("/nb/{nb_id}/deps.svg")
def deps_svg(request: Request, state: State, nb_id: str) -> Response:
    from nbrecall.convert.depmap import render_dependency_svg
    from nbrecall.notebook.analysis import analyse

    found = _indexed_file(request, state, nb_id)
    if isinstance(found, Response):
        return found
    content, (nb, _raw) = found
    svg = render_dependency_svg(nb, analyse(nb), title=content.rel)
    return Response(svg, media_type="image/svg+xml")


@router.get("/static/pygments.css")
def pygments_stylesheet() -> Response:
    return Response(pygments_css(), media_type="text/css", headers={"Cache-Control": "max-age=3600"})
