"""Keyword search finds non-ASCII symbols and words: the terms of index/terms.py, and a search end to end."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from conftest import HashEmbedder, code, stream, write_nb
from nbrecall.backends import open_manifest, open_store
from nbrecall.config import Settings
from nbrecall.index.terms import extra_terms, keyword_query, keyword_text, terms
from nbrecall.ingest.pipeline import run_index
from nbrecall.records import SearchFilters
from nbrecall.search.retrieve import retrieve


def test_terms_of_symbols_and_cjk_runs() -> None:
    assert extra_terms("plain ascii text, x = 1 + 2") == []
    assert extra_terms("a ☃ at 360° for 5 €") == ["u2603", "u00b0", "u20ac"]
    assert extra_terms("数据分析 and 東 alone") == ["数据", "据分", "分析", "東"]
    assert extra_terms("café Kármán α β μm") == []  # letters: the tokenizers keep (and fold) them already
    stored = keyword_text("path\nheading\n\nprints ☃ twice ☃")
    assert stored == "path\nheading\nu2603 u2603\n\nprints ☃ twice ☃"  # in the header: snippets skip it
    assert keyword_query("why ☃?") == "why  u2603 ?" and keyword_query("数据分析") == " 数据 据分 分析 "


def test_answer_terms_keep_a_hyphenated_name_whose_one_letter_part_tells_variants_apart() -> None:
    # alone, `S` and `T` are no terms: without the whole name both learners read as `learner`
    assert terms("median PEHE of the S-learner") == ["median", "pehe", "s-learner", "learner"]
    assert "t-learner" in terms("T-Learner 1 · pehe") and "s-learner" not in terms("T-Learner 1 · pehe")
    assert terms("k-means and total_ballast") == ["k-mean", "mean", "total_ballast", "total", "ballast"]
    # parts that are digits are terms already: a number's notation is not a name
    assert terms("rtol 1e-8, U-235, f1-score") == ["rtol", "1e", "1", "8", "u-235", "235", "f1", "1", "score"]


def test_keyword_search_finds_non_ascii_symbols_and_words(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    samples = {
        "snow": [code("print(chr(9731))", 1, [stream("☃\n")])],
        "angle": [code("turn(360)", 1, [stream("rotated by 360° in 12 s\n")])],
        "french": [code("x = 1", 1, [stream("résumé: la température moyenne\n")])],
        "chinese": [code("report()", 1, [stream("数据分析的结果如下所示\n")])],
        "japanese": [code("report()", 1, [stream("東京大学で研究する\n")])],
        "other": [code("total = 42", 1, [stream("total 42 kN\n")])],
    }
    for name, cells in samples.items():
        write_nb(root / f"{name}.ipynb", cells)
    settings = Settings(index_dir=tmp_path / "index")
    embedder = HashEmbedder()
    store = open_store(settings, embedder.dim)
    run_index([root], settings, embedder, store)
    expected = {"☃": "snow", "360°": "angle", "°": "angle", "température": "french", "temperature": "french",
                "résumé": "french", "数据": "chinese", "分析": "chinese", "東京": "japanese", "研究": "japanese"}
    with closing(open_manifest(settings, readonly=True)) as manifest:
        for query, name in expected.items():
            hits = store.keyword(query, 5, SearchFilters())
            assert hits and hits[0]["notebook"] == f"{name}.ipynb", query
            found = retrieve(query, store, manifest, None, settings.retrieve)
            assert found.notebooks[0].notebook == f"{name}.ipynb", query
            assert "u2603" not in found.notebooks[0].hits[0].snippet  # the terms never show


def test_the_postgresql_stop_words_mirror_the_terms_module() -> None:
    """The PostgreSQL store spells LanceDB's stop words out in its migration SQL; they must stay the same words as
    `index.terms.STOP_WORDS`, which the answerer and the LanceDB side use."""
    from nbrecall.index.pg_schema import STOP_WORDS as PG_STOP_WORDS
    from nbrecall.index.terms import STOP_WORDS

    assert len(PG_STOP_WORDS) == len(set(PG_STOP_WORDS))
    assert set(PG_STOP_WORDS) == STOP_WORDS


def test_lancedb_drops_exactly_the_stop_words_both_stores_share(tmp_path: Path) -> None:
    """`index.terms.STOP_WORDS` (and the PostgreSQL store's copy) were found word by word against LanceDB; a LanceDB
    release that drops other words (0.41 keeps `not`, `no`, `t`, `won`, ...) changes every BM25 document length,
    so the two stores' scores part. This names the words that moved, instead of a parity test's score mismatch."""
    from importlib.metadata import version

    from nbrecall.index.store import LanceStore
    from nbrecall.index.terms import STOP_WORDS, stem
    from nbrecall.records import ChunkRow

    probes = sorted(STOP_WORDS) + ["would", "could", "also", "one"]  # the last four: kept by both
    store = LanceStore(tmp_path / "lance", 4)
    store.replace_notebooks([], [
        ChunkRow(chunk_id=f"w{i:03d}", nb_sha=f"n{i}", notebook=f"n{i}.ipynb", root="/r", kind="code", cells=[0],
                 cell_ids=["a"], anchor=0, anchor_id="a", heading="", text=word, vector=None)
        for i, word in enumerate(probes)])
    store.finish_run()
    moved = sorted(w for w in probes if bool(store.keyword(w, 1, SearchFilters())) == (stem(w) in STOP_WORDS))
    assert not moved, (f"lancedb {version('lancedb')} no longer drops (or now drops) {moved}: pin the lancedb "
                       "release index.terms.STOP_WORDS was found against, or change the list with a PostgreSQL "
                       "migration that tokenizes again")
