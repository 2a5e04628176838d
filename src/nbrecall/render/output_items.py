"""A cell's outputs as comparable items and the verdict on a pair (architecture §11): streams merged by name,
errors by `ename: evalue`, rich outputs by their semantic representation before the image drawn from it, figures
by the data they plot or perceptually; text by `text_compare`. `compare` applies this cell by cell.
"""

from __future__ import annotations

import base64
import difflib
import io
import re
from dataclasses import dataclass, field
from typing import Any, cast

from nbrecall.notebook.model import Output
from nbrecall.notebook.outputs import html_to_text
from nbrecall.render.text_compare import (
    CompareOptions,
    format_equal,
    format_text,
    normalise_text,
    text_change,
    texts_equal,
)

_OBJECT_REPR_RE = re.compile(
    r"^\s*\[?\s*(?:<[^\n<>]*>|Text\([^\n]*?\))(?:\s*,\s*(?:<[^\n<>]*>|Text\([^\n]*?\)))*\s*\]?\s*$"
)
_PLACEHOLDER_REPR_RE = re.compile(r"^<[\w.]+ object(?: at 0xADDR)?>$|^<IPython\.core\.display\.\w+ object>$")
_IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "image/svg+xml")
_TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json")
_SEMANTIC_MIMES = ("text/latex", "text/markdown", "application/json")  # content an image may be drawn from
_WIDGET_MIMES = ("application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    import json

    return json.dumps(value, sort_keys=True)


@dataclass
class OutputItem:
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


def comparable(outputs: list[Output], options: CompareOptions | None = None) -> list[OutputItem]:
    """The outputs of a cell as comparable items: streams merged by name, stderr dropped unless asked."""
    options = options or CompareOptions()
    items: list[OutputItem] = []
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
                items.append(OutputItem(kind, out.text, raw={"text": out.text}))
        elif out.output_type == "error":
            items.append(OutputItem("error", normalise_text(f"{out.ename}: {out.evalue}")))
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
                items.append(OutputItem("data", reps.get("text/plain", ""), reps, raw))
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


def items_equal(a: OutputItem, b: OutputItem, options: CompareOptions) -> bool:
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


def outputs_equal(original: list[OutputItem], fresh: list[OutputItem], options: CompareOptions) -> bool:
    return len(original) == len(fresh) and all(
        items_equal(a, b, options) for a, b in zip(original, fresh, strict=True)
    )


# ---------------------------------------------------------------------------------------------------------------
# Classifying a difference: format only, or values / text / figure / error


def _has_image(item: OutputItem) -> bool:
    return any(m in item.reps for m in _IMAGE_MIMES)


def _semantic(item: OutputItem) -> dict[str, str]:
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


def _image_of(item: OutputItem) -> tuple[str, str] | None:
    for mime in _IMAGE_MIMES:
        if mime in item.reps:
            return mime, item.raw.get(mime, item.reps[mime])
    return None


def pair_verdict(a: OutputItem, b: OutputItem, options: CompareOptions) -> tuple[str, str]:
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


def _item_key(item: OutputItem) -> str:
    return item.kind + (":image" if item.kind == "data" and _has_image(item) else "")


_PRIORITY = ("error", "values", "figure", "text")


def cell_verdict(original: list[OutputItem], fresh: list[OutputItem], options: CompareOptions) -> tuple[str, list[str]]:
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


def diff_text(original: list[OutputItem], fresh: list[OutputItem], max_lines: int = 24) -> str:
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
