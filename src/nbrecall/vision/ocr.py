"""`[vision] kind = "ocr"`: the text drawn in a figure, read with Tesseract, offline.

A plot's words are few and exact: its title, axis labels, legend entries, annotations. They come from variables and
DataFrame columns (`df.plot()`, `ax.set_title(name)`, a label built in a loop) that the code's own text does not
show, so reading them off the picture is what makes such a figure findable. Tesseract runs as its own process
(`pytesseract`), so a hostile image cannot take the indexer down and a slow one is killed at the time-out.

Reading: the image on white with coloured strokes removed (`text_layer`), small ones scaled up, page
segmentation for sparse text; a second pass over the left strip turned upright reads a y-axis label. Cleaning
(`clean_words`): words Tesseract is unsure of, single characters and letter-less fragments are dropped; numbers
(tick labels) are kept only as their range ("values 0 to 250"): the axis range says something, each tick nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass

from nbrecall.config import VisionSettings
from nbrecall.vision.describe import DescriberUnavailable, FigureImage, open_image
from nbrecall.vision.store import Description

MIN_CONFIDENCE = 55  # Tesseract's word confidence (0-100) under which a word is noise
SHORT_WORD_CONFIDENCE = 85  # the same for two-character words
TARGET_HEIGHT = 400  # px: smaller images are scaled up to this (at most 3x); larger plots are read as drawn
# (scaling a 100-dpi plot up merges tick marks into its tick labels: "80" and its tick read "804")
MAX_SIDE = 2600  # px: larger images are scaled down (time grows with the area)
LEFT_STRIP = 0.18  # share of the width read again turned upright (y-axis labels)
MAX_CHARS = 600
CHROMA_LIMIT = 48  # max - min of R, G, B above which a pixel is colour, not text (see `text_layer`)

_NUMBER = re.compile(r"^[-−–+]?(?:\d+(?:[.,]\d+)?|[.,]\d+)(?:[eE][-−+]?\d+)?%?$")
_STRIP = ".,;:!?'\"`()[]{}<>|_~*=^"
_UNIT = re.compile(r"^[\[(][^\W\d_%°]{1,4}(?:[/·*^-]?[^\W_]{0,4}){0,3}[\])]$|^[\[(][%°][\])]$")
_LETTERS = re.compile(r"[^\W\d_]", re.UNICODE)


@dataclass
class OcrWord:
    text: str
    confidence: float
    line: tuple[int, ...]  # (pass, block, paragraph, line): words of one line read together
    left: int = 0


def _number(text: str) -> float | None:
    token = text.replace("−", "-").replace("–", "-").rstrip("%").replace(",", ".")
    if not _NUMBER.match(text):
        return None
    try:
        return float(token)
    except ValueError:
        return None


def _format_number(value: float) -> str:
    return f"{value:g}"


def clean_words(words: list[OcrWord]) -> str:
    """The lines of confident words, joined with "; ", then the range of the numbers read ("values 0 to 250").

    Kept as written: units in brackets (`[m]`, `(kN/m)`). Dropped: words under `MIN_CONFIDENCE`, single
    characters (tick marks, legend handles, stray strokes read as `l`, `|`, `-`), fragments without two letters
    (unless a number, or a number with its unit: `4m`), lines seen before."""
    lines: dict[tuple[int, ...], list[OcrWord]] = {}
    numbers: list[float] = []
    for word in words:
        raw = word.text.strip()
        text = raw.strip(_STRIP)
        if not text or word.confidence < MIN_CONFIDENCE:
            continue
        if _UNIT.match(raw):  # `[m]`, `(kN)`, `[%]`: a unit in brackets, kept as written
            lines.setdefault(word.line, []).append(OcrWord(raw, word.confidence, word.line, word.left))
            continue
        value = _number(text)
        if value is not None:
            numbers.append(value)
            continue
        letters = len(_LETTERS.findall(text))
        mixed = letters >= 1 and re.search(r"\d", text) is not None  # `4m`, `M20`, `CO2`: a value with its unit
        if len(text) < 2 or (letters < 2 and not mixed):
            continue
        if len(text) == 2 and not mixed and word.confidence < SHORT_WORD_CONFIDENCE:
            continue  # two letters read off a stroke ("of", "ll") are common; a real one is read surely
        if len(_LETTERS.findall(text)) < len(text) / 2 and not re.search(r"\d", text):
            continue  # `~~a-`: more punctuation than letters
        lines.setdefault(word.line, []).append(OcrWord(text, word.confidence, word.line, word.left))
    out: list[str] = []
    seen: set[str] = set()
    for key in sorted(lines):
        text = " ".join(w.text for w in sorted(lines[key], key=lambda w: w.left))
        if text.lower() not in seen:
            seen.add(text.lower())
            out.append(text)
    result = "; ".join(out)
    if len(numbers) >= 2:
        low, high = min(numbers), max(numbers)
        result = f"{result}; values {_format_number(low)} to {_format_number(high)}" if result else \
            f"values {_format_number(low)} to {_format_number(high)}"
    return result[:MAX_CHARS].strip()


def text_layer(img):
    """The image in grey with coloured pixels made white: plot text is black or grey, while data lines, legend
    handles and colour maps are coloured, and Tesseract reads a label beside a coloured stroke as one garbled word
    ("— span 4 m" → "spansm"). Black strokes stay (they are rarer, and thin)."""
    import numpy as np
    from PIL import Image

    rgb = np.asarray(img, dtype=np.int16)
    chroma = rgb.max(axis=2) - rgb.min(axis=2)
    gray = np.asarray(img.convert("L")).copy()
    gray[chroma > CHROMA_LIMIT] = 255
    return Image.fromarray(gray)


class OcrDescriber:
    """Tesseract through pytesseract; `id` names the languages (the cache survives a Tesseract upgrade)."""

    label = "ocr"

    def __init__(self, settings: VisionSettings) -> None:
        self.settings = settings
        self.languages = settings.languages or "eng"
        self._version: str | None = None
        # One thread per Tesseract process: `concurrency` processes run side by side, and OpenMP threads on top of
        # them only contend for the same cores (set for this process's children, unless the user set it).
        os.environ.setdefault("OMP_THREAD_LIMIT", "1")
        self.id = f"ocr:tesseract:{self.languages}"

    def check(self) -> None:
        try:
            import pytesseract
        except ImportError as exc:  # pragma: no cover - a dependency of nbrecall
            raise DescriberUnavailable("figure OCR needs the pytesseract package (pip install pytesseract)") from exc
        if shutil.which(pytesseract.pytesseract.tesseract_cmd) is None:
            raise DescriberUnavailable(
                "figure OCR needs Tesseract, which is not installed (Debian/Ubuntu: apt-get install tesseract-ocr; "
                "macOS: brew install tesseract); figures stay waiting and are described by a later run"
            )
        try:
            version = str(pytesseract.get_tesseract_version())
            installed = set(pytesseract.get_languages(config=""))
        except Exception as exc:
            raise DescriberUnavailable(f"Tesseract does not run: {exc}") from exc
        missing = [lang for lang in self.languages.split("+") if lang not in installed]
        if missing:
            raise DescriberUnavailable(
                f"Tesseract has no language pack for {', '.join(missing)} (installed: {', '.join(sorted(installed))};"
                f" Debian: apt-get install tesseract-ocr-{missing[0]})"
            )
        self._version = version.split()[0] if version else ""  # not in `id`: an upgrade keeps the cache

    def _words(self, img, pass_no: int) -> list[OcrWord]:
        import pytesseract

        data = pytesseract.image_to_data(
            img, lang=self.languages, config="--psm 11", output_type=pytesseract.Output.DICT,
            timeout=max(1.0, self.settings.timeout),
        )
        words = []
        for i, text in enumerate(data["text"]):
            if not text or not text.strip():
                continue
            try:
                confidence = float(data["conf"][i])
            except (TypeError, ValueError):
                confidence = -1.0
            line = (pass_no, int(data["block_num"][i]), int(data["par_num"][i]), int(data["line_num"][i]))
            words.append(OcrWord(text, confidence, line, int(data["left"][i])))
        return words

    def describe(self, image: FigureImage) -> Description:
        from PIL import Image

        started = time.perf_counter()
        try:
            img = open_image(image.data)
            if img is None:
                return Description("", seconds=time.perf_counter() - started)
            longest = max(img.width, img.height)
            scale = min(3.0, TARGET_HEIGHT / img.height) if img.height < TARGET_HEIGHT else 1.0
            scale = min(scale, MAX_SIDE / longest) if longest * scale > MAX_SIDE else scale
            if abs(scale - 1.0) > 0.05:
                img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))),
                                 Image.Resampling.LANCZOS)
            gray = text_layer(img)
            words = self._words(gray, 0)
            strip = gray.crop((0, 0, max(1, int(gray.width * LEFT_STRIP)), gray.height))
            words += self._words(strip.rotate(-90, expand=True), 1)
            return Description(clean_words(words), seconds=time.perf_counter() - started)
        except RuntimeError as exc:  # pytesseract's time-out
            return Description(None, f"OCR timed out after {self.settings.timeout:g} s ({exc})",
                               seconds=time.perf_counter() - started)
        except Exception as exc:  # an image Pillow cannot read, Tesseract failing on it: this figure only
            return Description(None, f"OCR failed: {type(exc).__name__}: {exc}"[:300],
                               seconds=time.perf_counter() - started)
