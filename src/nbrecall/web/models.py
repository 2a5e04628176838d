"""Typed response models of the HTTP API (they make the OpenAPI schema at /openapi.json)."""

from __future__ import annotations

import re
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, create_model

from nbrecall import records
from nbrecall.index.terms import TOKEN_PATTERN

MAX_QUERY = 2000
# A question must hold a token (`index.terms.has_terms`): "???" or "*" gives nothing to match on
WORDS = TOKEN_PATTERN
MAX_FILTER = 200
YEAR_PATTERN = r"^([0-9]{4}|[0-9]{4}\.\.[0-9]{4}|[0-9]{4}\.\.|\.\.[0-9]{4}|\.\.)$"


_PLAIN_INT = re.compile(r"-?[0-9]{1,30}")


def _plain_int(value: Any) -> Any:
    """Integers in paths and query strings are written as plain decimal digits: `1.0`, `+1`, ` 1`, `1_0`
    and `1e0` are refused (422) instead of being read as 1."""
    if isinstance(value, str) and not _PLAIN_INT.fullmatch(value):
        raise ValueError("must be a plain integer (decimal digits, optionally a leading minus)")
    return value


PlainInt = Annotated[int, BeforeValidator(_plain_int)]


class Version(BaseModel):
    """Another member of a result's notebook family (a copy, a `_v2`, a checkpoint)."""

    notebook: str = Field(description="its path (the first, when identical copies have several)")
    nb_id: str = Field(description="SHA-256 of its content")
    year: int | None
    author: str
    modified: str | None = Field(description="last modified (UTC date) of its newest file")
    deprecated: bool
    checkpoint_of: str | None = Field(description="for a checkpoint copy: the notebook it is a checkpoint of")
    matched: bool = Field(description="it matched the query too (its hits are not shown: one result per family)")


class HitFact(BaseModel):
    """What a `fact` hit says of its value."""

    value: str
    label: str
    unit: str
    shown: str = Field(description="the printed text that holds label and value")
    code: str = Field(description="the code line that produced it")
    origin: str = Field(description="result, line, entry, table, latex or input (a constant the code sets)")
    stale: bool


def _contract_model(name: str, record: type, overrides: dict[str, Any]) -> type[BaseModel]:
    """A pydantic model of a record's contract fields (`records.HIT_CONTRACT`), in order and with the record's types;
    `overrides` gives a field a richer API type and a description. Every field is required but the overridden ones,
    which take the default they declare (`Hit.contract()` writes `fact` only on a fact hit)."""
    hints = typing.get_type_hints(record)
    declared: dict[str, Any] = {}
    for field_name in records.HIT_CONTRACT:
        declared[field_name] = overrides.get(field_name) or (hints[field_name], ...)
    return create_model(name, __doc__=record.__doc__, **declared)


# One result: the JSON contract of `nbrecall search --json`, generated from `records.Hit`.
Hit = _contract_model(
    "Hit",
    records.Hit,
    {
        "family": (str, Field(default="", description="its notebook family's id; the other members are in `versions`")),
        "versions": (list[Version], Field(default_factory=list, description="the family's other members")),
        "checkpoint_of": (
            str | None,
            Field(default=None, description="a hit from a checkpoint copy: the notebook it is an older checkpoint of"),
        ),
        "version_of": (
            str | None,
            Field(
                default=None,
                description="a cell of another version, listed under the result of this path: what the shown "
                "version lacks",
            ),
        ),
        "fact": (HitFact | None, Field(default=None, description="for a `fact` hit: the value and what names it")),
    },
)
Hit.__doc__ = "One result: the JSON contract of `nbrecall search --json`."


class NotebookHit(Hit):  # type: ignore[valid-type,misc]  # Hit is generated from records.Hit
    nb_id: str = Field(description="SHA-256 of the notebook content")
    url: str = Field(description="viewer link to the cell: /nb/<nb_id>#cell-id=<cell_id>")


RENDER_STATUS = "re-render status as indexed: 'fresh', 'changed' or 'stale'; null when never re-rendered"
WARNING = "set for stale notebooks: 'stale: <reason> — outputs could not be re-executed'"


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
    render_status: str | None = Field(default=None, description=RENDER_STATUS)
    render_reason: str = Field(default="", description="why a stale notebook could not be re-executed")
    warning: str | None = Field(default=None, description=WARNING)
    url: str
    family: str = Field(default="", description="its notebook family's id")
    n_versions: int = Field(default=0, description="other members of its family (at most 20 in `versions`)")
    versions: list[Version] = Field(default_factory=list)
    checkpoint_of: str | None = Field(default=None, description="a checkpoint copy: the notebook it saves")
    hits: list[NotebookHit]


class SearchResponse(BaseModel):
    query: str
    results: list[Hit]  # type: ignore[valid-type]  # generated from records.Hit
    notebooks: list[NotebookGroup]


class CellSummary(BaseModel):
    index: int
    cell_id: str
    cell_type: str
    execution_count: int | None
    source_chars: int
    first_line: str
    url: str
    render_status: str | None = Field(
        default=None, description="this cell in the stored re-render: 'same', 'changed', 'failed', 'new' or null"
    )


class RenderCell(BaseModel):
    index: int
    cell_id: str
    status: str = Field(description="'same', 'changed', 'failed' or 'new'")
    detail: str = Field(description="the fresh error, or a short diff of the normalised outputs")


class RenderInfo(BaseModel):
    """The stored re-render of this notebook content (`nbrecall render`)."""

    status: str = Field(description="'fresh', 'changed' or 'stale'")
    reason: str
    rendered_at: str
    warning: str | None = Field(description=WARNING)
    indexed_status: str | None = Field(
        description="the render status the index was built with; differs from `status` until the next "
        "`nbrecall index` after a new render"
    )
    outputs_indexed: str = Field(description="'fresh' (the re-rendered outputs are indexed) or 'original'")
    has_fresh_outputs: bool = Field(description="an executed copy is stored (the viewer shows it side by side)")
    counts: dict[str, int] = Field(description="cells by status")
    notes: list[str]
    cells: list[RenderCell]


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
    render_status: str | None = Field(default=None, description=RENDER_STATUS)
    render_reason: str = ""
    warning: str | None = Field(default=None, description=WARNING)
    render: RenderInfo | None = Field(default=None, description="the stored re-render, if any")
    viewer_url: str
    report_url: str
    deps_url: str
    cells: list[CellSummary]


class CellOutput(BaseModel):
    """An output after the output rules (architecture §5): the text that was indexed for it."""

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
    render_status: str | None = Field(default=None, description="this cell in the stored re-render, if any")
    fresh_outputs: list[CellOutput] | None = Field(
        default=None, description="the re-rendered outputs (after the same output rules), when a render ran"
    )
    notice: str | None = Field(
        default=None, description="set when the outputs could not be rendered within the server's budget"
    )


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


class ReasonCount(BaseModel):
    reason: str
    count: int


class RenderStats(BaseModel):
    """Indexed notebooks by re-render status (as the index used them)."""

    fresh: int
    changed: int
    stale: int
    not_rendered: int
    stale_reasons: list[ReasonCount]


class IndexedRoot(BaseModel):
    root: str = Field(description="a folder (or notebook) the index holds files from, as the indexer saw it")
    files: int
    notebooks: int
    quarantined: int


class StatusResponse(BaseModel):
    stats: Stats
    quarantined: list[QuarantinedFile]
    renders: RenderStats | None = Field(default=None, description="null when no indexed notebook was re-rendered")
    roots: list[IndexedRoot] = Field(default_factory=list,
                                     description="where the indexed files came from (`nbrecall forget` removes one)")


class AskRequest(BaseModel):
    q: str = Field(min_length=1, max_length=MAX_QUERY, pattern=WORDS)
    year: str | None = Field(default=None, pattern=YEAR_PATTERN)
    project: str | None = Field(default=None, max_length=MAX_FILTER)
    author: str | None = Field(default=None, max_length=MAX_FILTER)
    tag: str | None = Field(default=None, max_length=MAX_FILTER)
    include_deprecated: bool = False
    format: Literal["events", "json"] = "events"


class ErrorResponse(BaseModel):
    detail: str
