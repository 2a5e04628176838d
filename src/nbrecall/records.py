"""The records the stages exchange: neutral dataclasses that belong to no implementation.

The indexer writes `FileRecord`, `ContentRecord`, `CellRecord` and `PendingVector` to a manifest and `ChunkRow`
to a store; search reads them back with `SearchFilters` and hands `Hit`s to the front ends. Both store and both
manifest implementations (LanceDB/SQLite, PostgreSQL) speak these records, so a reader never imports a writer's
database module. See docs/architecture.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `nbrecall status` imports the records without numpy or the fact reader
    import numpy as np

    from nbrecall.notebook.facts import Fact

FACT_KIND = "fact"  # one value a notebook shows (`notebook.facts.Fact`): searched apart from the content
CONTENT_KINDS = ("text", "code", "table", "scalar", "error", "figure")  # every other kind `ingest.chunk` makes
PROSE_KIND = "text"  # the content kind that holds markdown only: no code, no outputs


@dataclass
class ChunkRow:
    """A chunk as stored: its text, where it points, the notebook's metadata, and its vector (if any)."""

    chunk_id: str
    nb_sha: str
    notebook: str
    root: str
    kind: str  # one of CONTENT_KINDS, or FACT_KIND
    cells: list[int]
    cell_ids: list[str]
    anchor: int
    anchor_id: str
    heading: str
    text: str
    year: int | None = None
    project: str = ""
    author: str = ""
    tags: list[str] = field(default_factory=list)
    deprecated: bool = False
    stale: bool = False
    health: float = 1.0
    vector: np.ndarray | None = None
    # A fact whose name (what its vector embeds) is that of an earlier fact of its notebook, by that fact's chunk
    # sequence number: the same vector, which the LanceDB fact table stores once (`index.fact_table`).
    vector_of: int | None = None


def chunk_id(nb_sha: str, seq: int) -> str:
    """The id of chunk `seq` of a notebook content (a fact is a chunk too): what the store, the embedding queue and
    the answerer key a chunk by."""
    return f"{nb_sha[:20]}-{int(seq):05d}"


# What a search returns of a chunk: every stored field but its vector (in `ChunkRow` order; both stores select these).
CHUNK_COLUMNS = [f.name for f in fields(ChunkRow) if f.name not in ("vector", "vector_of")]
# What a search hit carries: every column but the per-cell ids and the tags, which no reader of a hit uses and
# which cost the most to fetch (list columns: at 1M rows, tags alone added ~4.6 ms to each 72-row list).
HIT_COLUMNS = [name for name in CHUNK_COLUMNS if name not in ("cell_ids", "tags")]
# What a fact search returns of a fact (`Store.search_facts`): a store keeps facts apart with only these (and tags
# and a vector); the store adds `kind`, `cells` and `anchor`, and `search.retrieve.complete_facts` the notebook's
# path, root, health and the fact's heading, cell id and stale flag (from the manifest).
FACT_COLUMNS = ["chunk_id", "nb_sha", "cell", "text", "year", "project", "author", "deprecated"]


def parse_year_range(year: str | None) -> tuple[int | None, int | None]:
    """`2017` → (2017, 2017); `2015..2019`, `2015..`, `..2019`; ValueError for anything else."""
    if not year or not year.strip():
        return None, None
    year = year.strip()
    if re.fullmatch(r"[0-9]{4}", year):
        return int(year), int(year)
    match = re.fullmatch(r"([0-9]{4})?\.\.([0-9]{4})?", year)
    if not match:
        raise ValueError(f"year takes YYYY or a range YYYY..YYYY, not {year!r}")
    low, high = match.groups()
    return (int(low) if low else None), (int(high) if high else None)


@dataclass
class SearchFilters:
    """Filters applied inside the store (before ranking), so a filtered search still fills its fan-out.

    Each store translates them to its own query language (`index.lance_schema.lance_where`, `index.pg_sql.filter_sql`).
    """

    year_from: int | None = None
    year_to: int | None = None
    project: str | None = None
    author: str | None = None
    tag: str | None = None
    include_deprecated: bool = False
    kinds: list[str] | None = None
    notebooks: list[str] | None = None  # notebook shas: search within these only (the answerer's second look)

    @classmethod
    def from_options(
        cls, year: str | None, project: str | None, author: str | None, tag: str | None, include_deprecated: bool
    ) -> SearchFilters:
        """The filters as the CLI, the HTTP API and MCP take them; ValueError for a malformed year."""
        year_from, year_to = parse_year_range(year)
        return cls(
            year_from=year_from,
            year_to=year_to,
            project=(project or "").strip() or None,
            author=(author or "").strip() or None,
            tag=(tag or "").strip() or None,
            include_deprecated=bool(include_deprecated),
        )


@dataclass
class FileRecord:
    """A file as last seen on disk: stat first, hash only what changed."""

    root: str
    rel: str
    size: int
    mtime_ns: int
    sha256: str


@dataclass(frozen=True)
class RootSummary:
    """What the index holds from one root (`Manifest.roots`): its files, and how many of them are indexed
    notebooks and quarantined files."""

    root: str
    files: int
    notebooks: int
    quarantined: int


@dataclass
class ContentRecord:
    """A notebook content (keyed by SHA-256; identical files are indexed once) and what became of it."""

    sha256: str
    status: str  # "indexed" | "quarantined"
    reason: str
    root: str
    rel: str
    n_cells: int = 0
    n_chunks: int = 0
    n_embedded: int = 0
    meta: dict[str, Any] | None = None
    facts: list[Fact] = field(default_factory=list)  # written with the content; read with `Manifest.facts`


@dataclass
class PendingVector:
    """A chunk that is stored (keyword-searchable) but has no vector yet; the highest priority is embedded first."""

    chunk_id: str
    sha256: str
    priority: float
    text: str  # what gets embedded (`Chunk.embed_text`)


@dataclass
class CellRecord:
    """A cell exactly as indexed (outputs as stored JSON), so neighbourhoods and the viewer read what was indexed."""

    sha256: str
    idx: int
    cell_id: str
    cell_type: str
    execution_count: int | None
    source: str
    outputs: str


@dataclass
class FusionSettings:
    """How a store fuses its keyword and vector lists (`index.fusion`); passed with each `Store.search`."""

    method: str = "convex"  # "convex" | "rrf"
    alpha: float = 0.5  # weight of the keyword side in "convex"
    rrf_k: int = 60


@dataclass(frozen=True)
class StoreQuery:
    """One hybrid search of a store (`Store.search`, `Store.search_facts`): the words, the question's vector
    (None: keyword only), how many hits each list gives, which rows pass, and how the two lists are fused."""

    text: str
    vector: np.ndarray | None
    k: int
    filters: SearchFilters = field(default_factory=SearchFilters)
    fusion: FusionSettings = field(default_factory=FusionSettings)


@dataclass
class StoreHit:
    """One chunk from a query: the fused score and what each list said about it."""

    row: dict[str, Any]
    score: float
    keyword_rank: int | None = None
    vector_rank: int | None = None
    keyword_score: float = 0.0  # BM25 relative to the best in the list, 0..1
    similarity: float = 0.0  # cosine similarity


def internal(default: Any = None) -> Any:
    """A `Hit` field that stays inside the process: not part of the JSON contract nor the API model."""
    return field(default=default, repr=False, metadata={"contract": False})


@dataclass
class Hit:
    """One result as a user sees it: the JSON contract of `nbrecall search --json`, the HTTP API's `Hit` model
    (`web.models`, generated from these fields) and MCP's results all come from this record."""

    notebook: str
    root: str
    cell: int
    cells: list[int]
    cell_id: str
    kind: str
    score: float
    heading: str
    snippet: str
    nb_sha: str = internal("")
    year: int | None = None
    project: str = ""
    author: str = ""
    stale: bool = False
    deprecated: bool = False
    family: str = ""  # the notebook family's id (`ingest.families`); "" without families
    versions: list[dict[str, Any]] = field(default_factory=list)  # the family's other members (`search.families`)
    checkpoint_of: str | None = None  # a hit from a checkpoint copy: the notebook it is an older checkpoint of
    version_of: str | None = None  # a hit from another version of the result's notebook (content it lacks)
    fact: dict[str, Any] | None = None  # a `fact` hit: value, label, unit, code (`notebook.facts.Fact`)
    chunk_seq: int | None = internal(None)

    def on_own_cell(self) -> bool:
        """A hit on its notebook's own content: not a fact (scored on its own table's BM25 scale) and not a cell
        of another version listed under the notebook. Only these take part in choosing the cell that is cited
        first and the other places offered (`search.retrieve.work_first`, `answer.places.other_places`)."""
        return self.kind != FACT_KIND and self.version_of is None

    def contract(self) -> dict[str, Any]:
        """The contract's fields in order; the score rounded to 6 places; `fact` only on a fact hit."""
        found: dict[str, Any] = {}
        for name in HIT_CONTRACT:
            value = getattr(self, name)
            if name == "score":
                value = round(value, 6)
            if name == "fact" and value is None:
                continue
            found[name] = value
        return found


# The fields of the JSON contract, in order (what `Hit.contract()` writes and the API's `Hit` model declares).
HIT_CONTRACT = tuple(f.name for f in fields(Hit) if f.metadata.get("contract", True))


@dataclass
class Signature:
    """A content's MinHash signature and the number of distinct lines it was made of."""

    size: int
    hashes: bytes  # `num_perm` uint32 values

    def array(self) -> np.ndarray:
        import numpy as np

        return np.frombuffer(self.hashes, dtype=np.uint32)
