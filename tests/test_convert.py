"""`nbrecall convert`: cell headers, no source lost, figures as files, dependency hints, report and CLI."""

from __future__ import annotations

import base64
import json
import re
import time
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nbrecall.cli import app
from nbrecall.convert.depmap import render_dependency_svg
from nbrecall.convert.markdown import ConvertedNotebook, ConvertOptions, compact_header, convert_notebook
from nbrecall.convert.report import FidelityFigures, render_report
from nbrecall.convert.run import ConvertResult, convert_file
from nbrecall.convert.tokens import count_llm_tokens
from nbrecall.notebook.model import Notebook
from nbrecall.notebook.read import NotebookUnreadable, read_notebook_bytes

REPO = Path(__file__).parents[1]
ARCHIVE = REPO / "samples" / "archive"
CORPUS = Path(__file__).parents[1] / ".." / "shared" / "corpus"
SWEEP_BUDGET_S = 60.0

SAMPLES = {
    "ballast_distribution": "projects/2017/17-042/ballast_distribution.ipynb",
    "mooring_loads": "projects/2018/18-007/mooring_loads.ipynb",
    "pile_capacity": "projects/2019/19-113/pile_capacity.ipynb",
    "stability_check": "projects/2014/14-003/stability_check.ipynb",
    "old_coefficients": "projects/2016/16-021/old_coefficients.ipynb",
    "glossary_hydrostatics": "reference/glossary_hydrostatics.ipynb",
}
BROKEN = "scratch/broken.ipynb"

HEADER_RE = re.compile(r"^## Cell (\d+) (code|markdown|raw)(?: In\[(\d+| )\])?(?: [^\n]*?)??(?: id:(\S+))?$", re.M)
# Lines of markdown cells that carry pasted image data; the converter replaces them by ![…](NAME_files/…) images.
IMAGE_LINE_RE = re.compile(r"data:image/[\w.+-]+;base64|attachment:", re.I)
DATA_URI_RE = re.compile(r"data:image/[\w.+-]+;base64,[A-Za-z0-9+/=]{16,}", re.I)
# Images the converter wrote (remote and relative images of markdown cells stay as the notebook has them)
FIGURE_RE = re.compile(
    r"!\[(?:[^\[\]\n]|\\[\[\]]|\[[^\[\]\n]*\])*\]\(([^()\s]*_files/cell\d+-\d+\.(png|jpg|gif|svg|pdf|bin))\)")


# ---------------------------------------------------------------------------------------------------------
# helpers


def _read(path: Path, shown: str | None = None) -> Notebook:
    return read_notebook_bytes(path.read_bytes(), shown or str(path))


def _header_positions(nb: Notebook, lines: list[str]) -> tuple[list[int], list[str]]:
    """Line number of every cell's exact header, searched in document order."""
    positions: list[int] = []
    start = 0
    for cell in nb.cells:
        try:
            start = lines.index(compact_header(cell), start)
        except ValueError:
            return positions, [f"Cell [{cell.index}]: header {compact_header(cell)!r} missing or out of order"]
        positions.append(start)
        start += 1
    return positions, []


def source_problems(nb: Notebook, markdown: str) -> list[str]:
    """Every source line of every code and markdown cell, as a whole line, in order, inside its cell's section.

    Trailing whitespace is not compared. Markdown lines holding pasted image data are skipped: they become
    ![…](NAME_files/…) images. A cell of whitespace only is its header alone.
    """
    lines = [line.rstrip() for line in markdown.split("\n")]
    positions, problems = _header_positions(nb, lines)
    if problems:
        return problems
    ends = positions[1:] + [len(lines)] if positions else []
    for cell, begin, end in zip(nb.cells, positions, ends, strict=True):
        if cell.cell_type not in ("code", "markdown") or not cell.source.strip():
            continue  # a blank cell is its header alone
        at = begin + 1
        for number, line in enumerate(cell.source.split("\n"), start=1):
            if cell.is_markdown and IMAGE_LINE_RE.search(line):
                continue
            try:
                at = lines.index(line.rstrip(), at, end) + 1
            except ValueError:
                problems.append(f"Cell [{cell.index}] ({cell.cell_type}) line {number} lost: {line[:100]!r}")
                break
    return problems


def figure_problems(converted: ConvertedNotebook, nb: Notebook) -> list[str]:
    """Placeholders name files the conversion produced; no image base64 left outside code sources."""
    problems = []
    prefix = f"{converted.name}_files/"
    for link, _mime in FIGURE_RE.findall(converted.markdown):
        if not link.startswith(prefix) or link[len(prefix):] not in converted.files:
            problems.append(f"placeholder points at {link}, not a produced file")
    if re.search(r"\[figure \d+: ", converted.markdown):
        problems.append("an unreplaced [figure N: …] mark is left in the markdown")
    in_code = sum(len(DATA_URI_RE.findall(c.source)) for c in nb.cells if not c.is_markdown)
    if len(DATA_URI_RE.findall(converted.markdown)) > in_code:
        problems.append("base64 image data left in the markdown")
    return problems


def section(markdown: str, index: int) -> str:
    """The text under `## Cell index` up to the next cell header."""
    match = re.search(rf"^## Cell {index} .*$", markdown, re.M)
    assert match, f"no header for Cell [{index}]"
    following = HEADER_RE.search(markdown, match.end())
    return markdown[match.end(): following.start() if following else len(markdown)]


def _b64(value: str | list[str]) -> bytes:
    return base64.b64decode("".join(value) if isinstance(value, list) else value)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ConvertResult]:
    """Every sample converted once with files written, as the CLI lays them out."""
    out = tmp_path_factory.mktemp("converted")
    results = {}
    for name, rel in SAMPLES.items():
        target = out / Path(rel).parent
        results[name] = convert_file(ARCHIVE / rel, target, display_path=rel)
        assert results[name].ok, results[name].reason
    return results


def _nb(name: str) -> Notebook:
    return _read(ARCHIVE / SAMPLES[name], SAMPLES[name])


# ---------------------------------------------------------------------------------------------------------
# headers and sources


@pytest.mark.parametrize("name", SAMPLES)
def test_every_cell_has_a_header_in_order(name: str, converted: dict[str, ConvertResult]) -> None:
    nb = _nb(name)
    markdown = converted[name].converted.markdown
    found = HEADER_RE.findall(markdown)
    expected = [(str(c.index), c.cell_type,
                 ("" if not c.is_code else str(c.execution_count) if c.execution_count is not None else " "),
                 "" if c.id_is_synthetic else c.id) for c in nb.cells]
    assert found == expected
    assert markdown.startswith(f"# {SAMPLES[name]}\n")


def test_code_cells_show_in_n_or_blank() -> None:
    nb = _nb("pile_capacity")
    markdown = convert_notebook(nb, "pile_capacity").markdown
    assert f"## Cell 5 code In[7] id:{nb.cells[5].id}\n" in markdown
    assert f"## Cell 8 code In[ ] id:{nb.cells[8].id}\n" in markdown  # never run
    assert f"## Cell 0 markdown id:{nb.cells[0].id}\n" in markdown
    assert "In[" not in next(line for line in markdown.splitlines() if line.startswith("## Cell 0 "))


def test_derived_ids_of_old_files_are_only_in_the_report(converted: dict[str, ConvertResult]) -> None:
    nb = _nb("stability_check")  # nbformat 3: ids made up from index and source
    result = converted["stability_check"]
    markdown = result.converted.markdown
    assert all(c.id_is_synthetic for c in nb.cells)
    assert "## Cell 0 markdown\n" in markdown and " id:" not in markdown
    report = next(p for p in result.written if p.name.endswith(".report.md")).read_text(encoding="utf-8")
    assert f"| 0 | `{nb.cells[0].id}` *derived* | markdown |" in report and nb.cells[0].id.startswith("c0-")


@pytest.mark.parametrize("name", SAMPLES)
def test_no_source_line_lost_in_samples(name: str, converted: dict[str, ConvertResult]) -> None:
    nb = _nb(name)
    assert source_problems(nb, converted[name].converted.markdown) == []


def test_source_check_catches_a_lost_line() -> None:
    nb = _nb("pile_capacity")
    markdown = convert_notebook(nb, "pile_capacity").markdown
    damaged = markdown.replace('    "L_emb": 38.0,    # embedded length below seabed [m]\n', "", 1)
    assert damaged != markdown
    assert source_problems(nb, damaged) == ["Cell [5] (code) line 4 lost: "
                                            "'    \"L_emb\": 38.0,    # embedded length below seabed [m]'"]
    moved = markdown.replace("## Cell 9 ", "## Cell X ", 1)
    assert "header" in source_problems(nb, moved)[0]


def test_sources_with_backtick_fences_and_odd_text_are_kept_whole() -> None:
    nb_json = {
        "nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}},
        "cells": [
            {"id": "a", "cell_type": "markdown", "metadata": {},
             "source": "```python\nx = 1\n```\n\n## Cell 7 code not a header\n"},
            {"id": "b", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
             "source": 'doc = """\n```\nfenced inside a string\n````\n"""\r\n\ttab = "\\u00e9 ü"'},
        ],
    }
    nb = read_notebook_bytes(json.dumps(nb_json).encode(), "odd.ipynb")
    markdown = convert_notebook(nb, "odd").markdown
    assert source_problems(nb, markdown) == []
    assert "`````python\n" in markdown  # fence longer than the ```` inside the source


# outputs._parse_code (figure captions) calls ast.parse on corpus code with invalid escapes, e.g. "\\d" in a
# plain string, without silencing the DeprecationWarning that compile() emits.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")
def test_corpus_sweep_no_source_lost_and_no_base64() -> None:
    """Every notebook of the development corpus, converted in memory, its SVG and report rendered, nothing written.

    Measured on 2 cores: 15-24 s for 502 notebooks. `convert_file` with files written takes ~40 s, half of it
    counting cl100k tokens of the raw .ipynb for the report, so tokens are left out here (the samples cover them).
    """
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is not present")
    files = sorted(CORPUS.rglob("*.ipynb"))
    assert files
    started = time.perf_counter()
    problems: list[str] = []
    for path in files:
        rel = str(path.relative_to(CORPUS))
        try:
            nb = read_notebook_bytes(path.read_bytes(), rel)
        except NotebookUnreadable as exc:
            problems.append(f"{rel}: unreadable: {exc.reason}")
            continue
        result = convert_notebook(nb, path.stem)
        problems += [f"{rel}: {p}" for p in source_problems(nb, result.markdown)]
        problems += [f"{rel}: {p}" for p in figure_problems(result, nb)]
        svg = render_dependency_svg(nb, result.analysis, title=nb.path)
        try:
            ET.fromstring(svg)
        except ET.ParseError as exc:
            problems.append(f"{rel}: dependency SVG is not well-formed XML: {exc}")
        sizes = FidelityFigures(nb.size_bytes, len(result.markdown.encode()), 0, 0, len(result.files),
                                len(result.warnings))
        rows = re.findall(r"^\| \d+ \| `", render_report(nb, result, sizes), re.M)
        if len(rows) != len(nb.cells):
            problems.append(f"{rel}: report cell map has {len(rows)} rows for {len(nb.cells)} cells")
    elapsed = time.perf_counter() - started
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:40])
    assert elapsed < SWEEP_BUDGET_S * 2, f"corpus sweep of {len(files)} notebooks took {elapsed:.1f} s"


# ---------------------------------------------------------------------------------------------------------
# figures


def test_figures_are_written_as_files_and_placeholders_point_at_them(converted: dict[str, ConvertResult]) -> None:
    raw = json.loads((ARCHIVE / SAMPLES["ballast_distribution"]).read_text(encoding="utf-8"))
    output_png = _b64(raw["cells"][13]["outputs"][0]["data"]["image/png"])
    attachment_png = _b64(raw["cells"][1]["attachments"]["sketch.png"]["image/png"])
    glossary = json.loads((ARCHIVE / SAMPLES["glossary_hydrostatics"]).read_text(encoding="utf-8"))
    uri = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", "".join(glossary["cells"][6]["source"]))
    assert uri
    data_uri_png = base64.b64decode(uri.group(1))

    expected = {
        "ballast_distribution": {"cell1-1.png": attachment_png, "cell13-1.png": output_png},
        "glossary_hydrostatics": {"cell6-1.png": data_uri_png},
    }
    for name, files in expected.items():
        result = converted[name]
        md_path = next(p for p in result.written if p.name == f"{name}.md")
        markdown = md_path.read_text(encoding="utf-8")
        links = FIGURE_RE.findall(markdown)
        assert sorted(link for link, _ in links) == sorted(f"{name}_files/{f}" for f in files)
        for link, extension in links:
            target = md_path.parent / link
            assert target.is_file(), link
            assert extension == "png"
            assert target.read_bytes() == files[target.name]
            assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        assert "base64" not in markdown
        assert "data:image" not in markdown
        assert "attachment:" not in markdown
        assert not re.search(r"\[figure \d+: ", markdown)
        assert len(markdown) < 20_000
    ballast = converted["ballast_distribution"].converted.markdown
    plot = section(ballast, 13)
    assert "Ballast distribution along the hull (x: Distance from AP [m], y: Ballast volume [m3])" in plot
    assert "![sketch](ballast_distribution_files/cell1-1.png)" in section(ballast, 1)


@pytest.mark.parametrize("name", SAMPLES)
def test_no_base64_in_any_sample_output(name: str, converted: dict[str, ConvertResult]) -> None:
    result = converted[name]
    assert figure_problems(result.converted, _nb(name)) == []
    assert not re.search(r"[A-Za-z0-9+/]{120,}", result.converted.markdown)
    files_dir = result.written[0].parent / f"{name}_files"
    assert files_dir.is_dir() == bool(result.converted.files)


def test_v3_png_output_becomes_a_file(converted: dict[str, ConvertResult]) -> None:
    result = converted["stability_check"]
    assert list(result.converted.files) == ["cell13-1.png"]
    assert "](stability_check_files/cell13-1.png)" in section(result.converted.markdown, 13)


def test_markdown_image_alt_text_appears_once(converted: dict[str, ConvertResult]) -> None:
    """The alt text stays in place after the mark and is not repeated as a caption."""
    ballast = section(converted["ballast_distribution"].converted.markdown, 1)
    assert "![sketch](ballast_distribution_files/cell1-1.png)\n" in ballast and "sketch sketch" not in ballast
    glossary = section(converted["glossary_hydrostatics"].converted.markdown, 6)
    assert "![metacentre](glossary_hydrostatics_files/cell6-1.png)" in glossary
    assert "metacentre metacentre" not in glossary and ") metacentre" not in glossary


def test_table_output_is_closed_before_its_shape_line(converted: dict[str, ConvertResult]) -> None:
    text = section(converted["ballast_distribution"].converted.markdown, 5)
    assert re.search(r"^\| 9 \| WB 4P \|.*\|\n\nshape: 12 rows × 5 columns", text, re.M)


def test_conversion_emits_no_python_warnings() -> None:
    nb_json = {
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"id": "a", "cell_type": "code", "metadata": {}, "execution_count": 1,
                   "source": 'plt.title("\\d+ \\w")\nx = "\\d"',
                   "outputs": [{"output_type": "display_data", "metadata": {},
                                "data": {"image/png": base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()}}]}],
    }
    nb = read_notebook_bytes(json.dumps(nb_json).encode(), "escapes.ipynb")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = convert_notebook(nb, "escapes")
    assert [str(w.message) for w in caught] == []
    assert "![\\d+ \\w](escapes_files/cell0-1.png)" in result.markdown


# ---------------------------------------------------------------------------------------------------------
# dependency hints and order warnings


def test_pile_capacity_dependency_lines_and_order_warnings(converted: dict[str, ConvertResult]) -> None:
    markdown = converted["pile_capacity"].converted.markdown
    preamble = markdown.split("\n")[2]
    assert preamble.startswith("> nbformat 4.5 · kernel python3 (python 3.7.3) · 15 cells (8 code, 7 markdown) · "
                               "did NOT run top to bottom (3 out of order, 1 never run)")
    assert "errors in cells 10" in preamble and "health 0." in preamble
    assert "Imported names" not in markdown  # the sources hold the imports
    assert "> uses soil (Cell 3)\n" in section(markdown, 7)  # Cell 5 is the code cell above
    assert "> uses soil (Cell 3); pile (Cell 5)\n" in section(markdown, 10)
    # A_steel and pile come from Cell 5, Q_s and Q_b from Cell 11, the code cell right above: left out
    assert "> uses A_steel, pile (Cell 5)\n" in section(markdown, 13)
    out_of_order = {7: 3, 10: 5, 11: 6}
    for index in range(15):
        text = section(markdown, index)
        if index in out_of_order:
            assert f"> ⚠ out of order: In[{out_of_order[index]}] runs below Cell 5 In[7]" in text
        else:
            assert "out of order" not in text, index
    never = section(markdown, 8)
    assert "never run" not in never  # the header's In[ ] says it
    assert "> ⚠ uses Q_s defined later in Cell 11" in never
    assert "> uses" not in section(markdown, 2)  # imports only: ambient, no edge
    # the hints sit between the header and the source fence
    text = section(markdown, 7)
    assert text.index("> uses") < text.index("```python")


def test_ballast_ran_top_to_bottom_has_no_order_warnings(converted: dict[str, ConvertResult]) -> None:
    markdown = converted["ballast_distribution"].converted.markdown
    assert " · ran top to bottom" in markdown.split("\n")[2]
    assert "executed" not in markdown.split("\n")[2]  # implied by a run top to bottom
    assert "⚠" not in markdown


@pytest.mark.parametrize("name", SAMPLES)
def test_dependency_lines_match_the_analysis(name: str, converted: dict[str, ConvertResult]) -> None:
    """Every edge but those from the code cell right above the using cell has its `uses` line."""
    result = converted[name].converted
    code = sorted(result.analysis.cells)
    above = {index: max((i for i in code if i < index), default=None) for index in code}
    edges = [e for e in result.analysis.edges if e.src != above[e.dst]]
    for index in {e.dst for e in edges}:
        text = section(result.markdown, index)
        for edge in (e for e in edges if e.dst == index):
            assert f"{', '.join(edge.names)} (Cell {edge.src})" in text
    with_line = {int(m) for m in re.findall(r"^## Cell (\d+) .*\n\n> uses ", result.markdown, re.M)}
    assert with_line == {e.dst for e in edges}


# ---------------------------------------------------------------------------------------------------------
# fidelity report


@pytest.mark.parametrize("name", SAMPLES)
def test_report_has_cell_map_sizes_and_limits(name: str, converted: dict[str, ConvertResult]) -> None:
    result = converted[name]
    nb = _nb(name)
    report_path = next(p for p in result.written if p.name == f"{name}.report.md")
    report = report_path.read_text(encoding="utf-8")
    assert report.startswith(f"# Fidelity report: {SAMPLES[name]}\n")

    rows = re.findall(r"^\| (\d+) \| `([^`]+)`( \*derived\*)? \| (code|markdown|raw) \| ([^|]*) \|", report, re.M)
    assert [(int(i), cid, bool(derived), kind) for i, cid, derived, kind, _ in rows] == [
        (c.index, c.id, c.id_is_synthetic, c.cell_type) for c in nb.cells]
    for (_, _, _, kind, count), cell in zip(rows, nb.cells, strict=True):
        if kind == "code":
            assert count.strip() == (str(cell.execution_count) if cell.execution_count is not None else "—")

    raw = (ARCHIVE / SAMPLES[name]).read_bytes()
    markdown = result.converted.markdown
    assert f"| bytes | {len(raw):,} | {len(markdown.encode()):,} |" in report
    tokens_before = count_llm_tokens(raw.decode("utf-8"))
    tokens_after = count_llm_tokens(markdown)
    assert 0 < tokens_after < tokens_before
    assert re.search(rf"^\| tokens, cl100k_base[^|]* \| {tokens_before:,} \| {tokens_after:,} \(\d+%\) \|$",
                     report, re.M)
    assert f"| cells | {len(nb.cells)} | {len(nb.cells)} |" in report

    limits = report.split("## Limits of the analysis\n", 1)
    assert len(limits) == 2
    paragraph = limits[1].strip()
    assert paragraph == result.converted.analysis.limits
    assert "approximate" in paragraph and len(paragraph) > 200


def test_pile_capacity_report_notes_and_warnings(converted: dict[str, ConvertResult]) -> None:
    result = converted["pile_capacity"]
    report = next(p for p in result.written if p.name.endswith(".report.md")).read_text(encoding="utf-8")
    row8 = next(line for line in report.splitlines() if line.startswith("| 8 |"))
    assert "| — |" in row8 and "never run" in row8
    row7 = next(line for line in report.splitlines() if line.startswith("| 7 |"))
    assert "out of order: In[3] runs below Cell 5 In[7]" in row7
    assert "- Cell [10] raised KeyError: 'pile_diameter'" in report
    assert "dependency edges: " in report


# ---------------------------------------------------------------------------------------------------------
# CLI


WIDE = {"COLUMNS": "400"}  # rich wraps the summary at the console width; keep paths on one line


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_cli_converts_archive_and_reports_broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no nbrecall.toml of the caller's folder
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["convert", str(ARCHIVE), "-o", str(out)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    log = _flat(result.output)
    assert "converted 6 of 7 notebooks" in log  # 7 .ipynb files, of which scratch/broken.ipynb is truncated
    assert "unreadable" in log and "broken.ipynb" in log and "truncated JSON" in log
    for name, rel in SAMPLES.items():
        folder = out / Path(rel).parent
        for suffix in (".md", ".report.md", ".deps.svg"):
            assert (folder / f"{name}{suffix}").is_file(), f"{name}{suffix}"
        svg = ET.parse(folder / f"{name}.deps.svg").getroot()
        assert svg.tag == "{http://www.w3.org/2000/svg}svg"
        markdown = (folder / f"{name}.md").read_text(encoding="utf-8")
        assert markdown.startswith(f"# {rel}\n")
    assert not (out / "scratch").exists()
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert len([p for p in written if p.endswith(".md") and not p.endswith(".report.md")]) == 6
    assert "projects/2017/17-042/ballast_distribution_files/cell13-1.png" in written


def test_cli_stdout_prints_one_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = ARCHIVE / SAMPLES["pile_capacity"]
    result = CliRunner().invoke(app, ["convert", str(path), "--stdout"], env=WIDE)
    assert result.exit_code == 0, result.output
    expected = convert_file(path, None).converted
    assert expected is not None
    assert result.stdout == expected.markdown
    assert result.stdout.count("## Cell ") == 15
    assert list(tmp_path.iterdir()) == []
    assert not list(path.parent.glob("*.md"))  # nothing written beside the sample


def test_cli_stdout_respects_max_output_chars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = ARCHIVE / SAMPLES["mooring_loads"]
    small = CliRunner().invoke(app, ["convert", str(path), "--stdout", "--max-output-chars", "200"], env=WIDE)
    large = CliRunner().invoke(app, ["convert", str(path), "--stdout"], env=WIDE)
    assert small.exit_code == large.exit_code == 0
    assert len(small.stdout) < len(large.stdout)
    assert source_problems(_nb("mooring_loads"), small.stdout.replace(str(path), SAMPLES["mooring_loads"])) == []


def test_cli_stdout_refuses_a_folder_and_reports_unreadable(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = CliRunner().invoke(app, ["convert", str(ARCHIVE), "--stdout"], env=WIDE)
    assert folder.exit_code == 2
    broken = CliRunner().invoke(app, ["convert", str(ARCHIVE / BROKEN), "--stdout"], env=WIDE)
    assert broken.exit_code == 1
    assert isinstance(broken.exception, SystemExit)
    assert broken.stdout == ""
    assert "truncated JSON" in _flat(broken.stderr)
    missing = CliRunner().invoke(app, ["convert", str(tmp_path / "nope.ipynb")], env=WIDE)
    assert missing.exit_code == 2


MALFORMED: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "empty file"),
    "blank": (b"  \n\t\n", "empty file"),
    "truncated": (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", ',
                  "truncated JSON"),
    "not_json": (b"print('this is a script, not a notebook')\n", "invalid JSON"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "invalid UTF-8"),
    "json_list": (b"[1, 2, 3]", "not a notebook"),
    "json_without_nbformat": (b'{"cells": []}', "not a notebook"),
    "nbformat_5": (b'{"nbformat": 5, "nbformat_minor": 0, "metadata": {}, "cells": []}', "unsupported nbformat"),
    "cells_not_a_list": (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": {}}', "schema violation"),
    "bad_cell_type": (b'{"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": [{"cell_type": "python", '
                      b'"source": "x", "metadata": {}}]}', "schema violation"),
    "v3_without_worksheets": (b'{"nbformat": 3, "nbformat_minor": 0, "metadata": {}}', "schema violation"),
}


@pytest.mark.parametrize("kind", MALFORMED)
def test_malformed_files_never_raise(kind: str, tmp_path: Path) -> None:
    data, reason = MALFORMED[kind]
    path = tmp_path / f"{kind}.ipynb"
    path.write_bytes(data)
    result = convert_file(path, tmp_path / "out")
    assert not result.ok
    assert result.reason is not None and result.reason.startswith(reason), result.reason
    assert "\n" not in result.reason
    assert not (tmp_path / "out").exists()


def test_cli_on_malformed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    for kind, (data, _) in MALFORMED.items():
        (bad / f"{kind}.ipynb").write_bytes(data)
    runner = CliRunner()
    only_bad = runner.invoke(app, ["convert", str(bad), "-o", str(tmp_path / "out1")], env=WIDE)
    assert only_bad.exit_code == 1  # nothing converted
    assert isinstance(only_bad.exception, SystemExit)
    log = _flat(only_bad.output)
    assert f"converted 0 of {len(MALFORMED)} notebooks" in log
    for kind in MALFORMED:
        assert f"{kind}.ipynb" in log
    for kind in MALFORMED:
        single = runner.invoke(app, ["convert", str(bad / f"{kind}.ipynb"), "--stdout"], env=WIDE)
        assert single.exit_code == 1 and isinstance(single.exception, SystemExit), kind

    (bad / "good.ipynb").write_bytes((ARCHIVE / SAMPLES["old_coefficients"]).read_bytes())
    mixed = runner.invoke(app, ["convert", str(bad), "-o", str(tmp_path / "out2")], env=WIDE)
    assert mixed.exit_code == 0, mixed.output
    assert f"converted 1 of {len(MALFORMED) + 1} notebooks" in _flat(mixed.output)
    assert (tmp_path / "out2" / "good.md").is_file()


def test_a_folder_convert_cannot_list_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its notebooks are missing from the output: the run says which folder and why instead of skipping it."""
    import os

    root = tmp_path / "share"
    (root / "locked").mkdir(parents=True)
    (root / "good.ipynb").write_bytes((ARCHIVE / SAMPLES["old_coefficients"]).read_bytes())
    (root / "locked" / "hidden.ipynb").write_bytes((ARCHIVE / SAMPLES["old_coefficients"]).read_bytes())
    listing = os.scandir

    def failing(path: object = ".") -> object:
        if Path(str(path)).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "scandir", failing)
    result = CliRunner().invoke(app, ["convert", str(root), "-o", str(tmp_path / "out")], env=WIDE)
    assert result.exit_code == 0, result.output
    log = _flat(result.output)
    assert "not listed:" in log and "locked (Permission denied): its notebooks are not converted" in log
    assert "converted 1 of 1 notebooks" in log


def test_odd_but_valid_outputs_do_not_stop_a_conversion() -> None:
    nb_json = {
        "nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}},
        "cells": [
            {"id": "a", "cell_type": "code", "metadata": {}, "execution_count": 1, "source": "show()",
             "outputs": [
                 {"output_type": "display_data", "metadata": {}, "data": {"image/png": "not base64 !!"}},
                 {"output_type": "display_data", "metadata": {}, "data": {}},
                 {"output_type": "execute_result", "metadata": {}, "execution_count": 1,
                  "data": {"application/json": {"a": [1, 2]}, "text/html": "<table><tr><td>x</td></tr>"}},
                 {"output_type": "stream", "name": "stderr", "text": "\x1b[31mred\x1b[0m\r50%\r100%\n"},
                 {"output_type": "error", "ename": "", "evalue": "", "traceback": []},
             ]},
            {"id": "b", "cell_type": "markdown", "metadata": {},
             "source": "![x](data:image/png;base64,@@@@) ![y](attachment:missing.png) <img src='data:,'>"},
            {"id": "c", "cell_type": "raw", "metadata": {}, "source": "```\nraw\n"},
        ],
    }
    nb = read_notebook_bytes(json.dumps(nb_json).encode(), "odd.ipynb")
    result = convert_notebook(nb, "odd", ConvertOptions(max_output_chars=50))
    assert [r.index for r in result.cells] == [0, 1, 2]
    assert "## Cell 2 raw id:c\n" in result.markdown
    assert "attachment:missing.png" in result.markdown  # a missing attachment stays as written
    assert "\x1b" not in result.markdown


# ---------------------------------------------------------------------------------------------------------
# facts that hold, informative outputs, the default folder (issue 15)


def _convert_json(cells: list[dict], metadata: dict | None = None, minor: int = 5) -> ConvertedNotebook:
    nb_json = {"nbformat": 4, "nbformat_minor": minor, "metadata": metadata or {}, "cells": cells}
    return convert_notebook(read_notebook_bytes(json.dumps(nb_json).encode(), "facts.ipynb"), "facts")


def test_headers_of_empty_and_markdown_only_notebooks_claim_no_run() -> None:
    empty = _convert_json([])
    assert empty.markdown.split("\n")[2] == "> nbformat 4.5 · kernel unknown · 0 cells"
    prose = _convert_json([{"id": "m", "cell_type": "markdown", "metadata": {}, "source": "# Notes"}])
    line = prose.markdown.split("\n")[2]
    assert line == "> nbformat 4.5 · kernel unknown · 1 cells (1 markdown)"
    assert "ran" not in prose.markdown and "health" not in prose.markdown and "executed" not in prose.markdown


def test_kernel_facts_and_one_word_fence_labels() -> None:
    wolfram = _convert_json(
        [{"id": "w", "cell_type": "code", "metadata": {}, "source": "Plot[Sin[x], {x, 0, 2 Pi}]",
          "execution_count": 1, "outputs": []}],
        {"kernelspec": {"name": "wolframlanguage13", "language": "Wolfram Language", "display_name": "WL 13"},
         "language_info": {"name": "Wolfram Language", "version": "13.1"}})
    assert "· kernel wolframlanguage13 (wolfram language 13.1) ·" in wolfram.markdown
    assert "```wolfram\nPlot[Sin[x]" in wolfram.markdown


def test_raw_cells_show_their_mimetype_and_unknown_cells_are_raw() -> None:
    raw = _convert_json([{"id": "r", "cell_type": "raw", "metadata": {"raw_mimetype": "text/restructuredtext"},
                          "source": "Title\n====="}])
    assert "## Cell 0 raw text/restructuredtext id:r\n\n```restructuredtext\nTitle\n=====\n```" in raw.markdown
    future = _convert_json([{"id": "q", "cell_type": "quiz", "metadata": {}, "source": "2 + 2?"}], minor=99)
    assert "## Cell 0 raw (unknown cell type 'quiz', shown raw) id:q" in future.markdown
    assert any("unknown cell type 'quiz'" in w for w in future.warnings)


def test_outputs_that_say_nothing_are_left_out_and_broken_images_reported() -> None:
    converted = _convert_json([{
        "id": "p", "cell_type": "code", "metadata": {}, "execution_count": 3,
        "source": "plt.plot(x)\nplt.title('Load')",
        "outputs": [
            {"output_type": "execute_result", "execution_count": 3, "metadata": {},
             "data": {"text/plain": "[<matplotlib.lines.Line2D at 0x7f0c5a1b2c40>]"}},
            {"output_type": "execute_result", "execution_count": 3, "metadata": {},
             "data": {"text/plain": "Text(0.5, 1.0, 'Load')"}},
            {"output_type": "stream", "name": "stdout", "text": ""},
            {"output_type": "display_data", "metadata": {}, "data": {"image/png": "", "text/plain": "<Figure>"}},
            {"output_type": "stream", "name": "stdout", "text": "peak 12.5 kN\n"},
        ]}], {"language_info": {"name": "python"}})
    body = section(converted.markdown, 0)
    assert "Line2D" not in body and "Text(0.5" not in body
    assert body.count("```output") == 1 and "peak 12.5 kN" in body
    assert "[broken image/png image, not written]" in body
    assert converted.files == {}
    assert any("Cell [0]" in w and "not written" in w for w in converted.warnings)


def test_a_cell_id_repair_is_noted_in_the_report() -> None:
    converted = _convert_json([
        {"id": "same", "cell_type": "markdown", "metadata": {}, "source": "a"},
        {"id": "same", "cell_type": "markdown", "metadata": {}, "source": "b"}])
    assert "## Cell 0 markdown id:same\n" in converted.markdown
    assert "## Cell 1 markdown\n" in converted.markdown  # derived: in the report's cell map only
    assert any("duplicate cell id" in w for w in converted.warnings)


def test_convert_writes_to_a_folder_in_the_working_directory_not_the_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "archive" / "sub"
    archive.mkdir(parents=True)
    (archive / "good.ipynb").write_bytes((ARCHIVE / SAMPLES["old_coefficients"]).read_bytes())
    bad = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
           "cells": [{"id": "a", "cell_type": "[bold]", "metadata": {}, "source": "x"}]}
    (archive / "bad.ipynb").write_text(json.dumps(bad), encoding="utf-8")  # no cell type nbformat knows
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = CliRunner().invoke(app, ["convert", str(tmp_path / "archive")])
    assert result.exit_code == 0, result.output  # some converted: 0, the unreadable one listed
    assert sorted(p.name for p in archive.iterdir()) == ["bad.ipynb", "good.ipynb"]  # nothing written there
    outdir = work / "nbrecall-converted"
    assert (outdir / "sub" / "good.md").is_file() and (outdir / "sub" / "good.report.md").is_file()
    lines = result.stderr.splitlines()
    assert f"output folder: {outdir} (1 of 2 notebook(s) written)" in lines  # on one line: not wrapped
    unreadable = next(line for line in lines if line.startswith("unreadable"))
    assert "bad.ipynb" in unreadable and "cell_type '[bold]'" in unreadable  # brackets are text, not markup
    only_bad = CliRunner().invoke(app, ["convert", str(archive / "bad.ipynb"), "-o", str(tmp_path / "o")])
    assert only_bad.exit_code == 1  # nothing converted
    assert "convert never writes" not in result.output
    help_text = _flat(CliRunner().invoke(app, ["convert", "--help"], env=WIDE).output)
    assert "Exit code: 0 when every notebook was converted" in help_text and "nbrecall-converted" in help_text


def test_convert_reads_the_notebooks_inside_a_zip_archive(tmp_path: Path) -> None:
    import zipfile

    archive = tmp_path / "archive"
    archive.mkdir()
    with zipfile.ZipFile(archive / "2017.zip", "w") as handle:
        handle.writestr("calc/good.ipynb", (ARCHIVE / SAMPLES["old_coefficients"]).read_bytes())
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["convert", str(archive), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "2017.zip" / "calc" / "good.md").is_file()
    assert not (archive / "calc").exists()  # nothing extracted beside the archive
