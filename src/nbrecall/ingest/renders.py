"""Stored renders (`nbrecall render`) as the index, the search results and the viewer use them.

A render of a notebook is stored under its SHA-256 in the renders folder (`settings.render.out_dir`, default
`<index>/renders`): `<sha>.json` (the `RenderResult`) and, when the notebook ran, `<sha>.ipynb` (the executed
copy, same cell ids). The index uses it so:

- `fresh` or `changed`: the fresh outputs are indexed in place of the file's own (sources, markdown, metadata and
  cell ids stay the original's);
- `stale` (could not re-execute): the original outputs stay indexed, every chunk is flagged `stale` (a lower
  priority bucket) and hits carry `render_warning()`.

The content record's meta says what was used: `render_status`, `render_reason`, `rendered_at`, `render_outputs`
(`fresh` or `original`) and `render_mtime_ns`, the stat of `<sha>.json` when it was indexed, which is how a run
notices a render made (or removed) since, without the notebook file changing.

This module stays light: the render package (nbclient, the sandbox) is imported only when a render exists.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbrecall.notebook.model import Cell, Notebook

if TYPE_CHECKING:
    from nbrecall.config import Settings
    from nbrecall.render.compare import RenderResult

RENDER_STATUSES = ("fresh", "changed", "stale")
META_KEYS = ("render_status", "render_reason", "rendered_at", "render_outputs", "render_mtime_ns")


def renders_dir(settings: Settings) -> Path:
    """Where `nbrecall render` stores results for this index (same rule as `RenderOptions.from_settings`)."""
    out = settings.render.out_dir
    return Path(out) if out else Path(settings.index_dir) / "renders"


def render_mtime_ns(out_dir: Path, sha: str) -> int | None:
    """The modification time of `<out_dir>/<sha>.json`, or None when there is no render: one stat."""
    try:
        return os.stat(out_dir / f"{sha}.json").st_mtime_ns
    except OSError:
        return None


def render_warning(status: str | None, reason: str | None = "") -> str | None:
    """The warning every hit of a stale notebook carries; None for other statuses."""
    if status != "stale":
        return None
    return f"stale: {reason or 'unknown reason'} — outputs could not be re-executed"


def render_label(status: str | None, reason: str | None = "") -> str:
    """The text of a notebook-level badge: `re-rendered: fresh`, `re-rendered: changed`, `stale: <reason>`."""
    if not status:
        return ""
    if status == "stale":
        return f"stale: {reason}" if reason else "stale"
    return f"re-rendered: {status}"


def render_summary(meta: dict[str, Any] | None) -> dict[str, Any]:
    """`render_status`, `render_reason`, `rendered_at` and `warning` from a content record's meta (all empty
    or None when the notebook was indexed without a render)."""
    meta = meta or {}
    status = meta.get("render_status")
    status = status if status in RENDER_STATUSES else None
    reason = str(meta.get("render_reason") or "") if status else ""
    return {
        "render_status": status,
        "render_reason": reason,
        "rendered_at": str(meta.get("rendered_at") or "") if status else "",
        "warning": render_warning(status, reason),
    }


def match_cells(original: Notebook, fresh: Notebook) -> dict[int, Cell]:
    """Original cell index → the executed copy's cell: by cell id, else by position when the source agrees."""
    by_id = {c.id: c for c in fresh.cells}
    matched: dict[int, Cell] = {}
    for cell in original.cells:
        other = by_id.get(cell.id)
        if other is None and cell.index < len(fresh.cells):
            candidate = fresh.cells[cell.index]
            if candidate.source == cell.source and candidate.cell_type == cell.cell_type:
                other = candidate
        if other is not None and other.cell_type == cell.cell_type:
            matched[cell.index] = other
    return matched


def with_fresh_outputs(original: Notebook, fresh: Notebook) -> Notebook | None:
    """`original` with every code cell's outputs and execution count taken from the executed copy.

    None when the copy does not match the notebook cell for cell (then the original outputs are kept).
    """
    matched = match_cells(original, fresh)
    code = [c for c in original.cells if c.is_code]
    if any(c.index not in matched for c in code):
        return None
    cells = [
        dataclasses.replace(c, outputs=list(matched[c.index].outputs), execution_count=matched[c.index].execution_count)
        if c.is_code
        else c
        for c in original.cells
    ]
    return dataclasses.replace(original, cells=cells)


def load_render_pair(out_dir: Path, sha: str, display_path: str) -> tuple[RenderResult | None, Notebook | None]:
    """The stored result and the executed copy (either may be None); imports the render package only if needed."""
    if render_mtime_ns(out_dir, sha) is None:
        return None, None
    from nbrecall.render.run import load_fresh_notebook, load_render

    result = load_render(out_dir, sha)
    if result is None:
        return None, None
    return result, load_fresh_notebook(out_dir, sha, display_path)


def notebook_for_index(out_dir: Path, sha: str, original: Notebook) -> tuple[Notebook, bool, dict[str, Any]]:
    """What to index for `original` given the renders folder: (notebook, stale, meta entries)."""
    mtime = render_mtime_ns(out_dir, sha)
    if mtime is None:
        return original, False, {}
    meta: dict[str, Any] = {"render_mtime_ns": mtime}  # recorded even when unreadable: no re-index loop
    result, fresh = load_render_pair(out_dir, sha, original.path)
    if result is None or result.status not in RENDER_STATUSES:
        return original, False, meta
    meta.update(
        render_status=result.status,
        render_reason=result.reason,
        rendered_at=result.rendered_at,
        render_outputs="original",
    )
    if result.status == "stale":
        return original, True, meta
    merged = with_fresh_outputs(original, fresh) if fresh is not None else None
    if merged is None:
        return original, False, meta
    meta["render_outputs"] = "fresh"
    return merged, False, meta
