"""The value candidates of a question: every fact of the notebooks retrieval ranked first, and the facts the store
found on their own, each with what it is compared by (`RankedFact`), gathered once per question.

Gathering is the evidence step of a value answer (issue 13: reading the question, gathering evidence, composing the
answer): which facts can answer, with their stored vectors compared with the question's here, the question's
similarity to each cell of the first notebooks, each fact's keyword score from retrieval's own fact search, and what
the notebook says its variables are (`glossary`). Scoring them is `values.score`; ordering them, `rerank`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from nbrecall.answer.glossary import meaning_of, symbol_glossary
from nbrecall.answer.question import Question
from nbrecall.notebook.facts import Fact
from nbrecall.notebook.printed import leading_number
from nbrecall.records import SearchFilters, chunk_id
from nbrecall.search.retrieve import SearchResult

if TYPE_CHECKING:
    from nbrecall.service import Archive


def same_value(value: str, digits: int = 6) -> str:
    """What makes two printed values one: their leading number to `digits` significant digits (`0.95` and `0.950`,
    `3803.0` and `3,803`), else the text with its spacing collapsed. An answer's alternatives and the confidence's
    margin use six digits (values that differ in the fifth digit are two answers); the learned order counts support
    with four (`rerank`: the same number printed rounded in another cell or table)."""
    number = leading_number(value)
    return f"{number:.{digits}g}" if number is not None else " ".join(value.split())


@dataclass
class RankedFact:
    """A candidate fact with where it is, its signals and its score."""

    fact: Fact
    notebook: str
    nb_sha: str
    year: int | None
    rank: int | None  # its notebook's position in the search result (None: found by the fact search only)
    source: str = ""  # the source of its cell (first notebooks only): words of the method around the value
    meaning: str = ""  # what its notebook says its variable is (`glossary`; first notebooks only)
    inputs_meaning: str = ""  # … the variables of the expression that printed it are
    signals: dict[str, float] = field(default_factory=dict)
    terms: dict[str, float] = field(default_factory=dict)  # what each weight of `ValueWeights` multiplies
    score: float = 0.0
    learned: float | None = None  # its score in the learned order (`rerank`), when that order was applied

    def outside(self) -> bool:
        """Its notebook is not among retrieval's first three (the `outside` weight scales its score)."""
        return self.rank is None or self.rank >= 3


def gather(
    question: Question,
    result: SearchResult,
    archive: Archive,
    filters: SearchFilters | None = None,
    top: int = 3,
    extra: int = 30,
) -> list[RankedFact]:
    """The candidate facts: every fact of the first `top` notebooks (their stored vectors read at once, compared
    with the question's here: a nearest-neighbour list would cut a notebook's facts short), and the first `extra`
    facts retrieval's own fact search found across the archive (`SearchResult.fact_hits`: the store is searched
    for facts once per question), with their keyword scores and similarities."""
    notebooks = [nb for nb in result.notebooks[:top] if nb.hits]
    by_sha = {nb.nb_sha: nb for nb in result.notebooks}
    vector = archive.query_vector(question.text)
    stored: dict[str, tuple[np.ndarray, list[int]]] = {}
    if notebooks and vector is not None:  # every chunk and every fact of the first notebooks
        first = [nb.nb_sha for nb in notebooks]
        stored = archive.store.vectors(replace(filters or SearchFilters(), notebooks=first), limit=20_000)
        stored.update((cid, (v, [])) for cid, v in archive.store.fact_vectors(first).items())
    found = result.fact_hits[:extra]
    keyword = {h.row["chunk_id"]: h.keyword_score for h in found}
    similarity = {h.row["chunk_id"]: h.similarity for h in found if h.vector_rank is not None}
    shas = [nb.nb_sha for nb in notebooks]
    shas += list(dict.fromkeys(h.row["nb_sha"] for h in found if h.row["nb_sha"] not in shas))
    facts_of = {sha: archive.manifest.facts(sha) for sha in shas}
    fact_ids = {chunk_id(sha, f.seq) for sha, facts in facts_of.items() for f in facts}
    chunk_shas = {sha[:20]: sha for sha in shas}
    visible = archive.manifest.indexed_shas(shas)
    rows = {h.row["chunk_id"]: h.row for h in found}
    query = np.asarray(vector, dtype=np.float32) if vector is not None else None
    # how close the question is to each cell of the first notebooks: the best of the chunks (not facts) covering it
    cell_similarity: dict[tuple[str, int], float] = {}
    if query is not None:
        for cid, (chunk_vector, covered) in stored.items():
            if cid in fact_ids:
                continue
            similar = float(np.dot(chunk_vector, query))
            sha = chunk_shas[cid[:20]]
            for cell in covered:
                key = (sha, cell)
                cell_similarity[key] = max(cell_similarity.get(key, -1.0), similar)
    cands: list[RankedFact] = []
    for sha in shas:
        if sha not in visible:
            continue
        nb = by_sha.get(sha)
        within = nb in notebooks
        wanted = None if within else {cid for cid in rows if rows[cid]["nb_sha"] == sha}
        cells = archive.manifest.cells(sha) if within else []
        sources = {c.idx: c.source for c in cells}
        glossary = symbol_glossary((c.cell_type, c.source) for c in cells)
        for fact in facts_of[sha]:
            cid = chunk_id(sha, fact.seq)
            if wanted is not None and cid not in wanted:
                continue
            row = rows.get(cid)
            notebook = row["notebook"] if row else (nb.notebook if nb else "")
            year = row.get("year") if row else (nb.hits[0].year if nb and nb.hits else None)
            cand = RankedFact(fact, notebook, sha, year, result.notebooks.index(nb) if nb is not None else None,
                              sources.get(fact.cell, ""))
            own, read = _symbols(fact)
            cand.meaning, cand.inputs_meaning = meaning_of(own, glossary), meaning_of(read, glossary)
            if cid in stored and query is not None:
                cand.signals["similarity"] = float(np.dot(stored[cid][0], query))
            else:
                cand.signals["similarity"] = similarity.get(cid, 0.0)
            cand.signals["cell_similarity"] = cell_similarity.get((sha, fact.cell), 0.0)
            cand.signals["keyword_raw"] = keyword.get(cid, 0.0)
            cands.append(cand)
    return cands


def _symbols(fact: Fact) -> tuple[list[str], list[str]]:
    """The variable names behind a fact: its own (its label when that is a name, the variable its code line prints
    when it reads one only) and the others its code line reads (an expression's inputs, none of them the value)."""
    names = fact.names.split()
    label = fact.label.strip().strip("'\"")
    own = [label] if label.isidentifier() else []
    if len(names) == 1:
        return own + names, []
    return own, names
