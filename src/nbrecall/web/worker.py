"""A render worker: the process in which `nbrecall serve` renders notebook pages, cells, reports and maps.

Everything a notebook can make expensive (parsing tens of MB of JSON, sanitizing deep HTML, highlighting long
sources, converting for a report) happens here, not in the server: the server (`nbrecall.web.heavy`) gives each
task a time and a memory budget and kills this process when it overruns, so no notebook can pin the server's
CPU, hold its memory or make a search wait. Run as `python -m nbrecall.web.worker FD PARENT_PID [pdeathsig]`;
FD is one end of a socket pair carrying `(task, kwargs)` requests and `("ok", result)` / `("error", message)`
replies as pickles. The process ends with its parent, and by itself after `IDLE_EXIT` seconds without work.

A page is read without parsing the whole notebook: the file is checked against the indexed hash, its JSON
loaded once (and kept for the next page while it is not too large), and only the page's cells go through the
notebook reader, with the cell ids the index recorded. So the first page of a 60,000-cell notebook costs one
JSON load, not a full parse and validation of every cell.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from nbrecall.executor import die_with_parent
from nbrecall.notebook.model import Cell, Notebook
from nbrecall.notebook.read import NotebookUnreadable, join_text, read_notebook_bytes
from nbrecall.records import CellRecord
from nbrecall.web.cell_html import SHRUNK, shrink_output
from nbrecall.web.documents import CellText, Documents

IDLE_EXIT = 600.0  # seconds without a task before the worker ends itself (the server starts another on demand)


def _shrunk_cell(cell: Any) -> tuple[Any, dict[int, dict[str, int]]]:
    """The cell with its outputs cut for the viewer, and the true field lengths by output (counted as the reader
    counts outputs: objects only)."""
    outputs = cell.get("outputs") if isinstance(cell, dict) else None
    if not isinstance(outputs, list) or not outputs:
        return cell, {}
    kept: list[Any] = []
    sizes: dict[int, dict[str, int]] = {}
    position = 0
    for output in outputs:
        if isinstance(output, dict):
            output, cut = shrink_output(output)
            if cut:
                sizes[position] = cut
            position += 1
        kept.append(output)
    return ({**cell, "outputs": kept} if sizes else cell), sizes


def v4_minor(meta: dict[str, Any]) -> int | None:
    """The nbformat minor version of an indexed nbformat-4 file (from the content's meta), else None."""
    major, _sep, minor = str(meta.get("nbformat") or "").partition(".")
    return int(minor) if major == "4" and minor.isdigit() else None


def _slice_cells(
    source: CellText, records: list[CellRecord], rel: str, minor: int, language: str, shrink: bool = False
) -> Notebook | None:
    """The cells `records` cover, read from the JSON text: only those go through the reader (its checks and
    repairs), and they take the index and id the index recorded. None when the file does not line up with the
    index (then the whole notebook is read). `shrink`: outputs cut to what the viewer shows
    (`render.shrink_output`)."""
    if not records or not source.ok:
        return None
    start, stop = records[0].idx, records[-1].idx + 1
    if stop - start != len(records):
        return None
    raw_cells = source.cells(start, stop)
    if raw_cells is None:
        return None
    shrunk = [_shrunk_cell(cell) if shrink else (cell, {}) for cell in raw_cells]
    part = {"cells": [cell for cell, _sizes in shrunk], "metadata": {}, "nbformat": 4, "nbformat_minor": minor}
    try:
        nb = read_notebook_bytes(json.dumps(part).encode("utf-8"), rel)
    except NotebookUnreadable:
        return None
    if len(nb.cells) != len(records):
        return None
    for cell, record, (_raw, sizes) in zip(nb.cells, records, shrunk, strict=True):
        if cell.cell_type != record.cell_type:
            return None
        cell.index, cell.id = record.idx, record.cell_id
        for position, cut in sizes.items():
            if position < len(cell.outputs):
                cell.outputs[position].metadata[SHRUNK] = cut
    return replace(nb, language=language)


def _page_notebook(
    docs: Documents,
    path: str | None,
    sha: str,
    rel: str,
    records: list[CellRecord],
    meta: dict[str, Any],
    shrink: bool = False,
) -> Notebook | None:
    minor = v4_minor(meta)
    if minor is not None:
        source = docs.text(path, sha)
        if source is not None:
            sliced = _slice_cells(source, records, rel, minor, str(meta.get("language") or "python"), shrink)
            if sliced is not None:
                return sliced
    parsed = docs.parsed(path, sha, rel)
    if parsed is None:
        return None
    nb = parsed[0]
    wanted = {r.idx for r in records}
    return replace(nb, cells=[c for c in nb.cells if c.index in wanted])


def _render_pair(renders: str | None, sha: str, rel: str) -> tuple[Any, Notebook | None]:
    if not renders:
        return None, None
    from nbrecall.ingest.renders import load_render_pair

    return load_render_pair(Path(renders), sha, rel)


# ----------------------------------------------------------------------------------------------------------
# tasks


def task_page(
    docs: Documents,
    *,
    path: str | None,
    sha: str,
    rel: str,
    records: list[CellRecord],
    language: str,
    meta: dict[str, Any],
    renders: str | None = None,
    figures: dict[str, str] | None = None,
) -> Any:
    """One viewer page: `render.PageResult` for the cells `records` cover; `figures` (`path`, `describer`,
    `label` of the index's figure cache) adds each image's description under it."""
    from nbrecall.ingest.renders import match_cells
    from nbrecall.web.render import page_views

    nb = _page_notebook(docs, path, sha, rel, records, meta, shrink=True)
    render, fresh = _render_pair(renders, sha, rel)
    matched = match_cells(nb, fresh) if nb is not None and fresh is not None else None
    return page_views(
        nb.cells if nb is not None else None,
        records,
        (nb.language if nb is not None else "") or language,
        meta,
        render,
        fresh,
        matched,
        _describe_from(figures) if figures else None,
    )


def _describe_from(figures: dict[str, str]):
    """Image hash → description line, read from the figure cache (read-only) for one page."""
    from contextlib import closing

    from nbrecall.vision.describe import description_line
    from nbrecall.vision.store import FigureStore

    def describe(shas: list[str]) -> dict[str, str]:
        try:
            with closing(FigureStore(Path(figures["path"]), readonly=True)) as store:
                found = store.get_many(shas, figures["describer"])
        except Exception:  # no cache yet, or it is being written: the page shows images without descriptions
            return {}
        return {sha: description_line(figures["label"], d.text) for sha, d in found.items() if d.text}

    return describe


def _markdown_above(cells: list[Any]) -> tuple[bool, str | None]:
    """The markdown that explains the cell after `cells` (the output rules use it for figure captions), found on
    raw JSON cells: the nearest non-blank cell above, when it is markdown. (found, markdown); found is False when
    every one of `cells` is blank, so the search goes on above them."""
    for raw in reversed(cells):
        if not isinstance(raw, dict):
            return True, None
        source = join_text(raw.get("source"))
        if not source.strip():
            continue
        return True, (source if raw.get("cell_type") == "markdown" else None)
    return False, None


def _markdown_above_cells(cells: list[Cell], index: int) -> str | None:
    for cell in reversed(cells[:index]):
        if cell.source.strip():
            return cell.source if cell.is_markdown else None
    return None


def task_cell(
    docs: Documents,
    *,
    path: str | None,
    sha: str,
    rel: str,
    record: CellRecord,
    max_output_chars: int,
    meta: dict[str, Any] | None = None,
    renders: str | None = None,
) -> dict[str, Any] | None:
    """One cell's outputs after the output rules (and the re-rendered ones); None when the file changed."""
    from nbrecall.ingest.renders import match_cells
    from nbrecall.notebook.outputs import OutputLimits, render_outputs

    meta = meta or {}
    nb = _page_notebook(docs, path, sha, rel, [record], meta)
    if nb is None or not nb.cells:
        return None
    cell = nb.cells[0]
    above = _above(docs, path, sha, rel, record.idx, meta)
    limits = OutputLimits(max_chars=max_output_chars)

    def outputs(of: Cell) -> list[dict[str, Any]]:
        rendered = render_outputs(of, markdown_above=above, limits=limits)
        return [
            {"output_type": raw.output_type, "kind": out.kind, "mime": out.mime, "text": out.text,
             "truncated": out.truncated}
            for raw, out in zip(of.outputs, rendered, strict=False)
        ]

    _render, fresh = _render_pair(renders, sha, rel)
    fresh_cell = match_cells(nb, fresh).get(record.idx) if fresh is not None else None
    return {
        "tags": list(cell.tags),
        "outputs": outputs(cell),
        "fresh_outputs": outputs(fresh_cell) if fresh_cell is not None and cell.is_code else None,
    }


def _above(docs: Documents, path: str | None, sha: str, rel: str, index: int, meta: dict[str, Any]) -> str | None:
    """The markdown above cell `index`, read 50 cells at a time upwards from the JSON text."""
    source = docs.text(path, sha) if v4_minor(meta) is not None else None
    if source is not None and source.ok:
        stop = index
        while stop > 0:
            start = max(0, stop - 50)
            cells = source.cells(start, stop)
            if cells is None:
                break
            found, markdown = _markdown_above(cells)
            if found:
                return markdown
            stop = start
        else:
            return None
    parsed = docs.parsed(path, sha, rel)
    return _markdown_above_cells(parsed[0].cells, index) if parsed else None


def task_report(docs: Documents, *, path: str | None, sha: str, rel: str) -> str | None:
    """The fidelity report as sanitized HTML; None when the file changed since it was indexed."""
    from nbrecall.convert.markdown import convert_notebook
    from nbrecall.convert.report import measure, render_report
    from nbrecall.web.cell_html import render_markdown

    parsed = docs.parsed(path, sha, rel)
    if parsed is None:
        return None
    nb, raw = parsed
    converted = convert_notebook(nb, Path(rel).stem)
    text = render_report(nb, converted, measure(raw, converted))
    return str(render_markdown(text))


def task_deps(docs: Documents, *, path: str | None, sha: str, rel: str) -> str | None:
    """The dependency map (SVG); None when the file changed since it was indexed."""
    from nbrecall.convert.depmap import render_dependency_svg
    from nbrecall.notebook.analysis import analyse

    parsed = docs.parsed(path, sha, rel)
    if parsed is None:
        return None
    nb = parsed[0]
    return render_dependency_svg(nb, analyse(nb), title=rel)


def task_diff(_docs: Documents, *, a: list[CellRecord], b: list[CellRecord]) -> dict[str, Any]:
    """What differs between two versions, cell by cell (`web.diff`), from their indexed cell records."""
    from nbrecall.web.diff import render_diff

    return render_diff(a, b)


def task_ping(_docs: Documents) -> int:
    return os.getpid()


def task_spin(_docs: Documents, *, seconds: float = 3600.0, allocate_mb: int = 0) -> None:
    """For the tests of the budgets: run past the time budget, or grow past the memory budget."""
    import time

    hold = bytearray(allocate_mb * 1024 * 1024) if allocate_mb else None
    if hold:
        for i in range(0, len(hold), 4096):
            hold[i] = 1
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(10_000))


TASKS: dict[str, Callable[..., Any]] = {  # each called as task(docs, **kwargs)
    "page": task_page,
    "cell": task_cell,
    "report": task_report,
    "deps": task_deps,
    "diff": task_diff,
    "ping": task_ping,
    "spin": task_spin,
}


def serve_forever(conn: Connection) -> int:
    docs = Documents()
    while True:
        try:
            if not conn.poll(IDLE_EXIT):
                return 0
            name, kwargs = conn.recv()
        except (EOFError, OSError):
            return 0
        try:
            reply: tuple[Any, ...] = ("ok", TASKS[name](docs, **kwargs))
        except Exception as exc:  # one bad notebook: the server shows the page degraded
            reply = ("error", f"{type(exc).__name__}: {exc}"[:500])
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return 0


def main(argv: list[str]) -> int:
    fd, parent = int(argv[1]), int(argv[2])
    die_with_parent(parent, signal_on_death=len(argv) > 3 and argv[3] == "pdeathsig")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle: it stops us
    with contextlib.suppress(OSError):
        os.nice(5)  # searches in the server come first on a busy machine
    from nbrecall.web.cell_html import render_code, render_markdown

    render_code("x = 1\nprint(x)")  # the lexer and the markdown parser built now, not on the first page
    render_markdown("# x\n\n*y*")

    conn = Connection(fd)
    try:
        conn.send(("ready", os.getpid()))
    except OSError:
        return 0
    return serve_forever(conn)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
