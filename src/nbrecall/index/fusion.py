"""Fusing the keyword (BM25) and vector lists into one ranking.

Two methods, both measured on the eval set (see the closing notes / bench): reciprocal rank fusion (RRF, rank
only) and a convex combination of the BM25 score relative to the list's best and the cosine similarity. RRF is
robust but flat (rank 1 and rank 10 differ by 15%), which throws away how much better the best match is; the
convex combination keeps that margin.
"""

from __future__ import annotations

from typing import Any

from nbrecall.records import FusionSettings, StoreHit


def fuse(
    keyword: list[dict[str, Any]], dense: list[dict[str, Any]], settings: FusionSettings
) -> list[StoreHit]:
    hits: dict[str, StoreHit] = {}
    best = max((row.get("_score") or 0.0 for row in keyword), default=0.0) or 1.0
    for rank, row in enumerate(keyword, start=1):
        hit = hits.setdefault(row["chunk_id"], StoreHit(row, 0.0))
        hit.keyword_rank = rank
        hit.keyword_score = float(row.get("_score") or 0.0) / best
    for rank, row in enumerate(dense, start=1):
        distance = row.get("_distance")
        if distance is None or distance != distance:  # NaN: a row without a vector
            continue
        hit = hits.setdefault(row["chunk_id"], StoreHit(row, 0.0))
        hit.vector_rank = rank
        hit.similarity = 1.0 - float(distance)
    for hit in hits.values():
        if settings.method == "rrf":
            hit.score = sum(1.0 / (settings.rrf_k + r) for r in (hit.keyword_rank, hit.vector_rank) if r)
        else:
            weight = settings.alpha if dense else 1.0
            hit.score = weight * hit.keyword_score + (1.0 - weight) * max(hit.similarity, 0.0)
    return sorted(hits.values(), key=lambda h: -h.score)
