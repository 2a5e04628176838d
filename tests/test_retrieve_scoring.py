"""Scoring pieces of retrieval: fusion, phrase bonus, query intent, notebook grouping, snippets."""

from __future__ import annotations

from nbrecall.index.fusion import FusionSettings, StoreHit, fuse
from nbrecall.search.retrieve import group_by_notebook, intent_kinds, phrase_overlap, rerank, snippet


def row(chunk: str, nb: str = "a", kind: str = "code", anchor: int = 0, text: str = "", **extra) -> dict:
    return {"chunk_id": chunk, "nb_sha": nb, "kind": kind, "anchor": anchor, "cells": [anchor], "text": text,
            "health": 1.0, **extra}


def test_convex_fusion_keeps_the_margin_and_rrf_only_ranks() -> None:
    keyword = [row("x", _score=10.0), row("y", _score=2.0)]
    dense = [row("y", _distance=0.2), row("x", _distance=0.6)]
    convex = {h.row["chunk_id"]: h.score for h in fuse(keyword, dense, FusionSettings("convex", 0.5))}
    assert convex["x"] > convex["y"]  # BM25 10 vs 2 outweighs the smaller cosine gap
    assert abs(convex["x"] - (0.5 * 1.0 + 0.5 * 0.4)) < 1e-9
    rrf = {h.row["chunk_id"]: h.score for h in fuse(keyword, dense, FusionSettings("rrf"))}
    assert abs(rrf["x"] - rrf["y"]) < 1e-12  # ranks 1+2 each: a tie


def test_rows_without_vectors_still_come_from_the_keyword_list() -> None:
    hits = fuse([row("x", _score=3.0)], [row("z", _distance=float("nan"))], FusionSettings())
    assert [h.row["chunk_id"] for h in hits] == ["x"]


def test_phrase_overlap_rewards_exact_wording() -> None:
    query = "TypeError: 'int' object is not subscriptable"
    assert phrase_overlap(query, "TypeError: 'int' object is not subscriptable at line 3") == 1.0
    assert phrase_overlap(query, "object int TypeError subscriptable not") < 0.5


def test_intent_kinds_from_wording() -> None:
    assert intent_kinds("show me the plot of resistance versus speed") == {"figure"}
    assert "error" in intent_kinds("ValueError: Length mismatch")
    assert {"scalar", "table"} <= intent_kinds("how many iterations were needed")
    assert intent_kinds("where do we compute the drag") == set()


def test_rerank_lifts_the_kind_asked_for() -> None:
    hits = [StoreHit(row("a", kind="code", text="iterations loop"), 1.0),
            StoreHit(row("b", kind="scalar", text="iterations = 4473"), 0.95)]
    ranked = rerank("how many iterations", hits, phrase_weight=0.0, intent_boost=0.15)
    assert ranked[0].row["chunk_id"] == "b"


def test_one_strong_match_beats_many_weak_ones_and_one_cell_counts_once() -> None:
    hits = [StoreHit(row("s", nb="strong", anchor=1), 1.0)]
    hits += [StoreHit(row(f"w{i}", nb="weak", anchor=i), 0.5) for i in range(6)]
    hits += [StoreHit(row(f"d{i}", nb="dup", anchor=7, kind=k), 0.9) for i, k in enumerate(("code", "table"))]
    order = [sha for sha, _score, _group in group_by_notebook(hits, None)]
    assert order[0] == "strong"
    dup_score = next(score for sha, score, _ in group_by_notebook(hits, None) if sha == "dup")
    assert abs(dup_score - 0.9) < 1e-9  # code and table of the same cell: counted once


def test_group_hides_notebooks_not_in_the_manifest() -> None:
    hits = [StoreHit(row("x", nb="pending"), 1.0), StoreHit(row("y", nb="done"), 0.5)]
    assert [sha for sha, _s, _g in group_by_notebook(hits, {"done"})] == ["done"]


def test_snippet_centres_on_the_matched_words() -> None:
    text = "path\nheading\n\n" + "filler " * 100 + "the ballast volume aft is 1,284.6 m3 " + "tail " * 100
    piece = snippet(text, {"ballast", "aft"}, width=80)
    assert "ballast volume aft" in piece and piece.startswith("…")


def test_filter_options_parse_one_way_for_cli_api_and_mcp() -> None:
    import pytest

    from nbrecall.index.store import SearchFilters, parse_year_range

    assert parse_year_range("2017") == (2017, 2017)
    assert parse_year_range("2015..2019") == (2015, 2019)
    assert parse_year_range("2015..") == (2015, None) and parse_year_range("..2019") == (None, 2019)
    assert parse_year_range(None) == (None, None) and parse_year_range(" ") == (None, None)
    for bad in ("17", "2015-2019", "20x5", "2015..19"):
        with pytest.raises(ValueError, match="year takes YYYY"):
            parse_year_range(bad)
    filters = SearchFilters.from_options("2017", " 17-042 ", "", None, False)
    assert (filters.year_from, filters.year_to, filters.project, filters.author, filters.tag) == (
        2017, 2017, "17-042", None, None)
