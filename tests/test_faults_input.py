"""Hostile input: malformed notebooks and hostile files never crash reading, converting or indexing.

Properties (hypothesis, derandomized, bounded): `read_notebook_bytes` returns a Notebook or raises
NotebookUnreadable and nothing else; `convert_file` never raises; `run_index` over a folder of such files never
raises and every file ends up in the manifest, indexed or quarantined with a reason. Then a fixed corpus of the
named hostile cases (5 MB output, 100k-line cell, deep nesting, huge base64, FIFO, symlink loops, non-UTF-8
names, a file that vanishes mid-run, ...). `bench/faults_fuzz.py` runs the generator over 10,000 files.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import HashEmbedder
from nbrecall.cli import app
from nbrecall.config import Settings
from nbrecall.convert.run import convert_file
from nbrecall.index.manifest import SqliteManifest
from nbrecall.index.store import LanceStore
from nbrecall.ingest import pipeline
from nbrecall.ingest.pipeline import run_index
from nbrecall.notebook.files import printable_path
from nbrecall.notebook.model import Notebook
from nbrecall.notebook.read import NotebookUnreadable, read_notebook, read_notebook_bytes

pytestmark = pytest.mark.slow  # a hostile corpus of hundreds of files, indexed and converted


def fuzz(examples: int) -> settings:
    """Bounded and repeatable: a fixed number of derandomized examples, no deadline, no example database."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )


# ---------------------------------------------------------------------------------------------------- generator

DROP = object()  # a field left out
ODD_TEXT = [
    "\ud800",  # lone surrogate: valid JSON escape, not encodable as UTF-8
    "a\udfffb",
    "\x00",
    "nul\x00byte",
    "é日本🚀",
    "<script>alert(1)</script>",
    "\u202eevil",
    "%%bash\nrm -rf /",
    "line\r\nline",
    "",
]
text = st.one_of(st.text(max_size=30), st.sampled_from(ODD_TEXT))
leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), text
)
any_json = st.recursive(leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(text, c, max_size=4), max_leaves=10)
multiline = st.one_of(text, st.lists(text, max_size=4))
KERNELS = ["python3", "ir", "julia-1.9", "scala", "javascript", "bash", "sos", "", "xpython"]
LANGUAGES = ["python", "R", "julia", "scala", "javascript", "bash", "sos", "", "Python"]
MIMES = ["text/plain", "text/html", "image/png", "image/jpeg", "image/svg+xml", "application/json", "text/latex",
         "text/markdown", "application/vnd.plotly.v1+json", "application/x-weird"]


@st.composite
def notebook_obj(draw: st.DrawFn) -> Any:
    """A notebook-shaped JSON value in which some fields (0–60 %) have a wrong type or are missing."""
    rate = draw(st.sampled_from([0, 0, 3, 10, 30, 60]))

    def pick(good: st.SearchStrategy[Any]) -> Any:
        if draw(st.integers(0, 99)) < rate:
            return draw(st.one_of(any_json, st.just(DROP)))
        return draw(good)

    def obj(**fields: Any) -> dict[str, Any]:
        return {k: v for k, v in fields.items() if v is not DROP}

    def b64() -> st.SearchStrategy[str]:
        return st.one_of(st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode()), text)

    def bundle() -> dict[str, Any]:
        mimes = draw(st.lists(st.sampled_from(MIMES), max_size=3, unique=True))
        return obj(**{
            m: pick(b64() if m.startswith("image/") and "svg" not in m else
                    any_json if "json" in m else multiline)
            for m in mimes
        })

    def output() -> Any:
        kind = draw(st.sampled_from(["stream", "execute_result", "display_data", "error", "pyout", "weird"]))
        if kind == "stream":
            return obj(output_type=kind, name=pick(st.sampled_from(["stdout", "stderr"])), text=pick(multiline))
        if kind == "error":
            traceback = pick(st.lists(text, max_size=3))
            return obj(output_type=kind, ename=pick(text), evalue=pick(text), traceback=traceback)
        return obj(output_type=kind, data=bundle(), metadata=pick(st.just({})),
                   execution_count=pick(st.one_of(st.none(), st.integers(0, 99))))

    def cell(i: int) -> Any:
        kind = pick(st.sampled_from(["code", "markdown", "raw"]))
        fields: dict[str, Any] = {
            "cell_type": kind,
            "id": pick(st.sampled_from([f"cell-{i}", "dup", "x" * 70, ""])),
            "metadata": pick(st.fixed_dictionaries({}, optional={"tags": st.lists(text, max_size=2)})),
            "source": pick(multiline),
        }
        if kind == "code":
            fields["outputs"] = pick(st.lists(st.builds(output), max_size=3))
            fields["execution_count"] = pick(st.one_of(st.none(), st.integers(0, 99)))
        elif kind == "markdown" and draw(st.booleans()):
            fields["source"] = "![fig](attachment:a.png)"
            fields["attachments"] = pick(st.just({"a.png": {"image/png": draw(b64())}}))
        return obj(**fields)

    major = pick(st.sampled_from([4, 4, 4, 3]))
    cells = pick(st.integers(0, 5).map(lambda n: [cell(i) for i in range(n)]))
    metadata = pick(
        st.fixed_dictionaries(
            {},
            optional={
                "kernelspec": st.fixed_dictionaries(
                    {"name": st.sampled_from(KERNELS), "language": st.sampled_from(LANGUAGES)}
                ),
                "language_info": st.fixed_dictionaries({"name": st.sampled_from(LANGUAGES)}),
                "authors": any_json,
                "tags": st.lists(text, max_size=3),
            },
        )
    )
    if major == 3:
        return obj(nbformat=3, nbformat_minor=pick(st.integers(0, 1)), metadata=metadata,
                   worksheets=pick(st.just([{"cells": cells if isinstance(cells, list) else []}])))
    return obj(nbformat=major, nbformat_minor=pick(st.integers(0, 5)), metadata=metadata, cells=cells)


def nested(depth: int) -> str:
    return '{"nbformat": 4, "nbformat_minor": 5, "metadata": {"a": ' + "[" * depth + "]" * depth + '}, "cells": []}'


@st.composite
def notebook_bytes(draw: st.DrawFn) -> bytes:
    """Bytes of a file named `.ipynb`: mostly notebook-shaped, then damaged at the byte level."""
    kind = draw(st.sampled_from(["notebook"] * 6 + ["json", "deep", "empty", "binary"]))
    if kind == "json":
        data = json.dumps(draw(any_json)).encode("utf-8", "surrogatepass")
    elif kind == "deep":
        data = nested(draw(st.sampled_from([50, 500, 990, 5000, 100_000]))).encode()
    elif kind == "empty":
        data = draw(st.sampled_from([b"", b"   \n", b"\xef\xbb\xbf", b"{}", b"[]", b"null"]))
    elif kind == "binary":
        data = draw(st.binary(max_size=200))
    else:
        ensure_ascii = draw(st.booleans())  # False writes lone surrogates raw: invalid UTF-8 bytes
        data = json.dumps(draw(notebook_obj()), ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")
    damage = draw(st.sampled_from(["none"] * 5 + ["truncate", "nul", "badbyte", "bom", "flip"]))
    if damage != "none" and data:
        at = draw(st.integers(0, len(data) - 1))
        if damage == "truncate":
            data = data[:at]
        elif damage == "nul":
            data = data[:at] + b"\x00" + data[at:]
        elif damage == "badbyte":
            data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"])) + data[at:]
        elif damage == "bom":
            data = b"\xef\xbb\xbf" + data
        else:
            data = data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :]
    return data


name_chars = st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",))
file_names = st.text(name_chars, min_size=1, max_size=24).filter(lambda s: not s.startswith(".")).map(
    lambda s: s + ".ipynb"
)

# ---------------------------------------------------------------------------------------------------- helpers


def all_strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def check_read(data: bytes) -> Notebook | None:
    try:
        nb = read_notebook_bytes(data, "fuzz.ipynb")
    except NotebookUnreadable as exc:
        assert exc.reason and "\n" not in exc.reason
        return None
    # Whatever was read can be written: no lone surrogates left for the store, the manifest or the converter.
    for cell in nb.cells:
        cell.source.encode("utf-8")
        assert cell.execution_count is None or 0 <= cell.execution_count < 2**63  # fits SQLite's INTEGER
        for out in cell.outputs:
            for s in all_strings([out.text, out.data, out.traceback, out.ename, out.evalue, out.metadata]):
                s.encode("utf-8")
    for s in all_strings(nb.metadata):
        s.encode("utf-8")
    return nb


def expected_entries(root: Path) -> set[str]:
    """What discovery must account for: every non-hidden `*.ipynb` entry that is not a folder."""
    found = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.endswith(".ipynb") and not name.startswith("."):
                found.add(printable_path((Path(folder) / name).relative_to(root).as_posix()))
    return found


def check_manifest(root: Path, index: Path) -> dict[str, tuple[str, str]]:
    """Every file under `root` is in the manifest, indexed or quarantined with a reason; the store agrees."""
    manifest = SqliteManifest(index / "manifest.sqlite", readonly=True)
    try:
        files = {rel: rec.sha256 for (_root, rel), rec in manifest.files().items()}
        assert set(files) == expected_entries(root)
        outcome: dict[str, tuple[str, str]] = {}
        for rel, sha in files.items():
            content = manifest.content(sha)
            assert content is not None, rel
            assert content.status in ("indexed", "quarantined"), (rel, content.status)
            if content.status == "quarantined":
                assert content.reason.strip(), rel
            outcome[rel] = (content.status, content.reason)
        expected = {c.sha256: c.n_chunks for c in manifest.contents("indexed") if c.n_chunks}
    finally:
        manifest.close()
    store = LanceStore(index / "lance", HashEmbedder.dim)
    counts = store.notebook_shas()
    assert {sha: n for sha, n in counts.items() if sha in expected} == expected
    ids = store.table.search().select(["chunk_id"]).limit(None).to_arrow()["chunk_id"].to_pylist()
    assert len(ids) == len(set(ids))
    return outcome


def index(root: Path, idx: Path, budget: int = 0) -> pipeline.IndexReport:
    embedder = HashEmbedder()
    config = Settings(index_dir=idx)
    config.chunk.budget_tokens = budget
    return run_index([root], config, embedder, LanceStore(idx / "lance", embedder.dim))


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a FIFO opened for reading blocks until a writer comes)."""

    def expired(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------------- properties


@fuzz(300)
@given(notebook_bytes())
def test_read_returns_a_notebook_or_raises_unreadable(data: bytes) -> None:
    check_read(data)


@fuzz(300)
@given(notebook_obj())
def test_read_of_wrong_types_in_every_field(obj: Any) -> None:
    check_read(json.dumps(obj).encode())


@fuzz(60)
@given(notebook_bytes(), file_names)
def test_convert_file_never_raises(tmp_path: Path, data: bytes, name: str) -> None:
    source = tmp_path / "in" / name
    source.parent.mkdir(exist_ok=True)
    source.write_bytes(data)
    result = convert_file(source, tmp_path / "out")
    assert result.ok or (result.reason and "internal error" not in result.reason), result.reason
    if result.ok:
        assert all(p.exists() for p in result.written)


@fuzz(4)
@given(st.lists(st.tuples(file_names, notebook_bytes()), min_size=4, max_size=12, unique_by=lambda t: t[0]))
def test_run_index_never_raises_and_accounts_for_every_file(tmp_path_factory: pytest.TempPathFactory,
                                                            files: list[tuple[str, bytes]]) -> None:
    base = tmp_path_factory.mktemp("fuzz")
    root, idx = base / "share", base / "idx"
    for i, (name, data) in enumerate(files):
        path = root / (f"sub {i % 3}" if i % 2 else "") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    index(root, idx)
    outcome = check_manifest(root, idx)
    assert not any("internal error" in reason for _status, reason in outcome.values()), outcome
    again = index(root, idx)  # nothing changed: nothing redone, nothing lost
    assert (again.hashed, again.notebooks_indexed, again.quarantined) == (0, 0, [])
    assert check_manifest(root, idx) == outcome


# ---------------------------------------------------------------------------------------------------- named cases


def nb_json(cells: list[dict[str, Any]], metadata: dict[str, Any] | None = None, minor: int = 5) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": minor, "metadata": metadata or {}, "cells": cells})


def code_cell(i: int, source: str, outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": source, "outputs": outputs or [],
            "execution_count": 1}


def md_cell(i: int, source: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "id": f"m{i}", "metadata": {}, "source": source}


BIG = 5_000_000  # in-suite size; bench/faults_fuzz.py does 100 MB


def hostile_corpus(root: Path) -> dict[str, str]:
    """The named hostile cases; returns rel → the outcome expected ("indexed", "quarantined" or "either")."""
    root.mkdir(parents=True)
    expect: dict[str, str] = {}

    def put(rel: str, data: str | bytes, outcome: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        expect[rel] = outcome

    ok_nb = nb_json([md_cell(0, "# Winch\nWinch pull of the anchor handler."), code_cell(1, "pull_t = 250")])
    put("valid.ipynb", ok_nb, "indexed")
    put("truncated.ipynb", ok_nb[: len(ok_nb) // 2], "quarantined")
    put("empty file.ipynb", b"", "quarantined")
    put("empty notebook.ipynb", nb_json([]), "indexed")
    put("not a notebook.ipynb", json.dumps({"name": "package.json", "version": "1.0"}), "quarantined")
    put("a list.ipynb", "[1, 2, 3]", "quarantined")
    put("invalid utf8.ipynb", ok_nb.encode()[:40] + b"\xff\xfe" + ok_nb.encode()[40:], "quarantined")
    put("nul bytes.ipynb", ok_nb.encode().replace(b"Winch pull", b"Winch\x00pull"), "quarantined")
    put("nul escape.ipynb", nb_json([md_cell(0, "NUL \x00 inside a string")]), "indexed")
    put("lone surrogate.ipynb", nb_json([code_cell(0, "s = '\ud800'", [
        {"output_type": "stream", "name": "stdout", "text": "bad \udc80 byte"}])]), "indexed")
    put("cells not a list.ipynb", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": {}}),
        "quarantined")
    put("source int.ipynb", nb_json([{**code_cell(0, ""), "source": 5}]), "quarantined")
    put("source dict.ipynb", nb_json([{**code_cell(0, ""), "source": {"a": 1}}]), "quarantined")
    put("source null.ipynb", nb_json([{**code_cell(0, ""), "source": None}]), "quarantined")
    put("outputs wrong.ipynb", nb_json([{**code_cell(0, "x"), "outputs": [5, "text"]}]), "quarantined")
    put("metadata list.ipynb", json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": [], "cells": []}),
        "quarantined")
    # an execution count that is not one ("*" when saved while the cell ran) is read as none, as Jupyter opens it
    put("exec count str.ipynb", nb_json([{**code_cell(0, "x"), "execution_count": "3"}]), "indexed")
    put("nbformat str.ipynb", json.dumps({"nbformat": "4", "nbformat_minor": 5, "metadata": {}, "cells": []}),
        "quarantined")
    put("minor str.ipynb", json.dumps({"nbformat": 4, "nbformat_minor": "5", "metadata": {}, "cells": []}),
        "quarantined")
    put("huge execution count.ipynb", nb_json([{**code_cell(0, "x = 1"), "execution_count": 2**70}]), "indexed")
    put("author object.ipynb", nb_json([md_cell(0, "# Authors")], {"authors": [{"name": {"first": "A"}}, 5]}),
        "indexed")
    put("missing keys.ipynb", json.dumps({"nbformat": 4, "cells": [{"cell_type": "code"}]}), "either")
    put("deep nesting.ipynb", nested(100_000), "quarantined")
    put("deep 900.ipynb", nested(900), "either")
    put("R kernel.ipynb", nb_json([code_cell(0, "x <- c(1, 2)\nsummary(x)")],
                                  {"kernelspec": {"name": "ir", "language": "R"}, "language_info": {"name": "R"}}),
        "indexed")
    put("julia kernel.ipynb", nb_json([code_cell(0, "using Plots\nx = 1:10")],
                                      {"kernelspec": {"name": "julia-1.9", "language": "julia"}}), "indexed")
    put("big output.ipynb", nb_json([code_cell(0, "print(log)", [
        {"output_type": "stream", "name": "stdout", "text": "iteration 12345 residual 0.001\n" * (BIG // 32)}])]),
        "indexed")
    put("huge base64.ipynb", nb_json([code_cell(0, "plot()", [
        {"output_type": "display_data", "metadata": {},
         "data": {"image/png": base64.b64encode(random.Random(7).randbytes(BIG * 3 // 4)).decode(),
                  "text/plain": "<Figure>"}}])]), "indexed")
    put("bad base64.ipynb", nb_json([code_cell(0, "plot()", [
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": "!!not base64!!"}}])]), "indexed")
    put("100k lines.ipynb", nb_json([code_cell(0, "".join(f"x = {i} * 2.5\n" for i in range(100_000)))]), "indexed")
    put("sub dir/ñø 日本 spaces.ipynb", ok_nb.replace("Winch", "Capstan"), "indexed")
    put("v3.ipynb", json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [
        {"cells": [{"cell_type": "heading", "level": 1, "source": "Old", "metadata": {}}]}]}), "indexed")
    put("v3 broken.ipynb", json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {},
                                       "worksheets": [{"cells": [{"cell_type": "code", "input": 5,
                                                                  "outputs": "x"}]}]}), "quarantined")
    put("no access.ipynb", ok_nb.replace("Winch", "Davit"), "either")  # chmod 000: root reads it anyway
    (root / "no access.ipynb").chmod(0)
    # File-system hostiles.
    os.mkfifo(root / "fifo.ipynb")
    expect["fifo.ipynb"] = "quarantined"
    (root / "loop.ipynb").symlink_to("loop.ipynb")
    expect["loop.ipynb"] = "quarantined"
    (root / "dangling.ipynb").symlink_to("nowhere/gone.ipynb")
    expect["dangling.ipynb"] = "quarantined"
    (root / "folder.ipynb").mkdir()  # a folder named like a notebook: not a file, walked into
    put("folder.ipynb/inner.ipynb", ok_nb.replace("Winch", "Bollard"), "indexed")
    (root / "sub dir" / "up").symlink_to("..")  # a folder symlink loop (not followed by default)
    bad_name = os.fsencode(root) + b"/bad \xff name.ipynb"
    with open(bad_name, "wb") as handle:
        handle.write(ok_nb.encode())
    expect[printable_path(os.fsdecode(b"bad \xff name.ipynb"))] = "indexed"  # recorded with its byte escaped
    return expect


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str], pipeline.IndexReport]:
    base = tmp_path_factory.mktemp("hostile")
    root, idx = base / "share", base / "idx"
    expect = hostile_corpus(root)
    with time_limit(120):
        report = index(root, idx, budget=2000)
    return root, idx, expect, report


def test_hostile_corpus_every_file_indexed_or_quarantined(hostile) -> None:  # type: ignore[no-untyped-def]
    root, idx, expect, report = hostile
    outcome = check_manifest(root, idx)
    assert set(outcome) == set(expect)
    wrong = {rel: outcome[rel] for rel, want in expect.items() if want != "either" and outcome[rel][0] != want}
    assert wrong == {}
    assert outcome["fifo.ipynb"][1] == "cannot read file: not a regular file (a FIFO)"
    assert "symbolic links" in outcome["loop.ipynb"][1]
    assert "broken symbolic link" in outcome["dangling.ipynb"][1]
    assert outcome["bad \\xff name.ipynb"] == ("indexed", "")
    assert "nested too deeply" in outcome["deep nesting.ipynb"][1]
    assert "truncated JSON" in outcome["truncated.ipynb"][1]
    assert not any("internal error" in reason for _status, reason in outcome.values())
    assert sorted(rel for rel, _ in report.quarantined) == sorted(r for r, (s, _) in outcome.items()
                                                                  if s == "quarantined")


def test_hostile_corpus_second_run_changes_nothing(hostile) -> None:  # type: ignore[no-untyped-def]
    root, idx, _expect, _report = hostile
    before = check_manifest(root, idx)
    with time_limit(60):
        again = index(root, idx, budget=2000)
    assert (again.notebooks_indexed, again.quarantined, again.notebooks_removed) == (0, [], 0)
    assert check_manifest(root, idx) == before


def test_lone_surrogates_are_replaced_and_noted() -> None:
    nb = read_notebook_bytes(nb_json([code_cell(0, "s = '\ud800'")]).encode(), "x.ipynb")
    assert nb.cells[0].source == "s = '\ufffd'"
    assert any("lone surrogate" in note for note in nb.notes)


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.ipynb")
    with time_limit(10):
        with pytest.raises(NotebookUnreadable, match="not a regular file"):
            read_notebook(tmp_path / "pipe.ipynb")
        assert convert_file(tmp_path / "pipe.ipynb", tmp_path / "out").reason == (
            "cannot read file: not a regular file (a FIFO)"
        )


def test_convert_cli_over_the_hostile_corpus(hostile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, _idx, expect, _report = hostile
    with time_limit(120):
        result = CliRunner().invoke(app, ["convert", str(root), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output  # some files converted, the rest listed as unreadable
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert (tmp_path / "out" / "valid.md").is_file()
    assert (tmp_path / "out" / "bad \\xff name.md").is_file()  # converted under a printable name


def test_a_file_that_vanishes_mid_run_is_quarantined_then_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, idx = tmp_path / "share", tmp_path / "idx"
    root.mkdir()
    (root / "stays.ipynb").write_text(nb_json([md_cell(0, "# Stays")]))
    (root / "goes.ipynb").write_text(nb_json([md_cell(0, "# Goes")]))
    real = pipeline.discover

    def discover_then_delete(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        (root / "goes.ipynb").unlink()  # after hashing, before parsing
        return found

    monkeypatch.setattr(pipeline, "discover", discover_then_delete)
    report = index(root, idx)
    assert report.quarantined == [("goes.ipynb", "cannot read file: No such file or directory")]
    monkeypatch.setattr(pipeline, "discover", real)
    report = index(root, idx)
    assert report.notebooks_removed == 1
    assert set(check_manifest(root, idx)) == {"stays.ipynb"}


def test_a_fixed_file_is_picked_up(tmp_path: Path) -> None:
    root, idx = tmp_path / "share", tmp_path / "idx"
    root.mkdir()
    os.mkfifo(root / "later.ipynb")
    (root / "link.ipynb").symlink_to("target.ipynb")
    with time_limit(30):
        first = index(root, idx)
    assert {rel for rel, _ in first.quarantined} == {"later.ipynb", "link.ipynb"}
    (root / "later.ipynb").unlink()
    (root / "later.ipynb").write_text(nb_json([md_cell(0, "# Fixed")]))
    (root / "target.ipynb").write_text(nb_json([md_cell(0, "# Target")]))
    second = index(root, idx)
    assert second.quarantined == [] and second.notebooks_indexed == 2
    outcome = check_manifest(root, idx)
    assert {rel: status for rel, (status, _) in outcome.items()} == {
        "later.ipynb": "indexed", "link.ipynb": "indexed", "target.ipynb": "indexed"
    }
    manifest = SqliteManifest(idx / "manifest.sqlite", readonly=True)
    assert manifest.contents("quarantined") == []  # the old reasons went with their files


def test_a_newer_reader_reads_the_quarantined_files_again_and_only_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that accepts what it used to refuse (`READER_VERSION`) must reach the files an older one quarantined,
    though neither they nor the settings changed; the indexed notebooks are not chunked again for it."""
    root, idx = tmp_path / "share", tmp_path / "idx"
    root.mkdir()
    (root / "good.ipynb").write_text(nb_json([md_cell(0, "# Hawser\nHawser tension.")]))
    (root / "cut.ipynb").write_text(nb_json([md_cell(0, "# Cut")])[:40])
    first = index(root, idx)
    assert [rel for rel, _ in first.quarantined] == ["cut.ipynb"] and first.notebooks_indexed == 1
    again = index(root, idx)
    assert again.quarantined == [] and again.notebooks_indexed == 0  # same reader: nothing read again
    monkeypatch.setattr(pipeline, "READER_VERSION", pipeline.READER_VERSION + 1)
    newer = index(root, idx)
    assert [rel for rel, _ in newer.quarantined] == ["cut.ipynb"] and newer.notebooks_indexed == 0
    assert index(root, idx).quarantined == []
    assert check_manifest(root, idx)["cut.ipynb"][0] == "quarantined"


def test_a_name_that_is_not_utf8_is_indexed_under_its_escaped_name(tmp_path: Path) -> None:
    """A share with a legacy encoding (Latin-1 `é` in a folder and a file name): the notebook is indexed, found and
    read again through its recorded name `caf\\xe9/…`; a file named with those characters literally is its own."""
    from nbrecall.notebook.files import notebook_path

    root, idx = tmp_path / "share", tmp_path / "idx"
    root.mkdir()
    folder = os.fsencode(root) + b"/caf\xe9"
    os.mkdir(folder)
    with open(folder + b"/r\xe9sum\xe9.ipynb", "w", encoding="utf-8") as handle:
        handle.write(nb_json([md_cell(0, "# Capstan\nCapstan pull of the legacy share.")]))
    (root / "literal \\xe9.ipynb").write_text(nb_json([md_cell(0, "# Fairlead\nFairlead angle, named literally.")]))
    first = index(root, idx)
    assert first.quarantined == [] and first.notebooks_indexed == 2
    outcome = check_manifest(root, idx)
    assert outcome == {"caf\\xe9/r\\xe9sum\\xe9.ipynb": ("indexed", ""), "literal \\xe9.ipynb": ("indexed", "")}
    assert notebook_path(str(root.resolve()), "caf\\xe9/r\\xe9sum\\xe9.ipynb").read_bytes().startswith(b"{")
    assert notebook_path(str(root.resolve()), "literal \\xe9.ipynb").is_file()
    again = index(root, idx)
    assert again.changed == 0 and again.notebooks_indexed == 0 and again.quarantined == []


def test_index_folder_with_uri_characters_in_its_name(tmp_path: Path) -> None:
    root, idx = tmp_path / "share", tmp_path / "we#ird?name %41"
    root.mkdir()
    (root / "a.ipynb").write_text(nb_json([md_cell(0, "# Hawser\nHawser tension.")]))
    index(root, idx)
    assert SqliteManifest(idx / "manifest.sqlite", readonly=True).stats()["notebooks"] == 1
