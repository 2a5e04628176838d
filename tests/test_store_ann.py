"""The ANN index of LanceStore: built by `finish_run` only from `AnnSettings.min_rows` rows with a vector, kept up
to date incrementally, trained again after growth, and searched with filters applied before the limit and with
exact cosine distances (the fusion reads them). A tiny threshold and 32-dim vectors keep it fast."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from nbrecall.index.lance_schema import AnnSettings
from nbrecall.index.store import LanceStore
from nbrecall.records import ChunkRow, SearchFilters

DIM = 32
CENTRES = np.random.default_rng(0).normal(size=(30, DIM)).astype(np.float32)  # topics: IVF partitions follow them


def _rows(start: int, n: int, rng: np.random.Generator, with_vectors: bool = True) -> list[ChunkRow]:
    rows = []
    for i in range(start, start + n):
        vector = CENTRES[i % len(CENTRES)] + 0.4 * rng.normal(size=DIM).astype(np.float32)
        rows.append(
            ChunkRow(
                chunk_id=f"c{i}", nb_sha=f"nb{i // 10}", notebook=f"projects/{2015 + i % 5}/nb{i // 10}.ipynb",
                root="/r", kind="text", cells=[0], cell_ids=["a"], anchor=0, anchor_id="a", heading="h",
                text=f"chunk number {i} about ballast", year=None if i % 11 == 0 else 2015 + i % 5,
                project=f"P{i % 50}", deprecated=i % 7 == 0,
                vector=(vector / np.linalg.norm(vector)) if with_vectors else None,
            )
        )
    return rows


def _add(store: LanceStore, rows: list[ChunkRow]) -> None:
    for start in range(0, len(rows), 100):  # one notebook batch per commit, as the indexer writes
        store.replace_notebooks([], rows[start : start + 100])


def test_ann_index_threshold_filters_and_exact_distances(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    ann = AnnSettings(min_rows=400, retrain_growth=2.0)
    store = LanceStore(tmp_path / "lance", DIM, ann)
    _add(store, _rows(0, 300, rng) + _rows(300, 100, rng, with_vectors=False))
    store.finish_run()
    assert store.vector_index() is None, "300 rows with a vector: below the threshold, flat search"
    indexed = {col for idx in store.table.list_indices() for col in idx.columns}
    assert {column for column, _kind in store.FILTER_INDEXES} <= indexed, "filter columns get scalar indexes"

    _add(store, _rows(400, 200, rng))
    store.finish_run()
    index = store.vector_index()
    assert index is not None and index.index_type.lower() == ann.index_type.replace("_", "").lower()
    state = json.loads((tmp_path / "lance" / ann.state_file).read_text())
    assert state["trained_rows"] == 600  # rows of the table, 500 of them with a vector

    queries = CENTRES[:20] + 0.4 * rng.normal(size=(20, DIM)).astype(np.float32)
    for filters, ok in [
        (SearchFilters(), lambda r: not r["deprecated"]),
        (SearchFilters(year_from=2017, year_to=2017), lambda r: r["year"] == 2017 and not r["deprecated"]),
        (SearchFilters(year_from=2017, include_deprecated=True), lambda r: r["year"] is not None and r["year"] >= 2017),
        (SearchFilters(project="P7"), lambda r: r["project"] == "P7" and not r["deprecated"]),
    ]:
        hits = 0
        for q in queries:
            got = store.vector(q, 10, filters)
            exact = store.vector(q, 10, filters, exact=True)
            assert all(ok(r) for r in got), "filters hold on the ANN path"
            assert len(got) == len(exact), "filters apply before the limit (prefilter), not after"
            exact_d = {r["chunk_id"]: r["_distance"] for r in exact}
            for r in got:
                assert r["_distance"] == r["_distance"], "no row without a vector comes back (NaN distance)"
                if r["chunk_id"] in exact_d:
                    assert abs(r["_distance"] - exact_d[r["chunk_id"]]) < 1e-4, "refined: exact cosine distance"
            hits += len({r["chunk_id"] for r in got} & set(exact_d))
        assert hits / sum(len(store.vector(q, 10, filters, exact=True)) for q in queries) >= 0.95

    _add(store, _rows(600, 100, rng))
    store.finish_run()  # 700 rows < 2 × 600: kept, the new rows added to it by optimize()
    index = store.vector_index()
    assert index is not None and index.num_unindexed_rows == 0
    assert json.loads((tmp_path / "lance" / ann.state_file).read_text())["trained_rows"] == 600
    _add(store, _rows(700, 500, rng))
    assert store.ensure_vector_index() == "retrained"  # 1,200 rows: grown 2-fold since training
    assert json.loads((tmp_path / "lance" / ann.state_file).read_text())["trained_rows"] == 1200
    assert store.ensure_vector_index() == "kept"
