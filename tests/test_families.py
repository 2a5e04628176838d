"""Notebook families: copies, `_v2`s and checkpoints found at index time, shown as one result, kept up to date."""

from __future__ import annotations

import json
import random
import shutil
from contextlib import closing
from pathlib import Path

import pytest
from nbformat import v4
from typer.testing import CliRunner

from conftest import HashEmbedder, code, stream, write_nb
from nbrecall.backends import open_manifest
from nbrecall.cli import app as cli_app
from nbrecall.config import FamilySettings, Settings
from nbrecall.index.family_store import family_store
from nbrecall.ingest.families import are_versions, shingles, signature
from nbrecall.ingest.pipeline import run_index
from nbrecall.notebook.checkpoints import checkpoint_path, is_checkpoint, saved_path
from nbrecall.records import CellRecord, SearchFilters
from nbrecall.search.retrieve import retrieve
from nbrecall.service import open_store


def ballast_cells(last: str = "rho = 1025  # sea water", author: str = "") -> list:
    """A notebook of a dozen cells; `last` is the one cell a `_v2` changes."""
    title = "# Ballast distribution\nWe size the aft ballast tanks of the supply vessel."
    cells = [v4.new_markdown_cell(title + author)]
    for i in range(10):
        cells.append(code(f"tank_{i}_volume = {i + 1} * 12.5\nprint('tank {i}', tank_{i}_volume)", i + 1,
                          [stream(f"tank {i} {(i + 1) * 12.5}\n")]))
    cells.append(code(last, 11))
    return cells


def mooring_cells() -> list:
    return [
        v4.new_markdown_cell("# Mooring loads\nCatenary pretension of the anchor lines."),
        code("pretension_kN = 1200\nanchors = 4\nline_length_m = 300\nwater_depth_m = 80\nprint(pretension_kN)", 1,
             [stream("1200\n")]),
        code("tension = pretension_kN * 1.35\nprint('design tension', tension)", 2, [stream("design tension 1620\n")]),
    ]


def write_family(root: Path) -> None:
    write_nb(root / "projects/2017/ballast.ipynb", ballast_cells())
    write_nb(root / "projects/2018/ballast_copy.ipynb", ballast_cells(author=" "))  # a copy, not byte-identical
    write_nb(root / "projects/2019/ballast_v2.ipynb", ballast_cells("rho = 1000  # fresh water trials"))
    write_nb(root / "projects/2018/mooring.ipynb", mooring_cells())


def settings_for(index: Path) -> Settings:
    settings = Settings(index_dir=index)
    settings.metadata.path_rules = [r"projects/(?P<year>\d{4})/"]
    return settings


def index(root: Path, settings: Settings):  # type: ignore[no-untyped-def]
    embedder = HashEmbedder()
    store = open_store(settings, embedder.dim)
    return run_index([root], settings, embedder, store), store, embedder


def families_by_path(settings: Settings) -> dict[str, str]:
    """Every indexed path → the smallest path of its family (readable, and independent of content hashes)."""
    with closing(open_manifest(settings, readonly=True)) as manifest:
        store = family_store(manifest)
        assert store is not None
        shas = [c.sha256 for c in manifest.contents("indexed")]
        family = store.families_of(shas)
        paths = {sha: [rel for _root, rel in manifest.paths_of(sha)] for sha in shas}
    members: dict[str, list[str]] = {}
    for sha in shas:
        members.setdefault(family[sha], []).extend(paths[sha])
    return {rel: min(group) for group in members.values() for rel in group}


def search(settings: Settings, store, embedder, query: str, **kwargs):  # type: ignore[no-untyped-def]
    with closing(open_manifest(settings, readonly=True)) as manifest:
        return retrieve(query, store, manifest, embedder.embed([query])[0], settings.retrieve,
                        kwargs.pop("filters", None), families=settings.families, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# what counts as a version


def record(source: str, outputs: str = "", cell_type: str = "code") -> CellRecord:
    return CellRecord("x", 0, "c", cell_type, None, source, outputs)


def test_one_changed_cell_of_twelve_is_a_version_and_another_notebook_is_not() -> None:
    settings = FamilySettings()
    lines = [f"value_{i} = {i} * 3.5  # step {i}" for i in range(30)]
    base = signature([record("\n".join(lines), "result 105.0")])
    v2 = signature([record("\n".join(lines[:-1] + ["value_29 = 0  # changed"]), "result 105.0")])
    other = signature([record("\n".join(f"speed_{i} = {i} / 7  # knots" for i in range(30)), "12 knots")])
    assert are_versions(base, v2, settings)
    assert not are_versions(base, other, settings)
    # a short notebook quoting three lines of a long one is not a version of it (Jaccard floor)
    short = signature([record("\n".join(lines[:6]))])
    assert not are_versions(base, short, settings)


def test_shingles_are_lines_with_whitespace_collapsed_and_punctuation_only_lines_dropped() -> None:
    found = shingles([record("x  =   1\n)\n\n   y = 2", "out   put\n---")])
    assert found == {"x = 1", "y = 2", "out put"}


def test_checkpoint_paths_map_to_their_notebook_and_back() -> None:
    assert is_checkpoint("a/b/.ipynb_checkpoints/calc-checkpoint.ipynb")
    assert not is_checkpoint("a/b/calc.ipynb")
    assert saved_path("a/b/.ipynb_checkpoints/calc-checkpoint.ipynb") == "a/b/calc.ipynb"
    assert saved_path(".ipynb_checkpoints/calc-checkpoint.ipynb") == "calc.ipynb"
    assert checkpoint_path("a/b/calc.ipynb") == "a/b/.ipynb_checkpoints/calc-checkpoint.ipynb"
    assert checkpoint_path("calc.ipynb") == ".ipynb_checkpoints/calc-checkpoint.ipynb"


# ---------------------------------------------------------------------------------------------------------
# index and search


def test_two_copies_and_a_v2_form_one_family_and_search_shows_one_entry(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    write_family(root)
    settings = settings_for(tmp_path / "index")
    report, store, embedder = index(root, settings)
    assert report.families is not None and report.families.families == 1 and report.families.in_families == 3
    family = families_by_path(settings)
    assert family["projects/2018/ballast_copy.ipynb"] == family["projects/2019/ballast_v2.ipynb"] == \
        family["projects/2017/ballast.ipynb"]
    assert family["projects/2018/mooring.ipynb"] == "projects/2018/mooring.ipynb"

    result = search(settings, store, embedder, "ballast tank volume")
    ballast = [nb for nb in result.notebooks if "ballast" in nb.notebook]
    assert len(ballast) == 1  # one entry for the family …
    entry = ballast[0]
    assert entry.n_versions == 2  # … with the others listed
    members = {"projects/2017/ballast.ipynb", "projects/2018/ballast_copy.ipynb", "projects/2019/ballast_v2.ipynb"}
    assert {v["notebook"] for v in entry.versions} == members - {entry.notebook}
    assert all(v["matched"] and v["modified"] for v in entry.versions)
    assert {v["year"] for v in entry.versions} | {entry.hits[0].year} == {2017, 2018, 2019}
    contract = entry.hits[0].contract()
    assert contract["family"] == entry.family and len(contract["versions"]) == 2
    json.dumps(contract)  # the JSON contract stays plain JSON

    every = search(settings, store, embedder, "ballast tank volume", all_versions=True)
    assert len([nb for nb in every.notebooks if "ballast" in nb.notebook]) == 3
    assert len({nb.family for nb in every.notebooks if "ballast" in nb.notebook}) == 1


def test_the_query_picks_the_member_and_a_deprecated_member_hides_no_sibling(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    write_family(root)
    write_nb(root / "projects/2019/ballast_v2.ipynb", ballast_cells("rho = 1000  # fresh water trials"),
             metadata={"tags": ["deprecated"]})
    settings = settings_for(tmp_path / "index")
    _report, store, embedder = index(root, settings)
    # only the v2 holds the fresh-water cell: it is the family's entry for that query (with deprecated ones on)
    result = search(settings, store, embedder, "fresh water trials rho",
                    filters=SearchFilters(include_deprecated=True))
    assert result.notebooks[0].notebook == "projects/2019/ballast_v2.ipynb"
    # without deprecated notebooks the v2 has no hits: a healthy sibling stands for the family
    result = search(settings, store, embedder, "ballast tank volume")
    ballast = [nb for nb in result.notebooks if "ballast" in nb.notebook]
    assert len(ballast) == 1 and ballast[0].notebook != "projects/2019/ballast_v2.ipynb"
    listed = {v["notebook"]: v for v in ballast[0].versions}
    assert listed["projects/2019/ballast_v2.ipynb"]["deprecated"] is True
    assert listed["projects/2019/ballast_v2.ipynb"]["matched"] is False


def column_cells(heading: str) -> list:
    """A timber column check; the utilisation cell sits under `heading`, which a copy may word otherwise."""
    cells = [v4.new_markdown_cell("# Timber column design")]
    for i in range(8):
        cells.append(code(f"load_{i} = {i + 2} * 4.5\nprint('load {i}', load_{i})", i + 1,
                          [stream(f"load {i} {(i + 2) * 4.5}\n")]))
    cells.append(v4.new_markdown_cell(heading))
    cells.append(code("area = b * h", 9))
    cells.append(code("eta_y = sigma_cd / (k_c_y * f_c0d)\nprint('eta_y', eta_y)", 10, [stream("eta_y 0.88\n")]))
    return cells


def test_a_hidden_copys_hit_lends_its_score_to_the_shown_copys_chunk_of_the_same_content(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    # the same notebook twice; only the older copy's heading above the utilisation cell says what the query asks
    write_nb(root / "projects/2017/column.ipynb", column_cells("## Utilisation check about the y axis"))
    write_nb(root / "projects/2019/column_copy.ipynb", column_cells("## Section values"))
    settings = settings_for(tmp_path / "index")
    settings.families.tie_margin = 0.9  # the recent copy stands for the family although the older one scores more
    _report, store, embedder = index(root, settings)
    query = "utilisation check about the y axis eta_y"
    every = {nb.notebook: nb for nb in search(settings, store, embedder, query, all_versions=True).notebooks}
    older, copy = every["projects/2017/column.ipynb"], every["projects/2019/column_copy.ipynb"]
    assert older.family == copy.family
    best = older.hits[0]  # the content's best hit is in the hidden copy: the utilisation cell, under its heading
    assert best.cell == 11 and best.score > 2 * max(h.score for h in copy.hits if h.cell == 11)

    result = search(settings, store, embedder, query)
    entry = next(nb for nb in result.notebooks if nb.family == copy.family)
    assert entry.notebook == "projects/2019/column_copy.ipynb"
    # the shown copy's own chunk of that cell (same kind, same cells) ranks with the hidden copy's score, first
    first = entry.hits[0]
    assert (first.notebook, first.cell, first.kind) == (entry.notebook, 11, best.kind)
    assert first.score == pytest.approx(best.score) and first.version_of is None
    assert first.chunk_seq is not None
    # a chunk the copies do not share lends nothing: the older copy's heading and the cell under it
    heading = next(h for h in older.hits if h.cell in (9, 10))
    assert all(h.score < 0.5 * heading.score for h in entry.hits if h.cell in (9, 10))


def test_a_value_only_a_checkpoint_holds_is_found_and_labelled(tmp_path: Path, model_cache: Path) -> None:
    root = tmp_path / "archive"
    folder = root / "projects/2018"
    write_nb(folder / "stability.ipynb", ballast_cells())
    write_nb(folder / ".ipynb_checkpoints/stability-checkpoint.ipynb",
             ballast_cells("metacentric_height_m = 1.87\nprint('GM', metacentric_height_m)"))
    write_nb(root / "projects/2018/mooring.ipynb", mooring_cells())
    settings = settings_for(tmp_path / "index")
    _report, store, embedder = index(root, settings)
    family = families_by_path(settings)
    assert family["projects/2018/.ipynb_checkpoints/stability-checkpoint.ipynb"] == family[
        "projects/2018/stability.ipynb"]

    found = search(settings, store, embedder, "metacentric_height_m GM")
    top = found.notebooks[0]
    assert top.notebook == "projects/2018/.ipynb_checkpoints/stability-checkpoint.ipynb"
    assert top.checkpoint_of == "projects/2018/stability.ipynb"
    assert top.hits[0].contract()["checkpoint_of"] == "projects/2018/stability.ipynb"
    # content both hold: the saved notebook is the entry, the checkpoint only listed
    shared = search(settings, store, embedder, "ballast tank volume")
    entries = [nb for nb in shared.notebooks if "stability" in nb.notebook]
    assert [nb.notebook for nb in entries] == ["projects/2018/stability.ipynb"]
    assert entries[0].checkpoint_of is None
    assert entries[0].versions[0]["checkpoint_of"] == "projects/2018/stability.ipynb"
    # a question both answer in part: one result for the family, and the checkpoint's own cell labelled in it
    mixed = search(settings, store, embedder, "ballast tank volume metacentric_height_m")
    entries = [nb for nb in mixed.notebooks if "stability" in nb.notebook]
    assert len(entries) == 1
    assert any(h.checkpoint_of == "projects/2018/stability.ipynb" and "metacentric" in h.snippet
               for h in entries[0].hits)

    runner = CliRunner()
    out = runner.invoke(cli_app, ["search", "metacentric_height_m GM", "--index", str(settings.index_dir)],
                        env={"NBRECALL_MODEL_CACHE": str(model_cache)})
    assert out.exit_code == 0, out.output
    assert "in an older checkpoint of projects/2018/stability.ipynb" in out.output

    # the setting that restores skipping: checkpoints are not read at all
    skip = settings_for(tmp_path / "index-skip")
    skip.discover.checkpoints = "skip"
    report, store, embedder = index(root, skip)
    assert report.files == 2
    assert not search(skip, store, embedder, "metacentric_height_m GM").notebooks[0].notebook.startswith(
        "projects/2018/.ipynb_checkpoints")


def test_adding_and_deleting_members_updates_families_incrementally(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    write_family(root)
    settings = settings_for(tmp_path / "index")
    index(root, settings)

    # a new copy joins the family; only it is placed
    write_nb(root / "projects/2020/ballast_final.ipynb", ballast_cells("rho = 1025  # final"))
    report, _store, _embedder = index(root, settings)
    assert report.families is not None and (report.families.placed, report.families.left) == (1, 0)
    family = families_by_path(settings)
    assert family["projects/2020/ballast_final.ipynb"] == family["projects/2017/ballast.ipynb"]

    # a member that changes into another notebook leaves the family (its old content is gone)
    write_nb(root / "projects/2018/ballast_copy.ipynb", mooring_cells() + [code("extra = 1")])
    report, _store, _embedder = index(root, settings)
    assert (report.families.placed, report.families.left) == (1, 1)
    family = families_by_path(settings)
    assert family["projects/2018/ballast_copy.ipynb"] == family["projects/2018/mooring.ipynb"]
    assert family["projects/2019/ballast_v2.ipynb"] == family["projects/2017/ballast.ipynb"]

    # deleting members: the rest stay together; the last one alone is a family of one
    (root / "projects/2020/ballast_final.ipynb").unlink()
    (root / "projects/2017/ballast.ipynb").unlink()
    report, _store, _embedder = index(root, settings)
    assert (report.families.placed, report.families.left, report.families.resplit) == (0, 2, 1)
    family = families_by_path(settings)
    assert family["projects/2019/ballast_v2.ipynb"] == "projects/2019/ballast_v2.ipynb"
    assert report.families.families == 1  # mooring and its changed copy

    # the incremental result is the one a fresh index of the same archive gives
    fresh = settings_for(tmp_path / "fresh")
    index(root, fresh)
    assert families_by_path(fresh) == family


def test_a_member_that_bridged_two_others_splits_them_when_it_goes(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    a = [f"line_a_{i} = {i}" for i in range(12)]
    b = [f"line_b_{i} = {i}" for i in range(12)]
    write_nb(root / "left.ipynb", [code("\n".join(a + b[:4]))])
    write_nb(root / "bridge.ipynb", [code("\n".join(a[4:] + b[:8]))])
    write_nb(root / "right.ipynb", [code("\n".join(a[8:] + b))])
    settings = settings_for(tmp_path / "index")
    settings.families.threshold, settings.families.min_jaccard = 0.5, 0.3
    index(root, settings)
    family = families_by_path(settings)
    assert family["left.ipynb"] == family["bridge.ipynb"] == family["right.ipynb"]
    (root / "bridge.ipynb").unlink()
    index(root, settings)
    family = families_by_path(settings)
    assert family["left.ipynb"] != family["right.ipynb"]


def test_other_family_settings_place_every_notebook_again(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    write_family(root)
    settings = settings_for(tmp_path / "index")
    index(root, settings)
    settings.families.threshold = 1.01  # nothing is a version any more
    report, _store, _embedder = index(root, settings)
    assert report.families is not None and report.families.rebuilt and report.families.placed == 4
    assert report.families.families == 0


def test_an_index_made_before_families_gets_them_from_its_cells(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    write_family(root)
    settings = settings_for(tmp_path / "index")
    settings.families.enabled = False
    index(root, settings)
    with closing(open_manifest(settings, readonly=True)) as manifest:
        assert family_store(manifest) is None or not family_store(manifest).families_of(
            c.sha256 for c in manifest.contents("indexed"))
    settings.families.enabled = True
    report, _store, _embedder = index(root, settings)
    assert report.notebooks_indexed == 0 and report.families is not None and report.families.families == 1


def test_search_json_and_the_cli_list_the_other_versions(tmp_path: Path, model_cache: Path) -> None:
    root = tmp_path / "archive"
    write_family(root)
    settings = settings_for(tmp_path / "index")
    index(root, settings)
    runner = CliRunner(env={"NBRECALL_MODEL_CACHE": str(model_cache)})
    out = runner.invoke(cli_app, ["search", "ballast tank volume", "--json", "-k", "30", "--index",
                                  str(settings.index_dir)])
    assert out.exit_code == 0, out.output
    results = json.loads(out.output)["results"]
    ballast = {r["notebook"] for r in results if "ballast" in r["notebook"]}
    assert len(ballast) == 1
    first = next(r for r in results if "ballast" in r["notebook"])
    assert first["family"] and {v["notebook"] for v in first["versions"]} | ballast == {
        "projects/2017/ballast.ipynb", "projects/2018/ballast_copy.ipynb", "projects/2019/ballast_v2.ipynb"}
    out = runner.invoke(cli_app, ["search", "ballast tank volume", "--all-versions", "--json", "-k", "30", "--index",
                                  str(settings.index_dir)])
    assert len({r["notebook"] for r in json.loads(out.output)["results"] if "ballast" in r["notebook"]}) == 3
    out = runner.invoke(cli_app, ["search", "ballast tank volume", "--index", str(settings.index_dir)])
    assert "2 other versions" in out.output


def test_families_on_postgresql_match_the_embedded_index(tmp_path: Path, pg_url: str, pg_schema: str) -> None:
    root = tmp_path / "archive"
    write_family(root)
    embedded = settings_for(tmp_path / "index")
    index(root, embedded)
    shared = settings_for(tmp_path / "pg-local")
    shared.store.url, shared.store.schema = pg_url, pg_schema
    report, store, embedder = index(root, shared)
    assert report.families is not None and report.families.families == 1
    assert families_by_path(shared) == families_by_path(embedded)
    (root / "projects/2017/ballast.ipynb").unlink()
    shutil.copy(root / "projects/2018/mooring.ipynb", root / "projects/2018/mooring_copy.ipynb")
    index(root, embedded)
    index(root, shared)
    assert families_by_path(shared) == families_by_path(embedded)
    result = search(shared, store, embedder, "ballast tank volume")
    assert len([nb for nb in result.notebooks if "ballast" in nb.notebook]) == 1


@pytest.mark.parametrize("value", ["sometimes"])
def test_an_unknown_checkpoints_setting_is_refused(tmp_path: Path, value: str) -> None:
    root = tmp_path / "archive"
    write_family(root)
    settings = settings_for(tmp_path / "index")
    settings.discover.checkpoints = value
    with pytest.raises(ValueError, match="checkpoints"):
        index(root, settings)


def _mates_as_listed_before(rows: list[tuple[int, int, str]], wanted: set[str], limit: int) -> dict[str, list[str]]:
    """The candidates as the family step listed them before they were integer arrays (sets of hashes): the
    reference `candidate_pairs` must agree with, bounded buckets included."""
    out: dict[str, set[str]] = {}
    buckets: dict[tuple[int, int], list[str]] = {}
    for band, key, sha in sorted(rows):
        buckets.setdefault((band, key), []).append(sha)
    for bucket in buckets.values():
        if len(bucket) < 2:
            continue
        head = bucket[:limit]
        for sha in bucket:
            if sha in wanted:
                out.setdefault(sha, set()).update(head)
        for sha in head:
            if sha in wanted and len(bucket) > limit:
                out[sha].update(bucket[limit : 2 * limit])
    return {sha: sorted(found - {sha})[:limit] for sha, found in out.items() if found - {sha}}


@pytest.mark.parametrize("limit", [2, 5, 400])
def test_candidate_pairs_as_integer_arrays_are_the_mates_listed_before(limit: int,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from nbrecall.ingest import families

    rng = random.Random(limit)
    shas = [f"{rng.getrandbits(64):016x}" for _ in range(60)]
    # two bands of 4 buckets (buckets of ~15: cut at 2 and 5), four of 40 (small buckets)
    rows = sorted({(band, rng.randrange(4 if band < 2 else 40), sha) for sha in shas for band in range(6)})
    wanted = set(rng.sample(shas, 40))
    monkeypatch.setattr(families, "_MERGE_EVERY", 7)  # merged many times, as on a large archive
    pairs = families.candidate_pairs(iter(rows), wanted, limit)
    assert pairs.names == sorted(pairs.names)
    got: dict[str, list[str]] = {}
    for s, d in zip(pairs.src.tolist(), pairs.dst.tolist(), strict=True):
        got.setdefault(pairs.names[s], []).append(pairs.names[d])
    expected = _mates_as_listed_before(rows, wanted, limit)
    assert got == expected
    assert set(got) <= wanted
    longest = max(len(m) for m in expected.values())
    assert longest == limit if limit < 400 else longest < limit  # the bound applied where buckets are large


def test_signatures_and_bands_are_datasketchs() -> None:
    """The MinHash and the LSH bands are computed with numpy (no scipy in the workers): datasketch's own
    `affine32` MinHash and `MinHashLSH` parameters are the reference, so stored signatures stay comparable."""
    import zlib

    import numpy as np
    from datasketch import MinHash, MinHashLSH

    from nbrecall.ingest.families import _LINES_AT_ONCE, optimal_bands

    rng = random.Random(7)
    many = [f"x = {rng.random()} # line {i}" for i in range(_LINES_AT_ONCE * 2 + 5)]  # several parts
    for lines in ([], ["only one line"], [f"row {i}: {i * i}" for i in range(50)], many):
        cells = [CellRecord("sha", 0, "c0", "code", None, "\n".join(lines), "")]
        for num_perm in (64, 128):
            ours = signature(cells, num_perm)
            theirs = MinHash(num_perm=num_perm, seed=1, scheme="affine32", hashfunc=zlib.crc32)
            theirs.update_batch([line.encode("utf-8") for line in shingles(cells)])
            assert ours.size == len(set(lines))
            assert np.array_equal(ours.array(), np.asarray(theirs.hashvalues, dtype=np.uint32))
    for num_perm in (32, 128):
        for threshold in (0.1, 0.3, 0.5, 0.8):
            lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
            assert optimal_bands(threshold, num_perm) == (lsh.b, lsh.r), (threshold, num_perm)


def test_the_family_step_and_the_workers_import_neither_datasketch_nor_scipy() -> None:
    """datasketch's package imports its LSH modules and scipy with them (46 MiB in each process): the indexer's
    signatures and bands do without."""
    import subprocess
    import sys

    script = ("import sys\n"
              "from nbrecall.config import FamilySettings\n"
              "from nbrecall.ingest import pipeline, worker\n"
              "from nbrecall.ingest.families import Banding, signature\n"
              "from nbrecall.records import CellRecord\n"
              "signature([CellRecord('s', 0, 'c', 'code', None, 'a = 1\\nb = 2', '')])\n"
              "Banding.for_settings(FamilySettings())\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'datasketch')))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
