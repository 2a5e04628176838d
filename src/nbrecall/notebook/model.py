"""Plain dataclasses for a notebook as every later stage sees it.

Everything downstream (convert, chunk, index, answer) works from these objects, never from raw
nbformat dicts, so that v3/v4 differences and `source` list/string forms are settled once in `read.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CellRef:
    """Where a hit lives: the notebook path, the 0-based nbformat-4 cell index and the cell id."""

    notebook: str
    index: int
    id: str

    def anchor(self) -> str:
        """The JupyterLab / nbconvert link fragment for this cell."""
        return f"#cell-id={self.id}"


@dataclass
class Output:
    """One cell output, normalised to nbformat 4 vocabulary (`pyout` → `execute_result`, …).

    `text` holds a stream's text; `data` a mime bundle with every value joined to one string
    (binary mimes stay base64 text, as stored in the file).
    """

    output_type: str
    name: str | None = None
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    execution_count: int | None = None
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)


@dataclass
class Cell:
    """A cell with its position, identity and content; `source` is always one string."""

    index: int
    id: str
    cell_type: str
    source: str
    execution_count: int | None = None
    outputs: list[Output] = field(default_factory=list)
    attachments: dict[str, dict[str, str]] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    id_is_synthetic: bool = False  # derived from index and source: the file has none (or a duplicate) for it
    raw_mimetype: str = ""  # a raw cell's target format (`text/restructuredtext`, `text/latex`, ...)
    unknown_type: str = ""  # the cell type of a newer nbformat minor, kept as a raw cell

    @property
    def is_code(self) -> bool:
        return self.cell_type == "code"

    @property
    def is_markdown(self) -> bool:
        return self.cell_type == "markdown"


@dataclass
class Notebook:
    """A parsed notebook: cells in nbformat-4 order plus what is known about where it came from."""

    path: str
    sha256: str
    cells: list[Cell]
    nbformat: int
    nbformat_minor: int
    language: str = "python"
    kernel_name: str = ""
    language_version: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    size_bytes: int = 0

    def ref(self, cell: Cell) -> CellRef:
        return CellRef(self.path, cell.index, cell.id)

    @property
    def code_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.is_code]

    @property
    def is_python(self) -> bool:
        """Whether the kernel runs Python (IPython included; no language recorded: Jupyter's default, Python)."""
        language = (self.language or "python").lower()
        return language.startswith("python") or language in {"ipython", "ipython3"}


@dataclass(frozen=True)
class Quarantined:
    """A file that could not be read as a notebook, and why (one line a user can act on)."""

    path: str
    sha256: str
    reason: str
