"""Discovery and symbolic links: nothing outside the roots is indexed unless `follow_symlinks` says so; then only
files the indexing user may read, and `nbrecall status` lists what came from outside."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from nbformat import v4
from typer.testing import CliRunner

from conftest import HashEmbedder, code, stream, write_nb
from nbrecall.cli import app as cli_app
from nbrecall.config import Settings
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest import discover as discover_module
from nbrecall.ingest.discover import LINK_OUT, LINK_UNREADABLE
from nbrecall.ingest.pipeline import run_index


@pytest.fixture()
def share(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "share", tmp_path / "elsewhere"
    write_nb(root / "calc.ipynb", [v4.new_markdown_cell("# Calc"), code("x = 1", 1, [stream("1\n")])])
    write_nb(outside / "secret.ipynb", [v4.new_markdown_cell("# Payroll secret zanzibar")])
    write_nb(outside / "folder" / "deep.ipynb", [v4.new_markdown_cell("# Folder secret quokka")])
    (root / "secret.ipynb").symlink_to(outside / "secret.ipynb")  # a file link out of the root
    (root / "copy.ipynb").symlink_to(root / "calc.ipynb")  # a link that stays inside
    (root / "linked").symlink_to(outside / "folder", target_is_directory=True)  # a folder link out
    return root, outside


def index(root: Path, tmp_path: Path, follow: bool) -> tuple[Settings, SqliteManifest]:
    settings = Settings(index_dir=tmp_path / ("idx-follow" if follow else "idx"))
    settings.discover.follow_symlinks = follow
    embedder = HashEmbedder()
    run_index([root], settings, embedder, LanceStore(settings.index_dir / "lance", embedder.dim))
    return settings, SqliteManifest(settings.index_dir / "manifest.sqlite", readonly=True)


def indexed_paths(manifest: SqliteManifest) -> set[str]:
    return {rel for rec in manifest.contents("indexed") for _root, rel in manifest.paths_of(rec.sha256)}


def quarantined(manifest: SqliteManifest) -> dict[str, str]:
    return {rel: rec.reason for rec in manifest.contents("quarantined") for _r, rel in manifest.paths_of(rec.sha256)}


def test_links_out_of_the_root_are_not_followed_by_default(share: tuple[Path, Path], tmp_path: Path) -> None:
    root, _outside = share
    settings, manifest = index(root, tmp_path, follow=False)
    try:
        assert indexed_paths(manifest) == {"calc.ipynb", "copy.ipynb"}  # the link inside the root is read
        assert quarantined(manifest) == {"secret.ipynb": LINK_OUT}  # said, with what to do about it
        assert manifest.last_run().get("outside_links") == []
    finally:
        manifest.close()
    env = {"NBRECALL_CONFIG": "", "NBRECALL_INDEX": "", "COLUMNS": "250"}
    status = CliRunner().invoke(cli_app, ["status", "--index", str(settings.index_dir)], env=env)
    assert status.exit_code == 0 and "secret.ipynb" in status.output and "follow_symlinks" in status.output
    assert "read through symbolic links" not in status.output


def test_with_follow_symlinks_they_are_indexed_and_status_says_which(share: tuple[Path, Path], tmp_path: Path) -> None:
    root, outside = share
    settings, manifest = index(root, tmp_path, follow=True)
    try:
        assert indexed_paths(manifest) == {"calc.ipynb", "copy.ipynb", "secret.ipynb", "linked/deep.ipynb"}
        assert quarantined(manifest) == {}
        links = {rel: target for rel, target in manifest.last_run()["outside_links"]}
        assert links == {
            "secret.ipynb": os.path.realpath(outside / "secret.ipynb"),
            "linked/deep.ipynb": os.path.realpath(outside / "folder" / "deep.ipynb"),
        }
    finally:
        manifest.close()
    env = {"NBRECALL_CONFIG": "", "NBRECALL_INDEX": "", "COLUMNS": "250"}
    status = CliRunner().invoke(cli_app, ["status", "--index", str(settings.index_dir)], env=env)
    assert status.exit_code == 0, status.output
    assert "2 notebook(s) read through symbolic links out of the roots" in status.output
    assert "linked/deep.ipynb" in status.output and str(os.path.realpath(outside)) in status.output


def test_with_follow_symlinks_only_readable_targets(share: tuple[Path, Path], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = share
    secret = os.path.realpath(outside / "secret.ipynb")
    real_access = os.access

    def access(path: str, mode: int, **kwargs: object) -> bool:  # as a user without read permission there
        return False if os.fspath(path) == secret else real_access(path, mode, **kwargs)

    monkeypatch.setattr(discover_module.os, "access", access)
    _settings, manifest = index(root, tmp_path, follow=True)
    try:
        assert "secret.ipynb" not in indexed_paths(manifest)
        assert quarantined(manifest) == {"secret.ipynb": LINK_UNREADABLE}
        assert [rel for rel, _t in manifest.last_run()["outside_links"]] == ["linked/deep.ipynb"]
    finally:
        manifest.close()


def test_a_root_that_is_itself_a_link_is_read(share: tuple[Path, Path], tmp_path: Path) -> None:
    root, _outside = share
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    _settings, manifest = index(alias, tmp_path, follow=False)
    try:
        assert indexed_paths(manifest) == {"calc.ipynb", "copy.ipynb"}
    finally:
        manifest.close()


@pytest.fixture(params=["lance", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    settings = Settings(index_dir=tmp_path / "idx-backend")
    if request.param == "postgres":
        settings.store.url = request.getfixturevalue("pg_url")
        settings.store.schema = request.getfixturevalue("pg_schema")
    return settings


def test_both_manifests_page_cells_and_keep_the_run_summary(share: tuple[Path, Path], store_settings: Settings) -> None:
    """What the viewer and `status` read, on the embedded manifest and on PostgreSQL alike."""
    from nbrecall.backends import open_manifest, open_store

    root, _outside = share
    write_nb(root / "long.ipynb", [code(f"v = {i}", i + 1, [stream(f"{i}\n")]) for i in range(7)])
    store_settings.discover.follow_symlinks = True
    embedder = HashEmbedder()
    run_index([root], store_settings, embedder, open_store(store_settings, embedder.dim))
    manifest = open_manifest(store_settings, readonly=True)
    try:
        sha = manifest.find_by_path("long.ipynb")
        assert sha is not None
        every = manifest.cells(sha)
        assert [c.idx for c in every] == list(range(7))
        assert [c.idx for c in manifest.cells(sha, 2, 5)] == [2, 3, 4]
        assert manifest.cells(sha, 6, 99)[0].source == "v = 6"
        assert manifest.cell_index(sha, every[4].cell_id) == 4 and manifest.cell_index(sha, "nope") is None
        assert {rel for rel, _t in manifest.last_run()["outside_links"]} == {"secret.ipynb", "linked/deep.ipynb"}
    finally:
        manifest.close()
