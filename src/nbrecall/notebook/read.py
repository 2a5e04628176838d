"""Read `.ipynb` files into `Notebook` objects, or quarantine them with a one-line reason.

nbformat does the upgrade (v1-v3 worksheets, `heading` cells, `pyout`/`pyerr`) and the validation, including
its leniency for files of a newer minor version (unknown cell types and fields allowed); this module adds what an
archive needs on top: a reason a user can act on for every file that nbformat rejects, and cell ids that stay
the same from one run to the next (nbformat invents random ids when it upgrades an old file or repairs missing
and duplicate ids; here such cells get ids derived from their index and source instead). What it repairs before
validating, as Jupyter opens such files, is in `notebook.repair`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import warnings
from pathlib import Path
from typing import Any

import nbformat
from nbformat.validator import ValidationError

from nbrecall.notebook.files import read_notebook_file
from nbrecall.notebook.model import Cell, Notebook, Output, Quarantined
from nbrecall.notebook.repair import CELL_ID, drop_unexpected_keys, fill_missing_keys, replace_lone_surrogates

# Bumped when the reader reads files it used to quarantine: quarantined files are then read again on the next run
# (`ingest.pipeline.quarantine_fingerprint`); indexed ones are not, since what the reader gives them is unchanged.
# 2: missing required keys supplied, a tool's top-level keys dropped, an execution count that is not one (`"*"`,
# saved while the cell ran) read as none, a cell id the schema does not allow replaced, UTF-16 with its byte order
# mark.
# 3: an HTML page saved under a notebook's name says so (the quarantine reason only)
READER_VERSION = 3


class NotebookUnreadable(Exception):
    """Raised when a file cannot be read as a notebook; `reason` is one line for `nbrecall status`."""

    def __init__(self, path: str, reason: str, sha256: str = "") -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.sha256 = sha256

    def quarantined(self) -> Quarantined:
        return Quarantined(self.path, self.sha256, self.reason)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def synthetic_cell_id(index: int, source: str) -> str:
    """A stable id for cells of files older than nbformat 4.5: index plus source hash."""
    digest = hashlib.sha1(f"{index}\0{source}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"c{index}-{digest[:8]}"


def read_notebook(path: str | Path, display_path: str | None = None) -> Notebook:
    """Read one notebook file; raise `NotebookUnreadable` with a reason when it cannot be read."""
    shown = display_path or str(path)
    try:
        data = read_notebook_file(path)
    except OSError as exc:
        raise NotebookUnreadable(shown, f"cannot read file: {exc.strerror or exc}") from exc
    return read_notebook_bytes(data, shown)


def read_notebook_bytes(data: bytes, path: str) -> Notebook:
    """Parse notebook bytes; see `read_notebook`."""
    digest = sha256_bytes(data)

    def fail(reason: str) -> NotebookUnreadable:
        return NotebookUnreadable(path, reason, digest)

    if not data.strip():
        raise fail("empty file")
    notes: list[str] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not data.startswith(_UTF16_BOMS):
            raise fail(f"invalid UTF-8 at byte {exc.start}") from exc
        # What Windows PowerShell 5 writes for `> out.ipynb`: UTF-16 with a byte order mark, which says the
        # encoding itself; Jupyter reads only UTF-8, so the file is read and the note says why it may not open.
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError as exc16:
            raise fail(f"invalid UTF-16 at byte {exc16.start} (the file starts with a UTF-16 byte order mark)") \
                from exc16
        notes.append("read as UTF-16 (the file starts with its byte order mark); Jupyter reads only UTF-8 and may "
                     "not open it")
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        raw = json.loads(text)
    except RecursionError as exc:
        raise fail("JSON nested too deeply to parse") from exc
    except json.JSONDecodeError as exc:
        target = text.strip()
        if "\n" not in target and len(target) <= 1024 and target.lower().endswith(".ipynb"):
            # what Git writes for a symbolic link where it cannot make one (`core.symlinks` false, a zip of a clone)
            raise fail(f"not a notebook: the file holds only the path {target!r} (a symbolic link saved as a text "
                       "file? index the notebook it names instead)") from exc
        if target.startswith("version https://git-lfs.github.com/spec/"):
            raise fail("not a notebook: a Git LFS pointer (the notebook itself is in LFS storage; `git lfs pull` "
                       "in its repository fetches it)") from exc
        if target[:200].lower().lstrip("\ufeff").startswith(("<!doctype html", "<html")):
            # what a browser saves from a notebook's page on GitHub, GitLab or nbviewer (not the raw file)
            raise fail("not a notebook: an HTML page (saved from a browser's view of the notebook? save the raw "
                       "file: GitHub's 'Download raw file', or the page's .ipynb link)") from exc
        conflict = _CONFLICT_MARKER.search(text)
        if conflict is not None:
            line = text.count("\n", 0, conflict.start()) + 1
            raise fail(f"unresolved merge conflict: a '<<<<<<<' marker at line {line} (resolve it, e.g. with "
                       "nbdime's `git mergetool`, and run again)") from exc
        # A string still open at the end of the file is reported where it starts: that is a cut file too.
        cut = exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated string")
        kind = "truncated JSON" if cut else "invalid JSON"
        raise fail(f"{kind}: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    if not isinstance(raw, dict) or "nbformat" not in raw:
        raise fail("not a notebook: JSON without an 'nbformat' field")
    if _SURROGATE_ESCAPE.search(text):
        replaced = replace_lone_surrogates(raw)
        if replaced:
            notes.append(f"repaired: replaced {replaced} lone surrogate escape(s) with U+FFFD")
    major = raw.get("nbformat")
    minor = raw.get("nbformat_minor", 0)
    if not isinstance(major, int) or isinstance(major, bool) or major not in nbformat.versions:
        known = ", ".join(str(v) for v in sorted(nbformat.versions))
        raise fail(f"unsupported nbformat version {major!r} (nbformat reads {known})")
    if not isinstance(minor, int) or isinstance(minor, bool):
        raise fail(f"schema violation: nbformat_minor is {minor!r}, not an integer")
    own_ids = _own_cell_ids(raw) if major == 4 and minor >= 5 else None
    try:
        nb = _to_v4(raw, major, notes)
    except NotebookUnreadable as exc:
        raise fail(exc.reason) from exc
    except RecursionError as exc:
        raise fail("JSON nested too deeply to parse") from exc
    except Exception as exc:  # nbformat raises many kinds on broken structure
        raise fail(f"schema violation: {_one_line(str(exc)) or type(exc).__name__}") from exc
    return _build(nb, path, digest, major, minor, notes, len(data), own_ids)


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
# Git writes `<<<<<<< ours`, `=======`, `>>>>>>> theirs` at line starts into a file it could not merge.
_CONFLICT_MARKER = re.compile(r"^<{7}(?: |$)", re.MULTILINE)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _one_line(message: str, limit: int = 200) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first[:limit]


def _own_cell_ids(raw: dict[str, Any]) -> list[str | None] | None:
    """The ids as the file has them (nbformat 4.5+), read before nbformat's repair replaces missing and duplicate
    ones with random ids: None for a cell without one, "" for one the schema does not allow (`repair.CELL_ID`);
    None when the cells are not a list (the shape check reports that)."""
    cells = raw.get("cells")
    if not isinstance(cells, list):
        return None
    ids: list[str | None] = []
    for cell in cells:
        value = cell.get("id") if isinstance(cell, dict) else None
        ids.append(None if value is None else value if isinstance(value, str) and CELL_ID.match(value) else "")
    return ids


def _future_minor(node: dict[str, Any]) -> bool:
    """A 4.x file newer than this nbformat knows: its validator then allows unknown cell types and fields."""
    minor = node.get("nbformat_minor", 0)
    return isinstance(minor, int) and minor > nbformat.v4.nbformat_minor


def _to_v4(raw: dict[str, Any], major: int, notes: list[str]) -> nbformat.NotebookNode:
    """Upgrade to v4 and validate; repair what nbformat can repair and note it."""
    if major < 4:
        if major == 3:
            _check_v3(raw)
        elif not isinstance(raw.get("worksheets", raw.get("cells")), list):
            raise NotebookUnreadable("", f"schema violation: nbformat {major} file without its cells")
        # to_notebook_json rejoins list-form sources, which the upgrade expects as strings.
        version = nbformat.versions[major]
        if major == 3:
            node = version.to_notebook_json(copy.deepcopy(raw), minor=raw.get("nbformat_minor", 0))
        else:
            node = version.to_notebook_json(copy.deepcopy(raw))
        node = nbformat.convert(node, 4)
        notes.append(f"upgraded from nbformat {major}")
    else:
        node = nbformat.from_dict(raw)
    _check_v4_shape(node)
    if _future_minor(node):
        notes.append(f"nbformat 4.{node['nbformat_minor']} is newer than 4.{nbformat.v4.nbformat_minor}: read "
                     "as nbformat's validator reads it (unknown cell types and fields allowed)")
    else:
        drop_unexpected_keys(node, notes)
    fill_missing_keys(node, notes)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.validate(node)
    except ValidationError as first:
        changes, node = nbformat.validator.normalize(node, strip_invalid_metadata=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                nbformat.validate(node)
        except ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "notebook"
            raise NotebookUnreadable("", f"schema violation at {where}: {_one_line(exc.message)}") from exc
        notes.append(f"repaired: {_one_line(first.message)} ({changes} change(s))")
    return node


def _check_v3(node: dict[str, Any]) -> None:
    worksheets = node.get("worksheets")
    if not isinstance(worksheets, list):
        raise NotebookUnreadable("", "schema violation: nbformat 3 file without a 'worksheets' list")
    for ws in worksheets:
        if not isinstance(ws, dict) or not isinstance(ws.get("cells"), list):  # nbformat's upgrade needs the key
            raise NotebookUnreadable("", "schema violation: a worksheet without a 'cells' list")
        for cell in ws["cells"]:
            if not isinstance(cell, dict) or "cell_type" not in cell:
                raise NotebookUnreadable("", "schema violation: a cell without 'cell_type'")


def _check_v4_shape(node: dict[str, Any]) -> None:
    cells = node.get("cells")
    if not isinstance(cells, list):
        raise NotebookUnreadable("", "schema violation: no 'cells' list")
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict):
            raise NotebookUnreadable("", f"schema violation: cell {i} is not an object")
        if cell.get("cell_type") not in ("code", "markdown", "raw") and not (
            _future_minor(node) and isinstance(cell.get("cell_type"), str)
        ):
            raise NotebookUnreadable(
                "", f"schema violation: cell {i} has cell_type {cell.get('cell_type')!r}"
            )
        if not isinstance(cell.get("source", ""), str | list):
            raise NotebookUnreadable("", f"schema violation: cell {i} 'source' is neither string nor list")


def join_text(value: Any) -> str:
    """nbformat allows multiline strings as a string or a list of strings; return one string."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "".join(v if isinstance(v, str) else json.dumps(v) for v in value)
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _count(value: Any) -> int | None:
    """An execution count, or None when it is not one an index can store: the schema sets no upper bound, and
    a count past SQLite's 64-bit INTEGER (`2**70` is valid JSON) used to stop the whole index run."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return value
    return None


def _output(raw: dict[str, Any]) -> Output:
    data = {
        k: (v if isinstance(v, dict | int | float | bool) else join_text(v))
        for k, v in (raw.get("data") or {}).items()
    }
    return Output(
        output_type=str(raw.get("output_type", "")),
        name=raw.get("name"),
        text=join_text(raw.get("text")),
        data=data,
        metadata=dict(raw.get("metadata") or {}),
        execution_count=_count(raw.get("execution_count")),
        ename=str(raw.get("ename", "") or ""),
        evalue=str(raw.get("evalue", "") or ""),
        traceback=[str(t) for t in raw.get("traceback") or []],
    )


def _build(
    nb: dict[str, Any], path: str, digest: str, major: int, minor: int, notes: list[str], size: int,
    own_ids: list[str | None] | None = None,
) -> Notebook:
    meta = dict(nb.get("metadata") or {})
    kernelspec = meta.get("kernelspec") or {}
    lang_info = meta.get("language_info") or {}
    language = str(lang_info.get("name") or kernelspec.get("language") or "").lower()
    cells: list[Cell] = []
    seen: set[str] = set()
    missing = duplicate = invalid = 0
    raw_cells = list(nb.get("cells", []))
    if own_ids is not None and len(own_ids) != len(raw_cells):
        own_ids = None
    for index, raw in enumerate(raw_cells):
        source = join_text(raw.get("source"))
        # The file's own id, never the one nbformat's repair drew at random (a new one on every read)
        own_id = own_ids[index] if own_ids is not None else None
        synthetic = not own_id or own_id in seen
        if own_ids is not None and synthetic:
            missing += own_id is None
            invalid += own_id == ""
            duplicate += bool(own_id)
        cell_id = synthetic_cell_id(index, source) if synthetic or not own_id else own_id
        seen.add(cell_id)
        cell_meta = raw.get("metadata") or {}
        tags = cell_meta.get("tags") or []
        count = raw.get("execution_count")
        cell_type = raw.get("cell_type", "raw")
        unknown = "" if cell_type in ("code", "markdown", "raw") else str(cell_type)
        mimetype = cell_meta.get("raw_mimetype") or cell_meta.get("format") if cell_type == "raw" else None
        if unknown:
            notes.append(f"Cell [{index}]: unknown cell type {unknown!r} (nbformat 4.{minor}), shown as raw")
        cells.append(
            Cell(
                index=index,
                id=cell_id,
                cell_type="raw" if unknown else cell_type,
                source=source,
                execution_count=_count(count),
                outputs=[_output(o) for o in raw.get("outputs") or [] if isinstance(o, dict)],
                attachments={
                    k: dict(v) for k, v in (raw.get("attachments") or {}).items() if isinstance(v, dict)
                },
                tags=[str(t) for t in tags] if isinstance(tags, list) else [],
                id_is_synthetic=synthetic,
                raw_mimetype=mimetype if isinstance(mimetype, str) else "",
                unknown_type=unknown,
            )
        )
    if missing or duplicate or invalid:
        what = " and ".join(p for p in (f"{missing} missing" if missing else "",
                                        f"{duplicate} duplicate" if duplicate else "",
                                        f"{invalid} invalid" if invalid else "") if p)
        notes.append(f"repaired: {what} cell id(s) replaced by ids derived from cell index and source "
                     "(the same on every read)")
    return Notebook(
        path=path,
        sha256=digest,
        cells=cells,
        nbformat=major,
        nbformat_minor=minor,
        language=language,
        kernel_name=str(kernelspec.get("name") or ""),
        language_version=str(lang_info.get("version") or ""),
        metadata=meta,
        notes=notes,
        size_bytes=size,
    )
