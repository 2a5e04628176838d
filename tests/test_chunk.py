"""Chunking: grouping under headings within a budget, and the typed chunks."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbformat import v4

from conftest import HashEmbedder, code, error, result, stream
from nbrecall.ingest.chunk import chunk_notebook, split_lines
from nbrecall.notebook.analysis import analyse
from nbrecall.notebook.headings import heading_of
from nbrecall.notebook.read import read_notebook_bytes
from nbrecall.records import CONTENT_KINDS, FACT_KIND

DF_HTML = """<div><table border="1" class="dataframe"><thead><tr style="text-align: right;"><th></th>
<th>tank</th><th>volume_m3</th></tr></thead><tbody><tr><th>0</th><td>AP</td><td>412.5</td></tr>
<tr><th>1</th><td>DB3</td><td>872.1</td></tr></tbody></table><p>2 rows × 2 columns</p></div>"""


def _nb(cells: list) -> object:
    nb = v4.new_notebook(cells=cells)
    return read_notebook_bytes(nbformat.writes(nb).encode(), "projects/2017/17-042/ballast.ipynb")


def _chunks(cells: list, budget: int = 60):  # type: ignore[no-untyped-def]
    nb = _nb(cells)
    embedder = HashEmbedder()
    return nb, chunk_notebook(nb, analyse(nb), count_tokens=embedder.count_tokens, budget=budget)


def test_heading_detection() -> None:
    nb = _nb(
        [
            v4.new_markdown_cell("## Aft tanks\ntext"),
            v4.new_markdown_cell("plain"),
            v4.new_markdown_cell("\n\n# Title"),
        ]
    )
    assert [heading_of(c) for c in nb.cells] == [(2, "Aft tanks"), None, (1, "Title")]


def test_groups_start_at_headings_and_code_joins_the_markdown_above() -> None:
    _nb_, chunks = _chunks(
        [
            v4.new_markdown_cell("# Ballast"),
            v4.new_markdown_cell("We fill the aft peak first to trim the PSV."),
            code("aft = 412.5", 1),
            v4.new_markdown_cell("## Forward tanks"),
            code("fwd = 300.0", 2),
        ]
    )
    groups = [c for c in chunks if c.kind in ("code", "text")]
    assert [g.cells for g in groups] == [[0, 1, 2], [3, 4]]
    assert groups[0].heading == "Ballast" and groups[1].heading == "Ballast › Forward tanks"
    first = groups[0].text
    assert first.startswith("projects/2017/17-042/ballast.ipynb\nBallast")
    assert first.index("aft peak") < first.index("aft = 412.5")
    assert "defines: aft" in first
    assert groups[0].anchor == 2 and groups[0].anchor_id == _nb_.cells[2].id


def test_budget_cut_carries_trailing_markdown_to_the_code_it_explains() -> None:
    long_code = "\n".join(f"x{i} = {i}" for i in range(12))
    _nb_, chunks = _chunks(
        [
            v4.new_markdown_cell("# Loads"),
            code(long_code, 1),
            v4.new_markdown_cell("The mooring pretension follows from the catenary equation."),
            code("pretension = 1200", 2),
        ],
        budget=50,
    )
    groups = [c for c in chunks if c.kind in ("code", "text")]
    assert [g.cells for g in groups] == [[0, 1], [2, 3]]


def test_a_cell_larger_than_the_budget_is_split_on_lines_and_nothing_is_lost() -> None:
    source = "\n".join(f"value_{i} = compute_{i}(argument_{i})" for i in range(60))
    _nb_, chunks = _chunks([code(source, 1)], budget=60)
    pieces = [c for c in chunks if c.kind == "code"]
    assert len(pieces) > 1 and all(c.cells == [0] for c in pieces)
    joined = "\n".join(c.text for c in pieces)
    assert all(line in joined for line in source.splitlines())


def test_split_lines_respects_budget() -> None:
    embedder = HashEmbedder()
    pieces = split_lines("\n".join(["a b c d"] * 10), embedder.count_tokens, 14)
    assert all(sum(embedder.count_tokens([p])) <= 14 + 6 * 2 for p in pieces) and len(pieces) > 1


def test_typed_chunks_table_scalar_error_figure() -> None:
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    _nb_, chunks = _chunks(
        [
            v4.new_markdown_cell("# Ballast plan"),
            code("tanks", 1, [result("  tank  volume_m3\n0 AP 412.5", 1, DF_HTML)]),
            code("total_ballast = tanks.volume_m3.sum()\ntotal_ballast", 2, [result("3803.0", 2)]),
            code(
                "print(f'Total ballast aft: {aft:,.1f} m3')", 3, [stream("Total ballast aft: 1,284.6 m3\n")]
            ),
            code("tanks['pile_diameter']", 4, [error("KeyError", "'pile_diameter'")]),
            code(
                "plt.plot(x)\nplt.title('Ballast along the hull')",
                5,
                [v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})],
            ),
        ]
    )
    by_kind = {}
    for chunk in chunks:
        by_kind.setdefault(chunk.kind, []).append(chunk)
    table = by_kind["table"][0]
    assert table.cells == [1] and "volume_m3" in table.text and "tank" in table.text
    scalars = {c.cells[0]: c.text for c in by_kind["scalar"]}
    assert "total_ballast = 3803.0" in scalars[2]
    assert "Total ballast aft: 1,284.6 m3" in scalars[3]
    err = by_kind["error"][0]
    assert err.cells == [4] and "KeyError" in err.text and "tanks['pile_diameter']" in err.text
    fig = by_kind["figure"][0]
    assert fig.cells == [5] and "Ballast along the hull" in fig.text
    assert all(c.heading == "Ballast plan" for c in chunks)
    # retrieval searches content and facts apart by kind: a kind the chunker makes must be one it searches
    assert set(by_kind) <= set(CONTENT_KINDS) | {FACT_KIND}


def test_base64_never_reaches_chunk_text() -> None:
    png = "iVBORw0KGgo" + "A" * 5000
    _nb_, chunks = _chunks([code("plot()", 1, [v4.new_output("display_data", data={"image/png": png})])])
    assert all("AAAAAAAAAA" not in c.text for c in chunks)


def test_empty_notebook_gives_no_chunks() -> None:
    _nb_, chunks = _chunks([])
    assert chunks == []
    raw = json.loads(nbformat.writes(v4.new_notebook()))
    assert raw["cells"] == []


def test_keyword_text_of_every_chunk_names_the_notebook_title_and_the_data_it_reads() -> None:
    # The data file is named in cell 2 and drawn in cell 4, under another heading: a question about "the drawing
    # of the Rotterdam basins" must find cell 4 by its keyword text. Vectors keep the cell's own text.
    _nb_, chunks = _chunks(
        [
            v4.new_markdown_cell("# Harbour network"),
            code('import pathlib\nshape = pathlib.Path("inputs") / "Rotterdam-Basins" / "basins.shp"', 1),
            v4.new_markdown_cell("## Draw"),
            v4.new_markdown_cell("Two panels."),
            code("nx.draw(G, ax=axes[0])\nnx.draw(G, pos=xy, ax=axes[1])", 2),
        ]
    )
    drawing = next(c for c in chunks if 4 in c.cells)
    assert "Rotterdam" in drawing.text and "nx.draw" in drawing.text
    assert all("Harbour network · inputs Rotterdam Basins basins shp" in c.text.split("\n\n")[0] for c in chunks)
    assert all("Rotterdam" not in c.embed_text for c in chunks if 1 not in c.cells)


def test_line_counts_add_up_to_the_whole_cell_with_the_bundled_tokenizer(model_cache: Path) -> None:
    """Cells are counted line by line once (`_count_cells`); for the WordPiece tokenizer the sum is exact, and the
    windows cut from those counts stay within the budget by a real count of each window."""
    from nbrecall.index.embed import OnnxMiniLM
    from nbrecall.ingest.chunk import _count_cells

    counter = OnnxMiniLM.bundled(model_cache).count_tokens
    source = "\n".join(f"tank_{i}_volume = compute_volume(sounding={i}.25, trim=-0.5)  # m³ Über" for i in range(80))
    cells = [v4.new_markdown_cell("## Tanks\n\nVolumes of the **aft** tanks.\n\n\n"), code(source, 1), code("", 2)]
    nb = read_notebook_bytes(json.dumps(v4.new_notebook(cells=cells)).encode(), "t.ipynb")
    counted = _count_cells(nb, counter)
    for cell in nb.cells:
        assert counted.tokens[cell.index] == counter([counted.text[cell.index] or " "])[0]
    chunks = chunk_notebook(nb, analyse(nb), count_tokens=counter, budget=200)
    windows = [c for c in chunks if c.kind == "code"]
    assert len(windows) > 3 and all(counter([c.embed_text])[0] <= 200 + 40 for c in windows)
