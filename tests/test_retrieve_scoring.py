"""Scoring pieces of retrieval: fusion, phrase bonus, query intent, notebook grouping, snippets."""

from __future__ import annotations

from nbrecall.index.fusion import fuse
from nbrecall.records import FusionSettings, StoreHit
from nbrecall.search.retrieve import (
    group_by_notebook,
    intent_kinds,
    keyword_query,
    negated_terms,
    phrase_overlap,
    rerank,
    retrieve,
    shown_order,
    snippet,
)
from retrieval_fakes import FakeManifest, FakeStore


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

    from nbrecall.records import SearchFilters, parse_year_range

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


def test_a_request_to_show_something_asks_for_a_figure() -> None:
    assert intent_kinds("show the starting concentration fields of the reaction") == {"figure"}
    assert intent_kinds("Display the velocity field") == {"figure"}
    assert "figure" not in intent_kinds("where do we show that the scheme converges")  # only as the opening verb


def test_negated_words_are_not_keyword_evidence() -> None:
    query = "test F1 after fully fine-tuning the 500M transformer (no LoRA)"
    assert negated_terms(query) == {"lora"}
    assert "lora" not in keyword_query(query).lower() and "fine-tuning the 500M transformer" in keyword_query(query)
    assert negated_terms("accuracy of the network without dropout?") == {"dropout"}
    # inside a name, and in pasted error messages, "no"/"without" are part of what is asked
    assert negated_terms("table with Dwellings without basic facilities and long working hours") == set()
    assert negated_terms("AttributeError: 'Graph' object has no attribute 'node'") == set()
    assert keyword_query("where is the drag computed") == "where is the drag computed"


def test_retrieve_searches_keywords_without_the_negated_words() -> None:
    from nbrecall.config import RetrieveSettings

    base = {"notebook": "a.ipynb", "root": "/r", "heading": "", "anchor_id": ""}
    store = FakeStore([StoreHit(row("x", text="full fine-tuning F1 0.94", **base), 1.0)])
    manifest = FakeManifest("a", "a.ipynb")
    retrieve("F1 of full fine-tuning (no LoRA)", store, manifest, None, RetrieveSettings())  # type: ignore[arg-type]
    assert set(store.texts) == {"F1 of full fine-tuning"}  # the content search and the fact search


def test_notebooks_are_ranked_by_their_content_and_facts_shown_inside_them() -> None:
    from nbrecall.config import RetrieveSettings

    base = {"root": "/r", "heading": "", "anchor_id": ""}
    store = FakeStore([
        StoreHit(row("a1", nb="a", kind="code", anchor=1, notebook="a.ipynb", **base), 0.9),
        # b's facts score higher than a's chunk, but b has no content chunk that matches: a stays first
        StoreHit(row("b1", nb="b", kind="fact", anchor=3, notebook="b.ipynb", **base), 1.0),
        StoreHit(row("b2", nb="b", kind="fact", anchor=4, notebook="b.ipynb", **base), 1.0),
        StoreHit(row("a2", nb="a", kind="fact", anchor=2, notebook="a.ipynb", **base), 0.8),
        StoreHit(row("a3", nb="a", kind="fact", anchor=1, notebook="a.ipynb", **base), 0.8),
    ])
    manifest = FakeManifest("a", "a.ipynb")
    manifest.indexed_shas = lambda among=None: {"a", "b"}  # type: ignore[method-assign]
    found = retrieve("anything", store, manifest, None, RetrieveSettings())  # type: ignore[arg-type]
    assert [nb.nb_sha for nb in found.notebooks] == ["a"]
    assert [(h.kind, h.cell) for h in found.notebooks[0].hits] == [("code", 1), ("fact", 2)]  # cell 1 shown once
    assert sorted(map(str, store.kinds)) == sorted(["facts", str(["text", "code", "table", "scalar", "error",
                                                                  "figure"])])


def test_shown_hits_put_the_asked_for_kind_second_and_drop_the_weak_tail() -> None:
    group = [StoreHit(row("t1", kind="text", anchor=1), 1.0), StoreHit(row("t2", kind="text", anchor=2), 0.9),
             StoreHit(row("c3", kind="code", anchor=3), 0.7), StoreHit(row("f4", kind="figure", anchor=4), 0.4),
             StoreHit(row("t5", kind="text", anchor=5), 0.2)]
    ids = [h.row["chunk_id"] for h in shown_order(group, {"figure"}, floor=0.6, kind_slot=1)]
    assert ids == ["t1", "f4", "t2", "c3"]  # the figure is shown second although weak; 0.2 < 0.6 × 1.0 is dropped
    assert [h.row["chunk_id"] for h in shown_order(group, set(), floor=0.6)] == ["t1", "t2", "c3"]
    assert len(shown_order(group, {"figure"}, floor=0.0, kind_slot=-1)) == 5  # both rules off: the fused order
