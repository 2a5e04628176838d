"""Value facts in a table of their own (`index.fact_table`): written with the chunks, kept consistent with them on
replace, delete and the stray sweep, found by keyword, shown as fact hits; an index of the old layout (facts as
chunk rows) opens and is moved over by its next run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from nbformat import v4

from conftest import HashEmbedder, code, result, write_nb
from nbrecall.config import Settings
from nbrecall.index import store as store_module
from nbrecall.index.fact_table import FactTable, dequantise, quantise
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest import build as build_module
from nbrecall.ingest.pipeline import run_index
from nbrecall.records import FACT_KIND, ChunkRow, SearchFilters, StoreQuery
from nbrecall.service import Archive

DIM = 8


def _row(chunk_id: str, nb: str, kind: str, text: str, cell: int = 0, vector: list[float] | None = None) -> ChunkRow:
    return ChunkRow(chunk_id=chunk_id, nb_sha=nb, notebook=f"{nb}.ipynb", root="/r", kind=kind, cells=[cell],
                    cell_ids=[f"c{cell}"], anchor=cell, anchor_id=f"c{cell}", heading="", text=text, year=2020,
                    project="p", author="", tags=[], deprecated=False, stale=False, health=1.0,
                    vector=np.asarray(vector, dtype=np.float32) if vector is not None else None)


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _chunk_kinds(store: LanceStore) -> list[str]:
    return sorted(store.table.search().select(["kind"]).limit(None).to_arrow()["kind"].to_pylist())


def test_int8_codes_keep_the_cosine() -> None:
    for seed in range(20):
        a, b = _unit(seed), _unit(seed + 100)
        codes = quantise(a, DIM)
        assert codes is not None and codes.dtype == np.int8
        restored = dequantise(codes)
        assert restored is not None
        assert abs(float(np.dot(restored, b)) - float(np.dot(a, b))) < 0.02
    assert quantise(np.full(DIM, np.nan), DIM) is None and quantise(np.ones(DIM + 1), DIM) is None


def test_facts_go_to_their_table_and_follow_replace_and_delete(tmp_path: Path) -> None:
    store = LanceStore(tmp_path / "lance", DIM)
    store.append_notebooks([
        _row("a-00000", "a", "code", "ballast = plan.sum() total ballast volume", 1, list(_unit(1))),
        _row("a-00001", "a", FACT_KIND, "total_ballast = 3803.0 m3", 1, list(_unit(2))),
        _row("b-00000", "b", "text", "mooring line tensions", 2),
        _row("b-00001", "b", FACT_KIND, "max_tension_kN = 812", 2),
    ])
    store.finish_run()
    assert _chunk_kinds(store) == ["code", "text"]  # no fact in the chunk table
    assert store.facts.count() == 2 and store.count() == 4
    assert store.notebook_shas() == {"a": 2, "b": 2}

    found = store.search_facts(StoreQuery("total ballast", _unit(2), 10, SearchFilters()))
    assert [h.row["chunk_id"] for h in found] == ["a-00001"]
    assert found[0].row["kind"] == FACT_KIND and found[0].row["cells"] == [1] and found[0].row["anchor"] == 1
    assert found[0].similarity == pytest.approx(1.0, abs=0.02)  # re-scored with its stored (int8) vector
    assert all(h.row["kind"] != FACT_KIND for h in store.search(StoreQuery("total ballast", None, 10, SearchFilters())))

    # vectors that come later (phase 2) reach the fact table too
    store.set_vectors({"b-00001": _unit(3), "b-00000": _unit(4)})
    vectors = store.fact_vectors(["b"])
    assert set(vectors) == {"b-00001"}
    assert float(np.dot(vectors["b-00001"], _unit(3))) > 0.99
    assert set(store.vectors(SearchFilters(notebooks=["b"]))) == {"b-00000"}

    # a changed notebook: its old facts go, its new ones come, in both tables
    store.replace_notebooks(["a"], [_row("a-00000", "a", "code", "ballast plan", 1),
                                    _row("a-00002", "a", FACT_KIND, "aft = 1284.6 m3", 1)])
    store.finish_run()
    ids = sorted(store.facts.table.search().select(["chunk_id"]).limit(None).to_arrow()["chunk_id"].to_pylist())
    assert ids == ["a-00002", "b-00001"]
    assert [h.row["chunk_id"] for h in store.search_facts(StoreQuery("aft", None, 10, SearchFilters()))] == ["a-00002"]
    assert store.search_facts(StoreQuery("3803.0", None, 10, SearchFilters())) == []

    # filters apply to facts (the notebooks of an answer, deprecated, project)
    assert store.search_facts(StoreQuery("aft", None, 10, SearchFilters(notebooks=["b"]))) == []
    assert store.search_facts(StoreQuery("aft", None, 10, SearchFilters(project="other"))) == []

    store.delete_notebooks(["a"])
    assert store.notebook_shas() == {"b": 2}
    store.replace_notebooks(["b"], [])
    assert store.notebook_shas() == {} and store.facts.count() == 0


def _notebooks(root: Path) -> None:
    write_nb(root / "ballast.ipynb", [
        v4.new_markdown_cell("# Ballast plan\nBallast water per tank for the transit condition."),
        code("aft = 1284.6\nfore = 2518.4\ntotal_ballast = aft + fore\nprint('total_ballast =', total_ballast)", 1,
             [v4.new_output("stream", name="stdout", text="total_ballast = 3803.0\n")]),
        code("draft = 7.25\ndraft", 2, [result("7.25", 2)]),
    ])
    write_nb(root / "mooring.ipynb", [
        v4.new_markdown_cell("# Mooring lines\nQuasi-static tensions."),
        code("mbl_kN = 4120\nmbl_kN", 1, [result("4120", 1)]),
    ])


def _index(root: Path, index: Path) -> Settings:
    settings = Settings(index_dir=index)
    embedder = HashEmbedder()
    run_index([root], settings, embedder, LanceStore(index / "lance", embedder.dim))
    return settings


def test_search_shows_fact_hits_from_the_fact_table(tmp_path: Path) -> None:
    _notebooks(tmp_path / "share")
    settings = _index(tmp_path / "share", tmp_path / "idx")
    archive = Archive(settings, _embedder=HashEmbedder())
    store = archive.store
    assert isinstance(store, LanceStore)
    assert FACT_KIND not in _chunk_kinds(store) and store.facts.count() > 0
    hits = archive.search("what was the total ballast").hits(30)
    facts = [h for h in hits if h.kind == FACT_KIND]
    assert facts, [h.kind for h in hits]
    shown = facts[0].contract()
    assert shown["notebook"] == "ballast.ipynb" and shown["fact"] is not None
    assert shown["cell_id"] and shown["heading"] == "Ballast plan"  # completed from the manifest
    # the answerer ranks the facts retrieval found (`SearchResult.fact_hits`: no second search)
    result = archive.search("what was the total ballast")
    sha = result.notebooks[0].nb_sha
    by_seq = {f.seq: f for f in archive.manifest.facts(sha)}
    values = [by_seq[int(h.row["chunk_id"].rsplit("-", 1)[1])].value for h in result.fact_hits
              if h.row["nb_sha"] == sha]
    assert "3803.0" in values
    assert all(h.row["notebook"] for h in result.fact_hits)


def test_an_index_of_the_old_layout_opens_and_its_next_run_moves_the_facts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    _notebooks(root)
    # the old layout: facts written as rows of the chunk table, no fact table, an older chunker in the fingerprint
    with monkeypatch.context() as old:
        old.setattr(store_module, "split_rows", lambda rows: (rows, []))
        old.setattr(build_module, "CHUNKER_VERSION", 7)
        _index(root, index)
    lance = LanceStore(index / "lance", HashEmbedder.dim)
    lance.db.drop_table(FactTable.NAME)
    facts_before = _chunk_kinds(LanceStore(index / "lance", HashEmbedder.dim)).count(FACT_KIND)
    assert facts_before > 0

    reopened = LanceStore(index / "lance", HashEmbedder.dim)  # opens, with an empty fact table
    assert reopened.facts.count() == 0
    settings = Settings(index_dir=index)
    archive = Archive(settings, _embedder=HashEmbedder())
    hits = archive.search("what was the total ballast").hits(30)
    assert hits and all(h.kind != FACT_KIND for h in hits)  # the old fact rows are not content

    _index(root, index)  # the changed fingerprint re-chunks every notebook
    after = LanceStore(index / "lance", HashEmbedder.dim)
    assert FACT_KIND not in _chunk_kinds(after)
    assert after.facts.count() == facts_before
    manifest = SqliteManifest(index / "manifest.sqlite")
    try:
        assert sum(len(manifest.facts(sha)) for sha in manifest.indexed_shas()) == facts_before
    finally:
        manifest.close()


def _stored(store: LanceStore) -> dict[str, tuple[bool, int | None]]:
    """fact id → (holds a vector of its own, the fact it shares one with)."""
    table = store.facts.table.search().select(["chunk_id", "vector", "vector_of"]).limit(None).to_arrow()
    return {cid: (vec is not None, of) for cid, vec, of in zip(
        table["chunk_id"].to_pylist(), table["vector"].to_pylist(), table["vector_of"].to_pylist(), strict=True)}


def test_a_name_repeated_in_a_notebook_stores_its_vector_once(tmp_path: Path) -> None:
    store = LanceStore(tmp_path / "lance", DIM)
    shared = _row("a-00002", "a", FACT_KIND, "Q_std: 922210.2 ft3/h converged", 2, list(_unit(5)))
    shared.vector_of = 1  # the same name as fact a-00001: the same vector
    store.append_notebooks([
        _row("a-00001", "a", FACT_KIND, "Q_std: 1176795.8 ft3/h first step", 2, list(_unit(5))),
        shared,
        _row("b-00001", "b", FACT_KIND, "Q_std: 12.0 ft3/h", 3, list(_unit(6))),
    ])
    store.finish_run()
    assert _stored(store) == {"a-00001": (True, None), "a-00002": (False, 1), "b-00001": (True, None)}
    found = store.search_facts(StoreQuery("converged", _unit(5), 10, SearchFilters()))
    assert [h.row["chunk_id"] for h in found] == ["a-00002"]
    assert found[0].similarity == pytest.approx(1.0, abs=0.02)  # read with the vector of a-00001
    assert "vector_of" not in found[0].row
    # and while rows the keyword index lacks are scanned beside it (a run in progress): the indexed side too
    store.append_notebooks([_row("c-00001", "c", FACT_KIND, "converged after 12 steps", 1, list(_unit(6)))])
    found = store.search_facts(StoreQuery("converged", _unit(5), 10, SearchFilters()))
    assert [h.row["chunk_id"] for h in found][:1] == ["a-00002"] and "vector_of" not in found[0].row
    assert found[0].similarity == pytest.approx(1.0, abs=0.02)
    vectors = store.fact_vectors(["a"])
    assert set(vectors) == {"a-00001", "a-00002"}
    assert float(np.dot(vectors["a-00002"], _unit(5))) > 0.99
    # a vector that comes later (phase 2) is stored for the fact that holds it, not for the one sharing it
    store.set_vectors({"a-00001": _unit(7), "a-00002": _unit(8)})
    assert _stored(store)["a-00002"] == (False, 1)
    vectors = store.fact_vectors(["a"])
    assert float(np.dot(vectors["a-00002"], _unit(7))) > 0.99
    # the PostgreSQL store keeps a vector per fact: the column is no chunk column
    from nbrecall.records import CHUNK_COLUMNS

    assert "vector_of" not in CHUNK_COLUMNS


def test_the_indexer_points_repeated_names_at_their_first_fact(tmp_path: Path) -> None:
    root = tmp_path / "share"
    write_nb(root / "solver.ipynb", [
        v4.new_markdown_cell("# Sonic flow\nIterate until the standard flow converges."),
        code("for q in (1176795.8, 922210.2):\n    print('Q_std:', q)", 1,
             [v4.new_output("stream", name="stdout", text="Q_std: 1176795.8\nQ_std: 922210.2\n")]),
    ])
    _index(root, tmp_path / "idx")
    store = LanceStore(tmp_path / "idx" / "lance", HashEmbedder.dim)
    stored = _stored(store)
    own = [cid for cid, (has, of) in stored.items() if has]
    sharing = {cid: of for cid, (has, of) in stored.items() if of is not None}
    assert len(own) == 1 and len(sharing) == 1
    assert own[0].endswith(f"-{next(iter(sharing.values())):05d}")
    assert set(store.fact_vectors([store.facts.shas()[0]])) == set(stored)  # both read with a vector


def test_a_fact_table_of_chunker_8_is_read_as_it_is_and_made_anew_by_the_next_write(tmp_path: Path) -> None:
    store = LanceStore(tmp_path / "lance", DIM)
    store.db.drop_table(FactTable.NAME)
    old = pa.schema([pa.field("vector", pa.list_(pa.int8(), DIM), nullable=True) if f.name == "vector" else f
                     for f in store.facts.schema if f.name != "vector_of"])
    codes = quantise(_unit(9), DIM)
    assert codes is not None
    row = _row("a-00001", "a", FACT_KIND, "draft = 7.25 m", 1)
    data = {f.name: [getattr(row, f.name) if f.name not in ("cell", "vector") else None] for f in old}
    data["cell"], data["vector"], data["text"] = [1], [codes.tolist()], ["draft = 7.25 m"]
    store.db.create_table(FactTable.NAME, pa.Table.from_pydict(data, schema=old))
    reopened = LanceStore(tmp_path / "lance", DIM)
    reopened.finish_run()
    assert "vector_of" not in reopened.facts.table.schema.names  # a reader does not change the table
    found = reopened.search_facts(StoreQuery("draft", _unit(9), 5, SearchFilters()))
    assert [h.row["chunk_id"] for h in found] == ["a-00001"] and found[0].similarity == pytest.approx(1.0, abs=0.02)
    assert set(reopened.fact_vectors(["a"])) == {"a-00001"}
    reader = LanceStore(tmp_path / "lance", DIM)  # a server open across the change
    # the next run's first write makes the table anew (that run re-chunks every notebook: CHUNKER_VERSION 9)
    reopened.append_notebooks([_row("b-00001", "b", FACT_KIND, "draft = 8.1 m", 1, list(_unit(9)))])
    assert _stored(reopened) == {"b-00001": (True, None)}
    assert reopened.facts.table.schema.field("vector").type == pa.binary()
    # the reader follows it once the run has built the new table's keyword index (the end of the run, or a refresh)
    reopened.finish_run()
    found = reader.search_facts(StoreQuery("draft", _unit(9), 5, SearchFilters()))
    assert [h.row["chunk_id"] for h in found] == ["b-00001"] and found[0].similarity == pytest.approx(1.0, abs=0.02)
    assert set(reader.fact_vectors(["b"])) == {"b-00001"}
