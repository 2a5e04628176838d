"""Naive baselines: LangChain NotebookLoader text and splitting, per-cell chunks, indexing and search."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nbformat import v4

from conftest import HashEmbedder, code, error, result, stream, write_nb
from nbrecall.notebook.read import read_notebook
from nbrecall.records import SearchFilters
from nbrecall.search.baselines import (
    BASELINES,
    baseline_search,
    build_baseline,
    langchain_chunks,
    langchain_text,
    notebook_chunks,
    per_cell_chunks,
)


def _word_count(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    image = v4.new_output("display_data", data={"image/png": "iVBORw0KGgoAAAANSUhEUgAAAAE=",
                                                 "text/plain": "<Figure size 640x480 with 1 Axes>"})
    write_nb(root / "a.ipynb", [
        v4.new_markdown_cell("# Harbour study\nWe model the zanzibar ferry."),
        code("x = 1\ny = 2", 1, [stream("printed-marker\n")]),
        code("x + y", 2, [result("42424242", 2)]),
        code("", None),
        code("plot()", 3, [image]),
    ])
    write_nb(root / "sub" / "b.ipynb", [
        code("boom()", 1, [error("ValueError", "quokka value is wrong")]),
        v4.new_markdown_cell("Notes on the lighthouse keeper."),
    ])
    (root / ".ipynb_checkpoints").mkdir()
    write_nb(root / ".ipynb_checkpoints" / "a-checkpoint.ipynb", [v4.new_markdown_cell("zanzibar copy")])
    return root


def test_langchain_text_has_notebookloader_format(corpus: Path) -> None:
    nb = read_notebook(corpus / "a.ipynb", display_path="a.ipynb")
    text, spans = langchain_text(nb)
    first = "'markdown' cell: '['# Harbour study\\n', 'We model the zanzibar ferry.']'\n\n"
    assert text.startswith(first + " 'code' cell: ")
    assert "'code' cell: '['x = 1\\n', 'y = 2']'\n\n 'code' cell: '['x + y']'\n\n" in text
    assert "'code' cell: '[]'\n\n" in text  # empty cells are kept, as LangChain does
    assert text.endswith("'code' cell: '['plot()']'\n\n")
    assert [s[2] for s in spans] == [0, 1, 2, 3, 4]
    for start, end, index in spans:
        assert text[start:end].startswith(f"'{nb.cells[index].cell_type}' cell: ")
    # defaults: no outputs at all
    assert "printed-marker" not in text and "42424242" not in text and "Figure" not in text
    chunks = langchain_chunks(nb, _word_count)
    assert len(chunks) == 1
    assert chunks[0].text == text.strip() and chunks[0].cells == [0, 1, 2, 3, 4]
    assert chunks[0].notebook == "a.ipynb"


def test_langchain_split_follows_cell_boundaries_and_records_cells(tmp_path: Path) -> None:
    cells = [v4.new_markdown_cell(" ".join(f"word{i}" for _ in range(8))) for i in range(10)]
    nb = read_notebook(write_nb(tmp_path / "n.ipynb", cells))
    chunks = langchain_chunks(nb, _word_count, budget=25, overlap=0)
    assert len(chunks) > 3
    seen: list[int] = []
    for chunk in chunks:
        present = sorted({int(m) for m in re.findall(r"word(\d+)", chunk.text)})
        assert chunk.cells == present
        assert chunk.text.startswith("'markdown' cell: '[") and chunk.text.endswith("]'")  # cut between cells
        seen.extend(chunk.cells)
    assert seen == list(range(10))  # no overlap asked: every cell exactly once, in order
    overlapping = langchain_chunks(nb, _word_count, budget=25, overlap=12)
    assert len(overlapping) > len(chunks)
    assert any(a.cells[-1] in b.cells for a, b in zip(overlapping, overlapping[1:], strict=False))


def test_langchain_split_cuts_a_long_cell_inside(tmp_path: Path) -> None:
    nb = read_notebook(write_nb(tmp_path / "n.ipynb", [
        v4.new_markdown_cell("short intro"),
        v4.new_code_cell(" ".join(f"tok{i}" for i in range(100))),
    ]))
    chunks = langchain_chunks(nb, _word_count, budget=30, overlap=0)
    assert len(chunks) >= 4
    assert chunks[0].cells[0] == 0
    assert all(c.cells == [1] for c in chunks[1:])
    joined = " ".join(c.text for c in chunks)
    assert all(f"tok{i}" in joined for i in range(100))


def test_per_cell_chunks_without_and_with_outputs(corpus: Path) -> None:
    a = read_notebook(corpus / "a.ipynb", display_path="a.ipynb")
    b = read_notebook(corpus / "sub" / "b.ipynb", display_path="sub/b.ipynb")
    plain = per_cell_chunks(a, with_outputs=False)
    assert [c.cells for c in plain] == [[0], [1], [2], [4]]  # the empty cell 3 makes no chunk
    assert [c.text for c in plain][1:] == ["x = 1\ny = 2", "x + y", "plot()"]
    assert not any("printed-marker" in c.text or "42424242" in c.text for c in plain)

    rich = {c.cells[0]: c.text for c in per_cell_chunks(a, with_outputs=True)}
    assert rich[1] == "x = 1\ny = 2\nprinted-marker"
    assert rich[2] == "x + y\n42424242"
    assert rich[4] == "plot()\n<Figure size 640x480 with 1 Axes>"  # text/plain only, never the image
    assert "iVBOR" not in "".join(rich.values())
    assert rich[0] == a.cells[0].source

    err = {c.cells[0]: c.text for c in per_cell_chunks(b, with_outputs=True)}
    assert err[0].startswith("boom()\nValueError: quokka value is wrong\n")
    assert "\x1b" not in err[0] and "ValueError  Traceback" in err[0]
    assert err[1] == "Notes on the lighthouse keeper."
    assert "quokka" not in " ".join(c.text for c in notebook_chunks("per-cell", b, _word_count))
    assert "quokka" not in " ".join(c.text for c in notebook_chunks("langchain", b, _word_count))
    with pytest.raises(ValueError):
        notebook_chunks("nope", b, _word_count)


def test_build_and_search_every_baseline(corpus: Path, tmp_path: Path, hash_embedder: HashEmbedder) -> None:
    out = tmp_path / "work"
    for name in BASELINES:
        store = build_baseline(name, corpus, out, hash_embedder)
        notebooks = {row["notebook"] for row in store.keyword("zanzibar lighthouse", 50, _all())}
        assert notebooks == {"a.ipynb", "sub/b.ipynb"}  # checkpoint folder skipped, paths relative to root

        bm25 = baseline_search(store, hash_embedder, "bm25")
        hits = bm25("lighthouse")
        assert hits and hits[0]["notebook"] == "sub/b.ipynb"
        assert hits[0]["cell"] == hits[0]["cells"][0]
        assert hits[0]["cells"] == ([0, 1] if name == "langchain" else [1])
        quokka = bm25("quokka")
        if name == "per-cell+outputs":
            assert quokka[0]["notebook"] == "sub/b.ipynb" and quokka[0]["cells"] == [0]
        else:
            assert quokka == []

        dense = baseline_search(store, hash_embedder, "dense")
        top = dense("zanzibar ferry")
        assert top[0]["notebook"] == "a.ipynb" and 0 in top[0]["cells"]
        assert len(top) == store.count() <= 50
        assert [h["score"] for h in top] == sorted((h["score"] for h in top), reverse=True)
    with pytest.raises(ValueError):
        baseline_search(store, hash_embedder, "hybrid")


def test_rebuild_is_skipped_and_embeddings_are_cached(corpus: Path, tmp_path: Path,
                                                      hash_embedder: HashEmbedder) -> None:
    out = tmp_path / "work"
    first = build_baseline("per-cell", corpus, out, hash_embedder)
    count, calls = first.count(), len(hash_embedder.calls)
    assert calls > 0 and (out / "per-cell" / "baseline.json").is_file()
    again = build_baseline("per-cell", corpus, out, hash_embedder)
    assert again.count() == count and len(hash_embedder.calls) == calls  # marker matched: nothing redone
    # outputs baseline shares texts with per-cell (cells without outputs): those come from the cache
    build_baseline("per-cell+outputs", corpus, out, hash_embedder)
    embedded = [t for call in hash_embedder.calls[calls:] for t in call]
    assert "x + y\n42424242" in embedded and "Notes on the lighthouse keeper." not in embedded
    # a changed corpus file list triggers a rebuild
    write_nb(corpus / "c.ipynb", [v4.new_markdown_cell("a brand new platypus notebook")])
    rebuilt = build_baseline("per-cell", corpus, out, hash_embedder)
    assert rebuilt.count() == count + 1
    assert baseline_search(rebuilt, hash_embedder, "bm25")("platypus")[0]["notebook"] == "c.ipynb"


def _all() -> SearchFilters:
    return SearchFilters(include_deprecated=True)
