"""Notebooks inside zip archives: indexed under `archive.zip/inner/x.ipynb`, read back from the archive, kept in step
with it from run to run, and each member that cannot be read named with its reason."""

from __future__ import annotations

import contextlib
import json
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

from conftest import HashEmbedder, code, result
from nbrecall.config import Settings
from nbrecall.notebook.archives import list_members, split_member
from nbrecall.notebook.files import notebook_exists, notebook_path, read_notebook_file, walk_notebooks
from nbrecall.notebook.read import read_notebook
from nbrecall.service import Archive
from test_pipeline import backend, consistent, index_once, search, settings_for  # noqa: F401 - a fixture

ZIP = "old/2017-042.zip"
BALLAST = f"{ZIP}/calc/ballast.ipynb"


def notebook_bytes(*cells: nbformat.NotebookNode) -> bytes:
    nb = v4.new_notebook(cells=list(cells), metadata={"kernelspec": {"name": "python3", "language": "python",
                                                                      "display_name": "Python 3"}})
    return nbformat.writes(nb).encode()


BALLAST_NB = notebook_bytes(v4.new_markdown_cell("# Ballast\nTotal ballast of the 130 m vessel."),
                            code("total_ballast = 3803.0\ntotal_ballast", 1, [result("3803.0")]))
MOORING_NB = notebook_bytes(v4.new_markdown_cell("# Mooring\nMooring line tension."),
                            code("tension_kn = 812.5\ntension_kn", 1, [result("812.5")]))


def write_zip(path: Path, members: dict[str, bytes], encrypted: tuple[str, ...] = ()) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as handle:
        for name, data in members.items():
            handle.writestr(zipfile.ZipInfo(name, date_time=(2017, 5, 4, 12, 0, 0)), data)
    if encrypted:  # the flag an encrypting archiver sets, in the central directory (zipfile cannot encrypt)
        raw = bytearray(path.read_bytes())
        start = 0
        while (start := raw.find(b"PK\x01\x02", start)) >= 0:
            length = int.from_bytes(raw[start + 28:start + 30], "little")
            if raw[start + 46:start + 46 + length].decode() in encrypted:
                raw[start + 8] |= 0x1
            start += 46
        path.write_bytes(bytes(raw))


def share(root: Path) -> None:
    write_zip(root / ZIP, {
        "calc/ballast.ipynb": BALLAST_NB,
        "calc/.hidden.ipynb": MOORING_NB,
        "__MACOSX/calc/._ballast.ipynb": b"\x00\x05\x16\x07 resource fork",
        "data/loads.csv": b"a,b\n1,2\n",
        "nested.zip": b"PK not entered",
    })
    (root / "notes.ipynb").write_bytes(notebook_bytes(v4.new_markdown_cell("# Notes\nMeeting notes.")))


def test_members_are_listed_with_the_walks_rules_and_read_without_extracting(tmp_path: Path) -> None:
    share(tmp_path)
    assert [m.name for m in list_members(tmp_path / ZIP)] == ["calc/ballast.ipynb"]
    walked = [p.relative_to(tmp_path).as_posix() for p in walk_notebooks(tmp_path, archives=True)]
    assert walked == ["notes.ipynb", BALLAST]
    assert [p.name for p in walk_notebooks(tmp_path)] == ["notes.ipynb"]  # archives are opened only when asked
    path = tmp_path / BALLAST
    assert split_member(path) == (tmp_path / ZIP, "calc/ballast.ipynb")
    assert notebook_exists(path) and not notebook_exists(tmp_path / ZIP / "calc/other.ipynb")
    assert read_notebook_file(path) == BALLAST_NB
    assert read_notebook(path, display_path=BALLAST).cells[1].source.startswith("total_ballast")
    assert list(tmp_path.rglob("ballast.ipynb")) == []  # nothing was extracted


def test_a_zip_archive_is_indexed_searched_and_kept_in_step(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str  # noqa: F811 - the fixture
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    share(root)
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.files == 2 and report.quarantined == []
    hits = search(index, store, hash_embedder, "total ballast").hits(5)
    assert hits[0].notebook == BALLAST and hits[0].cell == 1
    consistent(index, store)

    # unchanged archive: nothing is read from it again
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.hashed == 0 and report.chunks_written == 0

    # the archive rewritten: a member changed is indexed again, a member gone leaves the index
    changed = BALLAST_NB.replace(b"3803.0", b"3911.5")
    write_zip(root / ZIP, {"calc/ballast.ipynb": changed, "calc/mooring.ipynb": MOORING_NB})
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.changed == 2 and report.deleted_files == 0
    found = {h.notebook for h in search(index, store, hash_embedder, "mooring line tension").hits(5)}
    assert f"{ZIP}/calc/mooring.ipynb" in found
    write_zip(root / ZIP, {"calc/ballast.ipynb": changed})
    report, store, _ = index_once(root, index, hash_embedder)
    assert report.deleted_files == 1
    assert f"{ZIP}/calc/mooring.ipynb" not in {h.notebook for h in search(index, store, hash_embedder,
                                                                          "mooring line tension").hits(5)}
    consistent(index, store)

    # the viewer and the answers read the notebook back from the archive
    settings = settings_for(index)
    archive = Archive(settings)
    sha = search(index, store, hash_embedder, "total ballast").hits(1)[0].nb_sha
    path = archive.notebook_file(sha)
    assert path is not None and path == notebook_path(str(root.resolve()), BALLAST)
    assert b"3911.5" in read_notebook_file(path)


def test_members_that_cannot_be_read_are_named_and_a_damaged_archive_keeps_its_notebooks(
    tmp_path: Path, hash_embedder: HashEmbedder
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    write_zip(root / ZIP, {"calc/ballast.ipynb": BALLAST_NB, "calc/locked.ipynb": MOORING_NB,
                           "calc/huge.ipynb": notebook_bytes(code("x = 1\n" * 40_000))},
              encrypted=("calc/locked.ipynb",))
    settings = settings_for(index)
    settings.discover.max_file_mb = 0.1
    from nbrecall.backends import open_store
    from nbrecall.ingest.pipeline import run_index

    store = open_store(settings, hash_embedder.dim)
    report = run_index([root], settings, hash_embedder, store)
    reasons = dict(report.quarantined)
    assert set(reasons) == {f"{ZIP}/calc/locked.ipynb", f"{ZIP}/calc/huge.ipynb"}
    assert "encrypted inside 2017-042.zip" in reasons[f"{ZIP}/calc/locked.ipynb"]
    assert "max_file_mb" in reasons[f"{ZIP}/calc/huge.ipynb"]

    # a damaged archive (a copy cut short) is no evidence that its notebooks are gone
    data = (root / ZIP).read_bytes()
    (root / ZIP).write_bytes(data[: len(data) // 3])
    report = run_index([root], settings, hash_embedder, store)
    assert report.deleted_files == 0 and report.unlisted and report.unlisted[0][1] == ZIP
    assert "not a readable zip archive" in report.unlisted[0][2]
    assert search(index, store, hash_embedder, "total ballast").hits(1)[0].notebook == BALLAST


def test_a_zip_archive_given_as_the_root_and_archives_switched_off(
    tmp_path: Path, hash_embedder: HashEmbedder
) -> None:
    root = tmp_path / "2017-042.zip"
    write_zip(root, {"calc/ballast.ipynb": BALLAST_NB})
    report, store, _ = index_once(root, tmp_path / "idx", hash_embedder)
    assert report.files == 1 and report.quarantined == []
    hit = search(tmp_path / "idx", store, hash_embedder, "total ballast").hits(1)[0]
    assert hit.notebook == "calc/ballast.ipynb"
    assert read_notebook_file(notebook_path(str(root.resolve()), hit.notebook)) == BALLAST_NB

    share(tmp_path / "share")
    settings = settings_for(tmp_path / "idx2")
    settings.discover.zip_archives = False
    from nbrecall.backends import open_store
    from nbrecall.ingest.pipeline import run_index

    report = run_index([tmp_path / "share"], settings, hash_embedder, open_store(settings, hash_embedder.dim))
    assert report.files == 1 and report.unlisted == []


@pytest.mark.parametrize("name", ["../escape.ipynb", "/abs/olute.ipynb"])
def test_a_member_named_outside_its_archive_is_never_read(tmp_path: Path, name: str) -> None:
    write_zip(tmp_path / "a.zip", {name: MOORING_NB, "in/side.ipynb": BALLAST_NB})
    assert [m.name for m in list_members(tmp_path / "a.zip")] == ["in/side.ipynb"]
    assert json.loads(read_notebook_file(tmp_path / "a.zip/in/side.ipynb"))["cells"]
    assert Settings().discover.zip_archives


def test_a_content_a_plain_file_also_holds_is_cited_under_the_file_not_the_backup_zip(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str  # noqa: F811 - the fixture
) -> None:
    root, index = tmp_path / "share", tmp_path / "idx"
    # the backup sorts first ("backups" < "projects"), and it is walked first
    write_zip(root / "backups/2018.zip", {"projects/ballast.ipynb": BALLAST_NB})
    (root / "projects").mkdir(parents=True)
    (root / "projects/ballast.ipynb").write_bytes(BALLAST_NB)
    index_once(root, index, hash_embedder)
    settings = settings_for(index)
    store = index_once(root, index, hash_embedder)[1]
    assert search(index, store, hash_embedder, "total ballast").hits(1)[0].notebook == "projects/ballast.ipynb"
    archive = Archive(settings)
    sha = search(index, store, hash_embedder, "total ballast").hits(1)[0].nb_sha
    assert archive.manifest.paths_of(sha)[0][1] == "projects/ballast.ipynb"


def test_a_plain_copy_that_appears_after_the_zip_was_indexed_takes_over_the_citation(
    tmp_path: Path, hash_embedder: HashEmbedder, backend: str  # noqa: F811 - the fixture
) -> None:
    root2, index2 = tmp_path / "share2", tmp_path / "idx2"
    write_zip(root2 / "a-backups/2018.zip", {"projects/ballast.ipynb": BALLAST_NB})
    store = index_once(root2, index2, hash_embedder)[1]
    assert search(index2, store, hash_embedder, "total ballast").hits(1)[0].notebook.startswith("a-backups/2018.zip/")
    (root2 / "projects").mkdir()
    (root2 / "projects/ballast.ipynb").write_bytes(BALLAST_NB)
    report, store, _ = index_once(root2, index2, hash_embedder)
    assert report.chunks_written == 0  # the same content: nothing is chunked again
    assert search(index2, store, hash_embedder, "total ballast").hits(1)[0].notebook == "projects/ballast.ipynb"
    archive2 = Archive(settings_for(index2))
    assert [(c.rel) for c in archive2.manifest.contents("indexed")] == ["projects/ballast.ipynb"]


def test_a_damaged_archive_raises_only_errors_the_run_reports(tmp_path: Path) -> None:
    # archives cut short, with bytes changed, or with their end glued to garbage: zipfile raises NotImplementedError,
    # zlib.error and more besides BadZipFile, and any of them escaping would stop a whole indexing run
    import random

    from nbrecall.notebook.archives import read_member

    write_zip(tmp_path / "good.zip", {f"a/n{i}.ipynb": b'{"cells": []}' * 100 for i in range(5)})
    data = (tmp_path / "good.zip").read_bytes()
    path = tmp_path / "x.zip"
    # a member's compressed bytes overwritten, its headers intact: the deflate stream itself is broken
    with zipfile.ZipFile(tmp_path / "good.zip") as handle:
        info = handle.getinfo("a/n0.ipynb")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    broken = bytearray(data)
    broken[start:start + info.compress_size] = b"\xff" * info.compress_size
    path.write_bytes(bytes(broken))
    with pytest.raises(OSError, match="cannot read it from x.zip"):
        read_member(path, "a/n0.ipynb", 10**6)
    for seed in range(1, 5):
        rng = random.Random(seed)
        for trial in range(300):
            damaged = bytearray(data)
            if trial % 3 == 0:
                damaged = damaged[: rng.randrange(len(damaged))]
            elif trial % 3 == 1:
                for _ in range(5):
                    damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            else:
                damaged = bytearray(rng.randbytes(rng.randrange(1, 200))) + damaged[-22:]
            path.write_bytes(bytes(damaged))
            try:
                members = list_members(path)
            except OSError:
                continue
            for member in members:
                with contextlib.suppress(OSError):  # the errors the run reports; anything else fails the test
                    read_member(path, member.name, 10**6)
