"""The scale-corpus generator (bench/scale_corpus.py): deterministic, laid out like a share, valid notebooks, and
the malformed and duplicate files it says it wrote. Runs on three hand-built notebooks, not ../shared/corpus."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
from nbformat import v4

LAYOUT = re.compile(
    r"^(projects/(?P<year>20[0-9]{2})/(?P<code>[0-9]{2}-[0-9]{3})|reference/[a-z]+|scratch/[a-z]+)/[^/]+\.ipynb$"
)
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "bench" / "scale_corpus.py"
    spec = importlib.util.spec_from_file_location("scale_corpus", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_corpus"] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


def _sources(folder: Path) -> Path:
    folder.mkdir()
    ballast = v4.new_notebook(
        cells=[
            v4.new_markdown_cell("# Ballast distribution"),
            v4.new_code_cell("import numpy as np\ntank_volumes = [412.5, 388.25, 1203.0]"),
            v4.new_markdown_cell("## Aft tanks\nUses `tank_volumes`."),
            v4.new_code_cell(
                "total_ballast = sum(tank_volumes)\ntotal_ballast",
                outputs=[v4.new_output("execute_result", {"text/plain": "2003.75"}, execution_count=2)],
                execution_count=2,
            ),
            v4.new_markdown_cell("## Forward tanks"),
            v4.new_code_cell(
                "for tank_name in ['F1', 'F2']:\n    print(tank_name, 125.5)",
                outputs=[v4.new_output("stream", name="stdout", text="F1 125.5\nF2 125.5\n")],
            ),
            v4.new_markdown_cell("## Plot"),
            v4.new_code_cell("plot_handle = plt.plot(tank_volumes)",
                             outputs=[v4.new_output("display_data", {"image/png": PNG, "text/plain": "<Figure>"})]),
        ]
    )
    soil = v4.new_notebook(
        cells=[
            v4.new_markdown_cell("# Pile capacity"),
            v4.new_code_cell("shaft_friction = 45.0\nbase_area = 0.785\ncapacity = shaft_friction * 120 + base_area"),
            v4.new_markdown_cell("## Check"),
            v4.new_code_cell("assert capacity > 5000"),
        ]
    )
    broken = v4.new_notebook(cells=[v4.new_code_cell("undefined_name_here + 1", outputs=[v4.new_output(
        "error", ename="NameError", evalue="name 'undefined_name_here' is not defined", traceback=[])])])
    for name, nb in (("ballast.ipynb", ballast), ("Pile Capacity.ipynb", soil), ("error.ipynb", broken)):
        nbformat.write(nb, folder / name)
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*.ipynb"))}


def test_generate_is_deterministic_laid_out_and_valid(scale: ModuleType, tmp_path: Path) -> None:
    source = _sources(tmp_path / "src")
    shares = scale.Shares(malformed=0.1, duplicates=0.15, deprecated=0.2)
    first = scale.generate(20, source, tmp_path / "a", seed=7, workers=1, shares=shares)
    scale.generate(20, source, tmp_path / "b", seed=7, workers=2, shares=shares)
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert a == b, "same seed, different worker count: same files"
    scale.generate(20, source, tmp_path / "c", seed=8, workers=1, shares=shares)
    assert _files(tmp_path / "c") != a, "another seed: another corpus"
    assert len(a) == first["notebooks"] == 20
    assert all(LAYOUT.match(rel) for rel in a), [rel for rel in a if not LAYOUT.match(rel)]
    for rel in a:
        match = LAYOUT.match(rel)
        assert match is not None
        if match["year"]:
            assert match["code"].startswith(match["year"][2:])

    rows = [line.split("\t") for line in (tmp_path / "a" / "scale_manifest.tsv").read_text().splitlines()[1:]]
    kinds = {rel: kind for rel, kind, _size, _origin in rows}
    malformed = duplicates = deprecated = 0
    for rel, data in a.items():
        if kinds[rel] == "malformed":
            malformed += 1
            with pytest.raises(Exception):  # noqa: B017 - any reader error: truncated, empty, not a notebook
                nbformat.validate(nbformat.reads(data.decode("utf-8", "replace"), as_version=4))
            continue
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.authors and all(author["name"] for author in nb.metadata.authors)
        deprecated += "deprecated" in nb.metadata.get("tags", [])
    for rel, kind, _size, origin in rows:
        if kind == "duplicate":
            duplicates += 1
            assert a[rel] == a[origin] and rel != origin
    assert (malformed, duplicates) == (first["malformed"], first["duplicates"])
    assert malformed >= 1 and duplicates >= 1 and deprecated >= 1


def test_perturbation_renames_consistently_and_changes_numbers(scale: ModuleType, tmp_path: Path) -> None:
    source = _sources(tmp_path / "src")
    paths, _total, _images = scale.scan_sources(source)
    ballast = paths.index(source / "ballast.ipynb")
    seen_rename = seen_number = False
    for number in range(12):
        content = scale.Content(number, ballast, ("Anna Bakker",), False)
        data, images = scale.render(content, paths, source, seed=1)
        nb = json.loads(data)
        code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        assert images == len(PNG), "image bytes are kept as they are"
        defined = re.search(r"^(\w+) = \[", code, re.M)
        assert defined is not None
        name = defined.group(1)
        assert re.search(rf"sum\({name}\)", code) and re.search(rf"plt\.plot\({name}\)", code), "renamed everywhere"
        seen_rename |= name != "tank_volumes"
        seen_number |= "412.5," not in code
        assert re.search(r"\[\d+\.\d, \d+\.\d\d, \d+\.\d\]", code), "numbers keep their decimals"
        headings = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
        assert headings[0] == "# Ballast distribution"
        assert sorted(h.split("\n")[0] for h in headings[1:]) == ["## Aft tanks", "## Forward tanks", "## Plot"]
    assert seen_rename and seen_number


def test_default_shares_over_a_large_plan(scale: ModuleType) -> None:
    sources = [Path(f"nb{i}.ipynb") for i in range(50)]
    tasks = list(scale.plan(5000, sources, seed=0, shares=scale.Shares()))
    kinds = [t.kind for t in tasks]
    assert len({t.rel for t in tasks}) == 5000, "no two files share a path"
    assert 0.002 <= kinds.count("malformed") / 5000 <= 0.01
    assert 0.01 <= kinds.count("duplicate") / 5000 <= 0.03
    assert 0.75 <= sum(t.rel.startswith("projects/") for t in tasks) / 5000 <= 0.92
    years = {int(t.rel.split("/")[1]) for t in tasks if t.rel.startswith("projects/")}
    assert years == set(range(2015, 2025))
