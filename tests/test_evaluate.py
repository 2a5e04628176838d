"""Retrieval metrics on a hand-made query set whose expected numbers are worked out by hand below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nbrecall.search.evaluate import Query, evaluate, judge, load_queries, metrics, resolve_copies


def r(notebook: str, cells: list[int] | None = None, cell: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"notebook": notebook, "cell": cell if cell is not None else (cells or [0])[0]}
    if cells is not None:
        out["cells"] = cells
    return out


QUERIES = [
    Query("q1", "where is the harbour model", "where", "a.ipynb", [3]),
    Query("q2", "what was the accuracy", "value", "b.ipynb", [1, 2], answer="0.95", also=["b-copy.ipynb"]),
    Query("q3", "where is the unknown thing", "where", "c.ipynb", [0]),
    Query("q4", "TypeError: boom", "error", "sub/d.ipynb", [7]),
    Query("q5", "what does kriging mean", "vocab", "f.ipynb", [2]),
]

RESULTS: dict[str, list[dict[str, Any]]] = {
    # distinct notebooks x, a -> rank 2 (a's first result is 3rd in the list, but ranks count notebooks);
    # cell pairs (x,0) (x,1) (x,2) (a,5) (a,3): the duplicate (x,1) counts once, (a,3) is 5th -> cell hit
    "q1": [r("x.ipynb", [0, 1]), r("x.ipynb", [1, 2]), r("a.ipynb", [5]), r("a.ipynb", [3])],
    # y (no `cells`: falls back to `cell`), z, then the `also` copy at distinct rank 3 -> right notebook;
    # pairs: (y,4) + 9 of z = 10, so the copy's (b-copy,1) is 11th and b.ipynb's (b,2) 12th -> no cell hit
    # (a copy's cell counts only when `resolve_copies` found it the same as a right cell: not here)
    "q2": [r("y.ipynb", cell=4), r("z.ipynb", list(range(9))), r("b-copy.ipynb", [1]), r("b.ipynb", [2])],
    # never the right notebook
    "q3": [r("a.ipynb", [0]), r("b.ipynb", [0])],
    # path spellings normalised (backslashes, leading ./); rank 1; pairs: d0..d4 (5), then 3,4 again (dups),
    # d5 d6 d8 (8), (e,0) (9), (d,1) dup, (d,7) is exactly the 10th pair -> cell hit
    "q4": [r("sub\\d.ipynb", [0, 1, 2, 3, 4]), r("./sub/d.ipynb", [3, 4, 5, 6, 8]), r("e.ipynb", [0]),
           r("sub/d.ipynb", [1, 7])],
    # repeated notebooks do not push the rank: g g h h i j f -> f is 5th distinct; (f,2) is 7th pair -> hit
    "q5": [r("g.ipynb", [0]), r("g.ipynb", [1]), r("h.ipynb", [0]), r("h.ipynb", [1]), r("i.ipynb", [0]),
           r("j.ipynb", [0]), r("f.ipynb", [2])],
}


def test_judge_ranks_distinct_notebooks_and_flattens_cells() -> None:
    outcomes = {q.id: judge(q, RESULTS[q.id]) for q in QUERIES}
    assert {k: o.notebook_rank for k, o in outcomes.items()} == {"q1": 2, "q2": 3, "q3": None, "q4": 1,
                                                                  "q5": 5}
    assert {k: o.cell_hit for k, o in outcomes.items()} == {"q1": True, "q2": False, "q3": False, "q4": True,
                                                             "q5": True}


def test_cell_cut_off_is_ten_distinct_pairs() -> None:
    q4 = QUERIES[3]
    assert judge(q4, RESULTS["q4"]).cell_hit
    assert not judge(q4, RESULTS["q4"], cell_depth=9).cell_hit  # (d,7) is the 10th distinct pair
    # the right cell of the right notebook beyond 10 pairs: no hit, though the notebook is rank 1
    results = [r("sub/d.ipynb", list(range(10, 20))), r("d.ipynb", [7]), r("sub/d.ipynb", [7])]
    outcome = judge(Query("q", "x", "error", "sub/d.ipynb", [7]), results)
    assert outcome.notebook_rank == 1 and not outcome.cell_hit
    # the right cell number in another notebook is not a hit
    assert not judge(Query("q", "x", "where", "a.ipynb", [3]), [r("b.ipynb", [3])]).cell_hit


def test_also_counts_for_the_notebook_and_for_cells_only_when_resolved_the_same() -> None:
    q2 = QUERIES[1]
    outcome = judge(q2, [r("b-copy.ipynb", [1, 2])])
    assert outcome.notebook_rank == 1 and not outcome.cell_hit  # no `copy_cells`: no cell of the copy is right
    assert judge(q2, [r("b.ipynb", [2])]).cell_hit


CORE = ("n", "nb@1", "nb@3", "nb@5", "MRR", "cell@10c")


def core(values: dict[str, float]) -> dict[str, float]:
    return {key: values[key] for key in CORE}


def test_metrics_overall_and_per_kind() -> None:
    table, outcomes = evaluate(QUERIES, lambda text: RESULTS[next(q.id for q in QUERIES if q.query == text)])
    table = {kind: core(values) for kind, values in table.items()}
    assert [o.query.id for o in outcomes] == ["q1", "q2", "q3", "q4", "q5"]
    assert set(table) == {"all", "where", "value", "error", "vocab"}
    # ranks 2, 3, None, 1, 5; cell hits q1, q4, q5
    expected_all = {"n": 5.0, "nb@1": 1 / 5, "nb@3": 3 / 5, "nb@5": 4 / 5,
                    "MRR": (1 / 2 + 1 / 3 + 0 + 1 + 1 / 5) / 5, "cell@10c": 3 / 5}
    assert table["all"] == pytest.approx(expected_all)
    assert table["all"]["MRR"] == pytest.approx(61 / 150)
    # where: q1 (rank 2, hit) and q3 (miss)
    assert table["where"] == pytest.approx({"n": 2.0, "nb@1": 0.0, "nb@3": 0.5, "nb@5": 0.5, "MRR": 0.25,
                                            "cell@10c": 0.5})
    assert table["value"] == pytest.approx({"n": 1.0, "nb@1": 0.0, "nb@3": 1.0, "nb@5": 1.0, "MRR": 1 / 3,
                                            "cell@10c": 0.0})
    assert table["error"] == pytest.approx({"n": 1.0, "nb@1": 1.0, "nb@3": 1.0, "nb@5": 1.0, "MRR": 1.0,
                                            "cell@10c": 1.0})
    assert table["vocab"] == pytest.approx({"n": 1.0, "nb@1": 0.0, "nb@3": 0.0, "nb@5": 1.0, "MRR": 0.2,
                                            "cell@10c": 1.0})


def test_empty_results_and_empty_set() -> None:
    outcome = judge(QUERIES[0], [])
    assert outcome.notebook_rank is None and not outcome.cell_hit
    assert metrics([]) == {"n": 0.0, "nb@1": 0.0, "nb@3": 0.0, "nb@5": 0.0, "MRR": 0.0, "cell@10c": 0.0,
                           "cell@10c strict": 0.0, "fam@5": 0.0}


def test_families_in_the_first_five_and_cells_of_copies(tmp_path: Path) -> None:
    # fam@5: distinct families among the first five results of their own (a cell listed from another version
    # belongs to the result above it)
    hits = [{"notebook": "a.ipynb", "cells": [1], "family": "F"}, {"notebook": "b.ipynb", "cells": [1], "family": "F"},
            {"notebook": "c.ipynb", "cells": [1], "family": "G", "version_of": "x.ipynb"},
            {"notebook": "d.ipynb", "cells": [1], "family": ""}, {"notebook": "e.ipynb", "cells": [1], "family": "H"}]
    assert judge(Query("q", "x", "where", "a.ipynb", [1]), hits).families_top5 == 3  # F, d, H
    # cell@10c: the same cell (by source) of a copy under `also` counts, at its own index; cell@10c strict does not
    from nbformat import v4

    from conftest import write_nb

    write_nb(tmp_path / "calc.ipynb", [v4.new_markdown_cell("# Calc"), v4.new_code_cell("total = 3803.0")])
    write_nb(tmp_path / "_build/calc.ipynb", [v4.new_markdown_cell("# Calc"), v4.new_markdown_cell("extra"),
                                              v4.new_code_cell("total  =  3803.0")])
    query = Query("q", "x", "value", "calc.ipynb", [1], also=["_build/calc.ipynb"])
    resolve_copies([query], tmp_path)
    assert query.copy_cells == {"_build/calc.ipynb": [2]}
    outcome = judge(query, [{"notebook": "_build/calc.ipynb", "cells": [2]}])
    assert outcome.notebook_rank == 1 and outcome.cell_hit and not outcome.strict_cell_hit
    assert metrics([outcome])["cell@10c"] == 1.0 and metrics([outcome])["cell@10c strict"] == 0.0
    # the query's cell index in the copy is another cell (the copy has one more): not right
    assert not judge(query, [{"notebook": "_build/calc.ipynb", "cells": [1]}]).cell_hit
    # the right cell of the query's own notebook counts in both
    own = judge(query, [{"notebook": "calc.ipynb", "cells": [1]}])
    assert own.cell_hit and own.strict_cell_hit
    # a copy beyond the first ten pairs does not count
    late = judge(query, [{"notebook": "x.ipynb", "cells": list(range(10))}, {"notebook": "_build/calc.ipynb",
                                                                          "cells": [2]}])
    assert late.notebook_rank == 2 and not late.cell_hit


def test_load_queries(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    rows = [
        {"id": "d1", "query": "what value", "kind": "value", "notebook": "a/b.ipynb", "cells": [13, 14],
         "answer": "0.950", "note": "n"},
        {"id": "d2", "query": "where", "kind": "where", "notebook": "c.ipynb", "cells": [1], "answer": None,
         "also": ["c2.ipynb"]},
    ]
    path.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n", encoding="utf-8")
    queries = load_queries(path)
    assert queries == [Query("d1", "what value", "value", "a/b.ipynb", [13, 14], "0.950", []),
                       Query("d2", "where", "where", "c.ipynb", [1], None, ["c2.ipynb"])]


def test_answer_cell_at_1_counts_the_same_cell_of_a_copy() -> None:
    from nbrecall.answer.evaluate import answer_metrics, judge_answer
    from nbrecall.answer.types import Answer, Citation

    query = Query("q", "what total", "where", "calc.ipynb", [1], also=["_build/calc.ipynb"],
                  copy_cells={"_build/calc.ipynb": [2]})

    def cited(notebook: str, cell: int) -> Answer:
        return Answer("what total", "total = 3803.0", [Citation(notebook, cell, f"c{cell}")])

    copy = judge_answer(query, cited("_build/calc.ipynb", 2))
    assert copy.cell_first and not copy.strict_cell_first
    own = judge_answer(query, cited("calc.ipynb", 1))
    assert own.cell_first and own.strict_cell_first
    assert not judge_answer(query, cited("_build/calc.ipynb", 1)).cell_first  # another cell of the copy
    assert not judge_answer(query, Answer("what total", "")).cell_first  # no citation
    table = answer_metrics([copy, own])
    assert table["cell@1"] == 1.0 and table["cell@1 strict"] == 0.5


def test_answer_cell_at_3_counts_a_right_cell_among_the_first_three_places() -> None:
    from nbrecall.answer.evaluate import answer_metrics, judge_answer
    from nbrecall.answer.types import Answer, Citation

    query = Query("q", "where is the total computed", "where", "calc.ipynb", [7])
    places = [Citation("calc.ipynb", cell, f"c{cell}") for cell in (3, 9, 7, 8)]
    third = judge_answer(query, Answer(query.query, "", places[:3], places=places[:3]))
    assert not third.cell_first and third.cell_top3
    fourth = judge_answer(query, Answer(query.query, "", places, places=[*places[:2], places[3], places[2]]))
    assert not fourth.cell_top3  # offered fourth: not counted
    cited_only = judge_answer(query, Answer(query.query, "", [places[0], places[2]]))
    assert not cited_only.cell_top3  # without places, the first citation alone is the place
    assert answer_metrics([third, fourth])["cell@3"] == 0.5


@pytest.mark.parametrize(
    ("expected", "text", "held"),
    [
        ("3803.0", "total_ballast = 3803.0", True),
        ("0.950", "accuracy: 0.950 on the test split", True),
        ("0.950", "array([0.95035, 0.96035])", False),  # the first digits of a longer number
        ("1.5", "1.5e-3", False),  # the mantissa of another number
        ("11.5", "211.5 m", False),
        ("1,284.6", "Total ballast aft: 1,284.6 m3", True),
        ("4.159 c", "Initial Static Margin: 4.159 c", True),
        ("sklearn.utils.Bunch", "sklearn.utils.Bunch", True),
        ("", "anything", False),
    ],
)
def test_a_value_counts_only_when_shown_whole(expected: str, text: str, held: bool) -> None:
    from nbrecall.answer.evaluate import holds_value

    assert holds_value(expected, text) is held


def test_judge_answer_reads_values_whole() -> None:
    from nbrecall.answer.evaluate import judge_answer
    from nbrecall.answer.types import Answer, Citation, FoundValue

    query = Query("q", "cross-validated accuracy", "value", "a.ipynb", [3], "0.950")
    citation = Citation("a.ipynb", 3, "c3")
    near = FoundValue("[0.95035, 0.96]", "cv", "cv = [0.95035, 0.96]", "", citation)
    right = FoundValue("0.950", "Gradient Boosting", "Gradient Boosting: 0.950", "", citation)
    outcome = judge_answer(query, Answer(query.query, "", [citation], values=[near, right]), "cv = [0.95035]")
    assert outcome.value_first is False and outcome.value_top3 is True and outcome.in_context is False
