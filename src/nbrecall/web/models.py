"""Typed response models of the HTTP API (they make the OpenAPI schema at /openapi.json)."""

from __future__ import annotations

from pydantic import BaseModel, Field

MAX_QUERY = 2000
MAX_FILTER = 200
YEAR_PATTERN = r"^([0-9]{4}|[0-9]{4}\.\.[0-9]{4}|[0-9]{4}\.\.|\.\.[0-9]{4}|\.\.)$"


class Hit(BaseModel):
    """One result: the JSON contract of `nbrecall search --json`."""

    notebook: str
    root: str
    cell: int
    cells: list[int]
    cell_id: str
    kind: str
    score: float
    heading: str
    snippet: str
    year: int | None
    project: str
    author: str
    stale: bool
    deprecated: bool


class NotebookHit(Hit):
    nb_id: str = Field(description="SHA-256 of the notebook content")
    url: str = Field(description="viewer link to the cell: /nb/<nb_id>#cell-id=<cell_id>")


class NotebookGroup(BaseModel):
    id: str = Field(description="SHA-256 of the notebook content")
    path: str
    paths: list[str]
    score: float
    year: int | None
    project: str
    author: str
    stale: bool
    deprecated: bool
    url: str
    hits: list[NotebookHit]


class SearchResponse(BaseModel):
    query: str
    results: list[Hit]
    notebooks: list[NotebookGroup]


class CellSummary(BaseModel):
    index: int
    cell_id: str
    cell_type: str
    execution_count: int | None
    source_chars: int
    first_line: str
    url: str


class NotebookDetail(BaseModel):
    id: str
    path: str
    paths: list[str]
    root: str
    n_cells: int
    year: int | None
    project: str
    author: str
    tags: list[str]
    deprecated: bool
    health: float | None
    language: str
    nbformat: str
    order_warnings: list[str]
    notes: list[str]
    source: str = Field(description="'file' when the file on disk still has the indexed content, else 'index'")
    viewer_url: str
    report_url: str
    deps_url: str
    cells: list[CellSummary]


class CellOutput(BaseModel):
    """An output after the output rules (DESIGN §3): the text that was indexed for it."""

    output_type: str
    kind: str
    mime: str | None
    text: str
    truncated: bool


class CellDetail(BaseModel):
    notebook_id: str
    notebook: str
    index: int
    cell_id: str
    cell_type: str
    execution_count: int | None
    source: str
    tags: list[str]
    outputs: list[CellOutput]
    outputs_text: str = Field(description="the filtered outputs as indexed")
    url: str


class Stats(BaseModel):
    files: int
    notebooks: int
    quarantined: int
    chunks: int
    embedded: int


class QuarantinedFile(BaseModel):
    path: str
    root: str
    sha256: str
    reason: str


class StatusResponse(BaseModel):
    stats: Stats
    quarantined: list[QuarantinedFile]


class AskRequest(BaseModel):
    q: str = Field(min_length=1, max_length=MAX_QUERY)
    year: str | None = Field(default=None, pattern=YEAR_PATTERN)
    project: str | None = Field(default=None, max_length=MAX_FILTER)
    author: str | None = Field(default=None, max_length=MAX_FILTER)
    tag: str | None = Field(default=None, max_length=MAX_FILTER)
    include_deprecated: bool = False


class ErrorResponse(BaseModel):
    detail: str
