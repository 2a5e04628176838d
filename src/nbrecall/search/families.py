"""One result per notebook family (`ingest.families`): its best member for the query, the others listed.

The store's filters apply per chunk, so per member: a deprecated or filtered-out member has no hits and cannot
hide a sibling that matches. Among the members that matched, the best score wins; members within `tie_margin` of
it are ties, settled by recency (year, then last modified) and health. A checkpoint copy is never its own
result: a saved version within `CHECKPOINT_MARGIN` of it stands for the family, and when it wins (it holds what the
query asks for and its saved notebook does not, or no longer) its hits are shown labelled "in an older checkpoint of
<saved notebook>"; a cell only it holds under a saved version's result is labelled so too. What a hidden member
matches that the shown one holds as well lends its score to the shown one's chunk of it (`lend_scores`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from nbrecall.config import FamilySettings
from nbrecall.index.family_store import family_store
from nbrecall.records import CONTENT_KINDS, SearchFilters, StoreHit
from nbrecall.search.anchor import pick_anchor

CHECKPOINT_MARGIN = 0.05  # a checkpoint is shown as the result only when it matches clearly better than its saved
# notebook (it holds what the query asks for); within this share the saved notebook stands for the family
Ranked = tuple[str, float, list[Any]]  # (content sha, notebook score, its store hits), as `group_by_notebook` gives


@dataclass
class FamilyEntry:
    """One result: the chosen member, the family's best score, and the family."""

    sha: str
    score: float
    group: list[Any]
    family: str
    checkpoint_of: str | None = None
    matched: dict[str, float] = field(default_factory=dict)  # every member that matched → its score
    others: list[Ranked] = field(default_factory=list)  # the other members that matched, best first
    checkpoints: set[str] = field(default_factory=set)  # which of them are checkpoint copies


def _recency(detail: dict[str, Any]) -> tuple[int, int, float]:
    return (detail.get("year") or 0, detail.get("modified_ns") or 0, detail.get("health") or 0.0)


def arrange(ranked: list[Ranked], manifest: Any, settings: FamilySettings, collapse: bool = True) -> list[FamilyEntry]:
    """The ranked notebooks as results: one per family when `collapse`, else every notebook (with its family)."""
    store = family_store(manifest)
    families = store.families_of(sha for sha, _, _ in ranked) if store is not None else {}
    by_family: dict[str, list[Ranked]] = {}
    for item in ranked:
        by_family.setdefault(families.get(item[0], item[0]), []).append(item)
    shas = [sha for sha, _, _ in ranked]
    details = {d["nb_sha"]: d for d in store.member_details(shas)} if store is not None and families else {}
    entries: list[FamilyEntry] = []
    if not collapse:
        for sha, score, group in ranked:
            family = families.get(sha, sha)
            matched = {s: sc for s, sc, _ in by_family[family]}
            checkpoint = (details.get(sha) or {}).get("checkpoint_of")
            entries.append(FamilyEntry(sha, score, group, family, checkpoint, matched))
        return entries
    for family, items in by_family.items():
        best = max(score for _, score, _ in items)
        ties = [item for item in items if item[1] >= best * (1.0 - settings.tie_margin)]

        def preference(item: Ranked) -> tuple[Any, ...]:
            detail = details.get(item[0]) or {}
            return (detail.get("checkpoint_of") is None, *_recency(detail), item[1])

        chosen = max(ties, key=preference)
        if (details.get(chosen[0]) or {}).get("checkpoint_of"):
            saved = [item for item in items if not (details.get(item[0]) or {}).get("checkpoint_of")]
            near = [item for item in saved if item[1] >= chosen[1] * (1.0 - CHECKPOINT_MARGIN)]
            if near:  # the saved notebook holds what matched as well: the checkpoint stays hidden
                chosen = max(near, key=preference)
        checkpoint = (details.get(chosen[0]) or {}).get("checkpoint_of")
        others = sorted((item for item in items if item[0] != chosen[0]), key=lambda item: -item[1])
        marked = {sha for sha, _, _ in others if (details.get(sha) or {}).get("checkpoint_of")}
        entries.append(FamilyEntry(chosen[0], best, chosen[2], family, checkpoint,
                                   {sha: score for sha, score, _ in items}, others, marked))
    entries.sort(key=lambda e: -e.score)
    return entries


@dataclass
class VersionHit:
    """A matching cell of another member that the entry's notebook lacks."""

    sha: str
    hit: Any
    cells: dict[int, Any]
    checkpoint_of: str | None


def _text(cell: Any) -> str:
    return " ".join(f"{cell.source}\n{cell.outputs}".split())


def lacking(
    entry: FamilyEntry, cells: dict[int, Any], manifest: Any, floor: float, limit: int, terms: set[str]
) -> list[VersionHit]:
    """The best hit of each other matching member (best members first, at most `limit`) whose cell, source and
    outputs, is in no cell of the entry's notebook and scores at least `floor`: what the shown version lacks."""
    mine = {_text(c) for c in cells.values()}
    found: list[VersionHit] = []
    for sha, _score, group in entry.others:
        if len(found) >= limit:
            break
        if not group or group[0].score < floor:
            continue
        theirs = {c.idx: c for c in manifest.cells(sha)}
        anchor, _ordered = pick_anchor(group[0].row, theirs, terms)
        cell = theirs.get(anchor)
        if cell is None or _text(cell) in mine:
            continue
        checkpoint = None
        if sha in entry.checkpoints:
            from nbrecall.notebook.checkpoints import saved_path

            checkpoint = saved_path(group[0].row["notebook"])
        found.append(VersionHit(sha, group[0], theirs, checkpoint))
    return found


# (notebook sha, chunk kind, the cells it covers, their text) → that notebook's chunk row of that kind covering
# exactly those cells, or None: how `lend_scores` finds a chunk the fan-out did not bring
ChunkLookup = Callable[[str, str, list[int], str], dict[str, Any] | None]


def chunk_lookup(store: Any, filters: SearchFilters) -> ChunkLookup:
    """A `ChunkLookup` by the store's keyword search for the cells' text within one notebook (and the user's
    filters): the chunk holding that text ranks first among its notebook's chunks of its kind."""

    def find(sha: str, kind: str, cells: list[int], text: str) -> dict[str, Any] | None:
        wanted = replace(filters, notebooks=[sha], kinds=[kind])
        rows = store.keyword(text, 20, wanted)
        return next((row for row in rows if list(row["cells"]) == cells and row["nb_sha"] == sha), None)

    return find


def _equivalent_cells(hidden: list[int], theirs: dict[int, Any], mine: dict[int, Any],
                      mine_by_text: dict[str, list[int]]) -> list[int] | None:
    """The cells of the shown notebook holding what the cells `hidden` of another member hold (source and
    outputs, whitespace aside), in the same order and spacing; the nearest place when the text recurs."""
    first = theirs.get(hidden[0]) if hidden else None
    if first is None:
        return None
    for start in sorted(mine_by_text.get(_text(first), []), key=lambda i: (abs(i - hidden[0]), i)):
        mapped = [start + (idx - hidden[0]) for idx in hidden]
        if all(idx in theirs and m in mine and _text(mine[m]) == _text(theirs[idx])
               for idx, m in zip(hidden, mapped, strict=True)):
            return mapped
    return None


def _body_words(text: str, words: int = 60) -> str:
    """The first words of a chunk's text after its header lines (path, headings): what a copy's chunk of the same
    cells says too, and enough of it for the keyword search to rank that chunk first."""
    body = text.split("\n\n", 1)[1] if "\n\n" in text else text
    return " ".join(body.split()[:words])


def lend_scores(
    entry: FamilyEntry, cells: dict[int, Any], manifest: Any, find: ChunkLookup, floor: float, limit: int
) -> list[Any]:
    """The entry's hits, with the scores other members' hits lend to it: a hit of another member whose cells the
    shown notebook also holds (source and outputs alike) is the same content, so the shown notebook's chunk
    holding it ranks with that hit's score when it is higher than its own (or was not found at all: `find`).

    Without this, what a hidden copy matches best is hidden (`lacking` lists only what the shown one lacks) and
    the shown copy's chunk of it, under other headings or a path that scores less, ranks below the page: the
    family's result would not show the cell the query is about. At most `limit` chunks are lent a score, the
    best first; hits under `floor` (a share of the entry's best hit) are not shown anyway and lend nothing.
    """
    group = list(entry.group)
    if not entry.others or not cells:
        return group
    best = max((hits[0].score for hits in [group, *(g for _s, _sc, g in entry.others)] if hits), default=0.0)
    lenders = sorted(((hit, sha) for sha, _score, hits in entry.others for hit in hits
                      if hit.score >= floor * best and hit.row["kind"] in CONTENT_KINDS), key=lambda x: -x[0].score)
    if not lenders:
        return group
    mine_by_text: dict[str, list[int]] = {}
    for idx, cell in cells.items():
        mine_by_text.setdefault(_text(cell), []).append(idx)
    own = {(hit.row["kind"], tuple(hit.row["cells"])): i for i, hit in enumerate(group)}
    theirs_of: dict[str, dict[int, Any]] = {}
    lent: set[tuple[str, tuple[int, ...]]] = set()
    for hit, sha in lenders:
        if len(lent) >= limit:
            break
        if sha not in theirs_of:
            theirs_of[sha] = {c.idx: c for c in manifest.cells(sha)}
        mapped = _equivalent_cells(list(hit.row["cells"]), theirs_of[sha], cells, mine_by_text)
        if mapped is None:
            continue
        key = (hit.row["kind"], tuple(mapped))
        if key in lent:
            continue
        at = own.get(key)
        if at is not None and group[at].score >= hit.score:
            continue
        if at is None:
            row = find(entry.sha, hit.row["kind"], mapped, _body_words(hit.row["text"]))
            if row is None:
                continue
            at = own[key] = len(group)
            group.append(StoreHit(row, 0.0))
        # the shown notebook's own chunk (its row: path, anchor, cells), ranked as the member's hit was
        group[at] = StoreHit(group[at].row, hit.score, hit.keyword_rank, hit.vector_rank, hit.keyword_score,
                             hit.similarity)
        lent.add(key)
    group.sort(key=lambda h: -h.score)
    return group


def entry_path(entry: FamilyEntry, group: list[Any]) -> str:
    return str(group[0].row["notebook"]) if group else ""


def versions(
    manifest: Any, entries: list[FamilyEntry], settings: FamilySettings
) -> dict[str, tuple[int, list[dict[str, Any]]]]:
    """For each shown entry: how many other members its family has, and (at most `max_listed` of) them, the
    matching and recent first."""
    store = family_store(manifest)
    if store is None:
        return {}
    wanted = {e.family for e in entries}
    members = store.members(wanted)
    others = {sha for e in entries for sha in members.get(e.family, []) if sha != e.sha}
    details = {d["nb_sha"]: d for d in store.member_details(others)} if others else {}
    out: dict[str, tuple[int, list[dict[str, Any]]]] = {}
    for entry in entries:
        listed = [details[sha] for sha in members.get(entry.family, []) if sha != entry.sha and sha in details]
        listed.sort(key=lambda d: (d["nb_sha"] not in entry.matched, tuple(-x for x in _recency(d)), d["notebook"]))
        shown = [_version(d, entry.matched.get(d["nb_sha"])) for d in listed[: settings.max_listed]]
        out[entry.sha] = (len(listed), shown)
    return out


def _version(detail: dict[str, Any], score: float | None) -> dict[str, Any]:
    modified = detail.get("modified_ns") or 0
    return {
        "notebook": detail["notebook"],
        "nb_id": detail["nb_sha"],
        "year": detail.get("year"),
        "author": detail.get("author") or "",
        "modified": dt.datetime.fromtimestamp(modified / 1e9, dt.UTC).strftime("%Y-%m-%d") if modified else None,
        "deprecated": bool(detail.get("deprecated")),
        "checkpoint_of": detail.get("checkpoint_of"),
        "matched": score is not None,
    }


def family_members(manifest: Any, sha: str) -> tuple[str, list[dict[str, Any]]]:
    """The family of one content and its other members (recent first), as results list them; ("", []) alone."""
    store = family_store(manifest)
    if store is None:
        return "", []
    family = store.families_of([sha]).get(sha)
    if family is None:
        return "", []
    others = [m for m in store.members([family]).get(family, []) if m != sha]
    details = store.member_details(others) if others else []
    details.sort(key=lambda d: (tuple(-x for x in _recency(d)), d["notebook"]))
    return family, [_version(d, None) for d in details]
