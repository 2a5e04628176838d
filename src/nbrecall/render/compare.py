"""Compare a notebook's stored outputs with a fresh run's, cell by cell, by content before rendering.

Per code cell: `same`, `changed` (outputs differ), `failed` (the fresh run raised where the original did not, hit
a limit, or never reached the cell) or `new` (the original had no output, the fresh run has some). Every cell
that is not exactly the same also gets a class (`change`), so that drift means something:

- `values`: the same text with other numbers (beyond the tolerance);  `text`: other text;  `figure`: a figure
  that looks different;  `error`: another exception (or one that appeared or went away);
- `format`: the same content in another rendering (a LaTeX result drawn as another PNG, sympy's pretty printer
  wrapping at another width, `np.float64(0.0)` for `0.0`, a plot at another size or DPI): status `same`;
- `random`: a values/figure/text change in a cell whose result depends on random numbers drawn without a seed
  (in it or in a cell it uses): status `changed`, but it does not make the notebook `changed`.

Per notebook: `fresh` (no cell changed or failed), `changed` (ran to the end, some cells differ) or `stale` with a
reason: `missing file`, `import error: <module>`, `timeout`, `memory`, `kernel died`, `no network`,
`python 2 syntax`, `error: <ExceptionName>`, `sandbox unavailable`, `kernel not available: <language>`, ...

Normalisation before comparing (both sides): terminal escapes removed, `\\r` redraws collapsed, `0x…` addresses,
uuids, date-times, timing lines (`%time`, `%timeit`, progress-bar clocks) and cell file names
(`<ipython-input-3-…>`) replaced by placeholders, trailing spaces dropped, runs of spaces collapsed; execution
counts, metadata and tracebacks ignored (errors compare by `ename: evalue`); stderr streams are ignored unless
asked (warnings are not results); numbers compare with a relative tolerance (1e-6 by default).

A rich output compares by content: when both sides carry a semantic representation (`text/latex`,
`text/markdown`, `application/json`, an HTML table, `text/plain` that is not an object repr) that decides, never
the image drawn from it; matplotlib SVG figures compare by the data they plot (`svgplot.py`), other figures
perceptually (`images.py`: scale-normalised SSIM). Object
reprs (`<… at 0x…>`, `<Axes: …>`, matplotlib `Text(…)`) compare equal to each other: they name objects, not
results. Text that differs only in rendering is `format`: pretty-printed pictures are unwrapped (sympy's `↪`
screens), numpy 2 scalar reprs unwrapped, `[…]`/`(…)` and line breaks ignored, and, unless the notebook sets a
display precision itself, a number printed with fewer digits matches one it rounds (`0.333333` ~ `0.33333333`).
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import io
import re
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from nbrecall.notebook.model import Notebook, Output
from nbrecall.notebook.outputs import html_to_text
from nbrecall.render.outcome import Execution, classify, classify_error
from nbrecall.render.source_signals import sets_display_precision, unseeded_random_cells
from nbrecall.render.text_compare import (
    CompareOptions,
    format_equal,
    format_text,
    normalise_text,
    text_change,
    texts_equal,
)

CELL_STATUSES = ("same", "changed", "failed", "new")
NOTEBOOK_STATUSES = ("fresh", "changed", "stale")
CHANGE_CLASSES = ("values", "text", "figure", "error", "random", "format")
RESULT_CLASSES = ("values", "text", "figure", "error")  # what makes a notebook `changed` and lights a badge

_OBJECT_REPR_RE = re.compile(
    r"^\s*\[?\s*(?:<[^\n<>]*>|Text\([^\n]*?\))(?:\s*,\s*(?:<[^\n<>]*>|Text\([^\n]*?\)))*\s*\]?\s*$"
)
_PLACEHOLDER_REPR_RE = re.compile(r"^<[\w.]+ object(?: at 0xADDR)?>$|^<IPython\.core\.display\.\w+ object>$")
_IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/svg+xml")
_TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json")
_SEMANTIC_MIMES = ("text/latex", "text/markdown", "application/json")  # content an image may be drawn from
_WIDGET_MIMES = ("application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")


@dataclass
class CellComparison:
    """One code cell: its status and a short detail (the fresh error, or a diff of normalised text)."""

    index: int
    id: str
    status: str
    detail: str = ""
    change: str = ""  # one of CHANGE_CLASSES when not exactly the same; "" for same, failed, new


@dataclass
class RenderResult:
    """The outcome of re-rendering one notebook; `to_dict` / `from_dict` give the stored JSON form."""

    path: str
    sha256: str
    status: str
    reason: str = ""
    cells: list[CellComparison] = field(default_factory=list)
    paths: dict[str, Any] = field(default_factory=dict)  # PathScan.to_dict()
    execution: dict[str, Any] = field(default_factory=dict)  # outcome.describe()
    notes: list[str] = field(default_factory=list)
    rendered_at: str = ""
    environment: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(CELL_STATUSES, 0)
        for c in self.cells:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    def changes(self) -> dict[str, int]:
        """Cells by change class (`format` cells are `same`, `random` ones `changed`)."""
        out = dict.fromkeys(CHANGE_CLASSES, 0)
        for c in self.cells:
            if c.change:
                out[c.change] = out.get(c.change, 0) + 1
        return out

    def result_changed(self) -> int:
        """How many cells changed in their result (values, text, figure, error)."""
        return sum(1 for c in self.cells if c.status == "changed" and c.change in RESULT_CLASSES + ("",))

    def cell(self, cell_id: str) -> CellComparison | None:
        return next((c for c in self.cells if c.id == cell_id), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["counts"] = self.counts()
        data["changes"] = self.changes()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RenderResult:
        data = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        data["cells"] = [CellComparison(**c) for c in data.get("cells", [])]
        return cls(**data)


# ---------------------------------------------------------------------------------------------------------------
# Comparable items (text compared by `text_compare`)


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
    raw: dict[str, str] = field(default_factory=dict)  # text/plain, text/html, SVG and stream text as stored

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
                items[-1].raw["text"] += out.text
            else:
                items.append(_Item(kind, out.text, raw={"text": out.text}))
        elif out.output_type == "error":
            items.append(_Item("error", normalise_text(f"{out.ename}: {out.evalue}")))
        elif out.output_type in ("execute_result", "display_data"):
            reps: dict[str, str] = {}
            raw: dict[str, str] = {}
            for mime, value in out.data.items():
                if mime in _WIDGET_MIMES:
                    continue
                if mime in _IMAGE_MIMES and mime != "image/svg+xml":
                    reps[mime] = "".join(_text(value).split())
                elif mime == "text/html":
                    raw[mime] = _text(value)
                    reps[mime] = normalise_text(html_to_text(raw[mime])[0])
                else:
                    reps[mime] = normalise_text(_text(value))
                    if mime in ("text/plain", "image/svg+xml"):
                        raw[mime] = _text(value)
            if reps:
                items.append(_Item("data", reps.get("text/plain", ""), reps, raw))
    for item in items:
        if item.kind.startswith("stream:"):
            item.text = normalise_text(item.text)
    return [i for i in items if not (i.kind.startswith("stream:") and not i.text)]


def _object_repr(text: str) -> bool:
    return bool(text) and bool(_OBJECT_REPR_RE.match(text))


def _images_equal(a: str, b: str, tolerance: float) -> bool:
    """Exactly the same picture: the same bytes, or the same pixels (within `tolerance` of full scale per pixel)
    in another encoding. Anything else goes to the perceptual comparison (`format` or `figure`)."""
    if a == b:
        return True
    try:
        from PIL import Image, ImageChops

        img_a = Image.open(io.BytesIO(base64.b64decode(a))).convert("RGBA")
        img_b = Image.open(io.BytesIO(base64.b64decode(b))).convert("RGBA")
        if img_a.size != img_b.size:
            return False
        # one (low, high) pair per band of the RGBA image (PIL's type also covers the one-band form)
        extrema = cast("tuple[tuple[float, float], ...]", ImageChops.difference(img_a, img_b).getextrema())
    except Exception:  # a broken image is simply not equal
        return False
    return max(high for _, high in extrema) <= tolerance * 255


def items_equal(a: _Item, b: _Item, options: CompareOptions) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind != "data":
        return texts_equal(a.text, b.text, options.rel_tol, options.abs_tol)
    common = [m for m in a.reps if m in b.reps]
    images = [m for m in _IMAGE_MIMES if m in common]
    plain_a, plain_b = a.reps.get("text/plain", ""), b.reps.get("text/plain", "")
    semantic = [m for m in _SEMANTIC_MIMES if m in common]
    if not semantic and images and "text/plain" in common and not (_object_repr(plain_a) or _object_repr(plain_b)):
        semantic = ["text/plain"]
    if semantic:  # content before rendering: an image drawn from it never makes two contents equal
        if not texts_equal(a.reps[semantic[0]], b.reps[semantic[0]], options.rel_tol, options.abs_tol):
            return False
        # the same content: exactly the same only if the pictures are too (else `format`, see pair_verdict)
        if not images:
            return _has_image(a) == _has_image(b)  # a picture drawn on one side only is another rendering
        mime = images[0]
        if mime == "image/svg+xml":
            return a.reps[mime] == b.reps[mime]
        return _images_equal(a.reps[mime], b.reps[mime], options.image_tolerance)
    if images:
        mime = images[0]
        if mime == "image/svg+xml":
            return a.reps[mime] == b.reps[mime]
        return _images_equal(a.reps[mime], b.reps[mime], options.image_tolerance)
    if any(m in a.reps for m in _IMAGE_MIMES) != any(m in b.reps for m in _IMAGE_MIMES):
        return False
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


# ---------------------------------------------------------------------------------------------------------------
# Classifying a difference: format only, or values / text / figure / error


def _has_image(item: _Item) -> bool:
    return any(m in item.reps for m in _IMAGE_MIMES)


def _semantic(item: _Item) -> dict[str, str]:
    """The representations that carry an output's content (not the pictures drawn from it), best first."""
    out: dict[str, str] = {}
    for mime in _SEMANTIC_MIMES:
        if mime in item.reps:
            out[mime] = item.reps[mime]
    html = item.raw.get("text/html", "")
    if html and "<table" in html.lower():
        out["table"] = item.reps["text/html"]
    plain = item.raw.get("text/plain")
    if plain is not None and not _object_repr(item.reps.get("text/plain", "")):
        out["text/plain"] = plain
    if html and "table" not in out:
        out["text/html"] = item.reps["text/html"]
    return out


_SHOWN = {"text/latex": "LaTeX", "text/markdown": "markdown", "application/json": "JSON", "table": "table",
          "text/plain": "text", "text/html": "HTML text"}


def _image_of(item: _Item) -> tuple[str, str] | None:
    for mime in _IMAGE_MIMES:
        if mime in item.reps:
            return mime, item.raw.get(mime, item.reps[mime])
    return None


def pair_verdict(a: _Item, b: _Item, options: CompareOptions) -> tuple[str, str]:
    """(`same` | `format` | `values` | `text` | `figure` | `error`, a note) for two matched outputs."""
    if items_equal(a, b, options):
        return "same", ""
    if a.kind != b.kind:
        if "error" in (a.kind, b.kind):
            return "error", "an error appeared or went away"
        if _has_image(a) or _has_image(b):
            return "figure", "a figure appeared or went away"
        return "text", "output of another kind"
    if a.kind == "error":
        return ("format", "the same error, worded differently") if format_equal(
            format_text(a.text), format_text(b.text), options) else ("error", "another error")
    if a.kind != "data":
        fa, fb = format_text(a.raw.get("text", a.text)), format_text(b.raw.get("text", b.text))
        if format_equal(fa, fb, options):
            return "format", "the same text, rendered differently"
        return text_change(fa, fb), ""
    sem_a, sem_b = _semantic(a), _semantic(b)
    for key in sem_a:
        if key in sem_b:
            fa, fb = format_text(sem_a[key]), format_text(sem_b[key])
            shown = _SHOWN.get(key, key)
            if format_equal(fa, fb, options):
                drawn = " (its image re-drawn)" if _has_image(a) or _has_image(b) else ""
                return "format", f"the same {shown}{drawn}, rendered differently"
            return text_change(fa, fb), f"the {shown} differs"
    image_a, image_b = _image_of(a), _image_of(b)
    if image_a and image_b and image_a[0] == image_b[0] == "image/svg+xml":
        from nbrecall.render.svgplot import compare_plots

        plots = compare_plots(image_a[1], image_b[1])
        if plots is not None:
            return ("format" if plots[0] else "figure"), plots[1]
    if image_a and image_b:
        from nbrecall.render.images import compare_images

        verdict = compare_images(*image_a, *image_b, threshold=options.image_threshold)
        return ("format" if verdict.same else "figure"), verdict.note
    if image_a or image_b:
        return "figure", "a figure appeared or went away"
    plain_a, plain_b = a.reps.get("text/plain", ""), b.reps.get("text/plain", "")
    if _object_repr(plain_a) and _object_repr(plain_b):
        return "format", "object reprs differ"
    return "text", "outputs of other types"


def _item_key(item: _Item) -> str:
    return item.kind + (":image" if item.kind == "data" and _has_image(item) else "")


_PRIORITY = ("error", "values", "figure", "text")


def cell_verdict(original: list[_Item], fresh: list[_Item], options: CompareOptions) -> tuple[str, list[str]]:
    """The class of a cell's difference: `same`, `format`, or the weightiest result class of its outputs
    (error > values > figure > text); outputs are matched in order by kind, extra ones count as their kind."""
    verdicts: list[str] = []
    notes: list[str] = []
    matcher = difflib.SequenceMatcher(None, [_item_key(i) for i in original], [_item_key(i) for i in fresh],
                                      autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        pairs = list(zip(original[i1:i2], fresh[j1:j2], strict=False)) if tag in ("equal", "replace") else []
        for a, b in pairs:
            verdict, note = pair_verdict(a, b, options)
            verdicts.append(verdict)
            if note:
                notes.append(note)
        for extra in original[i1 + len(pairs):i2] + fresh[j1 + len(pairs):j2]:
            if extra.kind == "data" and not _has_image(extra) and _object_repr(extra.reps.get("text/plain", "")):
                verdicts.append("format")  # `Text(0.5, 1.0, 'title')` names an object, it is no result
                notes.append("an object repr appeared or went away")
                continue
            verdicts.append("error" if extra.kind == "error" else "figure" if _has_image(extra) else "text")
            notes.append("an output appeared or went away")
    if all(v == "same" for v in verdicts):
        return "same", []
    if all(v in ("same", "format") for v in verdicts):
        return "format", notes
    return next(p for p in _PRIORITY if p in verdicts), notes


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
    A fresh error where the original had none fails the cell (the notebook is stale); another error where the
    original had one too is a change of class `error`.
    """
    options = options or CompareOptions()
    if options.precision_tolerant and sets_display_precision(original):
        options = dataclasses.replace(options, precision_tolerant=False)
    random_cells: set[int] | None = None
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
        change = ""
        if cell.index in stopped or fresh_cell is None:
            status, detail = "failed", "not run (the run stopped earlier)"
        elif error is not None and _fails(error, orig_items):
            status, detail = "failed", f"{error.ename}: {error.evalue}"[:500]
        elif outputs_equal(orig_items, new_items, options):
            status, detail = "same", ""
        elif not orig_items:
            status, detail = "new", ""
        else:
            change, notes = cell_verdict(orig_items, new_items, options)
            if change == "same":
                status, detail, change = "same", "", ""
            elif change == "format":
                status, detail = "same", _detail(notes, orig_items, new_items, 8)
            else:
                if change in ("values", "figure", "text"):
                    if random_cells is None:
                        random_cells = unseeded_random_cells(original)
                    if cell.index in random_cells:
                        change = "random"
                        notes = ["draws random numbers without a seed: its result cannot reproduce", *notes]
                status, detail = "changed", _detail(notes, orig_items, new_items)
        if status == "failed" and first_failed is None:
            first_failed = cell.index
        cells.append(CellComparison(cell.index, cell.id, status, detail, change))
    if first_failed is not None:
        status = "stale"
        reason = _reason_at(first_failed, original, execution)
    elif execution.kernel_died or execution.notebook_timeout:
        status, reason = "stale", classify(execution) or "kernel died"
    elif any(c.status == "changed" and c.change != "random" for c in cells):
        status, reason = "changed", ""
    else:
        status, reason = "fresh", ""
    return RenderResult(path=original.path, sha256=original.sha256, status=status, reason=reason, cells=cells)


_ENVIRONMENT_REASONS = ("import error", "missing file", "memory", "timeout", "no network")


def _fails(error: Any, original: list[_Item]) -> bool:
    """A fresh error fails its cell unless the original had an error there too; then only when it is a
    problem of the render environment (a missing module or file, a limit) and not the original's own error."""
    before = [i.text for i in original if i.kind == "error"]
    if not before:
        return True
    text = normalise_text(f"{error.ename}: {error.evalue}")
    return text not in before and classify_error(error.ename, error.evalue).startswith(_ENVIRONMENT_REASONS)


def _detail(notes: list[str], original: list[_Item], fresh: list[_Item], max_lines: int = 24) -> str:
    head = "; ".join(dict.fromkeys(notes))
    diff = diff_text(original, fresh, max_lines)
    return f"{head}\n{diff}" if head and diff else head or diff


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
