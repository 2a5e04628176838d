"""The learned order of value candidates: its features, the bundled model, and the setting that turns it off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbrecall.answer import rerank as rerank_module
from nbrecall.answer.candidates import RankedFact
from nbrecall.answer.rerank import (
    FEATURES,
    TOP,
    RankerModelError,
    features,
    model_scores,
    number_digits,
    ordered_values,
    rerank,
)
from nbrecall.answer.values import TERMS
from nbrecall.notebook.facts import Fact


def candidate(value: str, *, cell: int = 1, nb: str = "a", origin: str = "line", score: float = 2.0,
              rank: int | None = 0, label: str = "x", unit: str = "") -> RankedFact:
    fact = Fact(cell=cell, cell_id=f"c{cell}", value=value, label=label, shown=f"{label} = {value}", unit=unit,
                origin=origin)
    terms = dict.fromkeys(TERMS, 0.0) | {"similarity": 0.5, "notebook": 1.0 if rank == 0 else 0.5}
    return RankedFact(fact=fact, notebook=f"{nb}.ipynb", nb_sha=nb, year=None, rank=rank, terms=terms, score=score)


@pytest.mark.parametrize(("value", "digits"), [
    ("282.798193", 9), ("10.0000", 1), ("0.0061", 2), ("-1,284.6", 5), ("3.2e-05", 2), ("0", 0), ("n/a", 0),
])
def test_number_digits_say_how_round_the_leading_number_is(value: str, digits: int) -> None:
    assert number_digits(value) == digits


def test_features_describe_each_candidate_among_its_rivals() -> None:
    ranked = [candidate("282.798193", score=3.0, origin="table"), candidate("10.0000", score=2.5, origin="table"),
              candidate("0", cell=4, nb="b", rank=None, score=1.0, unit="m")]
    rows = features(ranked)
    assert rows.shape == (3, len(FEATURES)) and rows.dtype == np.float32
    col = {name: i for i, name in enumerate(FEATURES)}
    assert rows[:, col["origin_table"]].tolist() == [1.0, 1.0, 0.0]
    assert rows[:, col["gap"]].tolist() == [0.0, 0.5, 2.0]
    assert rows[:, col["cell_candidates"]].tolist() == [2.0, 2.0, 1.0]  # two rivals share cell 1 of notebook a
    assert rows[:, col["rank_in_notebook"]].tolist() == [0.0, 1.0, 0.0]
    assert rows[:, col["notebook_rank"]].tolist() == [0.0, 0.0, 9.0]  # found by the fact search alone
    assert rows[:, col["digits"]].tolist() == [9.0, 1.0, 0.0]
    assert rows[:, col["zero"]].tolist() == [0.0, 0.0, 1.0] and rows[2, col["has_unit"]] == 1.0


def test_features_count_the_other_candidates_showing_the_same_value() -> None:
    """The same number shown in several cells or notebooks (`3803.0` printed, `3,803` in a table) is one value
    with support; the best-scored of them leads its group, the others trail it by their score gap."""
    ranked = [candidate("3803.0", score=3.0), candidate("1284.6", cell=2, score=2.8),
              candidate("3,803", cell=3, nb="b", score=2.0, origin="table"), candidate("n/a", cell=4, score=1.0)]
    rows = features(ranked)
    col = {name: i for i, name in enumerate(FEATURES)}
    assert rows[:, col["same_value"]].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert rows[:, col["same_value_best"]].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_the_bundled_model_reads_exactly_these_features() -> None:
    """A feature added or removed without retraining (`bench/ranker_fit.py`) fails here, not in a user's answer."""
    session = rerank_module._session()
    assert session.get_inputs()[0].shape[1] == len(FEATURES)
    scores = model_scores(features([candidate("1.5"), candidate("2.25", cell=2, score=1.5)]))
    assert scores.shape == (2,) and np.isfinite(scores).all()


def test_rerank_reorders_the_first_candidates_only_and_keeps_each_score() -> None:
    ranked = [candidate(f"{i}.5", cell=i, score=5.0 - i * 0.01) for i in range(TOP + 5)]
    again = rerank(ranked)
    assert sorted(id(c) for c in again) == sorted(id(c) for c in ranked)
    assert again[TOP:] == ranked[TOP:]  # past the first TOP, the score's order
    assert {c.score for c in again} == {c.score for c in ranked}  # each keeps its own score
    assert rerank(ranked) == again  # deterministic
    assert rerank(ranked[:1]) == ranked[:1] and rerank([]) == []


def test_the_setting_turns_the_learned_order_off(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = candidate("1.5", score=2.0), candidate("2.25", cell=2, score=1.9)
    monkeypatch.setattr(rerank_module, "rank_values", lambda *a, **k: [first, second])
    monkeypatch.setattr(rerank_module, "rerank", lambda ranked, weights=None, model="": list(reversed(ranked)))

    class Settings:
        class answer:  # noqa: N801 - the shape of `Settings.answer`
            rerank = True
            ranker_model = ""

    class Archive:
        settings = Settings()

    archive = Archive()
    assert ordered_values(None, None, archive) == [second, first]  # type: ignore[arg-type]
    archive.settings.answer.rerank = False
    assert ordered_values(None, None, archive) == [first, second]  # type: ignore[arg-type]


def _narrow_model(path: Path) -> Path:
    """A valid ONNX model that reads 3 features, not `FEATURES`."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["features"], ["score"])], "narrow",
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("score", TensorProto.FLOAT, [None, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def test_a_model_that_cannot_be_used_is_an_error_naming_the_file(tmp_path: Path) -> None:
    rows = np.zeros((1, len(FEATURES)), dtype=np.float32)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    with pytest.raises(RankerModelError, match=r"garbage\.onnx: not a model nbrecall can run .*rerank = false"):
        model_scores(rows, str(garbage))
    narrow = _narrow_model(tmp_path / "narrow.onnx")
    with pytest.raises(RankerModelError, match=rf"narrow\.onnx: the model reads 3 features .* {len(FEATURES)}"):
        model_scores(rows, str(narrow))


def test_ask_says_which_model_it_cannot_use_and_exits_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from nbrecall.cli import app
    from nbrecall.cli import ask as ask_module

    def refuse(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise RankerModelError(f"{tmp_path}/narrow.onnx: the model reads 3 features and this nbrecall computes 41")
        yield  # a generator, as stream_answer

    monkeypatch.setenv("NBRECALL_SERVER", "off")
    monkeypatch.setattr(ask_module, "_open_archive", lambda settings: object())
    monkeypatch.setattr("nbrecall.answer.answer.stream_answer", refuse)
    result = CliRunner().invoke(app, ["ask", "what ballast volume", "--index", str(tmp_path)])
    assert result.exit_code == 2 and "narrow.onnx" in result.output and "reads 3 features" in result.output
