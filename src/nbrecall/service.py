"""Wiring for the read side and the write side of an index folder, shared by the CLI, the web app and MCP."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nbrecall import backends
from nbrecall.config import Settings
from nbrecall.index import embedder_from_settings
from nbrecall.index.embed import Embedder
from nbrecall.notebook.files import notebook_exists, notebook_path
from nbrecall.plugins import PluginManager, plugin_manager
from nbrecall.protocols import Store
from nbrecall.records import SearchFilters
from nbrecall.search.retrieve import SearchResult, retrieve


class IndexMissing(RuntimeError):
    """The index folder has no index yet."""


def open_store(settings: Settings, dim: int) -> Store:
    """The chunk store the settings name: the index folder's LanceDB table, or PostgreSQL (`[store] url`)."""
    return backends.open_store(settings, dim)


def prepare_index(settings: Settings, embedder: Embedder) -> Store:
    """The store of the index these settings name, created empty (chunk table and manifest) if there is none
    yet: `serve ROOT` opens the index, and answers from it, before the first notebook of ROOT is written."""
    store = open_store(settings, embedder.dim)
    backends.open_manifest(settings, store=store).close()  # creates (or migrates) the manifest
    return store


@dataclass
class Archive:
    """An opened index: search it; models are loaded once, at first use. `plugins`: the plugin manager the
    embedder and the answerer come through (built from the settings at first use unless given)."""

    settings: Settings
    _embedder: Embedder | None = field(default=None, repr=False)
    _plugins: PluginManager | None = field(default=None, repr=False)
    _store: Store | None = field(default=None, repr=False)
    _last_vector: tuple[str, np.ndarray] | None = field(default=None, repr=False)
    _holds_vectors: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if not backends.index_exists(self.settings):
            where = "or pass --index / set NBRECALL_INDEX" if backends.store_url(self.settings) is None else (
                "or pass --store / set NBRECALL_STORE")
            raise IndexMissing(
                f"{backends.describe(self.settings)}: no index here; run `nbrecall index ROOT` first ({where})"
            )
        self.manifest = backends.open_manifest(self.settings, readonly=True)

    @property
    def plugins(self) -> PluginManager:
        if self._plugins is None:
            self._plugins = plugin_manager(self.settings)
        return self._plugins

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = embedder_from_settings.make_embedder(self.settings, self.plugins)
        return self._embedder

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = open_store(self.settings, self.embedder.dim)
        return self._store

    def holds_vectors(self) -> bool:
        """Whether the index has any vector to search yet (asked again until it has: a `serve` that follows an
        index run sees vectors arrive; once there, they stay)."""
        if not self._holds_vectors:
            self._holds_vectors = self.manifest.holds_vectors()
        return self._holds_vectors

    def query_vector(self, query: str) -> np.ndarray | None:
        """The question's vector: None with vectors off, or while the index holds none (keyword-only: built with
        `--no-vectors`, or its vectors not filled yet), where a vector list would only scan a column of nulls.
        The last one is kept, since an answer searches twice."""
        if not query.strip() or not self.settings.embed.enabled or not self.holds_vectors():
            return None
        if self._last_vector is None or self._last_vector[0] != query:
            if self._store is None:
                # A process's first search (a CLI command): the query's vector (ONNX session, native code) is
                # computed while the store opens (the lancedb import, Python): together ~0.3 s sooner on 2 cores.
                embedder = self.embedder
                with ThreadPoolExecutor(1, thread_name_prefix="nbrecall-query-vector") as pool:
                    pending = pool.submit(embedder.embed, [query])
                    try:
                        _ = self.store
                    finally:
                        vector = pending.result()[0]
            else:
                vector = self.embedder.embed([query])[0]
            self._last_vector = (query, vector)
        return self._last_vector[1]

    def search(
        self, query: str, filters: SearchFilters | None = None, max_notebooks: int = 10, all_versions: bool = False
    ) -> SearchResult:
        """One result per notebook family (`[families]`), or every version with `all_versions`."""
        vector = self.query_vector(query)
        return retrieve(
            query,
            self.store,
            self.manifest,
            vector,
            self.settings.retrieve,
            filters,
            max_notebooks=max_notebooks,
            families=self.settings.families if self.settings.families.enabled else None,
            all_versions=all_versions,
        )

    def notebook_file(self, sha: str) -> Path | None:
        """The file on disk for an indexed notebook (never a path taken from a request)."""
        for root, rel in self.manifest.paths_of(sha):
            path = notebook_path(root, rel)
            if notebook_exists(path):  # a file, or a notebook inside a zip archive
                return path
        return None
