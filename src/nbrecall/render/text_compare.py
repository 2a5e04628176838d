"""Output text compared with tolerance: the comparable form of a text (volatile parts replaced by placeholders),
numbers within a relative tolerance, and the rendering-free form in which a change is `format` only (pictures
unwrapped, numpy 2 scalar reprs, display precision). `compare` applies these per output; see its docstring."""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

from nbrecall.notebook.outputs import collapse_carriage_returns, strip_ansi

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
_SCALAR_REPR_RE = re.compile(
    r"\b(?:np|numpy)\.(?:float|int|uint|complex|bool|str|bytes|longdouble|clongdouble)\w*\(([^()]*)\)"
)


@dataclass
class CompareOptions:
    rel_tol: float = 1e-6
    abs_tol: float = 1e-12
    compare_stderr: bool = False
    image_tolerance: float = 0.01  # mean grey-level difference (0–1) of 64×64 thumbnails still called equal
    image_threshold: float = 0.38  # perceptual: changed area (images.py) above which a figure differs
    precision_tolerant: bool = True  # a number shown with fewer digits matches one it rounds (format only)


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


def _number_pairs(a: str, b: str) -> list[tuple[str, str]] | None:
    """The numbers of `a` and `b` side by side when the text around them is the same (spacing ignored), else None."""
    split_a, split_b = _NUMBER_RE.split(a), _NUMBER_RE.split(b)
    if len(split_a) != len(split_b):
        return None
    if any(re.sub(r"\s+", "", x) != re.sub(r"\s+", "", y) for x, y in zip(split_a, split_b, strict=True)):
        return None
    return list(zip(_NUMBER_RE.findall(a), _NUMBER_RE.findall(b), strict=True))


def texts_equal(a: str, b: str, rel_tol: float = 1e-6, abs_tol: float = 1e-12) -> bool:
    """Equal after normalisation, numbers compared with a relative tolerance and spacing ignored."""
    if a == b:
        return True
    pairs = _number_pairs(a, b)
    if pairs is None:
        return False
    for x, y in pairs:
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


_MIN_TERMINAL = 60  # columns: a picture cut without `↪` marks was cut at a terminal width at least this wide


def unwrap_pretty(text: str) -> str:
    """A pretty-printed picture cut into screens (sympy's pretty printer at a terminal width: blocks of equal
    height separated by one blank line, `↪` at the cut in sympy >= 1.12) put back side by side; other text as is.

    Without marks, the screens before the last must be one terminal wide (every line padded to the same width
    of at least 60 columns), which is what tells them from paragraphs that happen to have as many lines."""
    if "\n\n" not in text:
        return text
    screens = [s.split("\n") for s in text.rstrip("\n").split("\n\n")]
    height = len(screens[0])
    if len(screens) < 2 or any(len(s) != height for s in screens):
        return text
    marked = "↪" in text
    if not marked and any(len({len(line) for line in screen}) != 1 or len(screen[0]) < _MIN_TERMINAL
                          for screen in screens[:-1]):
        return text
    rows = []
    for k in range(height):
        parts = []
        for screen in screens:
            line = screen[k]
            if marked:
                line = line[2:] if line.startswith("↪ ") else line
                line = line[:-2] if line.endswith(" ↪") else line
            parts.append(line)
        rows.append("".join(parts))
    return "\n".join(rows)


def format_text(raw: str) -> str:
    """The rendering-free form of an output text: pictures unwrapped, volatile parts normalised, numpy 2 scalar
    reprs unwrapped (`np.float64(0.5)` → `0.5`), brackets of one kind, all white space one space."""
    text = normalise_text(unwrap_pretty(raw.replace("\r\n", "\n")))
    text = _SCALAR_REPR_RE.sub(r"\1", text)
    text = text.translate(str.maketrans("[]", "()"))
    return " ".join(text.split())


def _decimals(token: str) -> int | None:
    mantissa = re.split(r"[eE]", token)[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else None


def _significant(token: str) -> int:
    digits = re.sub(r"[^0-9]", "", re.split(r"[eE]", token)[0]).lstrip("0")
    return len(digits)


def numbers_match(x: str, y: str, options: CompareOptions) -> bool:
    """Equal within the tolerance; or, with `precision_tolerant`, the one shown with fewer decimals (at least 4
    significant digits) is the other rounded: another display precision, not another value."""
    try:
        fx, fy = float(x), float(y)
    except ValueError:
        return x == y
    if math.isnan(fx) and math.isnan(fy):
        return True
    if math.isclose(fx, fy, rel_tol=options.rel_tol, abs_tol=options.abs_tol):
        return True
    if not options.precision_tolerant or "e" in (x + y).lower():
        return False
    dx, dy = _decimals(x), _decimals(y)
    if dx is None or dy is None or dx == dy:
        return False
    short, digits = (x, dx) if dx < dy else (y, dy)
    if _significant(short) < 4:
        return False
    return abs(fx - fy) <= 0.5 * 10 ** (-digits) * (1 + 1e-9)


def format_equal(a: str, b: str, options: CompareOptions) -> bool:
    """Equal in content once both are in `format_text` form, numbers compared by `numbers_match`."""
    if a == b:
        return True
    pairs = _number_pairs(a, b)
    return pairs is not None and all(numbers_match(x, y, options) for x, y in pairs)


_TOKEN_RE = re.compile(_NUMBER_RE.pattern + r"|\w+|[^\w\s]")


def text_change(a: str, b: str) -> str:
    """`values` when what differs between two (normalised) texts is mostly numbers, else `text`."""
    tokens_a, tokens_b = _TOKEN_RE.findall(a), _TOKEN_RE.findall(b)
    numeric = 0
    other = 0
    matcher = difflib.SequenceMatcher(None, tokens_a, tokens_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for token in tokens_a[i1:i2] + tokens_b[j1:j2]:
            if _NUMBER_RE.fullmatch(token):
                numeric += 1
            else:
                other += 1
    return "values" if numeric and numeric >= other else "text"
