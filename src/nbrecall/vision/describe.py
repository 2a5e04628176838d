"""The figure describer interface, and what every describer and the chunker share about images.

A describer turns one raster image into text a search can match: what Tesseract reads in it (`ocr`), or what a
vision model says it shows (`openai`). It is called once per distinct image (the cache is keyed by its `id`), never
raises for one bad image (a `Description` with an error instead), and says up front when it cannot run at all
(`check` raises `DescriberUnavailable`, said once, and the index run goes on without descriptions).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import Protocol

from nbrecall.vision.store import Description

# Images a describer is given: raster formats Pillow reads. SVG figures already get their caption from their own
# text labels (`outputs._svg_labels`); PDFs are not drawn here.
RASTER_MIMES = frozenset(["image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"])
MIN_SIDE_PX = 16  # smaller images (icons, spacer GIFs) hold no text worth reading
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # larger images are not decoded (a pasted scan of that size is rare)


class DescriberUnavailable(RuntimeError):
    """The describer cannot run on this machine (Tesseract not installed, no URL or model configured)."""


@dataclass
class FigureImage:
    """One image to describe: its bytes and the caption nbrecall already has for it (sent as context)."""

    sha: str
    mime: str
    data: bytes
    caption: str | None = None


class Describer(Protocol):
    id: str  # cache key: kind, engine or model, and what changes the output (languages, endpoint)
    label: str  # how a chunk names it: "ocr", "vision model llava"

    def check(self) -> None:
        """Raise `DescriberUnavailable` with what to do when this describer cannot run."""

    def describe(self, image: FigureImage) -> Description:
        """The description of one image, or a failed `Description` (never raises for one image)."""


MACHINE_MARK = "machine-made"
_LINE_STARTS = ("text in the figure (", "figure description (")  # how `description_line` begins


def description_line(label: str, text: str) -> str:
    """How a description appears in a chunk: marked as machine-made, with what made it."""
    if label == "ocr":
        return f"text in the figure ({MACHINE_MARK}, read by OCR): {text}"
    return f"figure description ({MACHINE_MARK}, {label}): {text}"


def split_machine_text(text: str) -> tuple[str, str]:
    """`text` as (the notebook's own lines, the machine-made description lines): how search weighs them apart."""
    own: list[str] = []
    machine: list[str] = []
    for line in text.split("\n"):
        head = line.partition(": ")[0]
        (machine if f"({MACHINE_MARK}, " in head and head.startswith(_LINE_STARTS) else own).append(line)
    return "\n".join(own), "\n".join(machine)


def add_description(text: str, line: str) -> str:
    """`text` with `line` after its `figure: caption` line (or at the end when there is none)."""
    at = text.find("\n\nfigure: ")
    if at < 0:
        return f"{text}\n{line}"
    end = text.find("\n", at + 2)
    return f"{text}\n{line}" if end < 0 else f"{text[:end]}\n{line}{text[end:]}"


def image_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describable(mime: str, data: bytes) -> bool:
    """A raster image worth describing (decoding it is left to the describer)."""
    return mime in RASTER_MIMES and 0 < len(data) <= MAX_IMAGE_BYTES


def open_image(data: bytes):
    """The image as RGB on white (a transparent PNG's text is dark on nothing), first frame only; None when
    it is too small to hold text. Raises for bytes Pillow cannot read."""
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = 64_000_000  # a decompression bomb fails here, not in memory
    with Image.open(io.BytesIO(data)) as img:
        img.seek(0)
        if img.width < MIN_SIDE_PX or img.height < MIN_SIDE_PX:
            return None
        rgba = img.convert("RGBA")
    canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    canvas.alpha_composite(rgba)
    return canvas.convert("RGB")
