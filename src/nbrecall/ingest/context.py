"""What a notebook is about as a whole (architecture §6): its title, the files its code names, the classes it
defines. The chunker adds this line to every chunk's keyword text (`chunk.chunk_notebook`), so evidence spread
over several cells of one notebook adds up.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

from nbrecall.notebook.analysis import mask_magics
from nbrecall.notebook.headings import heading_of
from nbrecall.notebook.model import Notebook


@dataclass
class NotebookContext:
    """What a notebook is about as a whole, which no single cell says: its title, the files its code names and
    the classes it defines. A question names these ("the drawing of the harbour basins network") while the cell
    that answers it does not (the shapefile path is in one cell, the drawing in another, both under other headings).
    Added to every chunk's keyword text, they let the notebook's evidence and the cell's evidence add up."""

    title: str = ""
    data: list[str] = field(default_factory=list)  # words of the file paths the code names, in order
    classes: list[str] = field(default_factory=list)  # compound class names only (see `_COMPOUND`)

    @property
    def line(self) -> str:
        """The line added to every chunk's keyword text ("" when there is nothing to add)."""
        return " · ".join(p for p in (self.title, " ".join(self.data), " ".join(self.classes)) if p)


# A quoted literal that may name a file: it has a path separator or ends in a file extension (cheap pre-filter
# before a cell is parsed), or a string is joined onto a path with `/`.
_PATHISH = re.compile(r"""["'][^"'\n]*(?:[/\\]|\.[A-Za-z][A-Za-z0-9]{0,4})["']|/\s*[rbf]?["']""")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,4}$")
_UNPATHLIKE = re.compile(r"[\s%{}()\[\]<>*?^$|=,;!@#&+'\"]")
_FILE_EXTENSIONS = frozenset([
    "csv", "tsv", "txt", "dat", "json", "jsonl", "xml", "yaml", "yml", "xls", "xlsx", "xlsm", "ods", "parquet",
    "feather", "pkl", "pickle", "npy", "npz", "mat", "h5", "hdf5", "hdf", "nc", "grib", "zarr", "db", "sqlite",
    "shp", "shx", "dbf", "gpkg", "geojson", "kml", "tif", "tiff", "png", "jpg", "jpeg", "gif", "bmp", "svg", "pdf",
    "wav", "mp3", "mp4", "avi", "zip", "gz", "bz2", "xz", "tar", "tgz", "py", "ipynb", "md", "html", "htm", "css",
    "sav", "dta", "sas7bdat", "arff", "log", "out", "las", "vtk", "stl", "obj"
])
_PATH_WORD = re.compile(r"[A-Za-z]+[0-9]*|[0-9]+")
# Words of a location, not of its content (URL scheme and hosts, home and mount folders).
_PATH_NOISE = frozenset(["http", "https", "www", "com", "org", "net", "html", "htm", "raw", "githubusercontent",
                         "github", "blob", "master", "main", "users", "home", "tmp", "content", "drive", "mnt"])
# Calls whose path argument is written, not read: a saved figure says little about what the notebook studies.
_WRITERS = frozenset(["savefig", "to_csv", "to_excel", "to_parquet", "to_json", "to_pickle", "to_file",
                      "to_hdf", "to_feather", "mkdir", "makedirs", "write", "dump", "save", "imsave", "to_html"])
_JOINERS = frozenset(["join", "joinpath", "Path", "PurePath"])
_CLASS = re.compile(r"^class\s+([A-Za-z_]\w*)", re.M)
# `HasDraught`, `tank_plan`: a token only this code carries. A one-word class name (`Vortex`, `Source`) is an
# ordinary word the prose already uses; put on every chunk it would flatten the ranking inside the notebook.
_COMPOUND = re.compile(r"[a-z0-9][A-Z]|[A-Za-z0-9]_[A-Za-z0-9]")
_CONTEXT_MAX_TITLE = 200  # chars
_CONTEXT_MAX_DATA_WORDS = 24
_CONTEXT_MAX_CLASSES = 8


def _looks_like_path(value: str, joined: bool) -> bool:
    """A literal naming a file or folder: a URL, a path with separators, a file name with an extension, or a part
    joined onto a path (`root / "Harbour-Basins"`). Units ("m/s"), formats ("%Y/%m") and prose are not."""
    value = value.strip()
    if not value or len(value) > 300 or value.startswith(("%", "{")):
        return False
    if value.startswith(("http://", "https://", "s3://", "gs://")):
        return True
    if _UNPATHLIKE.search(value.replace(" ", "")) or value.count(" ") > 3:
        return False
    extension = _EXTENSION.search(value)
    # "tanks.csv", "in/run.out"; not a dotted key or name without a folder ("font.size", "scipy.stats")
    if (
        extension
        and sum(ch.isalpha() for ch in value) >= 4
        and (extension.group(0)[1:].lower() in _FILE_EXTENSIONS or "/" in value or "\\" in value)
    ):
        return True
    if " " in value:
        return False
    if "/" in value or "\\" in value:
        return any(sum(ch.isalpha() for ch in part) >= 3 for part in re.split(r"[/\\]", value))
    return joined and sum(ch.isalpha() for ch in value) >= 3


def path_literals(source: str, tree: ast.Module | None = None) -> list[str]:
    """String literals in one code cell that name files or folders the code works with (not ones it writes);
    `tree` is the cell's syntax tree when the caller has it."""
    try:
        if tree is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(mask_magics(source))
        written: set[int] = set()
        joined: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if name in _WRITERS:
                    written.update(id(arg) for arg in node.args)
                elif name in _JOINERS:
                    joined.update(id(arg) for arg in node.args)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                joined.update((id(node.left), id(node.right)))
        found = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in written
            and _looks_like_path(node.value, id(node) in joined)
        ]
        return [str(node.value) for node in sorted(found, key=lambda n: (n.lineno, n.col_offset))]  # source order
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return []


def notebook_context(nb: Notebook, trees: Mapping[str, ast.Module] | None = None) -> NotebookContext:
    """Title (the first level-1 heading, else the first heading), words of the data paths, compound class names.
    `trees` are the cells' syntax trees by source when the caller has them (`Analysis.trees`)."""
    trees = trees or {}
    context = NotebookContext()
    first_heading = ""
    data: dict[str, None] = {}  # ordered sets
    classes: dict[str, None] = {}
    for cell in nb.cells:
        heading = heading_of(cell)
        if heading is not None:
            first_heading = first_heading or heading[1]
            if heading[0] == 1 and not context.title:
                context.title = heading[1]
        if not cell.is_code:
            continue
        classes.update(dict.fromkeys(c for c in _CLASS.findall(cell.source) if _COMPOUND.search(c.strip("_"))))
        if len(data) < _CONTEXT_MAX_DATA_WORDS and _PATHISH.search(cell.source):
            for literal in path_literals(cell.source, trees.get(cell.source)):
                for word in _PATH_WORD.findall(literal):
                    if len(word) >= 2 and word.lower() not in _PATH_NOISE:
                        data.setdefault(word, None)
    context.title = (context.title or first_heading)[:_CONTEXT_MAX_TITLE]
    context.data = list(data)[:_CONTEXT_MAX_DATA_WORDS]
    context.classes = list(classes)[:_CONTEXT_MAX_CLASSES]
    return context

