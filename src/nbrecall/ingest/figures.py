"""Figure descriptions in the index run: added to figure chunks from the cache, and a resumable describe phase.

The describers and their cache are `nbrecall.vision`; this module is the indexing run's use of them.
Phase 1 (`FigureWork.apply`) puts every cached description into its figure chunk and lists the notebook's images
in the queue (`vision.store`). The describe phase (`describe_waiting`), after phase 1 like vectors, reads each
waiting notebook's images again (the file, or its render, as indexed), describes those the cache lacks with
`concurrency` at once, caches them, and hands the notebooks back to be chunked again: their figure chunks now carry
the descriptions and only those chunks get new vectors. A kill loses at most the images being described; the next
run resumes the queue. A describer that cannot run says so once and the run goes on; an endpoint that fails
`max_failures_in_a_row` times stops describing for this run (the rest waits).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nbrecall.ingest.chunk import render_cells
from nbrecall.notebook.figures import extract_markdown_images
from nbrecall.notebook.outputs import OutputLimits
from nbrecall.records import chunk_id
from nbrecall.vision.describe import (
    Describer,
    DescriberUnavailable,
    FigureImage,
    add_description,
    describable,
    description_line,
    image_sha,
)
from nbrecall.vision.store import Description, FigureStore

if TYPE_CHECKING:
    from nbrecall.ingest.chunk import Chunk
    from nbrecall.notebook.model import Notebook
    from nbrecall.records import ChunkRow

@dataclass
class FigureReport:
    """What the describe phase did, for the CLI summary and `bench/`."""

    described: int = 0
    failed: int = 0
    cached: int = 0  # images of re-chunked notebooks whose description came from the cache
    seconds: float = 0.0  # time describing (wall clock)
    notes: list[str] = field(default_factory=list)  # said once: describer unavailable, endpoint stopped


@dataclass
class FigureWork:
    """The configured describer and the figure cache/queue of one index."""

    describer: Describer
    store: FigureStore
    report: FigureReport = field(default_factory=FigureReport)
    unavailable: str | None = None

    def apply(self, nb_sha: str, chunks: list[Chunk], rows: list[ChunkRow], priority: float) -> None:
        """Put cached descriptions into the figure chunks of one notebook and list its images in the queue.
        Called before the batch's store commit, so a queued notebook may not be indexed yet (swept later)."""
        images = {sha for chunk in chunks for sha in chunk.images}
        if not images:
            self.store.set_notebook(nb_sha, {}, priority)
            return
        known = self.store.get_many(images, self.describer.id)
        row_of = {row.chunk_id: row for row in rows}
        for chunk in chunks:
            lines = [description_line(self.describer.label, known[s].text or "")
                     for s in chunk.images if s in known and known[s].text]
            if not lines:
                continue
            for line in lines:
                chunk.text = add_description(chunk.text, line)
                chunk.embed_text = add_description(chunk.embed_text, line)
            row = row_of.get(chunk_id(nb_sha, chunk.seq))
            if row is not None:
                row.text = chunk.text
        states = {s: ("waiting" if s not in known else "described" if known[s].ok else "failed") for s in images}
        self.report.cached += sum(1 for s in images if s in known and known[s].ok)
        self.store.set_notebook(nb_sha, states, priority)

    def available(self) -> bool:
        """False (with the reason noted once) when the describer cannot run here."""
        if self.unavailable is None:
            try:
                self.describer.check()
                self.unavailable = ""
            except DescriberUnavailable as exc:
                self.unavailable = str(exc)
                self.report.notes.append(f"figures not described: {exc}")
        return not self.unavailable

    def describe_images(self, images: list[FigureImage], concurrency: int, max_failures_in_a_row: int) -> bool:
        """Describe and cache `images`, `concurrency` at once; False when the endpoint kept failing (stop)."""
        started = time.perf_counter()
        failures_in_a_row = 0
        stopped = False
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="nbrecall-describe") as pool:
            for image, result in zip(images, pool.map(self._describe_one, images), strict=True):
                self.store.put(image.sha, self.describer.id, result)
                if result.ok:
                    self.report.described += 1
                    failures_in_a_row = 0
                else:
                    self.report.failed += 1
                    failures_in_a_row += 1
                    if failures_in_a_row >= max_failures_in_a_row and not stopped:
                        stopped = True
                        self.report.notes.append(
                            f"describing stopped after {failures_in_a_row} failures in a row (last: {result.error});"
                            " the figures left wait for the next run")
        self.report.seconds += time.perf_counter() - started
        return not stopped

    def _describe_one(self, image: FigureImage) -> Description:
        try:
            return self.describer.describe(image)
        except Exception as exc:  # a describer bug on one image must not stop the run
            return Description(None, f"{type(exc).__name__}: {exc}"[:300])


def figure_images(nb: Notebook, wanted: Iterable[str] | None = None) -> dict[str, FigureImage]:
    """The raster images of a notebook by content hash (outputs and markdown), with their captions, as the
    chunker sees them; only those in `wanted` when given."""
    wanted_set = set(wanted) if wanted is not None else None
    found: dict[str, FigureImage] = {}

    def add(figure) -> None:
        if figure is None or figure.broken or not describable(figure.mime, figure.data):
            return
        sha = image_sha(figure.data)
        if (wanted_set is None or sha in wanted_set) and sha not in found:
            found[sha] = FigureImage(sha, figure.mime, figure.data, figure.caption)

    for items in render_cells(nb, OutputLimits()).values():
        for item in items:
            add(item.figure)
    for cell in nb.cells:
        if cell.is_markdown and (cell.attachments or "data:" in cell.source):
            for figure in extract_markdown_images(cell.source, cell.attachments)[1]:
                add(figure)
    return found


Reindex = Callable[[list[str]], None]


def describe_waiting(
    work: FigureWork,
    indexed: set[str],
    load: Callable[[str], Notebook | None],
    reindex: Reindex,
    *,
    concurrency: int,
    batch_notebooks: int,
    max_failures_in_a_row: int,
    max_attempts: int,
    progress: Callable[[str, int, int], None] | None = None,
) -> None:
    """The describe phase: waiting figures by priority, a few notebooks at a time, each batch re-chunked.

    `load(nb_sha)` gives the notebook as indexed (None when its file is gone); `reindex(shas)` chunks those
    contents again (their descriptions now come from the cache)."""
    store = work.store
    store.keep_only(indexed)
    store.retry_failed(work.describer.id, max_attempts)
    total = store.counts(indexed)["waiting"]
    if not total or not work.available():
        return
    done = 0
    tried: set[str] = set()
    if progress:
        progress("describing figures", 0, total)
    while True:
        batch = store.waiting_notebooks(batch_notebooks, skip=tried)
        if not batch:
            break
        tried.update(batch)
        images: dict[str, FigureImage] = {}
        for nb_sha in batch:
            waiting = store.waiting_images(nb_sha)
            nb = load(nb_sha)
            found = figure_images(nb, waiting) if nb is not None else {}
            for sha in waiting:
                if sha in found:
                    images.setdefault(sha, found[sha])
                elif sha not in images:  # the file changed under the index: the next run re-queues it
                    store.put(sha, work.describer.id, Description(None, "image no longer in the notebook"))
        cached = store.get_many(images, work.describer.id)  # described meanwhile by another notebook's batch
        todo = [image for sha, image in images.items() if sha not in cached or not cached[sha].ok]
        going_on = work.describe_images(todo, concurrency, max_failures_in_a_row) if todo else True
        reindex(batch)
        done += len(images)
        if progress:
            progress("describing figures", done, max(total, done))
        if not going_on:
            break


class CachedDescriptions:
    """`convert --describe-figures`: a figure's description from the index's cache, else described now (and
    cached); the line as chunks carry it. A describer that cannot run is said once (`notes`), then nothing."""

    def __init__(self, work: FigureWork) -> None:
        self.work = work

    def __call__(self, figure) -> str | None:
        if figure.broken or not describable(figure.mime, figure.data):
            return None
        sha = image_sha(figure.data)
        known = self.work.store.get_many([sha], self.work.describer.id).get(sha)
        if known is None or not known.ok:
            if not self.work.available():
                return None
            known = self.work._describe_one(FigureImage(sha, figure.mime, figure.data, figure.caption))
            self.work.store.put(sha, self.work.describer.id, known)
        return description_line(self.work.describer.label, known.text) if known.text else None
