"""Renders in the index: fresh outputs indexed, stale notebooks flagged and ranked lower, re-index on a new render.

No kernel runs here: a render is written with the render module's own functions (`to_executable`, `write_render`)
from a hand-made `RenderResult` and hand-made fresh outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbformat import v4
from typer.testing import CliRunner

from conftest import HashEmbedder, code, stream, write_nb
from nbrecall.cli import app as cli_app
from nbrecall.config import Settings
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest.build import IndexReport
from nbrecall.ingest.pipeline import run_index
from nbrecall.ingest.renders import render_warning, with_fresh_outputs
from nbrecall.notebook.read import read_notebook
from nbrecall.render.compare import CellComparison, RenderResult
from nbrecall.render.run import to_executable, write_render
from nbrecall.service import Archive

RENDERED_AT = "2026-01-02T03:04:05+00:00"


def tank_notebook(path: Path, printed: str, marker: str = "") -> Path:
    """A small notebook; `marker` goes into the notebook metadata only (same cells, another file hash)."""
    meta = {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    if marker:
        meta["nbrecall_test"] = marker
    nb_path = write_nb(
        path,
        [
            v4.new_markdown_cell("# Tank volumes\n\nSum of the aft ballast tanks."),
            code("import tanks\ntotal = tanks.aft_total()", 1),
            code("print(f'aft ballast total: {total}')", 2, [stream(printed)]),
        ],
        meta,
    )
    raw = json.loads(nb_path.read_text())
    raw["nbformat_minor"] = 5
    for i, cell in enumerate(raw["cells"]):
        cell["id"] = f"cell-{i}"
    nb_path.write_text(json.dumps(raw, indent=1))
    return nb_path


def write_fake_render(
    out_dir: Path, nb_path: Path, status: str, reason: str = "", printed: str | None = None, ran: bool = True
) -> RenderResult:
    """A stored render of `nb_path`: per-cell statuses, and (when `ran`) an executed copy printing `printed`."""
    original = read_notebook(nb_path)
    executed = to_executable(original) if ran else None
    cell_status = {"fresh": ["same", "same"], "changed": ["same", "changed"], "stale": ["failed", "failed"]}[status]
    if executed is not None:
        executed.cells[1].execution_count = 1
        if status == "stale":
            executed.cells[1].outputs = [
                nbformat.from_dict({"output_type": "error", "ename": "ModuleNotFoundError",
                                    "evalue": "No module named 'tanks'", "traceback": []})
            ]
        else:
            executed.cells[2].execution_count = 2
            executed.cells[2].outputs = [nbformat.from_dict(stream(printed or ""))]
    result = RenderResult(
        path=str(nb_path),
        sha256=original.sha256,
        status=status,
        reason=reason,
        cells=[CellComparison(c.index, c.id, s, "") for c, s in zip(original.code_cells, cell_status, strict=True)],
        rendered_at=RENDERED_AT,
    )
    write_render(result, executed, out_dir)
    return result


def keyword_settings(tmp_path: Path) -> Settings:
    settings = Settings(index_dir=tmp_path / "idx")
    settings.embed.enabled = False  # keyword search only: a hit means the words are in the index
    return settings


def index(root: Path, settings: Settings) -> IndexReport:
    return run_index([root], settings, HashEmbedder(), LanceStore(settings.index_dir / "lance", HashEmbedder.dim))


def search(settings: Settings, query: str):  # type: ignore[no-untyped-def]
    archive = Archive(settings, _embedder=HashEmbedder())
    try:
        return archive.search(query)
    finally:
        archive.manifest.close()


def content_meta(settings: Settings, sha: str) -> dict:
    manifest = SqliteManifest(settings.index_dir / "manifest.sqlite", readonly=True)
    try:
        record = manifest.content(sha)
        assert record is not None
        return {"meta": record.meta or {}, "cells": manifest.cells(sha)}
    finally:
        manifest.close()


def test_fresh_outputs_are_what_keyword_search_finds_after_a_render(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    nb_path = tank_notebook(root / "tanks.ipynb", "aft ballast total: 1284.6 zanzibarstored\n")
    settings = keyword_settings(tmp_path)
    index(root, settings)
    assert [nb.notebook for nb in search(settings, "zanzibarstored").notebooks] == ["tanks.ipynb"]
    assert search(settings, "quokkafresh").notebooks == []

    # a render made after indexing: the next run picks it up although the file did not change
    render = write_fake_render(settings.index_dir / "renders", nb_path, "changed",
                               printed="aft ballast total: 1310.2 quokkafresh\n")
    report = index(root, settings)
    assert (report.changed, report.rerendered, report.notebooks_indexed) == (0, 1, 1)
    found = search(settings, "quokkafresh").notebooks
    assert [nb.notebook for nb in found] == ["tanks.ipynb"]
    assert not found[0].hits[0].stale
    assert search(settings, "zanzibarstored").notebooks == []  # the stored outputs are no longer indexed
    stored = content_meta(settings, render.sha256)
    meta = stored["meta"]
    assert (meta["render_status"], meta["render_reason"], meta["rendered_at"]) == ("changed", "", RENDERED_AT)
    assert meta["render_outputs"] == "fresh"
    assert [c.cell_id for c in stored["cells"]] == ["cell-0", "cell-1", "cell-2"]  # same cell ids
    assert "quokkafresh" in stored["cells"][2].outputs  # the viewer fallback and neighbourhoods agree
    assert nb_path.read_text().count("zanzibarstored") == 1  # the file itself is never touched

    # nothing changed: nothing is redone (one stat per content, no loop)
    again = index(root, settings)
    assert (again.rerendered, again.notebooks_indexed) == (0, 0)

    # the render removed: back to the file's own outputs
    for suffix in (".json", ".ipynb"):
        (settings.index_dir / "renders" / f"{render.sha256}{suffix}").unlink()
    assert index(root, settings).rerendered == 1
    assert [nb.notebook for nb in search(settings, "zanzibarstored").notebooks] == ["tanks.ipynb"]
    assert "render_status" not in content_meta(settings, render.sha256)["meta"]


def test_stale_notebook_is_flagged_and_ranked_below_an_equal_fresh_one(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    printed = "aft ballast total: 1284.6 m3\n"
    a = tank_notebook(root / "a" / "tanks.ipynb", printed, marker="a")
    b = tank_notebook(root / "b" / "tanks.ipynb", printed, marker="b")
    settings = keyword_settings(tmp_path)
    renders = settings.index_dir / "renders"
    write_fake_render(renders, a, "stale", "import error: tanks", ran=False)
    write_fake_render(renders, b, "fresh", printed=printed)
    index(root, settings)  # renders present at the first run

    def ranking() -> list[tuple[str, bool]]:
        result = search(settings, "aft ballast total")
        return [(nb.notebook, all(h.stale for h in nb.hits)) for nb in result.notebooks]

    assert ranking() == [("b/tanks.ipynb", False), ("a/tanks.ipynb", True)]
    meta_a = content_meta(settings, read_notebook(a).sha256)["meta"]
    assert (meta_a["render_status"], meta_a["render_reason"], meta_a["render_outputs"]) == (
        "stale", "import error: tanks", "original",
    )
    assert "1284.6" in content_meta(settings, read_notebook(a).sha256)["cells"][2].outputs  # original outputs

    # swap the renders: the order follows the stale flag, not the path
    write_fake_render(renders, a, "fresh", printed=printed)
    write_fake_render(renders, b, "stale", "timeout", printed=printed)
    assert index(root, settings).rerendered == 2
    assert ranking() == [("a/tanks.ipynb", False), ("b/tanks.ipynb", True)]


def test_cli_search_text_and_status_show_the_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "archive"
    printed = "aft ballast total: 1284.6 m3\n"
    a = tank_notebook(root / "a" / "tanks.ipynb", printed, marker="a")
    b = tank_notebook(root / "b" / "tanks.ipynb", printed, marker="b")
    tank_notebook(root / "c" / "tanks.ipynb", printed, marker="c")  # never rendered
    settings = keyword_settings(tmp_path)
    write_fake_render(settings.index_dir / "renders", a, "stale", "import error: tanks", ran=False)
    write_fake_render(settings.index_dir / "renders", b, "changed", printed="aft ballast total: 1300 m3\n")
    index(root, settings)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NBRECALL_CONFIG", raising=False)
    monkeypatch.setattr("nbrecall.index.embedder_from_settings.make_embedder",
                        lambda _settings, plugins=None: HashEmbedder())
    runner = CliRunner()
    res = runner.invoke(
        cli_app,
        ["search", "aft ballast total", "--index", str(settings.index_dir)],
        env={"COLUMNS": "200"},
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert "stale: import error: tanks — outputs could not be re-executed" in text
    assert "re-rendered: stale" in text and "re-rendered: changed" in text
    assert text.count("outputs could not be re-executed") == 1
    as_json = runner.invoke(
        cli_app,
        ["search", "--json", "aft ballast total", "--index", str(settings.index_dir)],
    )
    results = json.loads(as_json.stdout)["results"]
    assert set(results[0]) - {"fact"} == {  # the contract (a fact hit adds `fact`)
        "notebook", "root", "cell", "cells", "cell_id", "kind", "score", "heading", "snippet", "year", "project",
        "author", "stale", "deprecated", "family", "versions", "version_of", "checkpoint_of"}
    assert {r["notebook"] for r in results if r["stale"]} == {"a/tanks.ipynb"}

    status = runner.invoke(
        cli_app,
        ["status", "--index", str(settings.index_dir)],
        env={"COLUMNS": "200"},
    )
    assert status.exit_code == 0, status.output
    lines = [" ".join(ln.replace("│", " ").split()) for ln in status.stdout.splitlines()]
    for expected in ("fresh 0", "changed 1", "stale 1", "not rendered 1", "stale: import error: tanks 1"):
        assert expected in lines, (expected, lines)


def test_with_fresh_outputs_keeps_the_original_and_refuses_a_mismatch(tmp_path: Path) -> None:
    nb_path = tank_notebook(tmp_path / "t.ipynb", "old\n")
    original = read_notebook(nb_path)
    executed = to_executable(original)
    executed.cells[2].outputs = [nbformat.from_dict(stream("new\n"))]
    fresh_path = tmp_path / "fresh.ipynb"
    fresh_path.write_text(nbformat.writes(executed))
    merged = with_fresh_outputs(original, read_notebook(fresh_path))
    assert merged is not None and merged.sha256 == original.sha256 and merged.metadata == original.metadata
    assert merged.cells[2].outputs[0].text == "new\n" and original.cells[2].outputs[0].text == "old\n"
    assert [c.id for c in merged.cells] == [c.id for c in original.cells]
    del executed.cells[2]
    fresh_path.write_text(nbformat.writes(executed))
    assert with_fresh_outputs(original, read_notebook(fresh_path)) is None
    assert render_warning("stale", "timeout") == "stale: timeout — outputs could not be re-executed"
    assert render_warning("changed", "") is None
