"""One notebook into rows: parse, analyse, apply its render, chunk, extract facts (`build_rows`).

Shared by the indexing run (`ingest.pipeline`, in-process) and the executor workers (`ingest.worker`), so both
build alike and neither imports the other for it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nbrecall.config import Settings
from nbrecall.index.embed import Embedder
from nbrecall.ingest.chunk import CHUNKER_VERSION, Chunk, chunk_notebook, heading_paths, render_cells
from nbrecall.ingest.families import FamilyReport
from nbrecall.ingest.figures import FigureReport
from nbrecall.ingest.metadata import notebook_meta
from nbrecall.ingest.renders import notebook_for_index, renders_dir
from nbrecall.notebook.analysis import analyse
from nbrecall.notebook.facts import extract_facts
from nbrecall.notebook.outputs import OutputLimits
from nbrecall.notebook.read import read_notebook
from nbrecall.plugins import PluginManager, metadata_fingerprint
from nbrecall.records import FACT_KIND, CellRecord, ChunkRow, ContentRecord, chunk_id
from nbrecall.vision.factory import fingerprint_part


def _share_fact_vectors(chunks: list[Chunk], rows: list[ChunkRow]) -> None:
    """Point each fact whose embedded text (its name) an earlier fact of the notebook has at that fact
    (`ChunkRow.vector_of`): a notebook's facts repeat their names (a table column's rows, a loop's printouts), and
    46% of the facts of ../shared/corpus repeat a name within their notebook."""
    first: dict[str, int] = {}
    for chunk, row in zip(chunks, rows, strict=True):
        if chunk.kind == FACT_KIND:
            if chunk.embed_text in first:
                row.vector_of = first[chunk.embed_text]
            else:
                first[chunk.embed_text] = chunk.seq


@dataclass
class IndexReport:
    """What a run did, for the CLI summary and benchmarks."""

    files: int = 0
    hashed: int = 0
    changed: int = 0
    deleted_files: int = 0
    forgotten_files: int = 0  # files the run was told to forget (`run_index(forget=...)`), gone from disk or not
    notebooks_indexed: int = 0
    quarantined: list[tuple[str, str]] = field(default_factory=list)
    chunks_written: int = 0
    texts_embedded: int = 0
    embed_cache_hits: int = 0
    notebooks_removed: int = 0
    strays_removed: int = 0  # chunks of notebooks an interrupted run wrote to the store but never to the manifest
    rerendered: int = 0  # unchanged notebooks indexed again because their render was made, replaced or removed
    vectors_pending: int = 0  # chunks still waiting for a vector when the run ended (resumed by the next run)
    embedded_tokens: int = 0  # word pieces the model read (after its truncation): what embedding cost
    outside_links: list[tuple[str, str]] = field(default_factory=list)  # (rel, target) read through a link
    empty_roots: list[tuple[str, int]] = field(default_factory=list)  # (root, files kept): not mounted? (discover)
    unlisted: list[tuple[str, str, str, int]] = field(default_factory=list)  # (root, folder, reason, files kept)
    unread: list[tuple[str, str, str]] = field(default_factory=list)  # (root, rel, reason): indexed, kept as it was
    families: FamilyReport | None = None  # the family step (`ingest.families`), when families are on
    figures: FigureReport | None = None  # the describe phase (`ingest.figures`), when a describer is configured
    seconds: dict[str, float] = field(default_factory=dict)

    def add_time(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds


def _budget(settings: Settings, embedder: Embedder) -> int:
    return settings.chunk.budget_tokens or int(embedder.max_tokens * 0.8)


def fingerprint(settings: Settings, embedder: Embedder, plugins: PluginManager | None) -> str:
    """What the chunks of a notebook depend on besides its content; a change re-chunks the archive. `plugins`:
    the run's manager (its metadata extractors' names and versions count; none: the fingerprint is as before)."""
    return (f"chunker {CHUNKER_VERSION}; budget {_budget(settings, embedder)}; outputs "
            f"{settings.chunk.max_output_chars}; model {embedder.model_id}; vectors {settings.embed.enabled}"
            f"{fingerprint_part(settings)}{metadata_fingerprint(plugins)}")


def build_rows(
    path: Path, rel: str, root: str, sha: str, settings: Settings, embedder: Embedder, report: IndexReport,
    plugins: PluginManager,
) -> tuple[list[Chunk], ContentRecord, list[CellRecord], list[ChunkRow]]:
    """Parse, analyse and chunk one notebook; raises NotebookUnreadable for quarantine.

    When a render of this content exists (`ingest.renders`), its fresh outputs are indexed in place of the file's
    own (`fresh`/`changed`), or the original outputs are indexed and flagged stale (`stale`). Metadata, health and
    execution-order warnings always describe the file itself. `plugins`: the run's manager (metadata hooks).
    """
    started = time.perf_counter()
    original = read_notebook(path, display_path=rel)
    analysis = analyse(original)
    report.add_time("parse+analyse", time.perf_counter() - started)
    started = time.perf_counter()
    nb, stale, render_meta = notebook_for_index(renders_dir(settings), sha, original)
    if render_meta:
        report.add_time("renders", time.perf_counter() - started)
    started = time.perf_counter()
    meta = notebook_meta(original, rel, analysis, settings.metadata, file_path=path, plugins=plugins)
    limits = OutputLimits(max_chars=settings.chunk.max_output_chars)
    rendered = render_cells(nb, limits, analysis.trees)
    report.add_time("chunk", time.perf_counter() - started)
    started = time.perf_counter()
    facts = extract_facts(nb, rendered, headings=heading_paths(nb), trees=analysis.trees, stale=stale)
    report.add_time("facts", time.perf_counter() - started)
    started = time.perf_counter()
    chunks = chunk_notebook(
        nb, analysis, count_tokens=embedder.count_tokens, budget=_budget(settings, embedder), rendered=rendered,
        facts=facts,
    )
    cells = [
        CellRecord(
            sha,
            c.index,
            c.id,
            c.cell_type,
            c.execution_count,
            c.source,
            "\n".join(o.text for o in rendered.get(c.index, [])) if c.is_code else "",
        )
        for c in nb.cells
    ]
    rows = [
        ChunkRow(
            chunk_id=chunk_id(sha, ch.seq),
            nb_sha=sha,
            notebook=rel,
            root=root,
            kind=ch.kind,
            cells=ch.cells,
            cell_ids=ch.cell_ids,
            anchor=ch.anchor,
            anchor_id=ch.anchor_id,
            heading=ch.heading,
            text=ch.text,
            year=meta.year,
            project=meta.project,
            author=meta.author,
            tags=meta.tags,
            deprecated=meta.deprecated,
            stale=stale,
            health=meta.health,
        )
        for ch in chunks
    ]
    _share_fact_vectors(chunks, rows)
    meta_dict = asdict(meta)
    meta_dict["fingerprint"] = fingerprint(settings, embedder, plugins)
    meta_dict["notes"] = nb.notes
    meta_dict["nbformat"] = f"{nb.nbformat}.{nb.nbformat_minor}"
    meta_dict["order_warnings"] = analysis.order.warnings
    meta_dict.update(render_meta)
    record = ContentRecord(sha, "indexed", "", root, rel, len(nb.cells), len(chunks), 0, meta_dict, facts)
    report.add_time("chunk", time.perf_counter() - started)
    return chunks, record, cells, rows
