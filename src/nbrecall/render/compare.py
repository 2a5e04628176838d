"""Compare a notebook's stored outputs with a fresh run's, cell by cell, after normalisation.

Per code cell: `same`, `changed` (outputs differ), `failed` (the fresh run raised where the original did not, hit
a limit, or never reached the cell) or `new` (the original had no output, the fresh run has some).
Per notebook: `fresh` (no cell changed or failed), `changed` (ran to the end, some cells differ) or `stale` with a
reason: `missing file`, `import error: <module>`, `timeout`, `memory`, `kernel died`, `no network`,
`python 2 syntax`, `error: <ExceptionName>`, `sandbox unavailable`, `kernel not available: <language>`, ...

Normalisation before comparing (both sides): terminal escapes removed, `\\r` redraws collapsed, `0x…` addresses,
uuids, date-times, timing lines (`%time`, `%timeit`, progress-bar clocks) and cell file names
(`<ipython-input-3-…>`) replaced by placeholders, trailing spaces dropped, runs of spaces collapsed; execution
counts, metadata and tracebacks ignored (errors compare by `ename: evalue`); stderr streams are ignored unless
asked (warnings are not results); numbers compare with a relative tolerance (1e-6 by default). A rich output
compares by one representation both sides have: image, else `text/plain`, else the visible text of `text/html`,
else another common type; object reprs (`<… at 0x…>`, `<Axes: …>`, matplotlib `Text(…)`) compare equal to each
other: they name objects, not results. Images compare by bytes, else (with Pillow) by size and a 64×64 grey
thumbnail whose mean difference is under 1 %.
"""

from __future__ import annotations

import base64
import difflib
import io
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from nbrecall.notebook.model import Notebook, Output
from nbrecall.notebook.outputs import collapse_carriage_returns, html_to_text, strip_ansi
from nbrecall.render.sandbox import Execution, classify, classify_error

CELL_STATUSES = ("same", "changed", "failed", "new")
NOTEBOOK_STATUSES = ("fresh", "changed", "stale")

_UUID_RE = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_ADDR_RE = re.compile(r"\b0x[0-9a-fA-F]{4,}\b")
_DATETIME_RE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b"
)
_TIMING_LINE_RE = re.compile(
    r"^(?:CPU times:.*|Wall time:.*|.*\bper loop\b.*|\d+ loops?, best of \d+:.*|Elapsed time:.*|Time taken:.*)$",
    re.M,
)
_CELL_FILE_RE = re.compile(r"<ipython-input-\d+-[0-9a-f]+>|\b\d{6,}\.py\b|/tmp/ipykernel_\d+/\d+\.py")
_PROGRESS_CLOCK_RE = re.compile(r"\[\d+:\d+(?::\d+)?<[^\]]*\]")
_NUMBER_RE = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w])|\b(?:nan|NaN|inf|-inf)\b")
_OBJECT_REPR_RE = re.compile(
    r"^\s*\[?\s*(?:<[^\n<>]*>|Text\([^\n]*?\))(?:\s*,\s*(?:<[^\n<>]*>|Text\([^\n]*?\)))*\s*\]?\s*$"
)
_PLACEHOLDER_REPR_RE = re.compile(r"^<[\w.]+ object(?: at 0xADDR)?>$|^<IPython\.core\.display\.\w+ object>$")
_IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/svg+xml")
_TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json")
_WIDGET_MIMES = ("application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")


@dataclass
class CompareOptions:
    rel_tol: float = 1e-6
    abs_tol: float = 1e-12
    compare_stderr: bool = False
    image_tolerance: float = 0.01  # mean grey-level difference (0–1) of 64×64 thumbnails still called equal


@dataclass
class CellComparison:
    """One code cell: its status and a short detail (the fresh error, or a diff of normalised text)."""

    index: int
    id: str
    status: str
    detail: str = ""


@dataclass
class RenderResult:
    """The outcome of re-rendering one notebook; `to_dict` / `from_dict` give the stored JSON form."""

    path: str
    sha256: str
    status: str
    reason: str = ""
    cells: list[CellComparison] = field(default_factory=list)
    paths: dict[str, Any] = field(default_factory=dict)  # PathScan.to_dict()
    execution: dict[str, Any] = field(default_factory=dict)  # sandbox.describe()
    notes: list[str] = field(default_factory=list)
    rendered_at: str = ""
    environment: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(CELL_STATUSES, 0)
        for c in self.cells:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    def cell(self, cell_id: str) -> CellComparison | None:
        return next((c for c in self.cells if c.id == cell_id), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["counts"] = self.counts()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RenderResult:
        data = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        data["cells"] = [CellComparison(**c) for c in data.get("cells", [])]
        return cls(**data)


# ---------------------------------------------------------------------------------------------------------------
# Normalisation


def normalise_text(text: str) -> str:
    """The comparable form of an output text (see the module docstring)."""
    text = collapse_carriage_returns(strip_ansi(text.replace("\r\n", "\n")))
    text = _UUID_RE.sub("UUID", text)
    text = _ADDR_RE.sub("0xADDR", text)
    text = _DATETIME_RE.sub("DATETIME", text)
    text = _TIMING_LINE_RE.sub("TIMING", text)
    text = _PROGRESS_CLOCK_RE.sub("[CLOCK]", text)
    text = _CELL_FILE_RE.sub("<cell>", text)
    lines = [re.sub(r"[ \t]+", " ", ln).rstrip() for ln in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)


def texts_equal(a: str, b: str, rel_tol: float = 1e-6, abs_tol: float = 1e-12) -> bool:
    """Equal after normalisation, numbers compared with a relative tolerance and spacing ignored."""
    if a == b:
        return True
    split_a, split_b = _NUMBER_RE.split(a), _NUMBER_RE.split(b)
    if len(split_a) != len(split_b):
        return False
    if any(re.sub(r"\s+", "", x) != re.sub(r"\s+", "", y) for x, y in zip(split_a, split_b, strict=True)):
        return False
    for x, y in zip(_NUMBER_RE.findall(a), _NUMBER_RE.findall(b), strict=True):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if math.isnan(fx) and math.isnan(fy):
            continue
        if not math.isclose(fx, fy, rel_tol=rel_tol, abs_tol=abs_tol):
            return False
    return True


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    import json

    return json.dumps(value, sort_keys=True)


@dataclass
class _Item:
    """One comparable output: its kind and its normalised representations."""

    kind: str  # "stream:stdout", "error", "data"
    text: str = ""  # stream text, "ename: evalue", or text/plain
    reps: dict[str, str] = field(default_factory=dict)  # mime → normalised value (images: raw base64)

    def show(self) -> str:
        if self.kind != "data":
            return self.text
        for mime in ("text/plain", "text/html", "text/markdown", "text/latex"):
            if mime in self.reps:
                return self.reps[mime]
        return next((f"[{m}]" for m in self.reps), "")


def comparable(outputs: list[Output], options: CompareOptions | None = None) -> list[_Item]:
    """The outputs of a cell as comparable items: streams merged by name, stderr dropped unless asked."""
    options = options or CompareOptions()
    items: list[_Item] = []
    for out in outputs:
        if out.output_type == "stream":
            name = out.name or "stdout"
            if name == "stderr" and not options.compare_stderr:
                continue
            kind = f"stream:{name}"
            if items and items[-1].kind == kind:
                items[-1].text += out.text
            else:
                items.append(_Item(kind, out.text))
        elif out.output_type == "error":
            items.append(_Item("error", normalise_text(f"{out.ename}: {out.evalue}")))
        elif out.output_type in ("execute_result", "display_data"):
            reps: dict[str, str] = {}
            for mime, value in out.data.items():
                if mime in _WIDGET_MIMES:
                    continue
                if mime in _IMAGE_MIMES and mime != "image/svg+xml":
                    reps[mime] = "".join(_text(value).split())
                elif mime == "text/html":
                    reps[mime] = normalise_text(html_to_text(_text(value))[0])
                else:
                    reps[mime] = normalise_text(_text(value))
            if reps:
                items.append(_Item("data", reps.get("text/plain", ""), reps))
    for item in items:
        if item.kind.startswith("stream:"):
            item.text = normalise_text(item.text)
    return [i for i in items if not (i.kind.startswith("stream:") and not i.text)]


def _object_repr(text: str) -> bool:
    return bool(text) and bool(_OBJECT_REPR_RE.match(text))


def _images_equal(a: str, b: str, tolerance: float) -> bool:
    if a == b:
        return True
    try:
        from PIL import Image, ImageChops, ImageStat
    except ImportError:
        return False
    try:
        img_a = Image.open(io.BytesIO(base64.b64decode(a)))
        img_b = Image.open(io.BytesIO(base64.b64decode(b)))
        if img_a.size != img_b.size:
            return False
        thumb_a = img_a.convert("L").resize((64, 64))
        thumb_b = img_b.convert("L").resize((64, 64))
        diff = ImageStat.Stat(ImageChops.difference(thumb_a, thumb_b)).mean[0] / 255.0
    except Exception:  # a broken image is simply not equal
        return False
    return diff <= tolerance


def items_equal(a: _Item, b: _Item, options: CompareOptions) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind != "data":
        return texts_equal(a.text, b.text, options.rel_tol, options.abs_tol)
    common = [m for m in a.reps if m in b.reps]
    images = [m for m in _IMAGE_MIMES if m in common]
    if images:
        mime = images[0]
        if mime == "image/svg+xml":
            return a.reps[mime] == b.reps[mime]
        return _images_equal(a.reps[mime], b.reps[mime], options.image_tolerance)
    if any(m in a.reps for m in _IMAGE_MIMES) != any(m in b.reps for m in _IMAGE_MIMES):
        return False
    plain_a, plain_b = a.reps.get("text/plain", ""), b.reps.get("text/plain", "")
    if "text/plain" in common and _object_repr(plain_a) and _object_repr(plain_b):
        placeholder = _PLACEHOLDER_REPR_RE.match(plain_a) or _PLACEHOLDER_REPR_RE.match(plain_b)
        richer = [m for m in common if m != "text/plain"]
        if not (placeholder and richer):
            return True
    for mime in _TEXT_MIMES:
        if mime in common:
            if mime == "text/plain" and _PLACEHOLDER_REPR_RE.match(plain_a) and len(common) > 1:
                continue
            return texts_equal(a.reps[mime], b.reps[mime], options.rel_tol, options.abs_tol)
    if common:
        return all(a.reps[m] == b.reps[m] for m in common)
    return False


def outputs_equal(original: list[_Item], fresh: list[_Item], options: CompareOptions) -> bool:
    return len(original) == len(fresh) and all(
        items_equal(a, b, options) for a, b in zip(original, fresh, strict=True)
    )


def diff_text(original: list[_Item], fresh: list[_Item], max_lines: int = 24) -> str:
    """A short unified diff of the normalised outputs (what the drift report and the viewer show)."""
    a = "\n".join(i.show() for i in original).splitlines()
    b = "\n".join(i.show() for i in fresh).splitlines()
    lines = list(difflib.unified_diff(a, b, "original", "fresh", n=1, lineterm=""))
    if not lines and original and fresh:
        lines = ["(images differ)" if any(m in i.reps for i in original for m in _IMAGE_MIMES)
                 else "(outputs differ in kind or count)"]
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"… {len(lines) - max_lines} more diff lines"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Comparing a notebook


def compare_notebook(
    original: Notebook, fresh: Notebook, execution: Execution, options: CompareOptions | None = None
) -> RenderResult:
    """Per-cell and notebook status of `fresh` (the executed copy, read back) against `original`.

    Cells are matched by position (the executed copy is built from the original, so ids and order agree).
    """
    options = options or CompareOptions()
    errors = {e.index: e for e in execution.errors}
    stopped = set(execution.not_run)
    cells: list[CellComparison] = []
    first_failed: int | None = None
    for cell in original.code_cells:
        fresh_cell = fresh.cells[cell.index] if cell.index < len(fresh.cells) else None
        if not cell.source.strip():
            continue
        orig_items = comparable(cell.outputs, options)
        new_items = comparable(fresh_cell.outputs, options) if fresh_cell is not None else []
        error = errors.get(cell.index)
        if cell.index in stopped or fresh_cell is None:
            status, detail = "failed", "not run (the run stopped earlier)"
        elif error is not None and not any(
            i.kind == "error" and i.text == normalise_text(f"{error.ename}: {error.evalue}") for i in orig_items
        ):
            status, detail = "failed", f"{error.ename}: {error.evalue}"[:500]
        elif outputs_equal(orig_items, new_items, options):
            status, detail = "same", ""
        elif not orig_items:
            status, detail = "new", ""
        else:
            status, detail = "changed", diff_text(orig_items, new_items)
        if status == "failed" and first_failed is None:
            first_failed = cell.index
        cells.append(CellComparison(cell.index, cell.id, status, detail))
    if first_failed is not None:
        status = "stale"
        reason = _reason_at(first_failed, original, execution)
    elif execution.kernel_died or execution.notebook_timeout:
        status, reason = "stale", classify(execution) or "kernel died"
    elif any(c.status == "changed" for c in cells):
        status, reason = "changed", ""
    else:
        status, reason = "fresh", ""
    return RenderResult(path=original.path, sha256=original.sha256, status=status, reason=reason, cells=cells)


def _reason_at(index: int, original: Notebook, execution: Execution) -> str:
    error = next((e for e in execution.errors if e.index == index), None)
    if error is None:
        return classify(execution) or ("timeout" if execution.notebook_timeout else "kernel died")
    if error.ename == "DeadKernelError":
        later = Execution(notebook=None, errors=[], kernel_died=True, exit_code=execution.exit_code,
                          stderr=execution.stderr)
        return classify(later)
    if error.ename == "SyntaxError" and (_python2(original) or "Missing parentheses in call to" in error.evalue):
        return "python 2 syntax"
    return classify_error(error.ename, error.evalue, error.library)


def _python2(nb: Notebook) -> bool:
    return nb.kernel_name == "python2" or nb.language_version.startswith("2.")


def stale_result(nb_path: str, sha256: str, reason: str, notes: list[str] | None = None) -> RenderResult:
    """A notebook that could not be run at all (sandbox unavailable, unreadable, another language)."""
    return RenderResult(path=nb_path, sha256=sha256, status="stale", reason=reason, notes=list(notes or []))
