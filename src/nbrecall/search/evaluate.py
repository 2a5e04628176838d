"""Retrieval evaluation over a query set with cell-level ground truth (format of shared/eval/queries.jsonl).

Metrics, overall and per query kind:
- nb@1, nb@3, nb@5: the right notebook (or one listed under `also`) among the first k distinct notebooks;
- MRR: mean reciprocal rank of the first right notebook (distinct-notebook ranks);
- cell@10c: a right cell among the first 10 distinct (notebook, cell) pairs, flattening each result's `cells`
  in rank order. A right cell is one the query lists in its notebook, or a cell of a copy listed under `also` whose
  source is the source of one of them (`copy_cells`): the query set counts an `also` copy as the right notebook
  (nb@k does), and says its cell indices may differ, so its identical cell is the right cell too. With one
  result per family, the copy is shown when it matches the query best, and it holds the same cell;
- cell@10c strict: only the cells listed in the query's own notebook (what cell@10c measured before families);
- fam@5: distinct notebook families (`family` of the contract; a notebook without one is its own) among the
  first five distinct notebooks shown as results of their own (a cell listed from another version, `version_of`,
  is part of its result): how much of the first page is not the same notebook again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SearchFn = Callable[[str], list[dict[str, Any]]]


@dataclass
class Query:
    id: str
    query: str
    kind: str
    notebook: str
    cells: list[int]
    answer: str | None = None
    also: list[str] = field(default_factory=list)
    copy_cells: dict[str, list[int]] = field(default_factory=dict)  # `also` notebook → its cells equal to right ones


@dataclass
class QueryOutcome:
    query: Query
    notebook_rank: int | None  # 1-based rank among distinct notebooks, None if absent
    cell_hit: bool  # a right cell in the first ten pairs: the query's notebook's, or the same cell of a copy
    families_top5: int = 0  # distinct families among the first five distinct notebooks
    strict_cell_hit: bool = False  # a right cell of the query's own notebook (`also` copies not counted)


def load_queries(path: Path) -> list[Query]:
    queries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            raw = json.loads(line)
            queries.append(
                Query(
                    raw["id"],
                    raw["query"],
                    raw["kind"],
                    raw["notebook"],
                    list(raw["cells"]),
                    raw.get("answer"),
                    list(raw.get("also") or []),
                )
            )
    return queries


def resolve_copies(queries: list[Query], root: Path) -> None:
    """Fill `copy_cells`: for each `also` notebook under `root`, its cells whose source (whitespace aside) is the
    source of one of the query's right cells. Unreadable notebooks give none."""
    import nbformat

    cache: dict[str, list[str] | None] = {}

    def sources(rel: str) -> list[str] | None:
        if rel not in cache:
            try:
                nb = nbformat.read(root / rel, as_version=4)
                cache[rel] = [" ".join(str(c.get("source", "")).split()) for c in nb.cells]
            except Exception:
                cache[rel] = None
        return cache[rel]

    for query in queries:
        target = sources(query.notebook)
        if not target or not query.also:
            continue
        wanted = {target[i] for i in query.cells if 0 <= i < len(target) and target[i]}
        for rel in query.also:
            cells = sources(rel) or []
            found = [i for i, src in enumerate(cells) if src and src in wanted]
            if found:
                query.copy_cells[rel] = found


def _norm(path: str) -> str:
    return path.replace("\\", "/").lstrip("./")


def judge(query: Query, results: list[dict[str, Any]], cell_depth: int = 10) -> QueryOutcome:
    """Score one ranked result list (the `results` of the JSON contract) against the ground truth."""
    right = {_norm(query.notebook), *(_norm(a) for a in query.also)}
    notebooks: list[str] = []
    for result in results:
        name = _norm(result["notebook"])
        if name not in notebooks:
            notebooks.append(name)
    rank = next((i + 1 for i, name in enumerate(notebooks) if name in right), None)
    seen: list[tuple[str, int]] = []
    for result in results:
        for cell in result.get("cells") or [result["cell"]]:
            pair = (_norm(result["notebook"]), int(cell))
            if pair not in seen:
                seen.append(pair)
    target = _norm(query.notebook)
    strict_hit = any(nb == target and cell in query.cells for nb, cell in seen[:cell_depth])
    family_of: dict[str, str] = {}
    entries: list[str] = []  # the results a user sees: a cell listed from another version belongs to its result
    for result in results:
        name = _norm(result["notebook"])
        family_of.setdefault(name, result.get("family") or name)
        if not result.get("version_of") and name not in entries:
            entries.append(name)
    families = len({family_of[name] for name in entries[:5]})
    copies = {_norm(nb): set(cells) for nb, cells in query.copy_cells.items()}
    cell_hit = strict_hit or any(cell in copies.get(nb, ()) for nb, cell in seen[:cell_depth])
    return QueryOutcome(query, rank, cell_hit, families, strict_hit)


def metrics(outcomes: Iterable[QueryOutcome]) -> dict[str, float]:
    items = list(outcomes)
    n = len(items) or 1
    return {
        "n": float(len(items)),
        "nb@1": sum(1 for o in items if o.notebook_rank == 1) / n,
        "nb@3": sum(1 for o in items if o.notebook_rank and o.notebook_rank <= 3) / n,
        "nb@5": sum(1 for o in items if o.notebook_rank and o.notebook_rank <= 5) / n,
        "MRR": sum(1.0 / o.notebook_rank for o in items if o.notebook_rank) / n,
        "cell@10c": sum(1 for o in items if o.cell_hit) / n,
        "cell@10c strict": sum(1 for o in items if o.strict_cell_hit) / n,
        "fam@5": sum(o.families_top5 for o in items) / n,
    }


def evaluate(
    queries: list[Query], search: SearchFn
) -> tuple[dict[str, dict[str, float]], list[QueryOutcome]]:
    """Run every query; return metrics overall (key "all") and per kind, and the outcomes."""
    outcomes = [judge(q, search(q.query)) for q in queries]
    table = {"all": metrics(outcomes)}
    for kind in sorted({q.kind for q in queries}):
        table[kind] = metrics(o for o in outcomes if o.query.kind == kind)
    return table, outcomes
