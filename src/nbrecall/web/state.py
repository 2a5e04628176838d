"""What the routes share: the opened archive, settings, and lookups that never take a path from a request."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException, Request

from nbrecall.config import Settings
from nbrecall.index.store import SearchFilters
from nbrecall.ingest.manifest import CellRecord, ContentRecord
from nbrecall.ingest.renders import load_render_pair, render_summary, renders_dir
from nbrecall.notebook.model import Notebook
from nbrecall.search.retrieve import SearchResult
from nbrecall.service import Archive
from nbrecall.web.render import load_notebook

if TYPE_CHECKING:
    from nbrecall.render.compare import RenderResult

NB_ID = re.compile(r"^[0-9a-f]{64}$")


class NotFound(Exception):
    """An unknown or malformed notebook id, or a cell index out of range."""


@dataclass
class WebState:
    settings: Settings
    archive: Archive
    lock: threading.RLock = field(default_factory=threading.RLock)

    def search(self, query: str, filters: SearchFilters, max_notebooks: int = 10) -> SearchResult:
        with self.lock:
            return self.archive.search(query, filters, max_notebooks=max_notebooks)

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

    def cells(self, nb_id: str) -> list[CellRecord]:
        with self.lock:
            return self.archive.manifest.cells(nb_id)

    def notebook(self, content: ContentRecord) -> tuple[Notebook, bytes] | None:
        """The parsed file, only if the file the manifest lists still hashes to the indexed content."""
        with self.lock:
            path = self.archive.notebook_file(content.sha256)
        return load_notebook(path, content.sha256, content.rel)

    def render(self, content: ContentRecord) -> tuple[RenderResult | None, Notebook | None]:
        """The stored re-render of this content and its executed copy (found by hash in the renders folder)."""
        return load_render_pair(renders_dir(self.settings), content.sha256, content.rel)

    def render_summaries(self, shas: list[str]) -> dict[str, dict[str, Any]]:
        """sha → `render_summary` of what the index used, for a page of search results."""
        with self.lock:
            records = {sha: self.archive.manifest.content(sha) for sha in dict.fromkeys(shas)}
        return {sha: render_summary(rec.meta if rec is not None else None) for sha, rec in records.items()}


def get_state(request: Request) -> WebState:
    return request.app.state.web


def not_found(what: str = "notebook not found") -> HTTPException:
    return HTTPException(status_code=404, detail=what)


