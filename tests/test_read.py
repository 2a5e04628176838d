"""Reading notebooks: both source forms, v3 upgrade, stable ids, and quarantine reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat import v4

from nbrecall.notebook.read import NotebookUnreadable, read_notebook, read_notebook_bytes


def _nb_bytes(nb: dict) -> bytes:
    return json.dumps(nb).encode()


def test_source_as_string_and_as_list_read_the_same() -> None:
    nb = v4.new_notebook(cells=[v4.new_code_cell("x = 1\ny = 2\n"), v4.new_markdown_cell("# Title\ntext")])
    as_list = json.loads(nbformat.writes(nb))
    as_string = json.loads(nbformat.writes(nb))
    for cell in as_string["cells"]:
        cell["source"] = "".join(cell["source"])
    assert isinstance(as_list["cells"][0]["source"], list)
    a = read_notebook_bytes(_nb_bytes(as_string), "a.ipynb")
    b = read_notebook_bytes(_nb_bytes(as_list), "b.ipynb")
    assert [c.source for c in a.cells] == [c.source for c in b.cells] == ["x = 1\ny = 2\n", "# Title\ntext"]


def test_v45_ids_kept_and_old_files_get_stable_synthetic_ids() -> None:
    nb = v4.new_notebook(cells=[v4.new_code_cell("a = 1")])
    nb.cells[0]["id"] = "d4e5f6"
    assert read_notebook_bytes(nbformat.writes(nb).encode(), "x.ipynb").cells[0].id == "d4e5f6"

    old = json.loads(nbformat.writes(nb))
    old["nbformat_minor"] = 4
    del old["cells"][0]["id"]
    first = read_notebook_bytes(_nb_bytes(old), "x.ipynb").cells[0]
    second = read_notebook_bytes(_nb_bytes(old), "x.ipynb").cells[0]
    assert first.id == second.id and first.id_is_synthetic


V3 = {
    "nbformat": 3,
    "nbformat_minor": 0,
    "metadata": {"name": "old"},
    "worksheets": [
        {
            "cells": [
                {"cell_type": "heading", "level": 2, "source": ["Stability"], "metadata": {}},
                {
                    "cell_type": "code",
                    "language": "python",
                    "input": ["gm = 1.2\n", "gm"],
                    "prompt_number": 3,
                    "outputs": [
                        {"output_type": "pyout", "prompt_number": 3, "text": ["1.2"], "metadata": {}}
                    ],
                    "collapsed": False,
                    "metadata": {},
                },
                {
                    "cell_type": "code",
                    "language": "python",
                    "input": "1/0",
                    "prompt_number": 4,
                    "outputs": [
                        {
                            "output_type": "pyerr",
                            "ename": "ZeroDivisionError",
                            "evalue": "division by zero",
                            "traceback": ["tb"],
                        }
                    ],
                    "collapsed": False,
                    "metadata": {},
                },
            ]
        },
        {"cells": [{"cell_type": "markdown", "source": "second sheet", "metadata": {}}]},
    ],
}


def test_v3_upgraded_worksheets_flattened_headings_and_outputs_renamed() -> None:
    nb = read_notebook_bytes(_nb_bytes(V3), "old.ipynb")
    assert nb.nbformat == 3
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code", "markdown"]
    assert nb.cells[0].source == "## Stability"
    assert nb.cells[1].source == "gm = 1.2\ngm" and nb.cells[1].execution_count == 3
    assert nb.cells[1].outputs[0].output_type == "execute_result"
    assert nb.cells[1].outputs[0].data["text/plain"] == "1.2"
    err = nb.cells[2].outputs[0]
    assert (err.output_type, err.ename, err.evalue) == ("error", "ZeroDivisionError", "division by zero")
    assert all(c.id_is_synthetic for c in nb.cells)


def test_non_python_kernel_reads_fine() -> None:
    nb = v4.new_notebook(
        cells=[v4.new_code_cell("x <- c(1, 2)")],
        metadata={
            "kernelspec": {"name": "ir", "language": "R", "display_name": "R"},
            "language_info": {"name": "R"},
        },
    )
    parsed = read_notebook_bytes(nbformat.writes(nb).encode(), "r.ipynb")
    assert parsed.language == "r" and parsed.kernel_name == "ir"


def test_repairable_violation_is_repaired_and_noted() -> None:
    nb = json.loads(nbformat.writes(v4.new_notebook(cells=[v4.new_markdown_cell("hi")])))
    nb["cells"][0]["execution_count"] = 3
    parsed = read_notebook_bytes(_nb_bytes(nb), "x.ipynb")
    assert parsed.cells[0].source == "hi"
    assert any("execution_count" in note for note in parsed.notes)


def test_an_output_with_a_front_ends_own_key_is_read_with_the_key_dropped() -> None:
    """A display output carrying a key the schema does not name (a widget manager's `jetTransient`) is what Jupyter
    opens with a warning: its cell and its value are read, not the whole notebook quarantined."""
    nb = json.loads(nbformat.writes(v4.new_notebook(cells=[v4.new_code_cell("show(z)", outputs=[
        v4.new_output("display_data", data={"text/plain": "Z = 0.0123 ohm"}),
        v4.new_output("stream", text="done\n")])])))
    nb["cells"][0]["outputs"][0]["jetTransient"] = {"display_id": None}
    nb["cells"][0]["outputs"][1]["transient"] = {}
    parsed = read_notebook_bytes(_nb_bytes(nb), "x.ipynb")
    assert [o.output_type for o in parsed.cells[0].outputs] == ["display_data", "stream"]
    assert "0.0123" in str(parsed.cells[0].outputs[0].data)
    assert any("jetTransient" in note and "output 0 of cell 0" in note for note in parsed.notes)
    assert any("'transient'" in note and "output 1" in note for note in parsed.notes)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b'{"nbformat": 4, "nbformat_minor": 5, "cells": [', "truncated JSON"),
        (b"{not json", "invalid JSON"),
        (b"../examples/steady_flow.ipynb", "the file holds only the path '../examples/steady_flow.ipynb' (a symbolic"),
        (b'{"hello": "world"}', "not a notebook"),
        (b"[1, 2, 3]", "not a notebook"),
        (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": 7}', "schema violation"),
        (
            b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", "source": 5,'
            b' "metadata": {}, "outputs": [], "execution_count": null, "id": "a"}]}',
            "schema violation",
        ),
        (
            b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", "source": "",'
            b' "metadata": {}, "outputs": "nope", "execution_count": null, "id": "a"}]}',
            "schema violation",
        ),
        (
            b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [], "x": "\xff\xfe"}',
            "invalid UTF-8",
        ),
        (b'{"nbformat": 9, "cells": []}', "unsupported nbformat"),
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    ],
)
def test_malformed_input_is_quarantined_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(NotebookUnreadable) as info:
        read_notebook_bytes(data, "bad.ipynb")
    assert reason in info.value.reason
    assert info.value.sha256 and "\n" not in info.value.reason
    assert info.value.quarantined().path == "bad.ipynb"


def test_unreadable_file_reports_reason(tmp_path: Path) -> None:
    with pytest.raises(NotebookUnreadable) as info:
        read_notebook(tmp_path / "missing.ipynb")
    assert "cannot read file" in info.value.reason


# ---------------------------------------------------------------------------------------------------------
# read as nbformat reads (issue 15)

V2 = {
    "nbformat": 2,
    "metadata": {"name": "v2"},
    "worksheets": [{"cells": [
        {"cell_type": "markdown", "source": "# Old notebook"},
        {"cell_type": "code", "input": "print('hi')", "language": "python", "prompt_number": 1,
         "outputs": [{"output_type": "stream", "stream": "stdout", "text": "hi\n"}]},
        {"cell_type": "code", "input": "1 + 1", "language": "python", "prompt_number": 2,
         "outputs": [{"output_type": "pyout", "prompt_number": 2, "text": "2"}]},
    ]}],
}


def test_nbformat_2_is_upgraded_as_nbformat_does() -> None:
    first = read_notebook_bytes(_nb_bytes(V2), "v2.ipynb")
    assert (first.nbformat, [c.cell_type for c in first.cells]) == (2, ["markdown", "code", "code"])
    assert first.cells[1].outputs[0].text == "hi\n" and first.cells[1].execution_count == 1
    assert first.cells[2].outputs[0].data["text/plain"] == "2"
    assert "upgraded from nbformat 2" in first.notes
    second = read_notebook_bytes(_nb_bytes(V2), "v2.ipynb")
    assert [c.id for c in first.cells] == [c.id for c in second.cells]  # nbformat's upgrade draws random ids
    assert all(c.id_is_synthetic for c in first.cells)


def test_a_future_minor_version_is_read_as_nbformats_validator_reads_it() -> None:
    """4.99 with a cell type and a field this nbformat does not know: valid for nbformat's validator (newer
    minors relax the schema), so read; the unknown cell is shown raw with a note. Not so for a known minor."""
    future = {
        "nbformat": 4, "nbformat_minor": 99, "metadata": {"new_field": True},
        "cells": [
            {"id": "a1", "cell_type": "markdown", "metadata": {}, "source": "intro"},
            {"id": "b2", "cell_type": "quiz", "metadata": {}, "source": "What is 2 + 2?", "choices": [3, 4]},
            {"id": "c3", "cell_type": "code", "metadata": {}, "source": "x = 4", "execution_count": 1,
             "outputs": [], "extra": "kept"},
        ],
    }
    nb = read_notebook_bytes(_nb_bytes(future), "future.ipynb")
    assert [c.cell_type for c in nb.cells] == ["markdown", "raw", "code"]
    assert nb.cells[1].unknown_type == "quiz" and nb.cells[1].source == "What is 2 + 2?"
    assert nb.cells[1].id == "b2" and not nb.cells[1].id_is_synthetic
    assert any("unknown cell type 'quiz'" in note for note in nb.notes)
    known = dict(future, nbformat_minor=4)
    with pytest.raises(NotebookUnreadable) as info:
        read_notebook_bytes(_nb_bytes(known), "known.ipynb")
    assert "cell_type 'quiz'" in info.value.reason


@pytest.mark.parametrize("problem", ["missing", "duplicate", "invalid"])
def test_ids_missing_or_duplicated_are_the_same_on_every_read(problem: str) -> None:
    """nbformat repairs such ids with random ones (a new id on every read), and refuses an id its schema does not
    allow (`$illegal chars`), which Jupyter opens with a warning; ids derived from index and source instead keep
    `#cell-id=` links valid across runs. The file's own valid ids stay."""
    nb = json.loads(nbformat.writes(v4.new_notebook(cells=[
        v4.new_markdown_cell("# T"), v4.new_code_cell("a = 1"), v4.new_code_cell("b = 2")])))
    nb["cells"][0]["id"] = "own-id"
    if problem == "missing":
        del nb["cells"][1]["id"]
        del nb["cells"][2]["id"]
    elif problem == "invalid":
        nb["cells"][1]["id"], nb["cells"][2]["id"] = "$illegal chars", "x" * 65
    else:
        nb["cells"][1]["id"] = nb["cells"][2]["id"] = "same"
    reads = [read_notebook_bytes(_nb_bytes(nb), "ids.ipynb") for _ in range(2)]
    ids = [[c.id for c in r.cells] for r in reads]
    assert ids[0] == ids[1] and len(set(ids[0])) == 3
    assert ids[0][0] == "own-id"
    if problem == "duplicate":
        assert ids[0][1] == "same" and reads[0].cells[2].id_is_synthetic
    else:
        assert reads[0].cells[1].id_is_synthetic and reads[0].cells[2].id_is_synthetic
    assert any(f"{problem} cell id" in note and "the same on every read" in note for note in reads[0].notes)


def test_raw_cells_keep_their_mimetype_and_language_is_unknown_without_metadata() -> None:
    cell = v4.new_raw_cell("Title\n=====", metadata={"raw_mimetype": "text/restructuredtext"})
    nb = read_notebook_bytes(nbformat.writes(v4.new_notebook(cells=[cell])).encode(), "raw.ipynb")
    assert nb.cells[0].raw_mimetype == "text/restructuredtext"
    assert (nb.language, nb.kernel_name) == ("", "")


def test_reasons_keep_their_text() -> None:
    nb = json.loads(nbformat.writes(v4.new_notebook(cells=[v4.new_code_cell("x")])))
    nb["cells"][0]["cell_type"] = "[bold]"
    with pytest.raises(NotebookUnreadable) as info:
        read_notebook_bytes(_nb_bytes(nb), "bad-type.ipynb")
    assert "cell_type '[bold]'" in info.value.reason


# ---------------------------------------------------------------------------------------------------------
# what Jupyter opens with a warning is read, with a note; what it cannot open says what to do


def _pump() -> dict[str, Any]:
    nb = v4.new_notebook(cells=[v4.new_markdown_cell("# Pump"), v4.new_code_cell(
        "head = 12.5\nprint('head:', head)", execution_count=1, outputs=[
            v4.new_output("stream", name="stdout", text="head: 12.5\n"),
            v4.new_output("execute_result", data={"text/plain": "12.5"}, execution_count=1),
            v4.new_output("error", ename="ValueError", evalue="bad", traceback=["t"])])])
    return dict(json.loads(nbformat.writes(nb)))


@pytest.mark.parametrize(("path", "note"), [
    (("cells", 1, "metadata"), "added the missing 'metadata' to code cell 1"),
    (("cells", 1, "execution_count"), "added the missing 'execution_count' to code cell 1 (null)"),
    (("cells", 0, "metadata"), "added the missing 'metadata' to markdown cell 0"),
    (("cells", 0, "source"), "added the missing 'source' to markdown cell 0"),
    (("cells", 1, "outputs", 0, "name"), "added the missing 'name' to output 0 of cell 1 (\"stdout\")"),
    (("cells", 1, "outputs", 1, "metadata"), "added the missing 'metadata' to output 1 of cell 1"),
    (("cells", 1, "outputs", 2, "traceback"), "added the missing 'traceback' to output 2 of cell 1"),
    (("metadata",), "added the missing notebook 'metadata'"),
    (("nbformat_minor",), "added the missing 'nbformat_minor' (0)"),
])
def test_a_missing_required_key_is_added_and_noted_not_quarantined(path: tuple[Any, ...], note: str) -> None:
    """Report generators and old editors leave required keys out; Jupyter opens such a file with a warning, so
    the index reads it (its values with it) and says what it added."""
    nb = _pump()
    parent: Any = nb
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    parsed = read_notebook_bytes(_nb_bytes(nb), "gen.ipynb")
    assert "head = 12.5" in parsed.cells[1].source
    assert any(note in n for n in parsed.notes), parsed.notes
    assert "12.5" in str(parsed.cells[1].outputs[1].data)


def test_a_tools_own_top_level_key_is_dropped_and_noted() -> None:
    nb = _pump()
    nb["generator"] = {"name": "report-tool"}
    parsed = read_notebook_bytes(_nb_bytes(nb), "gen.ipynb")
    assert "repaired: removed unexpected top-level 'generator'" in parsed.notes
    assert parsed.cells[1].outputs[0].text == "head: 12.5\n"


def test_an_execution_count_saved_while_the_cell_ran_is_read_as_none() -> None:
    """Old IPython saved a running cell's prompt as `"*"` (a real notebook of a fresh set was quarantined for it):
    the cell and its outputs are read, the count is none, and the notes say so."""
    nb = _pump()
    nb["cells"][1]["execution_count"] = "*"
    nb["cells"][1]["outputs"][1]["execution_count"] = "*"
    parsed = read_notebook_bytes(_nb_bytes(nb), "running.ipynb")
    assert parsed.cells[1].execution_count is None and parsed.cells[1].outputs[1].execution_count is None
    assert "12.5" in str(parsed.cells[1].outputs[1].data)
    assert any("cell 1's execution count \"*\"" in n for n in parsed.notes), parsed.notes
    assert any("output 1 of cell 1: execution count" in n for n in parsed.notes)


def test_a_key_of_the_wrong_type_is_still_quarantined() -> None:
    nb = _pump()
    nb["cells"][1]["outputs"][0]["name"] = 7
    with pytest.raises(NotebookUnreadable) as info:
        read_notebook_bytes(_nb_bytes(nb), "bad.ipynb")
    assert "schema violation at cells/1" in info.value.reason


def test_utf16_with_its_byte_order_mark_is_read_and_noted() -> None:
    """Windows PowerShell 5 writes `> out.ipynb` as UTF-16 with a byte order mark."""
    text = nbformat.writes(nbformat.from_dict(_pump()))
    for encoding in ("utf-16", "utf-16-be"):
        data = text.encode(encoding) if encoding == "utf-16" else b"\xfe\xff" + text.encode(encoding)
        parsed = read_notebook_bytes(data, "ps.ipynb")
        assert parsed.cells[1].outputs[0].text == "head: 12.5\n"
        assert any("read as UTF-16" in n for n in parsed.notes)
    with pytest.raises(NotebookUnreadable):  # without the mark nothing says the encoding: not guessed
        read_notebook_bytes(text.encode("utf-16-le"), "no_bom.ipynb")


def test_a_git_lfs_pointer_and_a_merge_conflict_say_what_to_do() -> None:
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"a" * 64 + b"\nsize 123\n"
    with pytest.raises(NotebookUnreadable) as info:
        read_notebook_bytes(pointer, "lfs.ipynb")
    assert "Git LFS pointer" in info.value.reason and "git lfs pull" in info.value.reason
    lines = nbformat.writes(nbformat.from_dict(_pump())).splitlines(keepends=True)
    conflicted = "".join([*lines[:5], "<<<<<<< HEAD\n", *lines[5:8], "=======\n", *lines[5:8],
                          ">>>>>>> theirs\n", *lines[8:]])
    with pytest.raises(NotebookUnreadable) as info:
        read_notebook_bytes(conflicted.encode(), "merge.ipynb")
    assert "unresolved merge conflict" in info.value.reason and "line 6" in info.value.reason


def test_an_html_page_saved_as_a_notebook_says_what_it_is() -> None:
    """A browser's 'Save page as' on a notebook's GitHub or nbviewer page keeps the .ipynb name."""
    for page in (b"\n<!DOCTYPE html>\n<html lang='en'><head><title>ballast.ipynb</title>",
                 "\ufeff<html><body>Notebook</body></html>".encode()):
        with pytest.raises(NotebookUnreadable) as info:
            read_notebook_bytes(page, "ballast.ipynb")
        assert "an HTML page" in info.value.reason and "raw file" in info.value.reason
