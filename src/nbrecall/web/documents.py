"""The notebook a render worker reads (`web.worker`): its JSON text read one cell at a time (`CellText`), and the one
notebook the worker keeps between pages (`Documents`), checked against the indexed hash before use.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from nbrecall.notebook.files import read_notebook_file
from nbrecall.notebook.model import Notebook
from nbrecall.notebook.read import NotebookUnreadable, read_notebook_bytes

CACHE_RAW = 32 * 1024 * 1024  # a notebook up to this size stays loaded between pages

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class CellText:
    """A notebook's JSON text, read one cell at a time: the top-level `cells` array is found by walking the
    top-level object (values before it parsed; after it, not at all), and a cell is parsed only when a page
    needs it or a later one, whose start is then known. The first page of a 60,000-cell notebook parses 100
    cells, not 60,000; page 300 parses the 30,000 before it once, and keeps their starts (not their contents)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts: list[int] = []  # where each cell found so far begins
        self._next: int | None = None  # where the cell after the last found begins; None: no more cells
        try:
            self._next = self._array_start()
        except (ValueError, IndexError, RecursionError):
            self._next = None
        self.ok = self._next is not None

    def _ws(self, i: int) -> int:
        match = _WS.match(self.text, i)
        return match.end() if match else i

    def _array_start(self) -> int | None:
        text = self.text
        i = self._ws(0)
        if text[i] != "{":
            return None
        i += 1
        while True:
            i = self._ws(i)
            if text[i] == "}":
                return None
            key, i = _DECODER.raw_decode(text, i)
            i = self._ws(i)
            if text[i] != ":":
                return None
            i = self._ws(i + 1)
            if key == "cells":
                if text[i] != "[":
                    return None
                i = self._ws(i + 1)
                return None if text[i] == "]" else i
            _value, i = _DECODER.raw_decode(text, i)
            i = self._ws(i)
            if text[i] == ",":
                i += 1

    def cells(self, start: int, stop: int) -> list[Any] | None:
        """The raw cells `start`..`stop` (JSON objects as loaded), or None when the array has fewer."""
        wanted: dict[int, Any] = {}
        try:
            while len(self.starts) < stop and self._next is not None:
                at = self._next
                value, end = _DECODER.raw_decode(self.text, at)
                if start <= len(self.starts) < stop:
                    wanted[len(self.starts)] = value
                self.starts.append(at)
                end = self._ws(end)
                if self.text[end] == ",":
                    self._next = self._ws(end + 1)
                else:
                    self._next = None  # "]": the last cell
            if len(self.starts) < stop:
                return None
            return [
                wanted[k] if k in wanted else _DECODER.raw_decode(self.text, self.starts[k])[0]
                for k in range(start, stop)
            ]
        except (ValueError, IndexError, RecursionError):
            self.ok = False
            return None


class Documents:
    """The one notebook this worker read last, kept (up to `CACHE_RAW`) so paging through it reads it once."""

    def __init__(self) -> None:
        self.sha: str | None = None
        self.raw: bytes | None = None
        self.cell_text: CellText | None = None
        self.notebook: Notebook | None = None

    def _load(self, path: str | None, sha: str) -> bytes | None:
        if self.sha == sha and self.raw is not None:
            return self.raw
        self.sha, self.raw, self.cell_text, self.notebook = None, None, None, None
        if not path:
            return None
        try:
            raw = read_notebook_file(path)
        except OSError:
            return None
        if hashlib.sha256(raw).hexdigest() != sha:
            return None
        if len(raw) <= CACHE_RAW:
            self.sha, self.raw = sha, raw
        return raw

    def text(self, path: str | None, sha: str) -> CellText | None:
        """The notebook's JSON text, for reading cells from it (nothing validated: that was done when it was
        indexed under this hash)."""
        if self.sha == sha and self.cell_text is not None:
            return self.cell_text
        raw = self._load(path, sha)
        if raw is None:
            return None
        try:
            text = raw.decode("utf-8").removeprefix("\ufeff")
        except UnicodeDecodeError:
            return None
        del raw  # not the bytes and the text of a notebook too large to keep both
        source = CellText(text)
        if self.sha == sha:
            self.raw, self.cell_text = None, source
        return source

    def parsed(self, path: str | None, sha: str, rel: str) -> tuple[Notebook, bytes] | None:
        """The whole notebook through the reader (what indexing saw), and its bytes."""
        raw = self._load(path, sha)
        if raw is None and self.sha == sha and self.cell_text is not None:
            raw = self.cell_text.text.encode("utf-8")
        if raw is None:
            return None
        if self.sha == sha and self.notebook is not None:
            return self.notebook, raw
        try:
            nb = read_notebook_bytes(raw, rel)
        except NotebookUnreadable:
            return None
        if self.sha == sha:
            self.cell_text, self.notebook = None, nb  # one form kept, not both
        return nb, raw
