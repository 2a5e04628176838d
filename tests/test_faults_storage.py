"""Storage faults: a read-only index folder, a full disk, damaged index files.

Each gives one clear message (which file, what happened, what to do), never damages what was there, and the
documented rebuild works. The read-only and disk-full cases mount a small tmpfs, so they need root (or
CAP_SYS_ADMIN) and skip cleanly without it.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from nbformat import v4
from typer.testing import CliRunner

from conftest import HashEmbedder, code, write_nb
from nbrecall.cli import app
from nbrecall.config import Settings
from nbrecall.index.faults import IndexDamaged, IndexWriteError
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest.pipeline import run_index
from nbrecall.search.retrieve import retrieve


def make_corpus(root: Path, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        write_nb(
            root / f"nb{i:03d}.ipynb",
            [v4.new_markdown_cell(f"# Study {i}\nHull {i} resistance in calm water."), code(f"r{i} = {i} * 2.5", 1)],
        )


def index(root: Path, idx: Path, batch: int = 16):  # type: ignore[no-untyped-def]
    embedder = HashEmbedder()
    return run_index([root], Settings(index_dir=idx), embedder, LanceStore(idx / "lance", embedder.dim),
                     batch_notebooks=batch)


def search(idx: Path, query: str) -> list[str]:
    embedder = HashEmbedder()
    manifest = SqliteManifest(idx / "manifest.sqlite", readonly=True)
    try:
        found = retrieve(query, LanceStore(idx / "lance", embedder.dim), manifest, embedder.embed([query])[0],
                         Settings().retrieve)
    finally:
        manifest.close()
    return [nb.notebook for nb in found.notebooks]


def consistent(idx: Path) -> dict[str, int]:
    """Every indexed content has exactly its chunks, nothing twice; returns the manifest's stats."""
    manifest = SqliteManifest(idx / "manifest.sqlite", readonly=True)
    try:
        expected = {c.sha256: c.n_chunks for c in manifest.contents("indexed") if c.n_chunks}
        stats = manifest.stats()
    finally:
        manifest.close()
    store = LanceStore(idx / "lance", HashEmbedder.dim)
    assert {s: n for s, n in store.notebook_shas().items() if s in expected} == expected
    ids = store.table.search().select(["chunk_id"]).limit(None).to_arrow()["chunk_id"].to_pylist()
    assert len(ids) == len(set(ids))
    return stats


def mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 20 MB tmpfs mounted for the test (remount it `ro` or smaller inside the test)."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    point = tmp_path / "mnt"
    point.mkdir()
    mount("-t", "tmpfs", "-o", "size=20m,mode=0755", "tmpfs", str(point))
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.fixture
def hash_cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The CLI with the test embedder in place of the bundled model."""
    monkeypatch.setattr("nbrecall.index.embedder_from_settings.make_embedder",
                        lambda settings, plugins=None: HashEmbedder())
    return CliRunner()


def test_read_only_index_folder(tmp_path: Path, tmpfs: Path, hash_cli: CliRunner) -> None:
    root, idx = tmp_path / "share", tmpfs / "idx"
    make_corpus(root, 8)
    index(root, idx)
    before = search(idx, "Hull 3 resistance")
    mount("-o", "remount,ro", str(tmpfs))
    make_corpus(root, 2, start=8)
    with pytest.raises(IndexWriteError, match=r"cannot write to the index folder .*Read-only file system") as err:
        index(root, idx)
    assert str(idx) in str(err.value) and "searching a read-only index works" in str(err.value)
    # Searching a read-only index works (the manifest is opened immutable when its -shm cannot be created).
    assert search(idx, "Hull 3 resistance") == before and before[0] == "nb003.ipynb"
    assert consistent(idx)["notebooks"] == 8
    result = hash_cli.invoke(app, ["index", str(root), "--index", str(idx)])
    assert result.exit_code == 4, result.output
    assert "index error" in result.output and "Read-only file system" in result.output
    result = hash_cli.invoke(app, ["search", "--json", "Hull 3 resistance", "--index", str(idx)])
    assert result.exit_code == 0 and "nb003.ipynb" in result.stdout, result.output
    result = hash_cli.invoke(app, ["status", "--index", str(idx)])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_disk_full_keeps_the_previous_index_and_the_run_resumes(tmp_path: Path, tmpfs: Path) -> None:
    root, idx = tmp_path / "share", tmpfs / "idx"
    make_corpus(root, 10)
    index(root, idx)
    before = consistent(idx)
    mount("-o", "remount,size=6m", str(tmpfs))
    # Then a large batch of new notebooks, much more than the 6 MB left.
    words = [f"term{i}" for i in range(50_000)]
    for i in range(300):
        write_nb(
            root / f"big/{i:03d}.ipynb",
            [v4.new_markdown_cell(f"# Survey {i}\n" + " ".join(words[(i * 97 + j * 13) % 50_000] for j in range(800)))]
            + [code(" + ".join(words[(i * 31 + j) % 50_000] for j in range(60)), j) for j in range(8)],
        )
    with pytest.raises(IndexWriteError, match="no space left on the device") as err:
        index(root, idx)
    assert str(idx) in str(err.value) and "run `nbrecall index` again" in str(err.value)
    after = consistent(idx)  # what was there is intact: the batches committed before the disk filled, no more
    assert after["notebooks"] >= before["notebooks"] and after["files"] == after["notebooks"]
    assert search(idx, "Hull 7 resistance")[0] == "nb007.ipynb"
    mount("-o", "remount,size=200m", str(tmpfs))
    index(root, idx)  # space freed: the run resumes and completes
    assert consistent(idx)["notebooks"] == 310


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "zero":
        path.write_bytes(b"\0" * len(data))
    else:
        path.unlink()


def lance_data_file(idx: Path) -> Path:
    return max((idx / "lance/chunks.lance/data").iterdir(), key=lambda p: p.stat().st_size)


def latest_version_file(idx: Path) -> Path:
    return min((idx / "lance/chunks.lance/_versions").glob("*.manifest"), key=lambda p: p.name)


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path]:
    root, idx = tmp_path / "share", tmp_path / "idx"
    make_corpus(root, 12)
    index(root, idx)
    return root, idx


CASES = {
    "manifest zeroed": (lambda idx: idx / "manifest.sqlite", "zero", "search", "manifest.sqlite"),
    "manifest truncated": (lambda idx: idx / "manifest.sqlite", "truncate", "index", "manifest.sqlite"),
    "data file truncated": (lance_data_file, "truncate", "search", "the index is damaged"),
    "data file deleted": (lance_data_file, "delete", "index", ".lance"),
    "version file zeroed": (latest_version_file, "zero", "search", "_versions"),
    "version file truncated": (latest_version_file, "truncate", "index", "the index is damaged"),
    "embedding cache zeroed": (lambda idx: idx / "embeddings.sqlite", "zero", "index", "only a cache"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_file_gives_a_clear_message_and_the_rebuild_works(built: tuple[Path, Path], case: str) -> None:
    root, idx = built
    target, how, action, named = CASES[case]
    path = target(idx)
    damage(path, how)
    make_corpus(root, 1, start=12)  # so that the index run has something to write
    with pytest.raises(IndexDamaged) as err:
        if action == "search":
            search(idx, "Hull 3 resistance")
        else:
            index(root, idx)
    message = str(err.value)
    assert named in message and str(idx) in message, message
    assert "the index is damaged" in message
    # The documented rebuild: the message says what to delete; doing it and indexing again gives a sound index.
    if "only a cache" in message:
        (idx / "embeddings.sqlite").unlink()
    else:
        assert "to rebuild, delete" in message and "nbrecall index" in message
        shutil.rmtree(idx / "lance")
        for leftover in idx.glob("manifest.sqlite*"):
            leftover.unlink()
    index(root, idx)
    assert consistent(idx)["notebooks"] == 13
    assert search(idx, "Hull 3 resistance")[0] == "nb003.ipynb"


def test_cli_names_the_damaged_file(built: tuple[Path, Path], hash_cli: CliRunner) -> None:
    _root, idx = built
    damage(idx / "manifest.sqlite", "zero")
    for args in (["search", "Hull 3 resistance"], ["status"], ["serve"]):  # serve stops before it listens
        result = hash_cli.invoke(app, [*args, "--index", str(idx)])
        assert result.exit_code == 4, result.output
        flat = " ".join(result.output.split())
        assert "index error" in flat and "manifest.sqlite" in flat and "to rebuild" in flat, flat


def test_a_write_failing_between_store_and_manifest_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills after a batch's store commit, before its manifest transaction; the files then change, so
    that batch is never redone. Its chunks are invisible meanwhile, and the next run sweeps them out."""
    root, idx = tmp_path / "share", tmp_path / "idx"
    make_corpus(root, 4)
    index(root, idx)
    make_corpus(root, 2, start=4)

    def disk_full(*_args: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(SqliteManifest, "save_contents", disk_full)
    with pytest.raises(IndexWriteError, match="no space left"):
        index(root, idx)
    monkeypatch.undo()
    store = LanceStore(idx / "lance", HashEmbedder.dim)
    manifest = SqliteManifest(idx / "manifest.sqlite", readonly=True)
    written = set(store.notebook_shas()) - manifest.content_shas()
    assert len(written) == 2  # in the store, unknown to the manifest ...
    assert "nb005.ipynb" not in search(idx, "Hull 5 resistance")  # ... so invisible to search
    for i in (4, 5):
        write_nb(root / f"nb{i:03d}.ipynb", [v4.new_markdown_cell(f"# Study {i}\nRevised hull {i} resistance.")])
    report = index(root, idx)
    assert report.strays_removed == 2
    assert set(LanceStore(idx / "lance", HashEmbedder.dim).notebook_shas()) <= manifest.content_shas()
    assert consistent(idx)["notebooks"] == 6
    assert search(idx, "Revised hull 5 resistance")[0] == "nb005.ipynb"
