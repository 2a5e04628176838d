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
import hashlib
import json
import os
import signal
import sys
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from nbrecall.ingest.executor import die_with_parent
from nbrecall.ingest.manifest import CellRecord
from nbrecall.notebook.files import read_regular
from nbrecall.notebook.model import Cell, Notebook
from nbrecall.notebook.read import NotebookUnreadable, join_text, read_notebook_bytes
from nbrecall.web.render import SHRUNK, shrink_output

IDLE_EXIT = 600.0  # seconds without a task before the worker ends itself (the server starts another on demand)
CACHE_RAW = 32 * 1024 * 1024  # a notebook up to this size stays loaded between pages


class _Documents:
    """The one notebook this worker read last, kept so that paging through it does not read it again."""

    def __init__(self) -> None:
        self.sha: str | None = None
        self.raw: bytes | None = None
        self.doc: dict[str, Any] | None = None
        self.notebook: Notebook | None = None

    def _load(self, path: str | None, sha: str) -> bytes | None:
        if self.sha == sha and self.raw is not None:
            return self.raw
        self.sha, self.raw, self.doc, self.notebook = None, None, None, None
        if not path:
            return None
        try:
            raw = read_regular(path)
        except OSError:
            return None
        if hashlib.sha256(raw).hexdigest() != sha:
            return None
        if len(raw) <= CACHE_RAW:
            self.sha, self.raw = sha, raw
        return raw

    def document(self, path: str | None, sha: str) -> dict[str, Any] | None:
        """The notebook's JSON as loaded (nothing validated: it was, when it was indexed under this hash)."""
        if self.sha == sha and self.doc is not None:
            return self.doc
        raw = self._load(path, sha)
        if raw is None:
            return None
        try:
            text = raw.decode("utf-8").removeprefix("\ufeff")
        except UnicodeDecodeError:
            return None
        del raw  # bytes, text and parsed JSON are never all held at once (a 50 MB notebook: +150 MB, not +360)
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return None
        finally:
            del text
        if not isinstance(doc, dict):
            return None
        if self.sha == sha:
            self.doc = doc
        return doc

    def parsed(self, path: str | None, sha: str, rel: str) -> tuple[Notebook, bytes] | None:
        """The whole notebook through the reader (what indexing saw), and its bytes."""
        raw = self._load(path, sha)
        if raw is None:
            return None
        if self.sha == sha and self.notebook is not None:
            return self.notebook, raw
        try:
            nb = read_notebook_bytes(raw, rel)
        except NotebookUnreadable:
            return None
        if self.sha == sha:
            self.doc, self.notebook = None, nb  # one form kept, not both
        return nb, raw


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


def _slice_cells(
    doc: dict[str, Any], records: list[CellRecord], n_cells: int, rel: str, shrink: bool = False
) -> Notebook | None:
    """The cells `records` cover, read from the loaded JSON: only those cells go through the reader (its checks
    and repairs), and they take the index and id the index recorded. None when the file does not line up with
    the index cell for cell (an nbformat 3 file, say): then the whole notebook is read. `shrink`: outputs cut
    to what the viewer shows first (`render.shrink_output`)."""
    cells = doc.get("cells")
    if doc.get("nbformat") != 4 or not isinstance(cells, list) or len(cells) != n_cells or not records:
        return None
    start, stop = records[0].idx, records[-1].idx + 1
    if stop - start != len(records):
        return None
    part = {key: value for key, value in doc.items() if key != "cells"}
    shrunk = [_shrunk_cell(cell) if shrink else (cell, {}) for cell in cells[start:stop]]
    part["cells"] = [cell for cell, _sizes in shrunk]
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
    return nb


def _page_notebook(
    docs: _Documents,
    path: str | None,
    sha: str,
    rel: str,
    records: list[CellRecord],
    n_cells: int,
    doc: dict[str, Any] | None = None,
    shrink: bool = False,
) -> Notebook | None:
    doc = doc if doc is not None else docs.document(path, sha)
    if doc is not None:
        sliced = _slice_cells(doc, records, n_cells, rel, shrink)
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
    docs: _Documents,
    *,
    path: str | None,
    sha: str,
    rel: str,
    records: list[CellRecord],
    n_cells: int,
    language: str,
    meta: dict[str, Any],
    renders: str | None = None,
) -> Any:
    """One viewer page: `render.PageResult` for the cells `records` cover."""
    from nbrecall.ingest.renders import match_cells
    from nbrecall.web.render import page_views

    nb = _page_notebook(docs, path, sha, rel, records, n_cells, shrink=True)
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
    )


def _markdown_above(cells: list[Any], index: int) -> str | None:
    """The markdown that explains cell `index` (the output rules use it for figure captions), found on the raw
    JSON cells: the nearest non-blank cell above, when it is markdown."""
    for raw in reversed(cells[:index]):
        if not isinstance(raw, dict):
            return None
        source = join_text(raw.get("source"))
        if not source.strip():
            continue
        return source if raw.get("cell_type") == "markdown" else None
    return None


def task_cell(
    docs: _Documents,
    *,
    path: str | None,
    sha: str,
    rel: str,
    record: CellRecord,
    n_cells: int,
    max_output_chars: int,
    renders: str | None = None,
) -> dict[str, Any] | None:
    """One cell's outputs after the output rules (and the re-rendered ones); None when the file changed."""
    from nbrecall.ingest.renders import match_cells
    from nbrecall.notebook.outputs import OutputLimits, render_outputs

    doc = docs.document(path, sha)
    nb = _page_notebook(docs, path, sha, rel, [record], n_cells, doc)
    if nb is None or not nb.cells:
        return None
    cell = nb.cells[0]
    if doc is not None and isinstance(doc.get("cells"), list) and len(doc["cells"]) == n_cells:
        above = _markdown_above(doc["cells"], record.idx)
    else:
        parsed = docs.parsed(path, sha, rel)
        above = _markdown_above_cells(parsed[0].cells, record.idx) if parsed else None
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


def _markdown_above_cells(cells: list[Cell], index: int) -> str | None:
    for cell in reversed(cells[:index]):
        if cell.source.strip():
            return cell.source if cell.is_markdown else None
    return None


def task_report(docs: _Documents, *, path: str | None, sha: str, rel: str) -> str | None:
    """The fidelity report as sanitized HTML; None when the file changed since it was indexed."""
    from nbrecall.convert.markdown import convert_notebook
    from nbrecall.convert.report import measure, render_report
    from nbrecall.web.render import render_markdown

    parsed = docs.parsed(path, sha, rel)
    if parsed is None:
        return None
    nb, raw = parsed
    converted = convert_notebook(nb, Path(rel).stem)
    text = render_report(nb, converted, measure(raw, converted))
    return str(render_markdown(text))


def task_deps(docs: _Documents, *, path: str | None, sha: str, rel: str) -> str | None:
    """The dependency map (SVG); None when the file changed since it was indexed."""
    from nbrecall.convert.depmap import render_dependency_svg
    from nbrecall.notebook.analysis import analyse

    parsed = docs.parsed(path, sha, rel)
    if parsed is None:
        return None
    nb = parsed[0]
    return render_dependency_svg(nb, analyse(nb), title=rel)


def task_ping(_docs: _Documents) -> int:
    return os.getpid()


def task_spin(_docs: _Documents, *, seconds: float = 3600.0, allocate_mb: int = 0) -> None:
    """For the tests of the budgets: run past the time budget, or grow past the memory budget."""
    import time

    hold = bytearray(allocate_mb * 1024 * 1024) if allocate_mb else None
    if hold:
        for i in range(0, len(hold), 4096):
            hold[i] = 1
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(10_000))


TASKS = {
    "page": task_page,
    "cell": task_cell,
    "report": task_report,
    "deps": task_deps,
    "ping": task_ping,
    "spin": task_spin,
}


def serve_forever(conn: Connection) -> int:
    docs = _Documents()
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
    from nbrecall.web.render import render_code, render_markdown

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
