"""`GET /api/progress`: how far the index is, and what the background indexing of `serve ROOT` is doing."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from nbrecall.web.state import WebState, get_state

router = APIRouter(prefix="/api", tags=["api"])
State = Annotated[WebState, Depends(get_state)]


class IndexCounts(BaseModel):
    notebooks: int = Field(description="notebooks indexed (keyword-searchable)")
    quarantined: int = Field(description="files that could not be read (`/api/status` lists them with the reason)")
    chunks: int
    embedded: int = Field(description="chunks with a vector")
    waiting_for_vector: int = Field(description="chunks still to be embedded")


class LiveProgress(BaseModel):
    state: str = Field(description="starting, discovering, indexing, embedding, idle, waiting (another writer "
                                   "holds the index), failed or stopped")
    busy: bool = Field(description="a run is in progress")
    roots: list[str]
    watching: bool
    every_seconds: float | None
    runs: int = Field(description="runs started since the server started")
    trigger: str = Field(description="what started the current or last run")
    run_started_at: float | None
    notebooks_done: int = Field(description="this run: new or changed notebooks written")
    notebooks_total: int | None = Field(description="this run: new or changed notebooks to write (null while the "
                                                    "files are being listed)")
    vectors_done: int
    vectors_total: int | None
    eta_seconds: float | None = Field(description="estimate of the current phase's time left, from its rate")
    last_finished_at: float | None
    last_seconds: float | None
    last_summary: dict[str, Any]
    last_error: str | None
    next_run_at: float | None


class ProgressResponse(BaseModel):
    index: IndexCounts
    live: LiveProgress | None = Field(default=None, description="null unless the server indexes ROOT itself")
    lines: list[str] = Field(description="the same, in words, as the search page shows it")
    fraction: float | None = Field(description="share of the current phase done (0..1), null when unknown")


def progress_payload(state: WebState) -> dict[str, Any]:
    with state.lock:
        stats = state.archive.manifest.stats()
    index = {
        "notebooks": stats["notebooks"], "quarantined": stats["quarantined"], "chunks": stats["chunks"],
        "embedded": stats["embedded"], "waiting_for_vector": stats["waiting for a vector"],
    }
    live = state.live.status() if state.live is not None else None
    lines, fraction = describe(index, live)
    return {"index": index, "live": live, "lines": lines, "fraction": fraction}


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    seconds = round(seconds)
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def describe(
    index: dict[str, Any], live: dict[str, Any] | None, now: float | None = None
) -> tuple[list[str], float | None]:
    """The progress in words (one line per fact) and the share of the current phase done."""
    now = time.time() if now is None else now
    lines: list[str] = []
    fraction = None
    if live is not None:
        state = live["state"]
        eta = f" · {_duration(live['eta_seconds'])} left (estimate)" if live.get("eta_seconds") is not None else ""
        if state in ("starting", "discovering"):
            since = live.get("run_started_at") or now
            lines.append(f"Indexing {', '.join(live['roots'])}: looking for new, changed and deleted notebooks "
                         f"({_duration(now - since)} so far)")
        elif state == "indexing":
            done, total = live["notebooks_done"], live["notebooks_total"] or 0
            fraction = done / total if total else None
            lines.append(f"Indexing: {done:,} of {total:,} new or changed notebooks written, {total - done:,} "
                         f"waiting{eta}; each is keyword-searchable once written, vectors follow")
        elif state == "embedding":
            done, total = live["vectors_done"], live["vectors_total"] or 0
            fraction = done / total if total else None
            lines.append(f"Vectors: {done:,} of {total:,} chunks embedded{eta}; keyword search covers every "
                         f"notebook already")
        elif state in ("waiting", "failed"):
            retry = live.get("next_run_at")
            again = f"; trying again in {_duration(retry - now)}" if retry else ""
            lines.append(f"Indexing paused: {live.get('last_error') or state}{again}")
        elif state == "idle":
            ways = [w for w, on in (("watching for changes", live["watching"]),) if on]
            if live.get("every_seconds"):
                ways.append(f"looking again every {_duration(live['every_seconds'])}")
            lines.append("Up to date" + (f" ({', '.join(ways)})" if ways else ""))
            summary = live.get("last_summary") or {}
            if live.get("last_finished_at") and summary:
                lines.append(f"Last run {_duration(now - live['last_finished_at'])} ago, in "
                             f"{_duration(live.get('last_seconds') or 0)}: {summary.get('indexed', 0):,} new or "
                             f"changed, {summary.get('removed', 0):,} removed, "
                             f"{len(summary.get('quarantined') or []):,} quarantined")
    share = index["embedded"] / index["chunks"] if index["chunks"] else 1.0
    quarantined = index["quarantined"]
    lines.append(f"{index['notebooks']:,} notebooks searchable · {index['chunks']:,} chunks, {share:.0%} with a "
                 f"vector" + (f" · {quarantined:,} file(s) quarantined (see /api/status)" if quarantined else ""))
    return lines, fraction


@router.get("/progress", response_model=ProgressResponse, summary="Index size and background indexing progress")
def api_progress(state: State) -> dict[str, Any]:
    return progress_payload(state)
