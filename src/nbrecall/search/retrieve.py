"""Retrieval (architecture §8): hybrid fan-out, group by notebook, priors, anchor cells and neighbourhoods."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from nbrecall.config import FamilySettings, RetrieveSettings
from nbrecall.index.terms import RANKING_STOP_WORDS as _STOP
from nbrecall.index.terms import RANKING_WORD as _WORD
from nbrecall.index.terms import keyword_stems, query_terms
from nbrecall.notebook.archives import in_archive
from nbrecall.notebook.facts import Fact
from nbrecall.protocols import Manifest, Store
from nbrecall.records import (
    CONTENT_KINDS,
    FACT_KIND,
    PROSE_KIND,
    CellRecord,
    FusionSettings,
    Hit,
    SearchFilters,
    StoreHit,
    StoreQuery,
)
from nbrecall.search.anchor import pick_anchor
from nbrecall.search.families import FamilyEntry, arrange, chunk_lookup, entry_path, lacking, lend_scores, versions
from nbrecall.vision.describe import MACHINE_MARK, split_machine_text


@dataclass
class NotebookResult:
    """A notebook with its matching chunks and, for the top notebooks, the neighbourhood of the best cell."""

    nb_sha: str
    notebook: str
    root: str
    score: float
    hits: list[Hit]
    neighbourhood: list[CellRecord] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    family: str = ""
    n_versions: int = 0  # other members of its family (listed in `versions`, at most `max_listed`)
    versions: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_of: str | None = None
    # Every cell a content chunk of the fan-out covered, with the best fused score among those chunks: where in the
    # notebook retrieval found the question (the answerer's cell-level evidence). Fact hits are left out: their
    # scores come from the fact table's own keyword statistics, and mixed in they moved the evidence to the cell of
    # whichever fact its own ranking put first (eval2 v063, bench/README.md issue 13).
    cell_scores: dict[int, float] = field(default_factory=dict)


@dataclass
class SearchResult:
    query: str
    notebooks: list[NotebookResult]
    # The value facts the fact search found across the archive (best first, completed by `complete_facts`): the
    # answerer ranks these instead of searching again (`answer.candidates.gather`)
    fact_hits: list[StoreHit] = field(default_factory=list)

    def hits(self, k: int) -> list[Hit]:
        """Results in the order a user sees them: notebook by notebook, best first, at most `k`."""
        flat = [hit for nb in self.notebooks for hit in nb.hits]
        return flat[:k]


def chunk_seq(chunk_id: str) -> int | None:
    """The sequence number of a chunk in its notebook, from its id (`<sha prefix>-<seq>`)."""
    tail = chunk_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


def fact_summary(fact: Fact) -> dict[str, Any]:
    """What a search hit says of a fact (the JSON contract's `fact`)."""
    return {"value": fact.value, "label": fact.label, "unit": fact.unit, "shown": fact.shown, "code": fact.code,
            "origin": fact.origin, "stale": fact.stale}


def snippet(text: str, terms: set[str], width: int = 240) -> str:
    """The window of `text` holding most query terms (skipping the path/heading header lines)."""
    body = text.split("\n\n", 1)[1] if "\n\n" in text else text
    lowered = body.lower()
    if not terms:
        return body[:width].strip()
    positions = sorted(m.start() for t in terms for m in re.finditer(re.escape(t), lowered))
    if not positions:
        return body[:width].strip()
    best, best_count = positions[0], 0
    for i, start in enumerate(positions):
        count = sum(1 for p in positions[i:] if p < start + width)
        if count > best_count:
            best, best_count = start, count
    begin = max(0, best - width // 4)
    piece = body[begin : begin + width].replace("\n", " ⏎ ")
    return ("…" if begin else "") + piece.strip() + ("…" if begin + width < len(body) else "")


def _prior(row: dict[str, Any]) -> float:
    health = row.get("health")
    prior = 0.85 + 0.15 * (health if health is not None else 1.0)
    if row.get("stale"):
        prior *= 0.8
    if row.get("deprecated"):
        prior *= 0.7
    return prior


def _bigrams(text: str) -> set[tuple[str, str]]:
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOP]
    return set(zip(words, words[1:], strict=False))


def phrase_overlap(query: str, text: str) -> float:
    """Share of the query's adjacent word pairs that occur adjacent in `text` (0..1): rewards exact phrases."""
    pairs = _bigrams(query)
    if not pairs:
        return 0.0
    return len(pairs & _bigrams(text)) / len(pairs)


_INTENTS: list[tuple[re.Pattern[str], tuple[str, ...]]] = [
    (re.compile(r"\b(plot|plots|plotted|figure|chart|diagram|drawing|draw|drawn|visuali[sz]\w*|histogram|image|"
                r"heatmap|map of|curve)\b", re.I), ("figure",)),
    # a request that opens with "show …"/"display …" asks to see something: the picture, not the prose about it
    (re.compile(r"^\s*(show|display)\b", re.I), ("figure",)),
    (re.compile(r"\w+(Error|Exception|Warning)\b|Traceback|error message|raised", re.I), ("error",)),
    (re.compile(r"\b(columns?|dataframe|table|dataset|rows?)\b", re.I), ("table",)),
    (re.compile(r"\b(what (value|share|fraction|number|percentage)|how (many|much|long|large)|result(ed|s)? for|"
                r"score|accuracy|total|mean|average)\b", re.I), ("scalar", "table")),
]


def intent_kinds(query: str) -> set[str]:
    """Chunk kinds the wording of a query asks for ("plot of …" → figure, "ValueError: …" → error)."""
    kinds: set[str] = set()
    for pattern, wanted in _INTENTS:
        if pattern.search(query):
            kinds.update(wanted)
    return kinds


# "(no LoRA)", "without dropout?": the user rules a thing out, and a chunk that mentions it is evidence *against*.
# Only a negation of one or two words that closes a clause counts: inside a name it is part of what is asked
# ("Dwellings without basic facilities and …"). "not" is left alone (too often part of what is asked: "did not
# converge"), and so are pasted error messages ("has no attribute", "No module named").
_NEGATION = re.compile(
    r"\b(?:no|without|excluding|except)\s+(?:any\s+|the\s+|a\s+|an\s+)?"
    r"([A-Za-z][\w.+-]*(?:\s+[A-Za-z][\w.+-]*)?)\s*(?=[),;:?!]|\.(?:\s|$)|$)",
    re.I,
)


def negated_terms(query: str) -> set[str]:
    """Words the query rules out ("fully fine-tuned (no LoRA)" → {"lora"}); none for a pasted error message."""
    if "error" in intent_kinds(query):
        return set()
    return {word.lower() for m in _NEGATION.finditer(query) for word in m.group(1).split()}


def keyword_query(query: str) -> str:
    """The query as keyword search and the phrase bonus see it: without the negated phrases.

    Left in, "(no LoRA)" makes the LoRA variant of a notebook the best match for a question about the other one.
    """
    if not negated_terms(query):
        return query
    return re.sub(r"\(\s*\)", " ", _NEGATION.sub(" ", query)).strip() or query


def machine_share(wanted: set[str], text: str, machine_weight: float) -> float:
    """How much of `text`'s keyword match on the query stems `wanted` (`keyword_stems`) counts when stems found
    only in its machine-made lines (a figure's OCR text or vision-model description, `vision.describe`) weigh
    `machine_weight` of the notebook's own: the factor for its keyword score, 0..1 (1 without such lines).

    A describer adds words nobody wrote: axis and legend words of an unrelated plot, or its own wording ("values
    0 to 75"); counted as the notebook's own text, they let a figure outrank the cell a question is about."""
    if machine_weight >= 1.0 or f"({MACHINE_MARK}, " not in text:
        return 1.0
    own, machine = split_machine_text(text)
    own_found = wanted & keyword_stems(own)
    machine_only = (wanted & keyword_stems(machine)) - own_found
    found = len(own_found) + len(machine_only)
    if not found:
        return 1.0
    return (len(own_found) + machine_weight * len(machine_only)) / found


def weigh_machine_text(hits: list[StoreHit], query: str, fusion: FusionSettings, machine_weight: float) -> None:
    """Lower the keyword part of each fused score by `machine_share` (the vector part is left as it is)."""
    if machine_weight >= 1.0:
        return
    wanted = keyword_stems(query)
    dense = any(h.vector_rank for h in hits)
    for hit in hits:
        rank = hit.keyword_rank
        if not rank:  # found by its vector only: nothing to lower
            continue
        factor = machine_share(wanted, hit.row["text"], machine_weight)
        if factor >= 1.0:
            continue
        if fusion.method == "rrf":
            hit.score -= (1.0 - factor) / (fusion.rrf_k + rank)
        else:
            hit.score -= (fusion.alpha if dense else 1.0) * (1.0 - factor) * hit.keyword_score
        hit.keyword_score *= factor
    hits.sort(key=lambda h: -h.score)


def rerank(
    query: str, hits: list[StoreHit], phrase_weight: float, intent_boost: float = 0.15, machine_weight: float = 1.0
) -> list[StoreHit]:
    """Add a phrase-match bonus (quoted errors and exact wording rise) and favour the chunk kinds the query asks
    for; both are small next to the fused score, so they reorder near-ties rather than override relevance. Word
    pairs found only in machine-made lines count `machine_weight` (`machine_share`)."""
    kinds = intent_kinds(query)
    for hit in hits:
        if phrase_weight > 0:
            text = hit.row["text"]
            overlap = phrase_overlap(query, text)
            if machine_weight < 1.0 and f"({MACHINE_MARK}, " in text:
                own = phrase_overlap(query, split_machine_text(text)[0])
                overlap = own + machine_weight * max(overlap - own, 0.0)
            hit.score += phrase_weight * overlap
        if hit.row["kind"] in kinds:
            hit.score *= 1.0 + intent_boost
    return sorted(hits, key=lambda h: -h.score)


def group_by_notebook(
    hits: list[StoreHit], indexed: set[str] | None, weights: tuple[float, ...] = (1.0, 0.25, 0.1)
) -> list[tuple[str, float, list[StoreHit]]]:
    """Notebook score: its best chunk, plus smaller shares of its best chunks on *other* cells.

    A notebook with several matching cells beats one with a single match of the same strength, but many weak
    matches never outweigh one strong match. Several chunks of one cell (its code, table, figure) count once.
    """
    by_nb: dict[str, list[StoreHit]] = {}
    for hit in hits:
        sha = hit.row["nb_sha"]
        if indexed is not None and sha not in indexed:
            continue  # written to the store by a run that has not committed its manifest: not visible yet
        by_nb.setdefault(sha, []).append(hit)
    ranked = []
    for sha, group in by_nb.items():
        group.sort(key=lambda h: -h.score)
        per_cell: list[float] = []
        seen: set[int] = set()
        for hit in group:
            if hit.row["anchor"] not in seen:
                seen.add(hit.row["anchor"])
                per_cell.append(hit.score)
        score = sum(w * s for w, s in zip(weights, per_cell, strict=False))
        ranked.append((sha, score * _prior(group[0].row), group))
    ranked.sort(key=lambda item: -item[1])
    return ranked


def shown_order(group: list[StoreHit], kinds: set[str], floor: float = 0.0, kind_slot: int = 1) -> list[StoreHit]:
    """The chunks of one notebook (best first) in the order they are shown, before anchors are de-duplicated.

    Two rules on top of the fused order. A query that names what it wants (a plot, an error, a value) is answered by
    that artifact, yet prose about it shares more of the question's words and outscores it; so the notebook's best
    chunk of an asked-for kind is shown at position `kind_slot` at the latest (negative: never moved). And a chunk
    scoring under `floor` × the notebook's best is a match on a few generic words: listing it hides the cells of the
    next notebooks, so it is left out (the first chunk and the promoted one always stay).
    """
    if not group:
        return []
    best = group[0].score
    wanted = next((h for h in group if h.row["kind"] in kinds), None) if kinds and kind_slot >= 0 else None
    ordered = [h for i, h in enumerate(group) if i == 0 or h is wanted or h.score >= floor * best]
    if wanted is not None and ordered.index(wanted) > kind_slot:
        ordered.remove(wanted)
        ordered.insert(kind_slot, wanted)
    return ordered


def work_first(shown: list[Hit], cell_scores: dict[int, float], region: float) -> list[Hit]:
    """A notebook's shown hits with the one that does the work first: retrieval's first, unless that is a prose-only
    chunk and a hit that holds code or outputs scores higher once every hit gets `region` × the mean of
    `cell_scores` (the best fused score on each cell) of the cells just before and just after it (0: never moved).

    Why: a notebook's introduction, a problem statement or a quiz restates the words of many questions about the
    notebook, and standing alone it often outscores the cell that does the work; the work sits inside a run of cells
    retrieval also found (the markdown that explains it, the code, its printout). The neighbours' scores are
    retrieval's own, so the rule reads structure and scores, not wording. A first hit that holds code or outputs is
    the work already and stays; a prose hit is never put first (a definition is prose, and between two prose cells
    the support says nothing); fact hits (scored on their own table's BM25 scale) and the cells of another version
    listed under the notebook take no part. Done here, so that search, the answer's citation and the LLM context's
    neighbourhood all start at the same cell. Measured on both development sets (bench/README.md, issue 13, session
    11): every `region` from 0.2 to 1.0 moves the same three eval2 citations to a right cell and none of eval's away."""
    if region <= 0 or not shown or shown[0].kind != PROSE_KIND:
        return shown
    first = shown[0]

    def supported(hit: Hit) -> float:
        low, high = min(hit.cells, default=hit.cell), max(hit.cells, default=hit.cell)
        return hit.score + region * (cell_scores.get(low - 1, 0.0) + cell_scores.get(high + 1, 0.0)) / 2

    own = [h for h in shown if h.on_own_cell()]
    best = max(own, key=supported, default=first)
    if best.kind == PROSE_KIND or supported(best) <= supported(first):
        return shown
    return [best, *(h for h in shown if h is not best)]


def neighbourhood(cells: list[CellRecord], anchor: int, after: int = 2) -> list[CellRecord]:
    """The heading above the anchor, the anchor cell and the next `after` cells."""
    by_index = {c.idx: c for c in cells}
    picked: list[CellRecord] = []
    for i in range(anchor - 1, -1, -1):
        cell = by_index.get(i)
        if cell is not None and cell.cell_type == "markdown" and cell.source.lstrip().startswith("#"):
            picked.append(cell)
            break
    picked.extend(by_index[i] for i in range(anchor, anchor + after + 1) if i in by_index)
    seen: set[int] = set()
    return [c for c in picked if not (c.idx in seen or seen.add(c.idx))]  # type: ignore[func-returns-value]


def _search_apart(
    query: str, vector: np.ndarray | None, store: Store, settings: RetrieveSettings, filters: SearchFilters,
    fusion: FusionSettings,
) -> tuple[list[StoreHit], list[StoreHit]]:
    """The content chunks and the value facts, searched apart.

    A fact repeats one value of a cell that a content chunk already holds, in a short text; searched together,
    a notebook's many facts (short texts score high in BM25) took the fan-out's places and the notebook ranking's
    votes from the chunks (issue 13: eval nb@1 0.950 → 0.900). So notebooks are ranked by their content chunks,
    as without facts, and the facts, found by the store's fact search (`Store.search_facts`: their own keyword
    statistics), are shown inside them.
    """
    wanted = filters.kinds
    content = [k for k in (wanted or CONTENT_KINDS) if k != FACT_KIND]
    asked = StoreQuery(query, vector, settings.fanout, filters, fusion)
    hits = store.search(replace(asked, filters=replace(filters, kinds=content))) if content else []
    fact_hits: list[StoreHit] = []
    if wanted is None or FACT_KIND in wanted:
        fact_hits = store.search_facts(replace(asked, filters=replace(filters, kinds=None)))
    return hits, fact_hits


def complete_facts(fact_hits: list[StoreHit], hits: list[StoreHit], manifest: Manifest) -> None:
    """Give fact hits the fields of a chunk hit that a store does not keep per fact (`records.FACT_COLUMNS`): the
    notebook's path, root, health and stale flag from a content hit of the same notebook, else from the manifest.
    Heading and cell id start empty: `retrieve` takes them (and the fact's own stale flag) from the fact itself
    when the hit is shown."""
    by_sha = {h.row["nb_sha"]: h.row for h in hits}
    looked_up: dict[str, dict[str, Any]] = {}
    for hit in fact_hits:
        row = hit.row
        if "notebook" not in row:
            sha = row["nb_sha"]
            known = by_sha.get(sha)
            if known is None:
                if sha not in looked_up:
                    record = manifest.content(sha)
                    meta = (record.meta or {}) if record is not None else {}
                    looked_up[sha] = {"notebook": record.rel if record else "", "root": record.root if record else "",
                                      "health": meta.get("health", 1.0), "stale": False}
                known = looked_up[sha]
            for name in ("notebook", "root", "health", "stale"):
                row[name] = known.get(name)
        row.setdefault("heading", "")
        row.setdefault("anchor_id", "")


def at_current_paths(
    rows: Iterable[dict[str, Any]], manifest: Manifest, paths: dict[str, list[tuple[str, str]]]
) -> None:
    """Point each row whose stored path no longer holds its content at one that does (the first by root and path).

    Why: a chunk keeps the path it was indexed under, and an unchanged content is never indexed again. When that
    file is deleted or moved while a copy of the content stays elsewhere in the archive (or another indexer wrote
    the copy's chunks first), search and answers would cite a file that is gone; the manifest knows where the
    content is now. `paths` caches `Manifest.paths_of_many` across the calls of one search."""
    rows = list(rows)
    missing = {row["nb_sha"] for row in rows} - paths.keys()
    if missing:
        paths.update(manifest.paths_of_many(missing))
    for row in rows:
        now = paths.get(row["nb_sha"])
        if now and ((row.get("root"), row.get("notebook")) not in now
                    or (in_archive(str(row.get("notebook"))) and not in_archive(now[0][1]))):  # a plain file first
            row["root"], row["notebook"] = now[0]


def _make_hit(
    hit: StoreHit, nb_sha: str, cells: dict[int, CellRecord], terms: set[str], **labels: Any
) -> tuple[int, Hit]:
    """One store hit as a user sees it: its anchor cell (`pick_anchor`) and the `Hit`; `labels` are the family
    fields (`family`, `versions`, `checkpoint_of`, `version_of`)."""
    row = hit.row
    anchor, ordered = pick_anchor(row, cells, terms)
    cell = cells.get(anchor)
    return anchor, Hit(
        notebook=row["notebook"],
        root=row["root"],
        cell=anchor,
        cells=ordered,
        cell_id=cell.cell_id if cell else row["anchor_id"],
        kind=row["kind"],
        score=hit.score,
        heading=row["heading"],
        snippet=snippet(row["text"], terms),
        nb_sha=nb_sha,
        year=row.get("year"),
        project=row.get("project") or "",
        author=row.get("author") or "",
        stale=bool(row.get("stale")),
        deprecated=bool(row.get("deprecated")),
        chunk_seq=chunk_seq(row["chunk_id"]),
        **labels,
    )


def retrieve(
    query: str,
    store: Store,
    manifest: Manifest,
    query_vector: np.ndarray | None,
    settings: RetrieveSettings,
    filters: SearchFilters | None = None,
    per_notebook: int | None = None,
    max_notebooks: int = 10,
    families: FamilySettings | None = None,
    all_versions: bool = False,
) -> SearchResult:
    """Hybrid search, grouped by notebook, with anchors and neighbourhoods for the top notebooks.

    With `families`, one result per notebook family (`search.families`), unless `all_versions`."""
    filters = filters or SearchFilters()
    # The vector was embedded from the whole question; keyword search, the phrase bonus and the anchor choice see
    # only the words the user asks for (not the negated ones).
    positive = keyword_query(query)
    terms = query_terms(positive)
    kinds = intent_kinds(positive)
    fusion = FusionSettings(settings.fusion, settings.alpha, settings.rrf_k)
    hits, fact_hits = _search_apart(positive, query_vector, store, settings, filters, fusion)
    complete_facts(fact_hits, hits, manifest)
    paths: dict[str, list[tuple[str, str]]] = {}
    at_current_paths((h.row for h in hits + fact_hits), manifest, paths)
    weigh_machine_text(hits, positive, fusion, settings.machine_text_weight)
    hits = rerank(positive, hits, settings.phrase_weight, settings.intent_boost, settings.machine_text_weight)
    fact_hits = rerank(positive, fact_hits, settings.phrase_weight, settings.intent_boost)
    indexed = manifest.indexed_shas({h.row["nb_sha"] for h in hits + fact_hits})
    ranked = group_by_notebook(hits or fact_hits, indexed)
    facts_by_nb: dict[str, list[StoreHit]] = {}
    for hit in fact_hits if hits else []:
        facts_by_nb.setdefault(hit.row["nb_sha"], []).append(hit)
    entries = arrange(ranked, manifest, families, collapse=not all_versions) if families is not None else [
        FamilyEntry(sha, score, group, "") for sha, score, group in ranked]
    entries = entries[:max_notebooks]
    listed = versions(manifest, entries, families) if families is not None else {}
    results: list[NotebookResult] = []
    for position, entry in enumerate(entries):
        sha, score, group = entry.sha, entry.score, entry.group
        n_versions, others = listed.get(sha, (0, []))
        cells = {c.idx: c for c in manifest.cells(sha)}
        shown: list[Hit] = []
        anchors: set[int] = set()
        limit = per_notebook or settings.hits_per_notebook
        if families is not None and entry.others:  # what a hidden copy matched, ranked in the shown one's chunk
            group = lend_scores(entry, cells, manifest, chunk_lookup(store, filters), settings.hit_floor, limit)
            at_current_paths((h.row for h in group), manifest, paths)
        # the notebook's chunks first (they decided its place), then its best value facts on cells not shown yet,
        # while there is room: a fact names the one value of a cell the chunks above only contain
        for hit in shown_order(group, kinds, settings.hit_floor, settings.kind_slot) + facts_by_nb.get(sha, []):
            if len(shown) >= limit:
                break
            anchor, made = _make_hit(hit, sha, cells, terms, checkpoint_of=entry.checkpoint_of, family=entry.family,
                                     versions=others)
            if anchor in anchors:
                continue
            anchors.add(anchor)
            shown.append(made)
        if families is not None and entry.others and families.version_hits > 0:
            # Another version's best cell that the shown one lacks (a changed value, what only a checkpoint
            # holds) is listed under this result, labelled: one result per family must not hide it.
            floor = settings.hit_floor * group[0].score if group else 0.0
            for other in lacking(entry, cells, manifest, floor, families.version_hits, terms):
                _anchor, made = _make_hit(other.hit, other.sha, other.cells, terms, family=entry.family,
                                          versions=others, version_of=entry_path(entry, group),
                                          checkpoint_of=other.checkpoint_of)
                shown.append(made)
        facts_of: dict[str, dict[int, Fact]] = {}  # a version hit's facts are its own notebook's
        for hit_shown in shown:
            if hit_shown.kind == "fact" and hit_shown.chunk_seq is not None:
                if hit_shown.nb_sha not in facts_of:
                    facts_of[hit_shown.nb_sha] = {f.seq: f for f in manifest.facts(hit_shown.nb_sha)}
                fact = facts_of[hit_shown.nb_sha].get(int(hit_shown.chunk_seq))
                hit_shown.fact = fact_summary(fact) if fact is not None else None
                if fact is not None:
                    hit_shown.heading = hit_shown.heading or fact.heading
                    hit_shown.stale = hit_shown.stale or fact.stale
        cell_scores: dict[int, float] = {}
        for hit in group:  # content chunks only: a fact's score is on its own table's BM25 scale
            for covered in hit.row["cells"]:
                cell_scores[covered] = max(cell_scores.get(covered, 0.0), hit.score)
        shown = work_first(shown, cell_scores, settings.work_region)
        result = NotebookResult(
            sha,
            group[0].row["notebook"],
            group[0].row["root"],
            score,
            shown,
            paths=[rel for _root, rel in paths[sha]],  # the group's rows were put at current paths above
            family=entry.family,
            n_versions=n_versions,
            versions=others,
            checkpoint_of=entry.checkpoint_of,
            cell_scores=cell_scores,
        )
        if position < settings.top_notebooks and shown:
            result.neighbourhood = neighbourhood(
                list(cells.values()), shown[0].cell, settings.neighbours_after
            )
        results.append(result)
    return SearchResult(query, results, fact_hits)
