"""Which hit of a notebook is shown first (`search.retrieve.work_first`), and so cited by an answer: the best one,
unless a cell that does the work sits inside a run of cells retrieval also found and an isolated prose cell only
outscores it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from nbrecall.answer.places import other_places, where_answer
from nbrecall.answer.question import read_question
from nbrecall.config import RetrieveSettings
from nbrecall.records import CellRecord, Hit, StoreHit
from nbrecall.search.retrieve import NotebookResult, SearchResult, retrieve, work_first
from retrieval_fakes import FakeManifest, FakeStore

SHA = "b" * 40
PATH = "bode_plot.ipynb"


def _hit(cell: int, kind: str, score: float, cells: list[int] | None = None) -> Hit:
    return Hit(PATH, "/r", cell, cells or [cell], f"c{cell}", kind, score, "", "", nb_sha=SHA)


def _notebook(hits: list[Hit], cell_scores: dict[int, float]) -> NotebookResult:
    return NotebookResult(SHA, PATH, "/r", 2.0, hits, cell_scores=cell_scores)


def _first(hits: list[Hit], cell_scores: dict[int, float], region: float) -> int:
    shown = work_first(hits, cell_scores, region)
    assert sorted(id(h) for h in shown) == sorted(id(h) for h in hits)  # reordered, nothing added or lost
    return shown[0].cell


# An introduction (cell 1) restates the question's words and stands alone; the figure that answers (cell 11) sits
# among cells retrieval also found (the code that draws it, the markdown that explains it).
INTRO_FIRST = [_hit(1, "text", 1.00), _hit(11, "figure", 0.95), _hit(12, "text", 0.93), _hit(10, "code", 0.82)]
RUN_SCORES = {1: 1.00, 9: 0.67, 10: 0.82, 11: 0.95, 12: 0.93}


def test_a_worked_cell_inside_a_found_run_is_cited_before_an_isolated_introduction() -> None:
    assert [h.cell for h in work_first(INTRO_FIRST, RUN_SCORES, 0.5)] == [11, 1, 12, 10]  # the rest keep their order
    assert _first(INTRO_FIRST, RUN_SCORES, 0.0) == 1  # off: the fused order


def test_a_first_hit_that_holds_code_or_outputs_stays_cited() -> None:
    # the table that answers is the work already: a neighbour's better support does not move the citation away
    hits = [_hit(1, "table", 1.00), _hit(2, "scalar", 0.98)]
    assert _first(hits, {0: 0.9, 1: 1.00, 2: 0.98, 3: 0.9}, 1.0) == 1


def test_an_isolated_first_hit_that_scores_far_higher_stays_cited() -> None:
    hits = [_hit(1, "text", 1.60), _hit(11, "figure", 0.95), _hit(10, "code", 0.82)]
    assert _first(hits, {**RUN_SCORES, 1: 1.60}, 0.5) == 1


def test_a_prose_cell_is_never_moved_first() -> None:
    # a definition is prose and often stands alone: another prose cell with found neighbours does not replace it
    hits = [_hit(14, "text", 1.00), _hit(16, "text", 0.97), _hit(20, "code", 0.60)]
    scores = {14: 1.00, 15: 0.90, 16: 0.97, 17: 0.95, 20: 0.60}
    assert _first(hits, scores, 0.5) == 14


def test_fact_hits_take_no_part() -> None:
    # a fact's score is on its own table's scale: never cited over the first hit, and a fact first stays first
    hits = [_hit(1, "text", 1.00), _hit(11, "fact", 2.00)]
    assert _first(hits, RUN_SCORES, 0.5) == 1
    assert _first([_hit(11, "fact", 2.0), *INTRO_FIRST], RUN_SCORES, 0.5) == 11


def test_another_versions_cells_take_no_part() -> None:
    # a cell of another version of the notebook, listed under it, is numbered in that notebook, not in this one
    other = Hit("bode_plot_v2.ipynb", "/r", 11, [11], "v11", "figure", 0.95, "", "", nb_sha="c" * 40,
                version_of=PATH)
    assert _first([_hit(1, "text", 1.00), other], RUN_SCORES, 0.5) == 1


def _archive(cells: list[CellRecord]) -> Any:
    return SimpleNamespace(manifest=SimpleNamespace(cells=lambda sha: cells))


def test_a_where_answer_cites_the_worked_cell_and_the_markdown_above_it() -> None:
    sources = {1: ("markdown", "The magnitude of a system is the sum of its poles' and zeros' contributions."),
               9: ("code", "H = poles_and_zeros()"), 10: ("markdown", "Now the contributions are added up."),
               11: ("code", "plot_bode(H)"), 12: ("markdown", "Examine the Bode plot.")}
    cells = [CellRecord(SHA, i, f"c{i}", kind, None, text, "") for i, (kind, text) in sorted(sources.items())]
    hits = work_first([_hit(1, "text", 1.00), _hit(11, "figure", 0.95), _hit(12, "text", 0.93)], RUN_SCORES, 0.5)
    found = SearchResult("q", [_notebook(hits, RUN_SCORES)])
    question = read_question("where is the Bode magnitude plot built from pole and zero contributions?")
    answer = where_answer(question, found, _archive(cells))
    assert [c.cell for c in answer.citations[:2]] == [11, 10]
    assert "Cell 11: `plot_bode(H)`" in answer.text
    # the next cells retrieval found in the notebook are offered under it, the markdown already cited is not
    assert [c.cell for c in answer.places] == [11, 1, 12]
    assert ("Also in this notebook: Cell 1: “The magnitude of a system is the sum of its poles' and zeros' "
            f"contributions.” [{PATH} › Cell 1]; Cell 12: “Examine the Bode plot.” [{PATH} › Cell 12]") in answer.text


def _row(cell: int, kind: str, cells: list[int]) -> dict[str, Any]:
    return {"chunk_id": f"{SHA[:20]}-{cell}", "nb_sha": SHA, "notebook": PATH, "root": "/r", "kind": kind,
            "anchor": cell, "anchor_id": f"c{cell}", "cells": cells, "text": "", "heading": "", "health": 1.0}


def test_search_lists_first_the_cell_an_answer_cites() -> None:
    # retrieve itself orders the hits, so search, the answer's citation and the LLM context's neighbourhood agree
    cells = [CellRecord(SHA, i, f"c{i}", "markdown" if i in (1, 9, 12) else "code", None, f"cell {i}", "")
             for i in range(15)]
    store = FakeStore([StoreHit(_row(1, "text", [1]), 1.00), StoreHit(_row(11, "figure", [10, 11]), 0.95),
                       StoreHit(_row(12, "text", [12]), 0.93), StoreHit(_row(9, "text", [9]), 0.80)])
    manifest = FakeManifest(SHA, PATH, cells)
    found = retrieve("bode magnitude", store, manifest, None, RetrieveSettings())  # type: ignore[arg-type]
    nb = found.notebooks[0]
    assert nb.hits[0].cell == 11 and {h.cell for h in nb.hits} >= {1, 11, 12}
    around = [c.idx for c in nb.neighbourhood]
    assert 11 in around and 1 not in around
    question = read_question("where is the bode magnitude drawn?")
    assert where_answer(question, found, _archive(cells)).citations[0].cell == 11
    off = retrieve("bode magnitude", store, manifest, None,  # type: ignore[arg-type]
                   RetrieveSettings(work_region=0.0))
    assert off.notebooks[0].hits[0].cell == 1


def test_other_places_skip_facts_other_versions_and_cells_already_cited() -> None:
    other = Hit("bode_plot_v2.ipynb", "/r", 4, [4], "v4", "figure", 0.95, "", "", nb_sha="c" * 40, version_of=PATH)
    hits = [_hit(11, "figure", 1.0), _hit(12, "fact", 0.99), other, _hit(10, "text", 0.9), _hit(11, "code", 0.8),
            _hit(9, "code", 0.7), _hit(1, "text", 0.6)]
    nb = _notebook(hits, RUN_SCORES)
    assert other_places(nb, {11, 10}) == [9, 1]
    assert other_places(nb, {11}, most=1) == [10]
