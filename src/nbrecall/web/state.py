"""What the routes share: the opened archive, settings, the render processes, and lookups that never take a path
from a request."""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException, Request

from nbrecall.config import Settings
from nbrecall.ingest.renders import render_mtime_ns, render_summary, renders_dir
from nbrecall.notebook.files import content_sha256
from nbrecall.records import CellRecord, ContentRecord, SearchFilters
from nbrecall.search.retrieve import SearchResult
from nbrecall.service import Archive
from nbrecall.web.heavy import RenderPool

if TYPE_CHECKING:
    from nbrecall.ingest.live import LiveIndexer
    from nbrecall.render.compare import RenderResult

NB_ID = re.compile(r"^[0-9a-f]{64}$")


class NotFound(Exception):
    """An unknown or malformed notebook id, or a cell index out of range."""


def _render_pool(settings: Settings) -> RenderPool:
    serve = settings.serve
    return RenderPool(serve.workers, serve.render_memory_mb, serve.cache_mb, serve.queue_timeout)


@dataclass
class WebState:
    settings: Settings
    archive: Archive
    lock: threading.RLock = field(default_factory=threading.RLock)
    heavy: RenderPool | None = None
    live: LiveIndexer | None = None  # `serve ROOT`: the background indexing (None: another process indexes)

    def __post_init__(self) -> None:
        if self.heavy is None:
            self.heavy = _render_pool(self.settings)

    @property
    def pool(self) -> RenderPool:
        assert self.heavy is not None
        return self.heavy

    def close(self) -> None:
        """Stop the background indexing (at its next batch boundary) and the render processes."""
        if self.live is not None:
            self.live.close()
        self.pool.close()

    def search(
        self, query: str, filters: SearchFilters, max_notebooks: int = 10, all_versions: bool = False
    ) -> SearchResult:
        with self.lock:
            return self.archive.search(query, filters, max_notebooks=max_notebooks, all_versions=all_versions)

    def warm(self) -> None:
        """Open the store (and so the embedder) once, under the lock, before work that does not take it."""
        with self.lock:
            _ = self.archive.store

    def content(self, nb_id: str) -> ContentRecord:
        """The indexed notebook with this id (its SHA-256), looked up in the manifest; NotFound otherwise."""
        if not isinstance(nb_id, str) or not NB_ID.fullmatch(nb_id):
            raise NotFound(nb_id)
        with self.lock:
            record = self.archive.manifest.content(nb_id)
        if record is None or record.status != "indexed":
            raise NotFound(nb_id)
        return record

    def paths(self, nb_id: str) -> list[str]:
        with self.lock:
            return [rel for _root, rel in self.archive.manifest.paths_of(nb_id)]

    def cells(self, nb_id: str, start: int = 0, stop: int | None = None) -> list[CellRecord]:
        """The index's records of the notebook's cells (`start`..`stop`: one page of them)."""
        with self.lock:
            return self.archive.manifest.cells(nb_id, start, stop)

    def cell_index(self, nb_id: str, cell_id: str) -> int | None:
        with self.lock:
            return self.archive.manifest.cell_index(nb_id, cell_id)

    def notebook_file(self, content: ContentRecord) -> Path | None:
        """Where the notebook's file is (render workers read it, and check it still has the indexed hash)."""
        with self.lock:
            return self.archive.notebook_file(content.sha256)

    def file_matches(self, path: Path | None, sha: str) -> bool:
        """The file still hashes to the indexed content; read in blocks, so a 50 MB notebook costs no memory."""
        if path is None:
            return False
        try:
            return content_sha256(path) == sha
        except OSError:
            return False

    def version(self, path: Path | None, sha: str) -> tuple[Any, ...]:
        """What a cached rendering of this notebook depends on besides its hash: the file's state (it may have
        changed or gone since indexing) and its stored re-render."""
        try:
            stat = os.stat(path) if path is not None else None
        except OSError:
            stat = None
        file_state = (str(path), stat.st_size, stat.st_mtime_ns) if stat is not None else None
        return file_state, render_mtime_ns(renders_dir(self.settings), sha)

    def render_result(self, content: ContentRecord) -> tuple[RenderResult | None, bool]:
        """The stored re-render of this content (by hash, in the renders folder) and whether its executed copy
        is stored too; the copy itself is not read (render workers do that, within their budget)."""
        out = renders_dir(self.settings)
        if render_mtime_ns(out, content.sha256) is None:
            return None, False
        from nbrecall.render.run import load_render, render_file_name

        result = load_render(out, content.sha256)
        return result, result is not None and (out / render_file_name(content.sha256, ".ipynb")).is_file()

    def figure_cache(self) -> dict[str, str] | None:
        """Where the viewer reads figure descriptions (`[vision]` on and a cache in the index folder), else None."""
        from nbrecall.vision.factory import make_describer
        from nbrecall.vision.store import FILE_NAME

        path = self.settings.index_dir / FILE_NAME
        try:
            describer = make_describer(self.settings, plugins=self.archive.plugins)
            mtime = os.stat(f"{path}-wal").st_mtime_ns if os.path.exists(f"{path}-wal") else os.stat(path).st_mtime_ns
        except Exception:
            return None
        if describer is None:
            return None
        return {"path": str(path), "describer": describer.id, "label": describer.label, "mtime": str(mtime)}

    def renders_folder(self, content: ContentRecord) -> str | None:
        """The renders folder when this content has a stored render (workers load it), else None."""
        out = renders_dir(self.settings)
        return str(out) if render_mtime_ns(out, content.sha256) is not None else None

    def render_summaries(self, shas: list[str]) -> dict[str, dict[str, Any]]:
        """sha → `render_summary` of what the index used, for a page of search results."""
        with self.lock:
            records = {sha: self.archive.manifest.content(sha) for sha in dict.fromkeys(shas)}
        return {sha: render_summary(rec.meta if rec is not None else None) for sha, rec in records.items()}


def get_state(request: Request) -> WebState:
    return request.app.state.web


def not_found(what: str = "notebook not found") -> HTTPException:
    return HTTPException(status_code=404, detail=what)


