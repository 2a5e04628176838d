"""Indexing runs: incremental cases, quarantine, keyword search after a second run, filters, lock, crash."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from nbformat import v4

from conftest import HashEmbedder, code, result, stream, write_nb
from nbrecall.backends import open_manifest, open_store
from nbrecall.config import Settings
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest.lock import IndexLocked, WriterLock
from nbrecall.ingest.pipeline import run_index
from nbrecall.protocols import Store
from nbrecall.records import SearchFilters
from nbrecall.search.retrieve import retrieve


def make_archive(root: Path) -> None:
    write_nb(
        root / "projects/2017/17-042/ballast.ipynb",
        [
            v4.new_markdown_cell("# Ballast distribution\nBallast plan for the 130 m PSV Nordhav."),
            code(
                "aft = 1284.6\nprint(f'Total ballast aft: {aft:,.1f} m3')",
                1,
                [stream("Total ballast aft: 1,284.6 m3\n")],
            ),
            v4.new_markdown_cell("## Forward tanks"),
            code("fwd = 512.0\nfwd", 2, [result("512.0", 2)]),
            code("check = fwd + aft", 3),
        ],
    )
    write_nb(
        root / "projects/2018/18-007/mooring.ipynb",
        [
            v4.new_markdown_cell("# Mooring loads\nCatenary pretension of the anchor lines."),
            code("pretension_kN = 1200\npretension_kN", 1, [result("1200", 1)]),
        ],
    )
    write_nb(
        root / "projects/2016/16-021/old.ipynb",
        [
            v4.new_markdown_cell("# Drag coefficients\nSuperseded drag coefficient table for the hull."),
            code("cd = 0.95", 1),
        ],
        metadata={"tags": ["deprecated"]},
    )
    (root / "scratch").mkdir(parents=True, exist_ok=True)
    (root / "scratch/broken.ipynb").write_text('{"nbformat": 4, "cells": [', encoding="utf-8")
    (root / ".ipynb_checkpoints").mkdir(exist_ok=True)
    write_nb(root / ".ipynb_checkpoints/ballast-checkpoint.ipynb", [code("hidden = 1")])


# The store the helpers below use: the embedded default, or PostgreSQL for tests that take the `backend` fixture.
BACKEND: dict[str, str | None] = {"url": None, "schema": "nbrecall"}


@pytest.fixture(params=["lance", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test on the embedded store and on PostgreSQL (each test in a schema of its own)."""
    if request.param == "postgres":
        BACKEND.update(url=request.getfixturevalue("pg_url"), schema=request.getfixturevalue("pg_schema"))
    yield request.param
    BACKEND.update(url=None, schema="nbrecall")


def settings_for(index: Path) -> Settings:
    settings = Settings(index_dir=index)
    settings.metadata.path_rules = [r"projects/(?P<year>\d{4})/(?P<project>\d{2}-\d{3})/"]
    settings.store.url, settings.store.schema = BACKEND["url"], str(BACKEND["schema"])
    return settings


def index_once(root: Path, index: Path, embedder: HashEmbedder):  # type: ignore[no-untyped-def]
    settings = settings_for(index)
    store = open_store(settings, embedder.dim)
    return run_index([root], settings, embedder, store), store, settings


def search(
    index: Path, store: Store, embedder: HashEmbedder, query: str, filters: SearchFilters | None = None
):  # type: ignore[no-untyped-def]
    with closing(open_manifest(settings_for(index), readonly=True)) as manifest:
        return retrieve(query, store, manifest, embedder.embed([query])[0], Settings().retrieve, filters)


def chunk_ids(store: Store) -> list[str]:
    if isinstance(store, LanceStore):
        return store.table.search().select(["chunk_id"]).limit(None).to_arrow()["chunk_id"].to_pylist()
    return store.chunk_ids()  # type: ignore[attr-defined]


def consistent(index: Path, store: Store) -> None:
    """Every indexed notebook has exactly its chunks in the store, nothing else, nothing twice."""
    with closing(open_manifest(settings_for(index), readonly=True)) as manifest:
        expected = {c.sha256: c.n_chunks for c in manifest.contents("indexed") if c.n_chunks}
    counts = store.notebook_shas()
    assert {sha: n for sha, n in counts.items() if sha in expected} == expected
    ids = chunk_ids(store)
    assert len(ids) == len(set(ids))


def test_first_run_indexes_and_quarantines(tmp_path: Path, hash_embedder: HashEmbedder, backend: str) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    report, store, _settings = index_once(root, index, hash_embedder)
    assert report.notebooks_indexed == 4  # three notebooks and a checkpoint copy (a version: ingest.families)
    assert report.quarantined == [("scratch/broken.ipynb", report.quarantined[0][1])]
    assert "truncated JSON" in report.quarantined[0][1]
    manifest = open_manifest(settings_for(index), readonly=True)
    assert manifest.stats()["files"] == 5  # the checkpoint copy is read too
    assert [q.rel for q in manifest.contents("quarantined")] == ["scratch/broken.ipynb"]
    consistent(index, store)


def test_second_run_with_nothing_changed_does_nothing(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    calls = len(hash_embedder.calls)
    report, store, _ = index_once(root, index, hash_embedder)
    assert (report.hashed, report.notebooks_indexed, report.texts_embedded) == (0, 0, 0)
    assert len(hash_embedder.calls) == calls
    consistent(index, store)


def test_touch_rehashes_but_does_not_rechunk(tmp_path: Path, hash_embedder: HashEmbedder, backend: str) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    target = root / "projects/2018/18-007/mooring.ipynb"
    os.utime(target, (time.time() + 5, time.time() + 5))
    report, _store, _ = index_once(root, index, hash_embedder)
    assert (report.hashed, report.notebooks_indexed) == (1, 0)


def test_changed_notebook_only_it_is_rechunked_and_only_new_texts_embedded(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    write_nb(
        root / "projects/2018/18-007/mooring.ipynb",
        [
            v4.new_markdown_cell("# Mooring loads\nCatenary pretension of the anchor lines."),
            code("pretension_kN = 1200\npretension_kN", 1, [result("1200", 1)]),
            code("fairlead_angle = 42.0", 2),
        ],
    )
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.notebooks_indexed == 1 and report.notebooks_removed == 1
    assert report.embed_cache_hits >= 1 and report.texts_embedded >= 1
    hits = search(index, store, hash_embedder, "fairlead angle").hits(5)
    assert hits and hits[0].notebook == "projects/2018/18-007/mooring.ipynb"
    consistent(index, store)


def test_rows_added_in_a_second_run_are_found_by_keyword(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    write_nb(
        root / "projects/2019/19-113/piles.ipynb",
        [
            v4.new_markdown_cell("# Pile capacity\nSkin friction of the monopile in dense sand."),
            code("qs = 87.5", 1),
        ],
    )
    _report, store, _ = index_once(root, index, hash_embedder)
    rows = store.keyword("monopile skin friction", 5, SearchFilters())
    assert rows and rows[0]["notebook"] == "projects/2019/19-113/piles.ipynb"


def test_deleted_notebook_disappears_from_results(tmp_path: Path, hash_embedder: HashEmbedder, backend: str) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    (root / "projects/2018/18-007/mooring.ipynb").unlink()
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.deleted_files == 1 and report.notebooks_removed == 1
    notebooks = {h.notebook for h in search(index, store, hash_embedder, "catenary pretension").hits(20)}
    assert "projects/2018/18-007/mooring.ipynb" not in notebooks
    consistent(index, store)


def test_a_root_that_holds_none_of_its_notebooks_is_kept_until_pruning_is_asked_for(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    """An empty mount point (the share is not mounted) must not wipe an index that took hours; a root still holding
    some of its notebooks loses the others as before."""
    root, other, index = tmp_path / "share", tmp_path / "other", tmp_path / "idx"
    make_archive(root)
    write_nb(other / "winch.ipynb", [v4.new_markdown_cell("# Winch\nAnchor winch brake load.")])
    settings = settings_for(index)
    store = open_store(settings, hash_embedder.dim)
    first = run_index([root, other], settings, hash_embedder, store)
    shutil.rmtree(root)
    root.mkdir()  # the mount point, empty
    (other / "winch.ipynb").unlink()
    write_nb(other / "brake.ipynb", [v4.new_markdown_cell("# Brake\nBand brake torque.")])
    report = run_index([root, other], settings, hash_embedder, store)
    assert report.empty_roots == [(str(root.resolve()), first.files - 1)]
    assert report.deleted_files == 1 and report.notebooks_removed == 1  # winch.ipynb: its root is not empty
    assert search(index, store, hash_embedder, "catenary pretension").notebooks  # the share's notebooks stay
    with closing(open_manifest(settings, readonly=True)) as manifest:  # what `nbrecall status` shows
        assert [note.split(" holds ")[0] for note in manifest.last_run()["kept"]] == [str(root.resolve())]
    settings.discover.prune_empty_roots = True
    report = run_index([root, other], settings, hash_embedder, store)
    assert report.empty_roots == [] and report.deleted_files == first.files - 1
    with closing(open_manifest(settings, readonly=True)) as manifest:
        assert [rel for _root, rel in manifest.files()] == ["brake.ipynb"]


def test_an_archive_moved_elsewhere_is_moved_in_the_index_without_indexing_it_again(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    """A share mounted at a new place: `index NEW --forget OLD` takes the old root's files out, keeps every content
    the new place holds (nothing chunked again), and search names the new paths only."""
    old, new, index = tmp_path / "mnt" / "share", tmp_path / "media" / "share", tmp_path / "idx"
    make_archive(old)
    settings = settings_for(index)
    store = open_store(settings, hash_embedder.dim)
    first = run_index([old], settings, hash_embedder, store)
    old.parent.rename(tmp_path / "media")  # the share is now at `new`; `old` does not exist
    report = run_index([new], settings, hash_embedder, store, forget=[old])
    assert report.notebooks_indexed == 0 and report.chunks_written == 0  # known contents: no chunking again
    assert report.forgotten_files == first.files and report.notebooks_removed == 0
    assert report.deleted_files == 0
    found = search(index, store, hash_embedder, "catenary pretension")
    assert found.notebooks and {h.root for h in found.hits(20)} == {str(new.resolve())}
    with closing(open_manifest(settings, readonly=True)) as manifest:
        assert {root for root, _rel in manifest.files()} == {str(new.resolve())}
        assert [(r.root, r.files) for r in manifest.roots()] == [(str(new.resolve()), first.files)]
        assert {c.root for c in manifest.contents()} == {str(new.resolve())}  # re-pointed: the viewer's title
    consistent(index, store)


def test_forgetting_a_folder_inside_a_root_removes_only_what_no_other_file_holds(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    root, other, index = tmp_path / "share", tmp_path / "other", tmp_path / "idx"
    make_archive(root)
    other.mkdir()
    shutil.copy(root / "projects/2017/17-042/ballast.ipynb", other / "ballast_copy.ipynb")
    settings = settings_for(index)
    store = open_store(settings, hash_embedder.dim)
    run_index([root, other], settings, hash_embedder, store)
    with pytest.raises(ValueError, match="cannot forget what this run indexes"):
        run_index([root], settings, hash_embedder, store, forget=[root / "projects"])
    report = run_index([], settings, hash_embedder, store, forget=[root / "projects"])
    assert report.forgotten_files == 3 and report.notebooks_removed == 2  # the ballast content stays: its copy
    assert not any(h.notebook.startswith("projects/") for h in search(index, store, hash_embedder,
                                                                      "catenary pretension").hits(20))
    hits = search(index, store, hash_embedder, "ballast aft").hits(20)
    assert (str(other.resolve()), "ballast_copy.ipynb") in {(h.root, h.notebook) for h in hits}
    with closing(open_manifest(settings, readonly=True)) as manifest:
        assert sorted(rel for _root, rel in manifest.files()) == [
            ".ipynb_checkpoints/ballast-checkpoint.ipynb", "ballast_copy.ipynb", "scratch/broken.ipynb"]
    report = run_index([], settings, hash_embedder, store, forget=[tmp_path / "elsewhere"])
    assert report.forgotten_files == 0 and report.notebooks_removed == 0
    consistent(index, store)


def test_a_folder_that_cannot_be_listed_keeps_its_notebooks(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder the walk cannot list (permissions, a share's network error) is no evidence its notebooks are gone:
    they stay as they were, and the run says which folder and why; once it can be read, a deleted one goes."""
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    folder = root / "projects/2018"
    listing = os.scandir

    def failing(path: Any = ".") -> Any:
        if Path(path) == folder.resolve():
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)

    monkeypatch.setattr(os, "scandir", failing)
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.unlisted == [(str(root.resolve()), "projects/2018", "Permission denied", 1)]
    assert report.deleted_files == 0 and report.notebooks_removed == 0
    hits = search(index, store, hash_embedder, "catenary pretension").hits(20)
    assert "projects/2018/18-007/mooring.ipynb" in {h.notebook for h in hits}
    monkeypatch.undo()
    (folder / "18-007/mooring.ipynb").unlink()
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.unlisted == [] and report.deleted_files == 1 and report.notebooks_removed == 1
    consistent(index, store)


def test_an_indexed_file_that_cannot_be_read_this_time_keeps_its_last_state(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read error on a notebook indexed before (a share's network error) may pass: it is not quarantined and its
    content not dropped; the run names it. A file never read is quarantined with the reason, as before."""
    import nbrecall.ingest.discover as discover_module

    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    ballast = root / "projects/2017/17-042/ballast.ipynb"
    os.utime(ballast, ns=(time.time_ns(), time.time_ns()))  # its stat changed: the run reads it again
    write_nb(root / "new.ipynb", [v4.new_markdown_cell("# New\nA notebook written since.")])
    hashing = discover_module.content_sha256

    def failing(path: Path) -> str:
        if path.name in ("ballast.ipynb", "new.ipynb"):
            raise OSError(5, "Input/output error")
        return hashing(path)

    monkeypatch.setattr(discover_module, "content_sha256", failing)
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.unread == [(str(root.resolve()), "projects/2017/17-042/ballast.ipynb",
                              "cannot read file: Input/output error")]
    assert report.quarantined == [("new.ipynb", "cannot read file: Input/output error")]
    assert report.notebooks_removed == 0
    hits = search(index, store, hash_embedder, "ballast aft").hits(20)
    assert "projects/2017/17-042/ballast.ipynb" in {h.notebook for h in hits}
    monkeypatch.undo()
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.unread == [] and report.notebooks_indexed == 1 and not report.quarantined  # new.ipynb, read now


def test_rehash_finds_a_content_replaced_with_its_size_and_time_kept(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    mooring = root / "projects/2018/18-007/mooring.ipynb"
    before, stat = mooring.read_text(), mooring.stat()
    assert "Catenary" in before
    mooring.write_text(before.replace("Catenary", "Tethered"))  # same length: a restore of another version
    os.utime(mooring, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    report, _store, _ = index_once(root, index, hash_embedder)
    assert report.hashed == 0 and report.changed == 0  # size and time say unchanged
    settings = settings_for(index)
    settings.discover.rehash = True
    store = open_store(settings, hash_embedder.dim)
    report = run_index([root], settings, hash_embedder, store)
    assert report.hashed == report.files and report.changed == 1 and report.notebooks_indexed == 1
    found = search(index, store, hash_embedder, "tethered pretension").notebooks
    assert found[0].notebook == "projects/2018/18-007/mooring.ipynb"


def test_a_file_over_the_size_cap_is_quarantined_unread(tmp_path: Path, hash_embedder: HashEmbedder,
                                                        backend: str) -> None:
    """Parsing holds many times a file's size in memory: one over `[discover] max_file_mb` is not read, and the
    quarantine says why and what to change; the rest of the batch is indexed."""
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    write_nb(root / "big.ipynb", [code("x = 1", 1, [stream("y" * 40_000 + "\n")])])
    settings = settings_for(index)
    settings.discover.max_file_mb = 0.03  # about 31 kB: big.ipynb is over it, the archive's notebooks are not
    report = run_index([root], settings, hash_embedder, open_store(settings, hash_embedder.dim))
    why = dict(report.quarantined)
    assert set(why) == {"big.ipynb", "scratch/broken.ipynb"}  # (the archive's broken notebook, as always)
    big = why["big.ipynb"]
    assert big.startswith("larger than [discover] max_file_mb (") and "raise the setting" in big
    assert report.notebooks_indexed == 4  # the archive's three notebooks and a checkpoint copy, as without the cap


def test_identical_files_are_indexed_once_and_every_path_listed(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    src = root / "projects/2018/18-007/mooring.ipynb"
    (root / "copies").mkdir()
    (root / "copies/mooring copy.ipynb").write_bytes(src.read_bytes())
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.notebooks_indexed == 4  # the copy is not indexed again (the checkpoint copy is a 4th content)
    result_ = search(index, store, hash_embedder, "catenary pretension anchor lines")
    top = result_.notebooks[0]
    assert sorted(top.paths) == ["copies/mooring copy.ipynb", "projects/2018/18-007/mooring.ipynb"]
    # the file the chunks were written under goes; the content stays as the other copy and is not indexed again,
    # yet search names the file that is there (the chunks still hold the first path)
    (root / top.notebook).unlink()
    left = next(p for p in top.paths if p != top.notebook)
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.notebooks_indexed == 0 and report.notebooks_removed == 0
    again = search(index, store, hash_embedder, "catenary pretension anchor lines").notebooks[0]
    assert (again.notebook, again.paths) == (left, [left])
    assert {h.notebook for h in again.hits} == {left} and {h.root for h in again.hits} == {str(root.resolve())}
    record = open_manifest(settings_for(index), readonly=True).content(again.nb_sha)  # the viewer's title, renders
    assert record is not None and (record.root, record.rel) == (str(root.resolve()), left)


def test_quarantined_file_is_retried_when_its_content_changes(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    write_nb(
        root / "scratch/broken.ipynb", [v4.new_markdown_cell("# Repaired\nNow a notebook about winches.")]
    )
    report, _store, _ = index_once(root, index, hash_embedder)
    assert report.notebooks_indexed == 1 and not report.quarantined
    manifest = open_manifest(settings_for(index), readonly=True)
    assert manifest.contents("quarantined") == []


def test_a_quarantined_file_is_read_again_by_a_run_that_reads_notebooks_differently(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    """A quarantine is kept while nothing changes, and retried once the chunker or the settings change (the
    fingerprint): a newer nbrecall may repair what an older one could not."""
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    first, _store, _ = index_once(root, index, hash_embedder)
    assert [rel for rel, _ in first.quarantined] == ["scratch/broken.ipynb"]
    again, _store, _ = index_once(root, index, hash_embedder)
    assert again.quarantined == [] and again.notebooks_indexed == 0
    settings = settings_for(index)
    settings.chunk.max_output_chars += 1  # part of the fingerprint, as a new chunker version is
    other = run_index([root], settings, hash_embedder, open_store(settings, hash_embedder.dim))
    assert [rel for rel, _ in other.quarantined] == ["scratch/broken.ipynb"]
    with closing(open_manifest(settings, readonly=True)) as manifest:
        assert [q.rel for q in manifest.contents("quarantined")] == ["scratch/broken.ipynb"]


def test_filters_and_deprecated(tmp_path: Path, hash_embedder: HashEmbedder, backend: str) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    _report, store, _ = index_once(root, index, hash_embedder)
    default = {h.notebook for h in search(index, store, hash_embedder, "drag coefficient hull").hits(20)}
    assert "projects/2016/16-021/old.ipynb" not in default
    included = search(
        index, store, hash_embedder, "drag coefficient hull", SearchFilters(include_deprecated=True)
    )
    flagged = {h.notebook: h.deprecated for h in included.hits(20)}
    assert flagged["projects/2016/16-021/old.ipynb"] is True
    assert flagged["projects/2017/17-042/ballast.ipynb"] is False
    only_2018 = search(
        index, store, hash_embedder, "ballast pretension", SearchFilters(year_from=2018, year_to=2018)
    )
    assert {h.year for h in only_2018.hits(20)} == {2018}
    project = search(index, store, hash_embedder, "ballast pretension", SearchFilters(project="17-042"))
    assert {h.notebook for h in project.hits(20)} == {"projects/2017/17-042/ballast.ipynb"}


def test_neighbourhood_has_heading_cell_and_next_cells(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    _report, store, _ = index_once(root, index, hash_embedder)
    top = search(index, store, hash_embedder, "forward tanks fwd").notebooks[0]
    assert top.notebook == "projects/2017/17-042/ballast.ipynb"
    anchor = top.hits[0].cell
    idx = [c.idx for c in top.neighbourhood]
    assert anchor in idx and idx[0] < anchor or idx[0] == anchor
    assert top.neighbourhood[0].cell_type == "markdown" or idx[0] == anchor


def test_second_writer_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    with WriterLock(tmp_path), pytest.raises(IndexLocked, match="another nbrecall process"):
        WriterLock(tmp_path).__enter__()
    with WriterLock(tmp_path):
        pass


CRASH_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from conftest import HashEmbedder
    from nbrecall.backends import open_store
    from nbrecall.config import Settings
    from nbrecall.ingest.pipeline import run_index

    class Slow(HashEmbedder):
        # slow chunking (phase 1) and slow embedding (phase 2): the test sees the run between its commits
        def count_tokens(self, texts):
            time.sleep(0.02)
            return super().count_tokens(texts)

        def embed(self, texts):
            time.sleep(0.5)
            return super().embed(texts)

    emb = Slow()
    settings = Settings(index_dir=Path({index!r}))
    settings.store.url, settings.store.schema = {url!r}, {schema!r}
    run_index([Path({root!r})], settings, emb, open_store(settings, emb.dim), batch_notebooks=2)
""")

CRASH_NOTEBOOKS = 40


def committed(index: Path) -> tuple[int, int]:
    """(notebooks the manifest lists as indexed, vectors waiting) as a reader sees them; (0, 0) before it exists."""
    try:
        with closing(open_manifest(settings_for(index), readonly=True)) as manifest:
            stats = manifest.stats()
    except Exception:  # not created yet, or its schema is being written
        return 0, 0
    return stats["notebooks"], stats["waiting for a vector"]


# Kill points: just after the first batch of phase 1, midway through phase 1, after phase 1 with every vector
# still queued (phase 2 embeds them in one slow call).
KILL_POINTS = {
    "first-batch": lambda n, waiting: n >= 2,
    "midway": lambda n, waiting: n >= CRASH_NOTEBOOKS // 2,
    "vectors-queued": lambda n, waiting: n == CRASH_NOTEBOOKS and waiting > 0,
}


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", list(KILL_POINTS))
def test_sigkill_mid_run_then_rerun_leaves_a_consistent_index(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str, kill_at: str
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    for i in range(CRASH_NOTEBOOKS):
        write_nb(
            root / f"nb{i:02d}.ipynb",
            [
                v4.new_markdown_cell(f"# Study {i}\nHull {i} resistance."),
                code(f"r{i} = {i} * 2.5", 1, [result(str(i * 2.5), 1)]),
            ],
        )
    script = CRASH_SCRIPT.format(tests=str(Path(__file__).parent), index=str(index), root=str(root),
                                 url=BACKEND["url"], schema=BACKEND["schema"])
    proc = subprocess.Popen([sys.executable, "-c", script])
    reached, deadline = KILL_POINTS[kill_at], time.monotonic() + 300
    try:
        while not reached(*committed(index)):  # poll the manifest a reader sees: the kill lands after a commit
            assert proc.poll() is None, f"the indexer ended (exit {proc.returncode}) before the kill point"
            assert time.monotonic() < deadline, "the indexer did not reach the kill point in 300 s"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # The partial state: some notebooks committed, the rest not; what is committed is consistent and searchable.
    indexed, waiting = committed(index)
    assert 0 < indexed <= CRASH_NOTEBOOKS
    if kill_at != "vectors-queued":
        assert indexed < CRASH_NOTEBOOKS
    else:
        assert waiting > 0
    settings = settings_for(index)
    store = open_store(settings, hash_embedder.dim)
    consistent(index, store)
    with closing(open_manifest(settings, readonly=True)) as manifest:
        first = sorted(f.rel for f in manifest.files().values() if f.sha256 in manifest.indexed_shas())[0]
    number = int(first[2:4])
    hits = search(index, store, hash_embedder, f"Hull {number} resistance").hits(3)
    # Its vectors still wait (phase 2), so keyword search finds it, once a keyword index exists: LanceDB builds
    # it after the first batch, and a kill between that batch and the build leaves none until the next run.
    if not isinstance(store, LanceStore) or store._has_fts():
        assert hits and hits[0].notebook == first
    # Resume: every notebook once, no duplicates, no vector left waiting, search finds any of them.
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.notebooks_indexed == CRASH_NOTEBOOKS - indexed
    with closing(open_manifest(settings_for(index), readonly=True)) as manifest:
        assert manifest.stats()["notebooks"] == CRASH_NOTEBOOKS
        assert manifest.pending_count() == 0
    consistent(index, store)
    assert len(store.notebook_shas()) == CRASH_NOTEBOOKS
    hits = search(index, store, hash_embedder, "Hull 17 resistance").hits(3)
    assert hits[0].notebook == "nb17.ipynb"


def test_changed_chunk_settings_rechunk_everything_and_reuse_vectors(tmp_path: Path,
                                                                    hash_embedder: HashEmbedder, backend: str) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    index_once(root, index, hash_embedder)
    settings = settings_for(index)
    settings.chunk.max_output_chars = 1000  # a setting the chunks depend on
    store = open_store(settings, hash_embedder.dim)
    report = run_index([root], settings, hash_embedder, store)
    assert report.notebooks_indexed == 4 and report.texts_embedded == 0 and report.embed_cache_hits > 0
    again = run_index([root], settings, hash_embedder, store)
    assert again.notebooks_indexed == 0
    consistent(index, store)


def vectors_of(store: LanceStore) -> dict[str, bool]:
    table = store.table.search().select(["chunk_id", "vector"]).limit(None).to_arrow()
    return {cid: vec is not None for cid, vec in zip(table["chunk_id"].to_pylist(), table["vector"].to_pylist(),
                                                     strict=True)}


def test_deferred_vectors_keyword_search_first_then_the_queue_is_embedded(
    tmp_path: Path, hash_embedder: HashEmbedder
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    settings = settings_for(index)
    store = LanceStore(index / "lance", hash_embedder.dim)
    first = run_index([root], settings, hash_embedder, store, defer_vectors=True)
    assert hash_embedder.calls == [] and first.texts_embedded == 0
    manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
    stats = manifest.stats()
    assert stats["embedded"] == 0 and stats["waiting for a vector"] == stats["chunks"] == first.vectors_pending > 0
    assert not any(vectors_of(store).values())
    # keyword-searchable already, with a query vector too (fusion takes what exists)
    found = search(index, store, hash_embedder, "ballast distribution PSV")
    assert found.notebooks and found.notebooks[0].notebook.endswith("ballast.ipynb")
    # recent notebooks first: 2018 before 2017 before 2016 (the checkpoint copy at the root has no year: last)
    order = [item.sha256 for item in manifest.pending(1000)]
    years = {c.sha256: c.meta["year"] for c in manifest.contents("indexed")}
    assert [years[s] for s in dict.fromkeys(order)] == [2018, 2017, 2016, None]

    second = run_index([root], settings, hash_embedder, store)
    assert second.notebooks_indexed == 0  # nothing re-chunked, only the queue embedded
    assert second.texts_embedded > 0 and second.vectors_pending == 0
    assert all(vectors_of(store).values())
    stats = SqliteManifest(index / "manifest.sqlite", readonly=True).stats()
    assert stats["embedded"] == stats["chunks"] and stats["waiting for a vector"] == 0
    consistent(index, store)


class FailingEmbedder(HashEmbedder):
    """Dies on its n-th call to the model, like a run killed in the middle of phase 2."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at

    def embed(self, texts: list[str]):  # type: ignore[no-untyped-def]
        if len(self.calls) + 1 == self.fail_at:
            self.calls.append([])
            raise RuntimeError("killed")
        return super().embed(texts)


def test_phase_two_interrupted_then_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbrecall.ingest.pipeline as pipeline

    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    settings = settings_for(index)
    failing = FailingEmbedder(fail_at=2)
    store = LanceStore(index / "lance", failing.dim)
    real = pipeline.fill_vectors
    monkeypatch.setattr(pipeline, "fill_vectors", lambda *a, **k: real(*a, **{**k, "batch_chunks": 2}))
    with pytest.raises(RuntimeError, match="killed"):
        run_index([root], settings, failing, store)
    manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
    stats = manifest.stats()
    assert 0 < stats["embedded"] < stats["chunks"] and stats["waiting for a vector"] == stats["chunks"] - 2
    assert sum(vectors_of(store).values()) == 2  # the first batch landed, in the store and in the manifest
    again = run_index([root], settings, HashEmbedder(), store)
    assert again.notebooks_indexed == 0 and again.vectors_pending == 0
    stats = SqliteManifest(index / "manifest.sqlite", readonly=True).stats()
    assert stats["embedded"] == stats["chunks"] and all(vectors_of(store).values())
    consistent(index, store)


def test_keyword_ranking_holds_while_rows_wait_for_the_keyword_index(tmp_path: Path) -> None:
    """LanceDB scores indexed and not-yet-indexed rows on different BM25 scales; the best indexed match must not be
    crowded out by rows written since the last refresh (a run in progress, or one that stopped)."""
    from nbrecall.records import ChunkRow

    store = LanceStore(tmp_path / "lance", 384)

    def row(cid: str, text: str) -> ChunkRow:
        return ChunkRow(cid, cid[:3] * 20, f"{cid}.ipynb", "r", "text", [0], ["c0"], 0, "c0", "", text)

    store.append_notebooks([row(f"h{i:02d}", f"Study {i}. Hull {i} resistance in calm water.") for i in range(10)])
    store.finish_run()
    assert store._unindexed_text_rows() == 0  # looked up once per table version: the appends below must show
    filler = [row(f"n{i:03d}", " ".join(f"word{(i * 7 + j) % 900}" for j in range(200))) for i in range(300)]
    filler.append(row("n999", "resistance 3 " + " ".join(f"word{j}" for j in range(200))))
    store.append_notebooks(filler)
    assert store._unindexed_text_rows() == 301
    found = store.keyword("Hull 3 resistance", 10, SearchFilters())
    assert found[0]["chunk_id"] == "h03", [(r["chunk_id"], r["_score"]) for r in found]
    assert "n999" in {r["chunk_id"] for r in found}  # the new rows are found too


class SlowRefreshStore(LanceStore):
    """A LanceStore whose refreshes after the first take a while and record what the run appended meanwhile."""

    def __init__(self, *args, fail: bool = False, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.refreshes = 0
        self.appended_during_refresh = 0
        self.refreshing = False
        self.fail = fail

    def append_notebooks(self, rows):  # type: ignore[no-untyped-def]
        if self.refreshing:
            self.appended_during_refresh += len(rows)
        super().append_notebooks(rows)

    def finish_run(self) -> None:
        self.refreshes += 1
        if self.refreshes > 1:
            self.refreshing = True
            try:
                time.sleep(0.5)
                if self.fail and self.refreshes == 2:
                    raise OSError(28, "No space left on device")
            finally:
                self.refreshing = False
        super().finish_run()


def _many_notebooks(root: Path, count: int) -> None:
    for i in range(count):
        write_nb(
            root / f"projects/2019/19-{i:03d}/study.ipynb",
            [v4.new_markdown_cell(f"# Study {i}\nHull variant {i} resistance."), code(f"r = {i}.5\nr", 1)],
        )


def test_the_keyword_index_is_refreshed_beside_the_batches_of_a_new_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh during a run of new notebooks does not stop the writes; at the end every row is indexed."""
    import nbrecall.ingest.pipeline as pipeline

    monkeypatch.setattr(pipeline, "KEYWORD_REFRESH_ROWS", 4)
    _many_notebooks(tmp_path / "share", 60)
    settings = Settings(index_dir=tmp_path / "idx")
    embedder = HashEmbedder()
    store = SlowRefreshStore(tmp_path / "idx" / "lance", embedder.dim)
    report = run_index([tmp_path / "share"], settings, embedder, store, batch_notebooks=2)
    assert report.notebooks_indexed == 60
    assert store.refreshes >= 3  # the first batch, at least one in the background, the end of the run
    assert store.appended_during_refresh > 0  # batches went on being written while a refresh ran
    assert store._unindexed_text_rows() == 0
    found = retrieve("Hull variant 59", store, SqliteManifest(settings.index_dir / "manifest.sqlite"),
                     None, settings.retrieve)
    assert found.notebooks[0].notebook == "projects/2019/19-059/study.ipynb"


def test_a_background_refresh_that_fails_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbrecall.ingest.pipeline as pipeline

    monkeypatch.setattr(pipeline, "KEYWORD_REFRESH_ROWS", 4)
    _many_notebooks(tmp_path / "share", 30)
    settings = Settings(index_dir=tmp_path / "idx")
    embedder = HashEmbedder()
    store = SlowRefreshStore(tmp_path / "idx" / "lance", embedder.dim, fail=True)
    with pytest.raises(Exception, match="no space left on the device"):
        run_index([tmp_path / "share"], settings, embedder, store, batch_notebooks=2)
    assert store.refreshes >= 2


def test_the_queue_length_is_kept_through_adds_replaces_and_removals(tmp_path: Path) -> None:
    """`pending_count` reads a kept count (no COUNT(*) over millions of rows); it must equal the rows queued after
    every kind of write, and an index written before the count was kept gets it at its first writable open."""
    from nbrecall.records import ContentRecord, PendingVector

    manifest = SqliteManifest(tmp_path / "m.sqlite")

    def queued() -> int:
        return int(manifest.db.execute("SELECT COUNT(*) FROM pending_vectors").fetchone()[0])

    a, b = "a" * 64, "b" * 64
    items = [PendingVector(f"{sha[:20]}-{i}", sha, 1.0, f"text {i}") for sha in (a, b) for i in range(700)]
    with manifest.transaction():
        manifest.save_pending(items)
    assert manifest.pending_count() == queued() == 1400
    with manifest.transaction():  # queued again (a repeated batch): replaced, not counted twice
        manifest.save_pending(items[:600] + items[:3])
    assert manifest.pending_count() == queued() == 1400
    with manifest.transaction():  # embedded or gone: off the queue either way
        manifest.vectors_done(items[:100], {items[0].chunk_id})
    assert manifest.pending_count() == queued() == 1300
    with manifest.transaction():  # a content saved again drops its old queue
        manifest.save_contents([ContentRecord(a, "indexed", "", "r", "a.ipynb")], [])
    assert manifest.pending_count() == queued() == 700
    with manifest.transaction():
        manifest.delete_contents([b])
    assert manifest.pending_count() == queued() == 0
    with manifest.transaction():
        manifest.save_pending(items[:5])
    manifest.db.execute("DROP TABLE counters")  # as an index written before the count was kept
    manifest.db.commit()
    manifest.close()
    readonly = SqliteManifest(tmp_path / "m.sqlite", readonly=True)
    assert readonly.pending_count() == 5  # counted
    readonly.close()
    migrated = SqliteManifest(tmp_path / "m.sqlite")
    assert migrated.pending_count() == 5
    assert migrated.db.execute("SELECT value FROM counters").fetchone()[0] == 5
    migrated.close()


def test_a_keyword_only_index_is_searched_without_a_question_vector(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str
) -> None:
    """While no chunk has a vector (vectors deferred or off), a search does not embed the question nor run the
    vector list (at 2.47 M chunks a scan of null vectors, ~0.9 s); once vectors are there, it does."""
    from nbrecall.service import Archive

    root, index = tmp_path / "share", tmp_path / "idx"
    make_archive(root)
    settings = settings_for(index)
    store = open_store(settings, hash_embedder.dim)
    run_index([root], settings, hash_embedder, store, defer_vectors=True)
    archive = Archive(settings, _embedder=hash_embedder, _store=store)
    assert not archive.manifest.holds_vectors()
    assert archive.query_vector("ballast distribution") is None and hash_embedder.calls == []
    found = archive.search("ballast distribution PSV")
    assert found.notebooks and found.notebooks[0].notebook.endswith("ballast.ipynb")

    run_index([root], settings, hash_embedder, store)  # the queue embedded
    calls = len(hash_embedder.calls)
    assert archive.manifest.holds_vectors()  # the reader sees the run's commit
    assert archive.query_vector("ballast distribution") is not None and len(hash_embedder.calls) == calls + 1
