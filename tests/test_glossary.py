"""What a notebook says its variables are (`answer.glossary`), and a value named by a symbol found through it."""

from __future__ import annotations

from copy import copy
from pathlib import Path

from nbformat import v4

from conftest import HashEmbedder, code, result, stream, write_nb
from nbrecall.answer.answer import answer
from nbrecall.answer.candidates import RankedFact
from nbrecall.answer.glossary import meaning_of, symbol_glossary, symbol_key
from nbrecall.answer.question import read_question
from nbrecall.answer.values import ValueWeights, score
from nbrecall.config import Settings
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index
from nbrecall.notebook.facts import Fact
from nbrecall.search.retrieve import Hit, NotebookResult, SearchResult
from nbrecall.service import Archive


def test_a_symbol_has_one_key_however_code_and_latex_write_it() -> None:
    assert symbol_key("tau_I") == symbol_key("tauI") == symbol_key("\\tau_{I}") == "taui"
    assert symbol_key("K_u") == symbol_key("Ku") == "ku"
    assert symbol_key("\\mathrm{Re}") == "re"


def test_comments_on_assignments_and_markdown_definitions_explain_symbols() -> None:
    cells = [
        ("markdown", "The flow is set by the pump. Here $q_s$ is the suspension inflow, and $V$ = tank volume."),
        ("code", 'qs = qs_bar  # inlet flow of suspension\nlabel = "# not a comment"\nKp, Ki = 1.0, 0.2  # gains\n'
                 "x = compute(x)\n# a comment on no assignment\nqa = 5\n"),
        ("code", "qs = 2  # a later comment: the first explanation wins\n"),
        ("raw", "$z$ is ignored in raw cells"),
    ]
    glossary = symbol_glossary(cells)
    assert glossary["qs"] == "the suspension inflow"  # the markdown came first in the notebook
    assert glossary["v"] == "tank volume"
    assert glossary["kp"] == glossary["ki"] == "gains"
    assert "label" not in glossary and "x" not in glossary and "qa" not in glossary and "z" not in glossary


def test_a_name_the_commented_line_copies_means_what_the_comment_says() -> None:
    # `qs = qs_bar  # …`: one quantity under two names (the steady value printed, the variable simulated)
    glossary = symbol_glossary([("code", "qs = qs_bar  # inlet flow of suspension\n")])
    assert meaning_of(["qs_bar"], glossary) == "inlet flow of suspension"
    assert meaning_of(["qs_0", "qs"], glossary) == "inlet flow of suspension"
    assert meaning_of(["qs", "qs_bar"], glossary) == "inlet flow of suspension"  # said once
    assert meaning_of(["v10"], glossary) == ""
    # a name is not a variant of another by its spelling: `x_0` is the initial height, not `x`
    assert meaning_of(["x"], symbol_glossary([("code", "x_0 = 5.0  # initial height\n")])) == ""


def test_a_code_cell_that_does_not_tokenize_is_read_line_by_line() -> None:
    cells = [("code", 's = """\nh = 3  # inside a string\n"""\nh = 4  # head in metres\n')]
    glossary = symbol_glossary(cells)
    assert glossary["h"] in ("inside a string", "head in metres")  # a line read alone cannot tell; nothing raises


def test_a_value_printed_under_a_symbol_is_found_by_what_the_notebook_says_it_is() -> None:
    # `qs [liters/hr] = 120.0` and `Steady State Composition = 0.512`: the question asks for the suspension flow,
    # which only the comment on `qs = qs_bar` says; without it, the composition's word ("steady") wins
    sha = "g" * 40
    flow = Fact(17, "c17", "120.0", "qs [liters/hr]", "qs [liters/hr] = 120.0", names="qs_bar", number=120.0)
    comp = Fact(17, "c17", "0.512", "Steady State Composition", "Steady State Composition = 0.512", names="x",
                number=0.512)  # as many significant digits as the flow: the value's form does not decide
    glossary = symbol_glossary([("code", "qs = qs_bar  # inlet flow of suspension\n")])
    cands = [RankedFact(f, "blend.ipynb", sha, None, 0, signals={"similarity": 0.3, "keyword_raw": 1.0},
                        meaning=meaning_of(f.names.split(), glossary)) for f in (comp, flow)]
    hit = Hit("blend.ipynb", "share", 17, [17], "c17", "code", 1.0, "", "", nb_sha=sha)
    found = SearchResult("q", [NotebookResult(sha, "blend.ipynb", "share", 1.0, [hit], cell_scores={17: 1.0})])
    question = read_question("steady suspension flow into the blending tank")
    ranked = score(question, [copy(c) for c in cands], found)
    assert ranked[0].fact.value == "120.0"
    off = score(question, [copy(c) for c in cands], found, ValueWeights(glossary=0.0))
    assert off[0].fact.value == "0.512"


def test_an_answer_says_what_the_notebook_says_its_symbol_is(tmp_path: Path) -> None:
    # the relay test prints `Ku` alone: the question's words ("ultimate gain") are only in the comment where `Ku`
    # is set; the answer gives the value, cites its cell and says what the notebook says `Ku` is
    root = tmp_path / "share"
    write_nb(root / "lab/relay_tuning.ipynb", [
        v4.new_markdown_cell("# Relay feedback test on the heater\nAmplitude and period read off the plot."),
        code("h = 20\na = 1.5\nPu = 140  # period of the oscillation [s]\nKu = 4*h/(a*3.14)  # ultimate gain", 1),
        code("Ku", 2, [result("16.985138004246284", 2)]),
        code("Kp = Ku/2\nprint(Kp)", 3, [stream("8.49\n")]),
    ])
    settings = Settings(index_dir=tmp_path / "idx")
    embedder = HashEmbedder()
    run_index([root], settings, embedder, LanceStore(settings.index_dir / "lance", embedder.dim))
    archive = Archive(settings, _embedder=embedder)
    found = answer("what ultimate gain did we get from the relay test", archive, settings)
    assert found.values and found.values[0].value == "16.985138004246284"
    assert found.citations[0].cell == 2
    assert found.values[0].meaning == "ultimate gain"
    assert found.values[0].as_dict()["meaning"] == "ultimate gain"
    assert "the notebook says: “ultimate gain”" in found.text.splitlines()[0]


def test_a_comment_on_a_line_that_loads_builds_or_selects_says_what_the_line_does() -> None:
    glossary = symbol_glossary([("code", 'df = pd.read_csv("wells.csv")  # read the file\n'
                                         "model = LinearRegression()  # instantiate the model\n"
                                         'por = df["Por"].values  # extract the porosity\n'
                                         "fit = train(X, y, epochs=5)  # fit the network\n"
                                         "c = np.sqrt(g * h)  # wave celerity\n")])
    assert glossary == {"c": "wave celerity"}


def test_an_answer_says_the_meaning_only_where_the_printout_does_not() -> None:
    # a constant's comment is its printout already (`w1 = 500.0  # stream 1, kg/min`): nothing to add to it
    from nbrecall.answer.compose import pick_values, value_answer

    sha = "w" * 40
    given = Fact(3, "c3", "500.0", "w1 (stream 1, kg/min)", "w1 = 500.0  # stream 1, kg/min", origin="input",
                 number=500.0)
    cand = RankedFact(given, "mix.ipynb", sha, None, 0, meaning="stream 1, kg/min", score=1.0,
                      signals={"label": 1.0})
    hit = Hit("mix.ipynb", "share", 3, [3], "c3", "code", 1.0, "", "", nb_sha=sha)
    found = SearchResult("q", [NotebookResult(sha, "mix.ipynb", "share", 1.0, [hit], cell_scores={3: 1.0})])
    answered = value_answer(read_question("what stream 1 flow did we use"), found, None,  # type: ignore[arg-type]
                            None, ranked=pick_values([cand]))
    assert answered is not None and answered.values[0].meaning == ""
    assert "the notebook says" not in answered.text
