"""Which cell an answer cites in the first notebook (`answer.places.cited_hit`): retrieval's first, unless a cell
that does the work sits inside a run of cells retrieval also found and an isolated prose cell only outscores it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from nbrecall.answer.places import cited_hit, where_answer
from nbrecall.answer.question import read_question
from nbrecall.records import CellRecord, Hit
from nbrecall.search.retrieve import NotebookResult, SearchResult

SHA = "b" * 40
PATH = "bode_plot.ipynb"


def _hit(cell: int, kind: str, score: float, cells: list[int] | None = None) -> Hit:
    return Hit(PATH, "/r", cell, cells or [cell], f"c{cell}", kind, score, "", "", nb_sha=SHA)


def _notebook(hits: list[Hit], cell_scores: dict[int, float]) -> NotebookResult:
    return NotebookResult(SHA, PATH, "/r", 2.0, hits, cell_scores=cell_scores)


# An introduction (cell 1) restates the question's words and stands alone; the figure that answers (cell 11) sits
# among cells retrieval also found (the code that draws it, the markdown that explains it).
INTRO_FIRST = [_hit(1, "text", 1.00), _hit(11, "figure", 0.95), _hit(12, "text", 0.93), _hit(10, "code", 0.82)]
RUN_SCORES = {1: 1.00, 9: 0.67, 10: 0.82, 11: 0.95, 12: 0.93}


def test_a_worked_cell_inside_a_found_run_is_cited_before_an_isolated_introduction() -> None:
    nb = _notebook(INTRO_FIRST, RUN_SCORES)
    assert cited_hit(nb, 0.5).cell == 11
    assert cited_hit(nb, 0.0).cell == 1  # off: retrieval's first, as before
    assert nb.hits[0].cell == 1  # the search result itself is left as retrieval ordered it


def test_a_first_hit_that_holds_code_or_outputs_stays_cited() -> None:
    # the table that answers is the work already: a neighbour's better support does not move the citation away
    hits = [_hit(1, "table", 1.00), _hit(2, "scalar", 0.98)]
    assert cited_hit(_notebook(hits, {0: 0.9, 1: 1.00, 2: 0.98, 3: 0.9}), 1.0).cell == 1


def test_an_isolated_first_hit_that_scores_far_higher_stays_cited() -> None:
    hits = [_hit(1, "text", 1.60), _hit(11, "figure", 0.95), _hit(10, "code", 0.82)]
    assert cited_hit(_notebook(hits, {**RUN_SCORES, 1: 1.60}), 0.5).cell == 1


def test_a_prose_cell_is_never_moved_first() -> None:
    # a definition is prose and often stands alone: another prose cell with found neighbours does not replace it
    hits = [_hit(14, "text", 1.00), _hit(16, "text", 0.97), _hit(20, "code", 0.60)]
    scores = {14: 1.00, 15: 0.90, 16: 0.97, 17: 0.95, 20: 0.60}
    assert cited_hit(_notebook(hits, scores), 0.5).cell == 14


def test_fact_hits_take_no_part() -> None:
    # a fact's score is on its own table's scale: never cited over the first hit, and a fact first stays first
    hits = [_hit(1, "text", 1.00), _hit(11, "fact", 2.00)]
    assert cited_hit(_notebook(hits, RUN_SCORES), 0.5).cell == 1
    assert cited_hit(_notebook([_hit(11, "fact", 2.0), *INTRO_FIRST], RUN_SCORES), 0.5).cell == 11


def test_another_versions_cells_take_no_part() -> None:
    # a cell of another version of the notebook, listed under it, is numbered in that notebook, not in this one
    other = Hit("bode_plot_v2.ipynb", "/r", 11, [11], "v11", "figure", 0.95, "", "", nb_sha="c" * 40,
                version_of=PATH)
    assert cited_hit(_notebook([_hit(1, "text", 1.00), other], RUN_SCORES), 0.5).cell == 1


def _archive(cells: list[CellRecord]) -> Any:
    return SimpleNamespace(manifest=SimpleNamespace(cells=lambda sha: cells))


def test_a_where_answer_cites_the_worked_cell_and_the_markdown_above_it() -> None:
    sources = {1: ("markdown", "The magnitude of a system is the sum of its poles' and zeros' contributions."),
               9: ("code", "H = poles_and_zeros()"), 10: ("markdown", "Now the contributions are added up."),
               11: ("code", "plot_bode(H)"), 12: ("markdown", "Examine the Bode plot.")}
    cells = [CellRecord(SHA, i, f"c{i}", kind, None, text, "") for i, (kind, text) in sorted(sources.items())]
    hits = [_hit(1, "text", 1.00), _hit(11, "figure", 0.95), _hit(12, "text", 0.93)]
    found = SearchResult("q", [_notebook(hits, RUN_SCORES)])
    question = read_question("where is the Bode magnitude plot built from pole and zero contributions?")
    answer = where_answer(question, found, _archive(cells), region=0.5)
    assert [c.cell for c in answer.citations[:2]] == [11, 10]
    assert "Cell 11: `plot_bode(H)`" in answer.text
    assert where_answer(question, found, _archive(cells), 0.0).citations[0].cell == 1  # off: retrieval's first
