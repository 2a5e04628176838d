"""The answer stage without an LLM: question kinds, extractive value / where / term answers, the LLM context."""

from __future__ import annotations

import dataclasses
import re
from copy import deepcopy as copy
from pathlib import Path

import pandas as pd
import pytest
from nbformat import v4

from conftest import HashEmbedder, code, result, stream, write_nb
from nbrecall.answer.answer import answer, llm_context, stream_answer
from nbrecall.answer.compose import shows_number, with_values
from nbrecall.answer.context import TRUNCATED, VALUES_HEADING, build_context, notebook_heading, render_cell
from nbrecall.answer.question import number_alone, read_question
from nbrecall.answer.sentences import sentences
from nbrecall.answer.types import Answer, Citation
from nbrecall.config import Settings
from nbrecall.convert.tokens import count_llm_tokens
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index
from nbrecall.records import CellRecord, Hit, SearchFilters
from nbrecall.search.retrieve import NotebookResult, SearchResult
from nbrecall.service import Archive

BALLAST = "projects/2017/17-042/ballast.ipynb"
MOORING = "projects/2018/18-007/mooring.ipynb"
GLOSSARY = "reference/glossary.ipynb"


def _frame_output(df: pd.DataFrame, count: int):  # type: ignore[no-untyped-def]
    return result(df.to_string(), count, html=df.to_html())


def make_notebooks(root: Path) -> None:
    """Three small notebooks: a printed value and a DataFrame, a table of line tensions, a glossary."""
    zones = pd.DataFrame(
        {"tanks": [3, 6, 3], "volume_m3": [1284.6, 1501.4, 1017.0], "mass_t": [1316.7, 1538.9, 1042.4]},
        index=pd.Index(["aft", "mid", "fwd"], name="zone"),
    )
    write_nb(
        root / BALLAST,
        [
            v4.new_markdown_cell("# PSV Nordhav — ballast distribution\nBallast plan for the departure condition."),
            code("RHO_SW = 1.025  # sea water density [t/m3]\nLPP = 124.8", 1),
            v4.new_markdown_cell("## Ballast by zone\nZones follow the tank plan: aft, mid and forward groups."),
            code("summary = tanks.groupby('zone').sum()\nsummary", 2, [_frame_output(zones, 2)]),
            code(
                "aft = summary.loc['aft', 'volume_m3']\nprint(f'Total ballast aft: {aft:,.1f} m3')\n"
                "print(f'Total ballast fwd: {fwd:,.1f} m3')",
                3,
                [stream("Total ballast aft: 1,284.6 m3\nTotal ballast fwd: 1,017.0 m3\n")],
            ),
            v4.new_markdown_cell("## Centre of gravity of the ballast\nLCG measured from the aft perpendicular."),
            code("lcg = (w * tanks.lcg_m).sum() / w.sum()\nprint(lcg)", 4, [stream("53.55\n")]),
        ],
    )
    lines = pd.DataFrame(
        {"pretension_kN": [1200.0, 1200.0, 1250.0], "max_tension_kN": [2210.5, 3439.8, 2875.1]},
        index=pd.Index(["L1", "L5", "L6"], name="line"),
    )
    write_nb(
        root / MOORING,
        [
            v4.new_markdown_cell("# Spread mooring analysis\nQuasi-static line tensions of the FSO mooring."),
            code("tensions = solve_lines(offsets)\ntensions", 1, [_frame_output(lines, 1)]),
            code("util = tensions.max_tension_kN.max() / MBL\nutil", 2, [result("0.603", 2)]),
        ],
    )
    write_nb(
        root / GLOSSARY,
        [
            v4.new_markdown_cell("# Hydrostatics glossary\nShort definitions used across our notebooks."),
            v4.new_markdown_cell(
                "## Deadweight\n**Deadweight** is the difference between displacement and lightship weight. "
                "It includes cargo, ballast and fuel."
            ),
            v4.new_markdown_cell(
                "## Metacentric height\nThe **metacentric height** GM is the distance from the centre of gravity "
                "G to the metacentre M. A positive GM means the ship is initially stable."
            ),
        ],
    )


def build_index(root: Path, index: Path) -> Settings:
    make_notebooks(root)
    settings = Settings(index_dir=index)
    settings.metadata.path_rules = [r"projects/(?P<year>\d{4})/(?P<project>\d{2}-\d{3})/"]
    embedder = HashEmbedder()
    run_index([root], settings, embedder, LanceStore(index / "lance", embedder.dim))
    return settings


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Archive:
    base = tmp_path_factory.mktemp("answer")
    settings = build_index(base / "share", base / "idx")
    return Archive(settings, _embedder=HashEmbedder())


def ask(archive: Archive, question: str, filters: SearchFilters | None = None):  # type: ignore[no-untyped-def]
    return answer(question, archive, archive.settings, filters)


def first_hit_as(found: SearchResult, kind: str) -> SearchResult:
    """`found` with retrieval's first hit of chunk kind `kind` (a printed scalar or not: `compose` reads it)."""
    first = found.notebooks[0]
    hits = [dataclasses.replace(first.hits[0], kind=kind), *first.hits[1:]]
    return dataclasses.replace(found, notebooks=[dataclasses.replace(first, hits=hits), *found.notebooks[1:]])


def cell_text(archive: Archive, notebook: str, idx: int) -> str:
    sha = archive.manifest.find_by_path(notebook)
    cell = next(c for c in archive.manifest.cells(sha) if c.idx == idx)
    return cell.source + "\n" + cell.outputs


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("what ballast volume did we use aft", "value"),
        ("how many tanks are in the mid zone", "value"),
        ("what was the final RMSE", "value"),
        ("where did we compute the centre of gravity", "where"),
        ("which notebook has the mooring analysis", "where"),
        ("how did we compute the LCG", "where"),
        ("what is deadweight", "term"),
        ("what does GM mean", "term"),
        ("define free surface effect", "term"),
        ("KeyError pile_diameter", "general"),
        # a wh-word, the thing or degree asked about, then the verb
        ("What thrust did the optimizer settle on for level flight?", "value"),
        ("what test MSE does the pruned tree reach", "value"),
        ("how big is the threshold energy of the reaction", "value"),
        ("Exam scores online and in person: what p-value did the z-test give?", "value"),
        ("In a 5 gram sample of boron, how many atoms are boron-10?", "value"),
        ("which table has the beam percentile columns", "general"),
        ("how is the peak discharge at the urban gauge found?", "general"),
        # the degree with any auxiliary or modal, and a clause after a spaced dash
        ("how long did the whole profiling run take", "value"),
        ("how far can the vessel sail on two battery containers", "value"),
        ("how can we compute the drag", "where"),
        ("Refinery LP solved with linprog — how many barrels of the second crude are bought?", "value"),
    ],
)
def test_classify(question: str, kind: str) -> None:
    assert read_question(question).kind == kind


@pytest.mark.parametrize(
    ("question", "subject"),
    [
        # a setting, then the ask after the last separator: the ask names what is wanted
        ("Short sampler run on the first event with default priors: median chirp mass?", ["median", "chirp", "mass"]),
        ("Ridge regression on the salary data; test MSE?", ["test", "mse"]),
        # an interrogative opens the ask wherever it stands
        ("Fuel oil in 2 inch pipe: what psi drop do we get?", ["psi", "drop"]),
        # keywords in one run, or a separator with no question after it: the first noun phrase
        ("dew temperature of the ternary vapor at 2 bar", ["dew", "temperatur"]),
        ("mooring line tension: storm case", ["moor", "line", "tension"]),
    ],
)
def test_the_subject_is_what_the_asking_clause_names(question: str, subject: list[str]) -> None:
    assert read_question(question).subject == subject


def test_value_from_a_printed_line(archive: Archive) -> None:
    found = ask(archive, "what total ballast volume did we use aft")
    assert found.mode == "extractive" and found.kind == "value"
    best = found.values[0]
    assert float(best.value.replace(",", "")) == 1284.6 and "aft" in best.label.lower()
    assert found.text.startswith(f"{best.shown} — [{BALLAST} › Cell {best.citation.cell}]")
    assert (found.citations[0].notebook, found.citations[0].cell) == (BALLAST, best.citation.cell)
    assert found.citations[0].cell_id and found.citations[0].nb_sha
    assert best.shown in cell_text(archive, BALLAST, best.citation.cell) or best.citation.cell == 3  # copied
    assert "Also found:" in found.text and 1 < len(found.values) <= 3  # alternatives from other cells
    assert len({(v.citation.notebook, v.citation.cell) for v in found.values}) == len(found.values)
    assert found.values[0].year == 2017


def test_a_pasted_wall_of_words_is_quoted_back_short(archive: Archive) -> None:
    """The notice that the value's name lacks what was asked quotes the asked words once each, clipped: a question
    can be a pasted log of thousands of words."""
    once = ask(archive, "what zorblax flux did we use for the ballast aft")
    assert once.values and "does not say “zorblax flux”" in (once.notice or "")
    found = ask(archive, "what " + "zorblax flux " * 2000 + "did we use for the ballast aft")
    assert "no notebook found mentions “zorblax flux”" in (found.notice or "") and len(found.notice or "") < 400


@pytest.mark.parametrize(("text", "readings"), [
    ("3803", [(3803.0, 0)]), ("1,284.6", [(1284.6, 1)]), ("1.284,6", [(1284.6, 1)]), ("12 345,6", [(12345.6, 1)]),
    ("0,702", [(702.0, 0), (0.702, 3)]), ("12.5 %", [(12.5, 1), (0.125, 3)]), ("3803 m3", [(3803.0, 0)]),
    ("-4.5e-3", [(-0.0045, 4)]), ("3803.0?", [(3803.0, 1)]),
    ("what is 3803", []), ("130 m vessel", []), ("ballast 1284.6 aft", []), ("v2.1.3", []),
])
def test_a_number_alone_is_read_every_way_it_may_be_written(text: str, readings: list[tuple[float, int]]) -> None:
    assert number_alone(text) == readings


def test_a_number_pasted_alone_gets_the_cells_that_print_it(archive: Archive) -> None:
    """A figure pasted from a report asks where it was printed: the values that show it lead, exact ones first,
    one per cell, in retrieval's order; never another number (a number the question gives counts against a value
    in a value answer)."""
    found = ask(archive, "1,284.6")
    assert found.values and {float(v.value.replace(",", "")) for v in found.values} == {1284.6}
    assert {(v.citation.notebook, v.citation.cell) for v in found.values} == {(BALLAST, 3), (BALLAST, 4)}
    assert "a number alone" in (found.notice or "") and "rounded" not in (found.notice or "")
    rounded = ask(archive, "1285")
    assert rounded.values and float(rounded.values[0].value.replace(",", "")) == 1284.6
    assert "rounded to the decimals typed" in (rounded.notice or "")
    assert shows_number("1,284.6", [(1285.0, 0)]) == 1 and shows_number("1284.6", [(1284.6, 1)]) == 2
    assert shows_number("1284.6", [(1284.0, 0)]) == 0 and shows_number("n/a", [(1.0, 0)]) == 0
    none = ask(archive, "777.77")
    assert not none.values and "no printed value of the notebooks found shows 777.77" in (none.notice or "")
    assert none.citations  # the closest cell still


def test_value_from_a_dataframe_cell(archive: Archive) -> None:
    found = ask(archive, "what ballast mass did we have in the mid zone")
    assert (found.values[0].label, found.values[0].value) == ("mid · mass_t", "1538.9"), found.text
    assert found.citations[0].cell == 3


def test_value_max_of_a_table_column(archive: Archive) -> None:
    found = ask(archive, "which mooring line had the highest max tension")
    assert (found.values[0].label, found.values[0].value) == ("L5 · max_tension_kN", "3439.8"), found.text
    assert (found.citations[0].notebook, found.citations[0].cell) == (MOORING, 1)


def test_value_bare_scalar_is_labelled_with_its_expression(archive: Archive) -> None:
    found = ask(archive, "what was the lcg of the ballast")
    assert found.values[0].shown == "lcg: 53.55", found.text
    util = ask(archive, "what utilisation did the mooring lines reach")
    assert util.values[0].shown == "util = 0.603", util.text


def test_value_from_a_constant_in_the_source(archive: Archive) -> None:
    found = ask(archive, "what sea water density did we use")
    assert found.text.startswith("RHO_SW = 1.025  # sea water density [t/m3]"), found.text
    assert found.citations[0].cell == 1


@pytest.mark.parametrize("question", ["how many lifeboats does the ballast plan list",
                                      "what lifeboat capacity did the mooring plan assume"])
def test_no_value_close_enough_points_at_the_cell(archive: Archive, question: str) -> None:
    # no notebook mentions lifeboats, and no printed value's name is close in meaning to the question
    found = ask(archive, question)
    assert not found.values and found.citations, found.text
    assert found.notice and "closest cell" in found.notice and "lifeboat" in found.notice


def test_general_question_cites_the_cell_and_lists_the_values_under_it(archive: Archive) -> None:
    # no interrogative and no value whose name holds what is asked: retrieval's cell comes first, the printed
    # values that score best follow it (with their own citations) instead of being dropped
    from nbrecall.answer.compose import extractive_answer

    place = ask(archive, "where are the quasi-static line tensions of the FSO")
    question = "quasi-static line tensions of the FSO"
    found = extractive_answer(question, first_hit_as(archive.search(question), "text"), archive)
    assert found.kind == "general"
    assert found.citations[0] == place.citations[0]
    assert found.text.startswith(place.text.splitlines()[0])
    assert "Printed values that may answer it:" in found.text
    assert found.values and all(v.citation in found.citations for v in found.values)
    assert all(f"{v.shown} — {v.citation.label()}" in found.text for v in found.values)


def test_a_value_that_scores_too_low_is_offered_under_the_closest_cell(archive: Archive) -> None:
    # a question whose grammar does not ask for a value, with the same candidates once as scored and once with every
    # score under half of what the signals can give: the second time the value is not the answer; the closest cell
    # is, with the values listed under it
    from nbrecall.answer.compose import extractive_answer
    from nbrecall.answer.values import ValueWeights, rank_values

    question = "which total ballast volume aft is listed"
    assert read_question(question).kind == "general" and read_question(question).asked
    result = first_hit_as(archive.search(question), "text")  # not a printed value: see the next test
    ranked = rank_values(read_question(question), result, archive)
    floor = ValueWeights().min_share * ValueWeights().ceiling()
    assert ranked[0].score >= floor
    given = extractive_answer(question, result, archive, ranked=[copy(c) for c in ranked])
    assert given.text.startswith(given.values[0].shown) and not given.notice
    low = [copy(c) for c in ranked]
    for c in low:
        c.score = c.score * (floor - 1e-3) / ranked[0].score
    offered = extractive_answer(question, result, archive, ranked=low)
    assert offered.text.startswith(f"In {BALLAST}"), offered.text
    assert "Printed values that may answer it:" in offered.text
    assert offered.values[0].shown == given.values[0].shown
    assert offered.places[0] == offered.citations[0]
    assert len(set(offered.places)) == len(offered.places), offered.places  # a cell offered twice is one place
    off = extractive_answer(question, result, archive, weights=ValueWeights(min_share=0.0), ranked=low)
    assert off.text.startswith(given.values[0].shown)  # the ablation's "no min_share": the value is given


def test_a_question_that_asks_for_a_value_gets_it_first_however_low_it_scores(archive: Archive) -> None:
    # the grammar asks for a value ("what … did we use"): with every score under half of what the signals can give,
    # the value still leads, and its confidence says it is uncertain (the closest cell was right less often than
    # the low value's own cell for such questions: bench/README.md, session 25)
    from nbrecall.answer.compose import extractive_answer
    from nbrecall.answer.values import ValueWeights, rank_values

    question = "what total ballast volume did we use aft"
    assert read_question(question).kind == "value"
    result = first_hit_as(archive.search(question), "text")
    ranked = rank_values(read_question(question), result, archive)
    floor = ValueWeights().min_share * ValueWeights().ceiling()
    low = [copy(c) for c in ranked]
    for c in low:
        c.score = c.score * (floor - 1e-3) / ranked[0].score
    answer = extractive_answer(question, result, archive, ranked=low)
    assert answer.text.startswith(answer.values[0].shown), answer.text
    assert answer.citations[0] == answer.values[0].citation
    assert answer.confidence is not None and answer.confidence < 0.5
    assert answer.notice and "uncertain" in answer.notice


def test_a_question_that_matched_a_printed_value_gets_the_value_first(archive: Archive) -> None:
    # the low-scoring case above, with retrieval's first hit once a printed scalar output: the question matched a
    # value as printed, so the value leads (with its own notice) instead of being offered under the place
    from nbrecall.answer.compose import extractive_answer
    from nbrecall.answer.values import ValueWeights, rank_values

    question = "which total ballast volume aft is listed"
    result = archive.search(question)
    ranked = rank_values(read_question(question), result, archive)
    floor = ValueWeights().min_share * ValueWeights().ceiling()
    low = [copy(c) for c in ranked]
    for c in low:
        c.score = c.score * (floor - 1e-3) / ranked[0].score
    for kind, leads_with_value in (("scalar", True), ("text", False)):
        answer = extractive_answer(question, first_hit_as(result, kind), archive, ranked=[copy(c) for c in low])
        assert answer.text.startswith(answer.values[0].shown) is leads_with_value, (kind, answer.text)
        assert answer.citations[0] == (answer.values[0].citation if leads_with_value else answer.places[0])


def test_with_values_leaves_a_place_alone_without_values() -> None:
    place = Answer("q", "In a.ipynb, Cell 1 [a.ipynb › Cell 1]", [Citation("a.ipynb", 1, "c1")], kind="general")
    assert with_values(place, None) is place
    assert with_values(place, Answer("q", "", [], kind="general")) is place


def test_where_answer_names_notebook_section_and_cell(archive: Archive) -> None:
    found = ask(archive, "where did we compute the centre of gravity of the ballast")
    assert found.text.startswith(f"In {BALLAST} (2017, 17-042)")
    assert "Centre of gravity of the ballast" in found.text
    assert (BALLAST, 6) in [(c.notebook, c.cell) for c in found.citations]
    assert f"[{BALLAST} › Cell 6]" in found.text


def test_term_answer_is_the_defining_sentence(archive: Archive) -> None:
    found = ask(archive, "what does metacentric height mean")
    first = "The **metacentric height** GM is the distance from the centre of gravity G to the metacentre M."
    assert found.text.startswith(first), found.text
    assert found.citations[0].notebook == GLOSSARY and found.citations[0].cell == 2
    assert first in cell_text(archive, GLOSSARY, 2)


def test_filters_apply_and_no_match_says_so(archive: Archive) -> None:
    found = ask(archive, "what total ballast volume did we use aft", SearchFilters(year_from=2018, year_to=2018))
    assert BALLAST not in found.text
    for nothing in (ask(archive, "zzzqqq xylophone"), ask(archive, "ballast", SearchFilters(project="99-999"))):
        assert nothing.citations == [] and nothing.notice == "no matching notebook"
        assert nothing.text == "Nothing in the indexed notebooks matches this question."


def test_stream_answer_events(archive: Archive) -> None:
    events = list(stream_answer("what total ballast volume did we use aft", archive, archive.settings))
    kinds = [e.type for e in events]
    assert kinds[-1] == "done" and "token" in kinds and "citation" in kinds
    assert kinds.index("citation") > max(i for i, k in enumerate(kinds) if k == "token")
    text = "".join(e.text for e in events if e.type == "token")
    done = events[-1].answer
    assert done is not None and text == done.text
    payload = events[-1].as_dict()
    assert payload["answer"]["mode"] == "extractive" and payload["answer"]["kind"] == "value"
    first = payload["answer"]["values"][0]
    assert first["notebook"] == BALLAST and first["cell"] == payload["answer"]["citations"][0]["cell"]
    assert {"value", "label", "shown", "unit", "cell_id", "year"} <= set(first)
    assert 0.0 < payload["answer"]["confidence"] < 1.0  # the chance the first value is the one asked for
    assert Answer.from_dict(payload["answer"]).confidence == payload["answer"]["confidence"]


def test_sentences_skip_headings_and_fences() -> None:
    text = "## Title\nFirst one. Second one here.\n\n```python\nx = 1\n```\n* **K** — keel, the reference."
    assert sentences(text) == ["First one.", "Second one here.", "* **K** — keel, the reference."]


# --- the LLM context ---------------------------------------------------------------------------------------


def test_context_is_addressable_and_inside_the_budget(archive: Archive) -> None:
    found = archive.search("what total ballast volume did we use aft")
    context = build_context(found, 3000)
    assert context.text.startswith(f"# Notebook: {BALLAST} · 2017 · project 17-042")
    assert "## Cell [4] · type:code · In[3] · id:" in context.text
    assert "```python\naft = summary.loc['aft', 'volume_m3']" in context.text
    assert "Total ballast aft: 1,284.6 m3" in context.text
    assert context.tokens == count_llm_tokens(context.text) <= 3000
    assert (BALLAST, 4) in context.citable()
    # Room for the matching cell and not much more, measured: cell ids are random, and their token counts vary.
    matching = next(c for c in found.notebooks[0].neighbourhood if c.idx == 4)
    budget = count_llm_tokens(notebook_heading(found.notebooks[0])) + count_llm_tokens(render_cell(matching)) + 12
    small = build_context(found, budget)
    assert small.tokens <= budget and small.cells
    assert (BALLAST, 4) in small.citable()  # the matching cell comes first
    assert TRUNCATED not in small.text  # whole cells only while they fit
    assert small.dropped > 0


def test_context_lists_the_best_values_first_and_they_are_citable(archive: Archive) -> None:
    question = "what ballast volume did we use aft"
    found = archive.search(question)
    context = llm_context(question, found, archive, archive.settings)
    assert context.text.startswith(VALUES_HEADING)
    listed = context.text.split("\n\n", 1)[0]
    assert "1,284.6" in listed or "1284.6" in listed
    assert context.tokens <= archive.settings.answer.context_tokens
    assert count_llm_tokens(listed) <= archive.settings.answer.context_tokens * 0.2
    cited: list[tuple[str, int]] = []
    notebook = None
    for line in listed.splitlines()[1:]:
        if line.startswith("## "):
            notebook = line[3:]  # each notebook's path once, its cells' lines under it
            continue
        m = re.match(r"- Cell (\d+)\b", line)
        assert m is not None and notebook is not None, line
        cited.append((notebook, int(m[1])))
    assert cited and len(set(cited)) == len(cited)  # one line per cell
    assert all(place in context.citable() for place in cited)


def _value_list(values: list, notebook: str, cell: int) -> list[str]:  # type: ignore[type-arg]
    """The value list's lines of a context for one notebook (sha `s1`) found at `cell`."""
    cells = [CellRecord("s1", cell, f"c{cell}", "code", 1, "x = 1", "")]
    found = SearchResult("q", [NotebookResult("s1", notebook, "/r", 1.0, [
        Hit(notebook, "/r", cell, [cell], f"c{cell}", "code", 1.0, "", "", "s1")], neighbourhood=cells)])
    return build_context(found, 3000, values=values).text.split("\n\n", 1)[0].splitlines()


def test_context_lists_the_values_of_a_cell_on_one_line() -> None:
    # the best value's cell also prints the one asked for: both are listed, the cell cited once
    from nbrecall.answer.context import ContextValue

    values = [ContextValue("pump_efficiency = 0.707", "pump.ipynb", "s1", 2, "c2", "Cost"),
              ContextValue("Profit = 42.7", "plant.ipynb", "s2", 9, "c9"),
              ContextValue("The cost is 84033.2", "pump.ipynb", "s1", 2, "c2", "Cost")]
    listed = _value_list(values, "pump.ipynb", 2)
    assert listed[1:] == ["## pump.ipynb", "- Cell 2 (Cost): pump_efficiency = 0.707; The cost is 84033.2",
                          "## plant.ipynb", "- Cell 9: Profit = 42.7"]


def test_context_value_list_names_each_notebook_once_and_the_last_section_only() -> None:
    from nbrecall.answer.context import ContextValue

    values = [ContextValue("a = 1", "long/path/one.ipynb", "s1", 3, "c3", "Title › Method › Results"),
              ContextValue("b = 2", "other.ipynb", "s2", 1, "c1"),
              ContextValue("c = 3", "long/path/one.ipynb", "s1", 7, "c7", "Title › Checks")]
    listed = _value_list(values, "long/path/one.ipynb", 3)
    # notebooks in the order of their best value, a notebook's cells under its one path
    assert listed[1:] == ["## long/path/one.ipynb", "- Cell 3 (Results): a = 1", "- Cell 7 (Checks): c = 3",
                          "## other.ipynb", "- Cell 1: b = 2"]


def _fake_result(cells: list[CellRecord]) -> SearchResult:
    hit = Hit("big.ipynb", "/r", cells[0].idx, [c.idx for c in cells], cells[0].cell_id, "code", 1.0, "", "", "sha1")
    return SearchResult("q", [NotebookResult("sha1", "big.ipynb", "/r", 1.0, [hit], neighbourhood=cells)])


def test_context_cuts_whole_cells_and_truncates_only_a_cell_larger_than_the_budget() -> None:
    small = [CellRecord("sha1", i, f"id{i}", "code", i, f"x{i} = {i}\nprint(x{i})", f"{i}") for i in range(5)]
    context = build_context(_fake_result(small), 120)
    assert context.tokens <= 120
    for cell in context.cells:
        assert render_cell(small[cell.cell]) in context.text  # never cut mid-source
    assert len(context.cells) < 5 and context.dropped == 5 - len(context.cells)

    source = "\n".join(f"value_{i} = compute_something({i}) * {i} + offset_{i}" for i in range(400))
    huge = CellRecord("sha1", 0, "big", "code", 1, source, "out\n" * 50)
    context = build_context(_fake_result([huge]), 500)
    assert context.tokens <= 500
    assert TRUNCATED in context.text and context.cells[0].truncated
    assert "## Cell [0] · type:code · In[1] · id:big" in context.text
    assert "value_0 = compute_something(0)" in context.text


def test_equal_scores_put_the_last_printout_of_a_label_first() -> None:
    # a solver prints `Q_std` at each iteration: both printouts share every signal, the converged one is the answer
    from nbrecall.answer.candidates import RankedFact
    from nbrecall.answer.values import score
    from nbrecall.notebook.facts import Fact

    first = Fact(2, "c2", "1176795.8", "Q_std", "Q_std: 1176795.8", position=0, final=False, number=1176795.8)
    last = Fact(2, "c2", "922210.2", "Q_std", "Q_std: 922210.2", position=1, final=True, number=922210.2)
    cands = [RankedFact(f, "flow.ipynb", "s" * 40, None, 0, signals={"similarity": 0.2, "keyword_raw": 1.0})
             for f in (first, last)]
    hit = Hit("flow.ipynb", "share", 2, [2], "c2", "code", 1.0, "", "", nb_sha="s" * 40)
    nb = NotebookResult("s" * 40, "flow.ipynb", "share", 1.0, [hit], cell_scores={2: 1.0})
    found = SearchResult("converged flow", [nb])
    ranked = score(read_question("converged flow Q_std"), cands, found)
    assert ranked[0].score == ranked[1].score
    assert [c.fact.value for c in ranked] == ["922210.2", "1176795.8"]


@pytest.mark.parametrize(("value", "digits"), [("0.00612", 3), ("1,284.6", 5), ("5e-3", 1), ("1000", 1),
                                                ("3803.0", 5), ("-4.9497", 5), ("(0.52, 7)", 2), ("n/a", 0)])
def test_significant_digits_of_a_printed_value(value: str, digits: int) -> None:
    from nbrecall.answer.values import _significant_digits

    assert _significant_digits(value) == digits


def test_the_form_of_a_value_picks_the_computed_result_among_values_of_the_same_name() -> None:
    # the cell prints a round target and the result it computes under the same name, and a counter starts at 0:
    # every other signal is equal, so without the form signals the earlier cell's round value comes first
    from dataclasses import replace as with_weights

    from nbrecall.answer.candidates import RankedFact
    from nbrecall.answer.values import ValueWeights, score
    from nbrecall.notebook.facts import Fact

    sha = "f" * 40
    facts = [Fact(3, "c3", "0", "pressure drop", "pressure drop: 0", number=0.0),
             Fact(4, "c4", "2000", "pressure drop", "pressure drop: 2000", number=2000.0),
             Fact(5, "c5", "1873.42", "pressure drop", "pressure drop = 1873.42", origin="result", number=1873.42)]
    cands = [RankedFact(f, "pipe.ipynb", sha, None, 0, signals={"similarity": 0.5, "keyword_raw": 1.0})
             for f in facts]
    hits = [Hit("pipe.ipynb", "share", c, [c], f"c{c}", "code", 1.0, "", "", nb_sha=sha) for c in (3, 4, 5)]
    found = SearchResult("q", [NotebookResult(sha, "pipe.ipynb", "share", 1.0, hits,
                                              cell_scores={3: 1.0, 4: 1.0, 5: 1.0})])
    question = read_question("what pressure drop did we get")
    ranked = score(question, [copy(c) for c in cands], found)
    assert [c.fact.value for c in ranked] == ["1873.42", "2000", "0"]
    assert ranked[0].terms["computed"] == 1.0 and ranked[0].terms["result"] == 1.0
    assert ranked[1].terms["printed"] == 1.0 and ranked[2].terms["zero"] == -1.0
    off = with_weights(ValueWeights(), computed=0.0, zero=0.0, result=0.0, printed=0.0)
    assert [c.fact.value for c in score(question, [copy(c) for c in cands], found, off)] == ["0", "2000", "1873.42"]


def test_the_form_of_a_value_does_not_lift_a_value_that_names_nothing_asked() -> None:
    # a computed result whose name shares no word with the question gets no form signal: it cannot overtake a
    # table cell that names what is asked on its form alone (`which line had the highest max tension`)
    from nbrecall.answer.candidates import RankedFact
    from nbrecall.answer.values import score
    from nbrecall.notebook.facts import Fact

    sha = "m" * 40
    util = Fact(2, "c2", "0.603", "util", "util = 0.603", origin="result", number=0.603)
    tension = Fact(1, "c1", "3439.8", "L5 · max_tension_kN", "L5 · max_tension_kN: 3439.8", origin="table",
                   number=3439.8)
    cands = [RankedFact(f, "mooring.ipynb", sha, None, 0, signals={"similarity": 0.3, "keyword_raw": 1.0})
             for f in (util, tension)]
    hits = [Hit("mooring.ipynb", "share", c, [c], f"c{c}", "code", 1.0, "", "", nb_sha=sha) for c in (1, 2)]
    found = SearchResult("q", [NotebookResult(sha, "mooring.ipynb", "share", 1.0, hits, cell_scores={1: 1.0, 2: 1.0})])
    ranked = score(read_question("max tension of the mooring lines"), cands, found)
    by_value = {c.fact.value: c for c in ranked}
    assert all(by_value["0.603"].terms[k] == 0.0 for k in ("computed", "zero", "result", "printed"))
    assert ranked[0].fact.value == "3439.8"


def test_a_label_that_names_the_extreme_asked_for_is_that_extreme() -> None:
    # a cell prints the least and the greatest stress under labels that differ in that word only; the question's
    # "peak" asks for the greatest, and "300 L/min" names a unit, not a least
    from nbrecall.answer.candidates import RankedFact
    from nbrecall.answer.values import score
    from nbrecall.notebook.facts import Fact

    sha = "x" * 40
    low = Fact(4, "c4", "-6.4627", "Minimum value in the domain", "Minimum value in the domain: -6.4627",
               position=0, number=-6.4627)
    high = Fact(4, "c4", "515.881", "Maximum value in the domain", "Maximum value in the domain: 515.881",
                position=1, number=515.881)
    cands = [RankedFact(f, "halfspace.ipynb", sha, None, 0, signals={"similarity": 0.1, "keyword_raw": 1.0})
             for f in (low, high)]
    hits = [Hit("halfspace.ipynb", "share", 4, [4], "c4", "code", 1.0, "", "", nb_sha=sha)]
    found = SearchResult("q", [NotebookResult(sha, "halfspace.ipynb", "share", 1.0, hits, cell_scores={4: 1.0})])
    ranked = score(read_question("peak von Mises stress in the section"), [copy(c) for c in cands], found)
    assert [(c.fact.value, c.terms["extreme"]) for c in ranked] == [("515.881", 1.0), ("-6.4627", 0.0)]
    assert score(read_question("lowest stress in the section"), [copy(c) for c in cands], found)[0].fact.value \
        == "-6.4627"
    assert read_question("pressure drop across the check valve at 300 L/min").extreme is None
    assert read_question("stress after 10 min").extreme is None
    assert read_question("min stress in the section").extreme == "min"


def test_what_a_printed_quantity_is_of_names_it() -> None:
    # one line prints two quantities under one label and unit; only what each is "of" tells them apart
    from nbrecall.answer.candidates import RankedFact
    from nbrecall.answer.values import score
    from nbrecall.notebook.facts import Fact

    sha = "w" * 40
    corn = Fact(5, "c5", "53.12", "We should plant", "We should plant 53.12 roods of corn", unit="roods",
                position=0, number=53.12)
    wheat = Fact(5, "c5", "21.88", "We should plant", "21.88 roods of wheat", unit="roods", position=1,
                 number=21.88)
    cands = [RankedFact(f, "farm.ipynb", sha, None, 0, signals={"similarity": 0.3, "keyword_raw": 1.0})
             for f in (corn, wheat)]
    hits = [Hit("farm.ipynb", "share", 5, [5], "c5", "code", 1.0, "", "", nb_sha=sha)]
    found = SearchResult("q", [NotebookResult(sha, "farm.ipynb", "share", 1.0, hits, cell_scores={5: 1.0})])
    assert score(read_question("how much of the land goes to wheat"), [copy(c) for c in cands], found)[0] \
        .fact.value == "21.88"
    assert score(read_question("how much of the land goes to corn"), [copy(c) for c in cands], found)[0] \
        .fact.value == "53.12"


def test_a_constant_the_code_sets_does_not_beat_what_its_cell_prints() -> None:
    # the cell sets `pump_efficiency = 0.707` and prints the cost it computes: the constant is closer to the
    # question's words ("pump"), the printed cost is what the question asks about (its subject: the cost)
    from nbrecall.answer.candidates import RankedFact
    from nbrecall.answer.values import ValueWeights, score
    from nbrecall.notebook.facts import Fact

    sha = "p" * 40
    given = Fact(2, "c2", "0.707", "pump_efficiency", "pump_efficiency = 0.707", origin="input", number=0.707)
    cost = Fact(2, "c2", "84033.2", "The cost", "The cost is 84033.2", origin="line", number=84033.2)
    other = Fact(5, "c5", "0.9", "motor efficiency", "motor efficiency = 0.9", origin="input", number=0.9)
    cands = [RankedFact(given, "pump.ipynb", sha, None, 0, signals={"similarity": 1.0, "keyword_raw": 1.0}),
             RankedFact(cost, "pump.ipynb", sha, None, 0, signals={"similarity": 0.0, "keyword_raw": 1.0}),
             RankedFact(other, "pump.ipynb", sha, None, 0, signals={"similarity": 0.0, "keyword_raw": 1.0})]
    hit = Hit("pump.ipynb", "share", 2, [2], "c2", "code", 1.0, "", "", nb_sha=sha)
    found = SearchResult("cost", [NotebookResult(sha, "pump.ipynb", "share", 1.0, [hit], cell_scores={2: 1.0})])
    question = read_question("annual cost of running the pump")
    off = score(question, [copy(c) for c in cands], found, ValueWeights(shown_first=0.0))
    assert off[0].fact.label == "pump_efficiency"  # without the rule the constant wins on its words
    on = ValueWeights(shown_first=1.0)  # off by default (bench/README.md): settable for an archive it helps
    ranked = score(question, [copy(c) for c in cands], found, on)
    assert [c.fact.label for c in ranked[:2]] == ["The cost", "pump_efficiency"]
    # a constant whose name holds the question's subject still answers a question about that constant
    asked = score(read_question("pump efficiency used for the annual cost"), [copy(c) for c in cands], found, on)
    assert asked[0].fact.label == "pump_efficiency"


def test_an_excluded_method_counts_against_the_cell_that_uses_it_not_the_prose_that_names_it() -> None:
    # "… rather than ISO": the ISO cell's code uses ISO; the markdown above the Hollingshead cell names ISO only to
    # set it aside ("outside the range of the ISO formula, we turn to …"), which is no evidence against its value
    from nbrecall.answer.candidates import RankedFact
    from nbrecall.answer.values import score
    from nbrecall.notebook.facts import Fact

    sha = "o" * 40
    iso = Fact(4, "c4", "88.0", "Flow rate is", "Flow rate is: 88.0", code='print(f"Flow rate is: {Q}")',
               number=88.0)
    laminar = Fact(6, "c6", "77.2", "Flow rate is", "Flow rate is: 77.2", code='print(f"Flow rate is: {Q}")',
                   sentence="Outside the range of the ISO formula, we turn to the Hollingshead data.", number=77.2)
    sources = {4: 'm = solve(D, meter_type="ISO 5167 orifice")', 6: 'm = solve(D, meter_type="Hollingshead orifice")'}
    cands = [RankedFact(f, "orifice.ipynb", sha, None, 0, sources[f.cell],
                        signals={"similarity": 0.5, "keyword_raw": 1.0}) for f in (iso, laminar)]
    hits = [Hit("orifice.ipynb", "share", c, [c], f"c{c}", "code", 1.0, "", "", nb_sha=sha) for c in (4, 6)]
    found = SearchResult("q", [NotebookResult(sha, "orifice.ipynb", "share", 1.0, hits, cell_scores={4: 1.0, 6: 1.0})])
    ranked = score(read_question("orifice flow rate in laminar flow rather than ISO"), cands, found)
    assert [c.fact.value for c in ranked] == ["77.2", "88.0"]
    assert ranked[0].terms["excluded"] == 0.0 and ranked[1].terms["excluded"] == -1.0


def test_a_value_score_is_its_weights_times_the_terms_it_records() -> None:
    # `RankedFact.terms` is what each `ValueWeights` field multiplies (bench/answer_fit.py fits on it): doubling
    # one weight moves a score by exactly that term, and the outside penalty scales the sum
    from dataclasses import replace as with_weights

    from nbrecall.answer.candidates import RankedFact
    from nbrecall.answer.values import TERMS, ValueWeights, score
    from nbrecall.notebook.facts import Fact

    sha = "t" * 40
    facts = [Fact(2, "c2", "3803.0", "total_ballast", "total_ballast = 3803.0", number=3803.0),
             Fact(3, "c3", "12", "n_tanks", "n_tanks = 12", origin="input", number=12.0)]
    cands = [RankedFact(f, "b.ipynb", sha, None, 0, signals={"similarity": 0.4, "keyword_raw": 1.0}) for f in facts]
    cands.append(RankedFact(facts[0], "c.ipynb", "u" * 40, None, None, signals={"similarity": 0.4, "keyword_raw": 0.5}))
    hit = Hit("b.ipynb", "share", 2, [2], "c2", "code", 1.0, "", "", nb_sha=sha)
    found = SearchResult("q", [NotebookResult(sha, "b.ipynb", "share", 1.0, [hit], cell_scores={2: 1.0})])
    question = read_question("what total ballast did we use")
    weights = ValueWeights(shown_first=0.0)
    base = score(question, [copy(c) for c in cands], found, weights)
    for c in base:
        outside = weights.outside if c.rank is None else 1.0
        expected = sum(getattr(weights, k) * v for k, v in c.terms.items()) * outside
        assert abs(c.score - expected) < 1e-9
    doubled = score(question, [copy(c) for c in cands], found, with_weights(weights, label=2 * weights.label))
    def key(c: RankedFact) -> tuple[str, str]:
        return c.notebook, c.fact.label

    for before, after in zip(sorted(base, key=key), sorted(doubled, key=key), strict=True):
        outside = weights.outside if before.rank is None else 1.0
        assert abs(after.score - before.score - weights.label * before.terms["label"] * outside) < 1e-9
    assert any(c.terms["label"] > 0 for c in base) and any(c.terms["input"] == -1.0 for c in base)
    assert all(tuple(c.terms) == TERMS for c in base)  # the names bench/answer_fit.py fits, in order


def test_a_question_that_names_the_unit_of_the_best_value_asks_for_that_value() -> None:
    # no interrogative, and the best value's name covers little of the question and is not in retrieval's first
    # chunk: the place comes first, unless the question names the unit printed with the value ("… in standard
    # cubic feet per hour" for `Q_std: 922210.2 foot ** 3 / hour`)
    from nbrecall.answer.candidates import RankedFact
    from nbrecall.answer.compose import _found, _value_fits
    from nbrecall.answer.values import ValueWeights
    from nbrecall.notebook.facts import Fact

    fact = Fact(3, "c3", "922210.2", "Q_std", "Q_std: 922210.2 foot ** 3 / hour", unit="foot ** 3 / hour")
    cand = RankedFact(fact, "gas.ipynb", "s" * 64, None, 0, signals={"subject": 0.2, "label": 0.3})
    hit = Hit("gas.ipynb", "/r", 1, [1], "c1", "text", 1.0, "", "", nb_sha="s" * 64)
    found = SearchResult("q", [NotebookResult("s" * 64, "gas.ipynb", "/r", 1.0, [hit])])
    question = read_question("converged flow of the vented gas in standard cubic feet per hour")
    value = Answer(question.text, "", [], values=[_found(cand)], kind=question.kind)
    assert question.kind != "value"  # no interrogative: the evidence decides
    cand.terms = {"unit": 0.0}
    assert not _value_fits(question, found, value, [cand])
    cand.terms = {"unit": 1.0}
    assert _value_fits(question, found, value, [cand])
    assert not _value_fits(question, found, value, [cand], ValueWeights(named_unit=0.0))  # the ablation's "off"


def test_context_values_fill_what_the_cells_leave_and_never_take_their_room() -> None:
    from nbrecall.answer.context import VALUES_SHARE, ContextValue, _values_block
    from nbrecall.convert.tokens import count_llm_tokens

    values = [ContextValue(f"result_{i} = {i}.5", "big.ipynb", "sha1", 100 + i, f"c{100 + i}", "Results")
              for i in range(80)]
    budget = 600
    share_block, share_listed = _values_block(values, int(budget * VALUES_SHARE))

    def shown(context_text: str) -> int:
        return sum(1 for v in values if f"{v.shown};" in context_text or f"{v.shown}\n" in context_text
                   or context_text.endswith(v.shown))

    # one short cell leaves most of the budget: the value list grows into it, the cell stays whole
    few = [CellRecord("sha1", 0, "id0", "code", 1, "x = 1\nprint(x)", "1")]
    roomy = build_context(_fake_result(few), budget, values=values)
    assert shown(roomy.text) > len(share_listed)
    assert roomy.tokens <= budget and render_cell(few[0]) in roomy.text

    # cells that fill the budget keep exactly the cells they had; the values get their share and the crumbs
    many = [CellRecord("sha1", i, f"id{i}", "code", i, f"y{i} = {i} * 2\nprint(y{i})", f"{2 * i}") for i in range(80)]
    full = build_context(_fake_result(many), budget, values=values)
    alone = build_context(_fake_result(many), budget - count_llm_tokens(share_block) - 2)
    assert [c.cell for c in full.cells if c.cell_type != "value"] == [c.cell for c in alone.cells]
    assert len(share_listed) <= shown(full.text) < shown(roomy.text) and full.tokens <= budget


def test_only_the_best_cells_take_the_value_share_and_the_others_only_fill_what_is_left() -> None:
    from nbrecall.answer.context import ContextValue

    values = [ContextValue(f"result_{i} = {i}.5", "big.ipynb", "sha1", 100 + i, f"c{100 + i}", "Results")
              for i in range(20)]
    many = [CellRecord("sha1", i, f"id{i}", "code", i, f"y{i} = {i} * 2\nprint(y{i})", f"{2 * i}") for i in range(80)]
    few = [CellRecord("sha1", 0, "id0", "code", 1, "x = 1\nprint(x)", "1")]

    def listed(context_text: str) -> list[int]:
        return [i for i in range(20) if f"Cell {100 + i}" in context_text]

    # cells that fill the budget keep the room they have beside the two best cells' values: the others get crumbs
    shared = build_context(_fake_result(many), 600, values=values, share_cells=2)
    two = build_context(_fake_result(many), 600, values=values[:2])
    assert [c.cell for c in shared.cells if c.cell_type != "value"] == [c.cell for c in two.cells
                                                                         if c.cell_type != "value"]
    assert listed(two.text) == [0, 1] and listed(shared.text)[:2] == [0, 1] and shared.tokens <= 600
    unlimited = build_context(_fake_result(many), 600, values=values)
    assert len([c for c in unlimited.cells if c.cell_type != "value"]) < len(
        [c for c in shared.cells if c.cell_type != "value"])  # twenty cells' values in the share cost cells
    # room the cells leave is filled from further down the ranking
    assert len(listed(build_context(_fake_result(few), 600, values=values, share_cells=2).text)) > 2


def test_an_error_pasted_as_the_question_gets_the_cell_that_raised_it(archive: Archive) -> None:
    # keywords whose best value leads on its own confidence; once retrieval's first hit is an error output, the
    # question is the error as printed: the cell comes first, the values under it
    from nbrecall.answer.compose import extractive_answer

    question = "total ballast volume"
    result = archive.search(question)
    plain = extractive_answer(question, result, archive)
    assert plain.values and plain.text.startswith(plain.values[0].shown)  # the value leads
    pasted = extractive_answer(question, first_hit_as(result, "error"), archive)
    assert pasted.text.startswith("In ") and pasted.citations[0] == pasted.places[0]
    assert "Printed values that may answer it" in pasted.text and pasted.values


def test_a_question_quoting_an_exception_gets_the_place_first(archive: Archive) -> None:
    # the same keywords, now quoting an exception class: an error pasted in asks where it was raised
    from nbrecall.answer.compose import extractive_answer

    assert read_question("KeyError: total ballast volume").error
    assert not read_question("total ballast volume, mean squared error").error
    question = "KeyError: total ballast volume"
    answer = extractive_answer(question, archive.search(question), archive)
    assert answer.text.startswith("In ") and answer.citations[0] == answer.places[0]


def test_the_value_list_leaves_out_values_of_cells_sent_whole_but_the_best_ones() -> None:
    from nbrecall.answer.context import ContextValue

    cells = [CellRecord("sha1", i, f"id{i}", "code", i, f"y{i} = {i} * 2\nprint(y{i})", f"{2 * i}") for i in range(6)]
    # the best value is in a cell that is sent, so are the next two; twenty more are in cells that are not
    values = [ContextValue(f"y{i} = {2 * i}", "big.ipynb", "sha1", i, f"id{i}", "Results") for i in range(3)]
    values += [ContextValue(f"result_{i} = {i}.5", "big.ipynb", "sha1", 100 + i, f"c{100 + i}", "Results")
               for i in range(20)]
    budget = 330
    context = build_context(_fake_result(cells), budget, values=values)
    block = context.text.split("\n\n# Notebook: ", 1)[0]
    sent = {c.cell for c in context.cells if c.cell_type != "value"}
    assert {0, 1, 2} <= sent and context.tokens <= budget
    assert "- Cell 0 (Results): y0 = 0" in block  # the pointer to the likely answer stays
    assert "Cell 1 " not in block and "Cell 2 " not in block  # read whole below: not listed again
    without = sum(f"Cell {100 + i} " in block for i in range(20))
    # the tokens the two lines took list values of cells the model would not see otherwise
    repeated = build_context(_fake_result(cells), budget, values=values[:1] + values[3:])
    assert without >= sum(f"Cell {100 + i} " in repeated.text for i in range(20)) > 0
