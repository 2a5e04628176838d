"""Notebook-level evidence in chunks: what a notebook is about (title, data files, classes) is spread over cells,
so every chunk's keyword text carries it; vectors and snippets keep the cell's own text."""

from __future__ import annotations

import nbformat
from nbformat import v4

from conftest import HashEmbedder, code
from nbrecall.ingest.chunk import chunk_notebook
from nbrecall.ingest.context import notebook_context, path_literals
from nbrecall.notebook.analysis import analyse
from nbrecall.notebook.model import Notebook
from nbrecall.notebook.read import read_notebook_bytes
from nbrecall.search.retrieve import snippet

CELLS = [
    v4.new_markdown_cell("# Harbour basin network\nFrom a shapefile to a graph."),
    code("import pathlib\nimport geopandas as gpd", 1),
    code('root = pathlib.Path("inputs")\nshape = root / "Rotterdam-Basins" / "basins_v2.shp"', 2),
    v4.new_markdown_cell("## Read the basins"),
    code('gdf = gpd.read_file(shape)\nspeed = "m/s"\nfmt = "%Y/%m/%d"\nname = "plain words here"', 3),
    v4.new_markdown_cell("## Convert to a graph"),
    code("class HasDraught:\n    pass\n\nclass Basin:\n    pass", 4),
    code('nx.draw(G, ax=axes[0])\nnx.draw(G, pos=xy, ax=axes[1])\nplt.savefig("figures/plot_out.png")', 5),
]


def _nb(cells: list) -> Notebook:
    nb = v4.new_notebook(cells=cells)
    return read_notebook_bytes(nbformat.writes(nb).encode(), "projects/harbour/basins.ipynb")


def test_context_has_title_data_path_words_and_compound_class_names() -> None:
    context = notebook_context(_nb(CELLS))
    assert context.title == "Harbour basin network"
    # parts joined onto a path count however they are spelled; units, date formats, prose and written files do not
    assert context.data == ["inputs", "Rotterdam", "Basins", "basins", "v2", "shp"]
    assert context.classes == ["HasDraught"]  # "Basin" is an ordinary word: on every chunk it would flatten ranking
    assert context.line == "Harbour basin network · inputs Rotterdam Basins basins v2 shp · HasDraught"


def test_context_title_falls_back_to_the_first_heading_and_may_be_empty() -> None:
    nb = _nb([v4.new_markdown_cell("### Making updated tank classes"), code("x = 1", 1)])
    assert notebook_context(nb).title == "Making updated tank classes"
    assert notebook_context(_nb([code("x = 1", 1)])).line == ""


def test_path_literals_keep_read_paths_and_urls_and_skip_writes() -> None:
    source = (
        'df = pd.read_csv("data/2019/tanks.csv")\n'
        'url = "https://example.org/ais/vessels.json"\n'
        'ax.set_xlabel("speed [m/s]")\n'
        'df.to_csv("out/summary.csv")\n'
        'p = os.path.join(base, "Lock-Gates")\n'
    )
    assert path_literals(source) == ["data/2019/tanks.csv", "https://example.org/ais/vessels.json", "Lock-Gates"]
    assert path_literals("this is not python (") == []


def test_every_chunk_keyword_text_carries_the_context_but_vectors_and_snippets_do_not() -> None:
    nb = _nb(CELLS)
    embedder = HashEmbedder()
    chunks = chunk_notebook(nb, analyse(nb), count_tokens=embedder.count_tokens, budget=60)
    line = notebook_context(nb).line
    assert chunks and all(line in c.text.split("\n\n", 1)[0] for c in chunks)  # in the header lines
    assert all(line not in c.embed_text for c in chunks)  # vectors unchanged: the embedding cache still hits
    # the cell that draws the network now matches a question naming the data it draws (in another cell)
    drawing = next(c for c in chunks if 7 in c.cells and c.kind == "code")
    assert "Rotterdam" in drawing.text and "nx.draw" in drawing.text
    assert "Rotterdam" not in snippet(drawing.text, {"draw"})
