"""A store and a manifest that `search.retrieve.retrieve` can run on, answering from hits a test gives: what
retrieval makes of what a store returns, without an index."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbrecall.records import CellRecord, StoreHit, StoreQuery


class FakeStore:
    """Answers every content search with the given hits of the kinds it asks for (all, when it names none) and every
    fact search with the hits of kind `fact`; records the text and the kinds of each search it was sent."""

    def __init__(self, hits: list[StoreHit]) -> None:
        self.hits = hits
        self.texts: list[str] = []
        self.kinds: list[Any] = []

    def search(self, query: StoreQuery) -> list[StoreHit]:
        self.texts.append(query.text)
        kinds = query.filters.kinds
        self.kinds.append(kinds)
        return [StoreHit(dict(h.row), h.score) for h in self.hits if kinds is None or h.row["kind"] in kinds]

    def search_facts(self, query: StoreQuery) -> list[StoreHit]:
        self.texts.append(query.text)
        self.kinds.append("facts")
        return [StoreHit(dict(h.row), h.score) for h in self.hits if h.row["kind"] == "fact"]


class FakeManifest:
    """One indexed notebook, `sha` at `path` under the root `/r`, with `cells` and no facts."""

    def __init__(self, sha: str, path: str, cells: Iterable[CellRecord] = ()) -> None:
        self.sha, self.path, self._cells = sha, path, list(cells)

    def indexed_shas(self, among: object = None) -> set[str]:
        return {self.sha}

    def cells(self, sha: str) -> list[CellRecord]:
        return list(self._cells)

    def paths_of(self, sha: str) -> list[tuple[str, str]]:
        return [("/r", self.path)]

    def paths_of_many(self, shas: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
        return {sha: self.paths_of(sha) if sha == self.sha else [] for sha in shas}

    def facts(self, sha: str) -> list[Any]:
        return []
