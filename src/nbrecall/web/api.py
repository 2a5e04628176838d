"""The JSON API: search, streamed answers, notebooks and cells, status."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from fastapi.responses import JSONResponse, StreamingResponse

from nbrecall.ingest.renders import render_summary, render_warning
from nbrecall.records import SearchFilters
from nbrecall.search.retrieve import SearchResult
from nbrecall.web.heavy import RenderBusy, RenderFailed
from nbrecall.web.models import (
    MAX_FILTER,
    MAX_QUERY,
    WORDS,
    YEAR_PATTERN,
    AskRequest,
    CellDetail,
    CellOutput,
    CellSummary,
    ErrorResponse,
    NotebookDetail,
    PlainInt,
    RenderCell,
    RenderInfo,
    SearchResponse,
    StatusResponse,
)
from nbrecall.web.state import NotFound, WebState, get_state, not_found

log = logging.getLogger("nbrecall.web")
router = APIRouter(prefix="/api", tags=["api"])

State = Annotated[WebState, Depends(get_state)]
QueryText = Annotated[
    str, Query(min_length=1, max_length=MAX_QUERY, pattern=WORDS, description="the question or keywords (with a "
               "letter or a digit)")
]
AnswerFormat = Annotated[
    Literal["events", "json"],
    Query(description="`events`: server-sent events as the answer is made; `json`: the complete answer at once"),
]
Year = Annotated[str | None, Query(pattern=YEAR_PATTERN, description="a year or a range: 2015..2019")]
Project = Annotated[str | None, Query(max_length=MAX_FILTER, description="only notebooks of this project code")]
Author = Annotated[str | None, Query(max_length=MAX_FILTER, description="only notebooks whose author contains this")]
Tag = Annotated[str | None, Query(max_length=MAX_FILTER, description="only notebooks with this tag")]
Deprecated = Annotated[bool, Query(description="also search deprecated notebooks")]
AllVersions = Annotated[bool, Query(description="every version of a notebook family as a result of its own")]
NbId = Annotated[
    str,
    Path(
        description="SHA-256 of the notebook content (64 lowercase hex digits); anything else is 404",
        json_schema_extra={"pattern": "^[0-9a-f]{64}$"},  # documented; checked in the route, which answers 404
    ),
]
Responses = dict[int | str, dict[str, Any]]  # what FastAPI takes for `responses=`
NOT_FOUND: Responses = {
    404: {"model": ErrorResponse, "description": "unknown or malformed notebook id, or no such cell"}
}
BUSY: Responses = {503: {"model": ErrorResponse, "description": "every render process is busy: try again shortly"}}


def viewer_url(nb_id: str, cell_id: str | None = None) -> str:
    return f"/nb/{nb_id}" + (f"#cell-id={cell_id}" if cell_id else "")


def search_payload(
    result: SearchResult, k: int, renders: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The JSON contract (`query`, `results`) plus the same hits grouped by notebook; `renders` (sha →
    `render_summary`) adds each notebook's re-render status and, for stale ones, the warning."""
    renders = renders or {}
    hits = result.hits(k)
    shown = {id(h) for h in hits}
    groups: list[dict[str, Any]] = []
    for nb in result.notebooks:
        nb_hits = [h for h in nb.hits if id(h) in shown]
        if not nb_hits:
            continue
        first = nb_hits[0]
        groups.append(
            {
                "id": nb.nb_sha,
                "path": nb.notebook,
                "paths": list(nb.paths) or [nb.notebook],
                "score": float(round(float(nb.score), 6)),
                "year": first.year,
                "project": first.project,
                "author": first.author,
                "stale": first.stale,
                "deprecated": first.deprecated,
                **_render_fields(renders.get(nb.nb_sha), first.stale),
                "url": viewer_url(nb.nb_sha),
                "family": nb.family,
                "n_versions": nb.n_versions,
                "versions": nb.versions,
                "checkpoint_of": nb.checkpoint_of,
                "hits": [
                    {**_contract(h), "nb_id": h.nb_sha or nb.nb_sha,
                     "url": viewer_url(h.nb_sha or nb.nb_sha, h.cell_id)}  # a version's cell links to that version
                    for h in nb_hits
                ],
            }
        )
    return {"query": result.query, "results": [_contract(h) for h in hits], "notebooks": groups}


def _render_fields(summary: dict[str, Any] | None, stale: bool) -> dict[str, Any]:
    summary = summary or render_summary(None)
    warning = summary["warning"]
    if warning is None and stale:
        warning = render_warning("stale", summary["render_reason"])
    return {"render_status": summary["render_status"], "render_reason": summary["render_reason"], "warning": warning}


def _contract(hit: Any) -> dict[str, Any]:
    data = hit.contract()
    data["score"] = float(data["score"])
    return data


def _filters(year: str | None, project: str | None, author: str | None, tag: str | None, dep: bool) -> SearchFilters:
    try:
        return SearchFilters.from_options(year, project, author, tag, dep)
    except ValueError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc


@router.get("/search", response_model=SearchResponse, response_model_exclude_unset=True,
             summary="Search the archive; results grouped by notebook")
def api_search(
    state: State,
    q: QueryText,
    k: Annotated[PlainInt, Query(ge=1, le=100, description="number of results")] = 10,
    year: Year = None,
    project: Project = None,
    author: Author = None,
    tag: Tag = None,
    include_deprecated: Deprecated = False,
    all_versions: AllVersions = False,
) -> dict[str, Any]:
    filters = _filters(year, project, author, tag, include_deprecated)
    result = state.search(q, filters, max_notebooks=k, all_versions=all_versions)
    return search_payload(result, k, state.render_summaries([nb.nb_sha for nb in result.notebooks]))


_CITATION = {
    "type": "object",
    "properties": {
        "notebook": {"type": "string"},
        "cell": {"type": "integer"},
        "cell_id": {"type": "string"},
        "nb_sha": {"type": "string"},
    },
    "required": ["notebook", "cell", "cell_id"],
}
ANSWER_EVENT_SCHEMA = {
    "title": "AnswerEvent",
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["token", "notice", "citation", "done"]},
        "text": {"type": "string"},
        "citation": _CITATION,
        "answer": {
            "type": "object",
            "properties": {
                "question": {"type": "string"},
                "text": {"type": "string"},
                "mode": {"type": "string"},
                "notice": {"type": ["string", "null"]},
                "citations": {"type": "array", "items": _CITATION},
                "places": {"type": "array", "items": _CITATION},
            },
        },
    },
    "required": ["type"],
}
_ANSWER_SCHEMA = ANSWER_EVENT_SCHEMA["properties"]["answer"]  # type: ignore[index]
_SSE: Responses = {
    200: {
        "description": "server-sent events: one `data: {json}` per answer event (token, notice, citation, done); "
        "the last is `done`, with the complete answer; with `format=json`, the complete answer as one object",
        "content": {
            "application/json": {"schema": _ANSWER_SCHEMA},
            "text/event-stream": {
                "schema": {  # one event (OpenAPI < 3.2: the schema of a sequential media type describes an item)
                    "type": "object",
                    "properties": {
                        "data": {
                            "type": "string",
                            "contentMediaType": "application/json",
                            "contentSchema": ANSWER_EVENT_SCHEMA,
                        },
                        "event": {"type": "string"},
                        "id": {"type": "string"},
                        "retry": {"type": "integer"},
                    },
                    "required": ["data"],
                }
            }
        },
    },
    503: {"model": ErrorResponse, "description": "answers are not available in this build, or the configured "
          "answer ranking model (`[answer] ranker_model`) cannot be used"},
}


def _answer_stream(
    state: WebState, question: str, filters: SearchFilters, form: str = "events"
) -> StreamingResponse | JSONResponse:
    try:
        from nbrecall.answer.answer import answer, stream_answer
        from nbrecall.answer.rerank import RankerModelError
    except ModuleNotFoundError as exc:
        if exc.name not in ("nbrecall.answer.answer", "nbrecall.answer"):
            raise
        return JSONResponse({"detail": "answers are not available in this build"}, status_code=503)
    state.warm()
    if form == "json":
        try:
            done = answer(question, state.archive, state.settings, filters)
        except RankerModelError as exc:  # the configured model cannot be used: the server's fault, named
            return JSONResponse({"detail": str(exc)}, status_code=503)
        return JSONResponse(done.as_dict())

    def events() -> Iterator[str]:
        try:
            for event in stream_answer(question, state.archive, state.settings, filters=filters):
                yield f"data: {json.dumps(event.as_dict(), ensure_ascii=False)}\n\n"
        except Exception as exc:  # the stream has started: report the failure as events, not a broken response
            log.exception("answer failed")
            why = str(exc) if isinstance(exc, RankerModelError) else type(exc).__name__  # a model file's name is safe
            yield "data: " + json.dumps({"type": "notice", "text": f"answer failed: {why}"}) + "\n\n"
            yield 'data: {"type": "done"}\n\n'

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/ask", response_class=StreamingResponse, responses=_SSE, summary="Answer a question (streamed)")
def api_ask(
    state: State,
    q: QueryText,
    year: Year = None,
    project: Project = None,
    author: Author = None,
    tag: Tag = None,
    include_deprecated: Deprecated = False,
    format: AnswerFormat = "events",  # noqa: A002 - the public parameter name
) -> Any:
    return _answer_stream(state, q, _filters(year, project, author, tag, include_deprecated), format)


@router.post("/ask", response_class=StreamingResponse, responses=_SSE, summary="Answer a question (streamed)")
def api_ask_post(state: State, body: AskRequest) -> Any:
    filters = _filters(body.year, body.project, body.author, body.tag, body.include_deprecated)
    return _answer_stream(state, body.q, filters, body.format)


@router.get("/notebooks/{nb_id}", response_model=NotebookDetail, responses=NOT_FOUND, summary="One notebook")
def api_notebook(state: State, nb_id: NbId) -> dict[str, Any]:
    try:
        content = state.content(nb_id)
    except NotFound as exc:
        raise not_found() from exc
    records = state.cells(nb_id)
    meta = content.meta or {}
    from_file = state.file_matches(state.notebook_file(content), content.sha256)
    order_warnings = [str(w) for w in meta.get("order_warnings") or []]  # analysed when it was indexed
    year = meta.get("year")
    health = meta.get("health")
    render, has_fresh = state.render_result(content)
    compared = {c.id: c.status for c in render.cells} if render is not None else {}
    indexed = render_summary(meta)
    return {
        "id": content.sha256,
        "path": content.rel,
        "paths": state.paths(nb_id) or [content.rel],
        "root": content.root,
        "n_cells": len(records),
        "year": year if isinstance(year, int) else None,
        "project": str(meta.get("project") or ""),
        "author": str(meta.get("author") or ""),
        "tags": [str(t) for t in meta.get("tags") or []],
        "deprecated": bool(meta.get("deprecated")),
        "health": float(health) if isinstance(health, int | float) else None,
        "language": str(meta.get("language") or ""),
        "nbformat": str(meta.get("nbformat") or ""),
        "order_warnings": list(order_warnings),
        "notes": [str(n) for n in meta.get("notes") or []],
        "source": "file" if from_file else "index",
        **_render_fields(indexed, False),
        "render": _render_info(render, has_fresh, indexed["render_status"], meta) if render else None,
        "viewer_url": viewer_url(nb_id),
        "report_url": f"/nb/{nb_id}/report",
        "deps_url": f"/nb/{nb_id}/deps.svg",
        "cells": [
            CellSummary(
                index=r.idx,
                cell_id=r.cell_id,
                cell_type=r.cell_type,
                execution_count=r.execution_count,
                source_chars=len(r.source),
                first_line=next((ln.strip() for ln in r.source.splitlines() if ln.strip()), "")[:200],
                url=viewer_url(nb_id, r.cell_id),
                render_status=compared.get(r.cell_id),
            )
            for r in records
        ],
    }


def _render_info(render: Any, has_fresh: bool, indexed: str | None, meta: dict[str, Any]) -> RenderInfo:
    return RenderInfo(
        status=render.status,
        reason=render.reason,
        rendered_at=render.rendered_at,
        warning=render_warning(render.status, render.reason),
        indexed_status=indexed,
        outputs_indexed="fresh" if indexed and meta.get("render_outputs") == "fresh" else "original",
        has_fresh_outputs=has_fresh,
        counts=render.counts(),
        notes=[str(n) for n in render.notes],
        cells=[RenderCell(index=c.index, cell_id=c.id, status=c.status, detail=c.detail) for c in render.cells],
    )


@router.get(
    "/notebooks/{nb_id}/cells/{index}",
    response_model=CellDetail,
    responses={**NOT_FOUND, **BUSY},
    summary="One cell",
)
def api_cell(
    state: State, nb_id: NbId, index: Annotated[PlainInt, Path(description="0-based cell index")]
) -> CellDetail | JSONResponse:
    try:
        content = state.content(nb_id)
    except NotFound as exc:
        raise not_found() from exc
    records = state.cells(nb_id, index, index + 1) if 0 <= index < 2**62 else []
    if not records:
        raise not_found("no such cell")
    record = records[0]
    path = state.notebook_file(content)
    task = {
        "path": str(path) if path is not None else None,
        "sha": content.sha256,
        "rel": content.rel,
        "record": record,
        "max_output_chars": state.settings.chunk.max_output_chars,
        "meta": dict(content.meta or {}),
        "renders": state.renders_folder(content),
    }
    key = ("cell", content.sha256, index, task["max_output_chars"], state.version(path, content.sha256))
    notice = None
    try:
        found = state.pool.run(key, "cell", task, state.settings.serve.render_timeout)
    except RenderBusy:
        return JSONResponse(
            {"detail": "every render process is busy: try again shortly"}, status_code=503,
            headers={"retry-after": "5"},
        )
    except RenderFailed as exc:
        found, notice = None, f"outputs not shown ({exc.reason}): outputs_text has them as indexed"
    render, _has_fresh = state.render_result(content)
    comparison = render.cell(record.cell_id) if render is not None else None
    return CellDetail(
        notebook_id=nb_id,
        notebook=content.rel,
        index=record.idx,
        cell_id=record.cell_id,
        cell_type=record.cell_type,
        execution_count=record.execution_count,
        source=record.source,
        tags=list(found["tags"]) if found else [],
        outputs=[CellOutput(**o) for o in found["outputs"]] if found else [],
        outputs_text=record.outputs,
        url=viewer_url(nb_id, record.cell_id),
        render_status=comparison.status if comparison is not None else None,
        fresh_outputs=[CellOutput(**o) for o in found["fresh_outputs"]]
        if found and found["fresh_outputs"] is not None
        else None,
        notice=notice,
    )


@router.get("/status", response_model=StatusResponse, summary="What the index holds; quarantined files")
def api_status(state: State) -> dict[str, Any]:
    with state.lock:
        manifest = state.archive.manifest
        stats = manifest.stats()
        quarantined = []
        for rec in manifest.contents("quarantined"):
            for root, rel in manifest.paths_of(rec.sha256) or [(rec.root, rec.rel)]:
                quarantined.append({"path": rel, "root": root, "sha256": rec.sha256, "reason": rec.reason})
        renders = manifest.render_counts()
        roots = [asdict(r) for r in manifest.roots()]
    return {"stats": stats, "quarantined": quarantined, "renders": renders, "roots": roots}
