"""Do two figures look the same? A perceptual comparison that ignores size, resolution and anti-aliasing.

A re-rendered figure almost never has the bytes of the stored one: another matplotlib, another DPI or a tight
bounding box two pixels wider changes every pixel while the plot stays the same. So both images are decoded
(PNG/JPEG/GIF/WebP with Pillow, SVG rasterised with resvg), laid on white, turned grey, scaled to one common
size (`WIDTH` px wide, the mean aspect ratio), blurred a little (`BLUR` px: line widths and font hinting stop
mattering), aligned by the shift of at most `SHIFT` px that matches them best, and compared with SSIM
(scikit-image's `structural_similarity`). The SSIM map is then cut into a 12×12 grid; the score is the largest
share of a cell's pixels whose local SSIM is under 0.5: `changed_area`. A change spread thinly over the whole
image (anti-aliasing, another rasteriser) keeps every cell low; a curve that moved, a line added or a bar that
grew fills some cell. Images whose aspect ratios differ by more than `MAX_ASPECT` are different figures.

The settings and the threshold (`THRESHOLD`) were measured on pairs (bench/image_pairs.py, bench/README.md):
same-looking re-renders scored at most 0.23 (72/100/150 DPI, matplotlib 3.5 vs 3.11, sympy's adaptive sampling, an
axis range a little wider, 60 dense stems with another baseline), changed plots at least 0.43 (a 10-sample bump,
an added line, 5% more amplitude, another frequency, fresh random noise).
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from typing import Any

WIDTH = 224  # px: both images are compared at this width (or the smaller image's, if narrower)
BLUR = 1.25  # Gaussian sigma in px at that width
SHIFT = 2  # px: the largest offset tried when aligning the two
GRID = 12  # the SSIM map is judged in GRID × GRID cells
LOW_SSIM = 0.5  # a pixel whose local SSIM is under this is "strongly dissimilar"
THRESHOLD = 0.33  # changed_area above this: the figures differ
MAX_ASPECT = 0.15  # relative aspect-ratio difference beyond which two figures are different figures
MAX_PIXELS = 40_000_000  # a larger image is not decoded (a decompression bomb is not a figure)

RASTER_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp")
IMAGE_MIMES = (*RASTER_MIMES, "image/svg+xml")


@dataclass
class ImageVerdict:
    """The outcome of comparing two images: `same` look, the score, and why (for the diff the viewer shows)."""

    same: bool
    changed_area: float
    note: str


def decode(mime: str, value: str) -> Any | None:
    """A grey Pillow image (alpha laid on white) from an output's value (base64, or SVG markup); None if unreadable."""
    from PIL import Image

    try:
        if mime == "image/svg+xml":
            import resvg_py

            # 48 dpi: 1 pt = 2/3 px, still over WIDTH for a figure (matplotlib sizes its SVGs in pt, which resvg
            # refuses without a dpi); fewer pixels to draw
            data = resvg_py.svg_to_bytes(svg_string=value, background="#ffffff", dpi=48.0)
        else:
            data = base64.b64decode("".join(value.split()), validate=False)
        img = Image.open(io.BytesIO(bytes(data)))
        if img.width * img.height > MAX_PIXELS or img.width < 2 or img.height < 2:
            return None
        img = img.convert("RGBA")
    except (ImportError, OSError, ValueError, binascii.Error, Image.DecompressionBombError, SyntaxError):
        return None
    white = Image.new("RGBA", img.size, (255, 255, 255, 255))
    white.alpha_composite(img)
    return white.convert("L")


def compare_images(mime_a: str, value_a: str, mime_b: str, value_b: str, threshold: float = THRESHOLD) -> ImageVerdict:
    """Compare two image outputs perceptually (see the module docstring)."""
    a, b = decode(mime_a, value_a), decode(mime_b, value_b)
    if a is None or b is None:
        return ImageVerdict(False, 1.0, "an image could not be decoded")
    ratio_a, ratio_b = a.width / a.height, b.width / b.height
    if abs(ratio_a - ratio_b) / max(ratio_a, ratio_b) > MAX_ASPECT:
        return ImageVerdict(False, 1.0, f"other shape: {a.width}×{a.height} px vs {b.width}×{b.height} px")
    area = changed_area(a, b)
    size = "" if a.size == b.size else f" at another size ({a.width}×{a.height} vs {b.width}×{b.height} px)"
    if area <= threshold:
        return ImageVerdict(True, area, f"the figure looks the same{size} (changed area {area:.2f})")
    return ImageVerdict(False, area, f"the figure differs{size} (changed area {area:.2f} > {threshold})")


def changed_area(a: Any, b: Any) -> float:
    """The largest share of strongly dissimilar pixels in any grid cell, at the best alignment (0: identical)."""
    import numpy as np
    from PIL import Image
    from scipy.ndimage import gaussian_filter
    from skimage.metrics import structural_similarity

    width = max(8, min(WIDTH, a.width, b.width))
    height = max(8, round(width / ((a.width / a.height + b.width / b.height) / 2)))
    grey_a = gaussian_filter(np.asarray(a.resize((width, height), Image.Resampling.BOX), dtype=np.float32) / 255, BLUR)
    grey_b = gaussian_filter(np.asarray(b.resize((width, height), Image.Resampling.BOX), dtype=np.float32) / 255, BLUR)
    dx, dy = _best_shift(grey_a, grey_b)
    part_a, part_b = _overlap(grey_a, grey_b, dx, dy)
    if min(part_a.shape) < 7:
        return 0.0 if np.allclose(part_a, part_b, atol=0.02) else 1.0
    _, ssim = structural_similarity(part_a, part_b, data_range=1.0, gaussian_weights=True, sigma=1.5,
                                    use_sample_covariance=False, full=True)
    low = ssim < LOW_SSIM
    rows, cols = low.shape
    return float(max(low[i * rows // GRID:(i + 1) * rows // GRID, j * cols // GRID:(j + 1) * cols // GRID].mean()
                     for i in range(GRID) for j in range(GRID)
                     if (i + 1) * rows // GRID > i * rows // GRID and (j + 1) * cols // GRID > j * cols // GRID))


def _overlap(a: Any, b: Any, dx: int, dy: int) -> tuple[Any, Any]:
    rows, cols = a.shape
    h, w = rows - abs(dy), cols - abs(dx)
    return (a[max(0, dy):max(0, dy) + h, max(0, dx):max(0, dx) + w],
            b[max(0, -dy):max(0, -dy) + h, max(0, -dx):max(0, -dx) + w])


def _best_shift(a: Any, b: Any) -> tuple[int, int]:
    """The offset (|dx|, |dy| <= SHIFT) with the smallest mean absolute difference: a tight bounding box a few
    pixels wider moves the whole plot; this puts it back before SSIM, which is sensitive to shifts."""
    best, where = None, (0, 0)
    for dy in range(-SHIFT, SHIFT + 1):
        for dx in range(-SHIFT, SHIFT + 1):
            part_a, part_b = _overlap(a, b, dx, dy)
            if part_a.size == 0:
                continue
            score = float(abs(part_a - part_b).mean())
            if best is None or score < best - 1e-9:
                best, where = score, (dx, dy)
    return where
