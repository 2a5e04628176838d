"""Do two figures look the same? A perceptual comparison that ignores size, resolution and anti-aliasing.

A re-rendered figure almost never has the bytes of the stored one: another matplotlib, another DPI or a tight
bounding box two pixels wider changes every pixel while the plot stays the same. So both images are decoded
(PNG/JPEG/GIF/WebP with Pillow, SVG rasterised with resvg), laid on white, turned grey, scaled to one common
size (`WIDTH` px wide, the mean aspect ratio), blurred a little (`BLUR` px: line widths and font hinting stop
mattering), aligned by the shift of at most `SHIFT` px that matches them best, and compared with SSIM
(scikit-image's `structural_similarity`). The SSIM map is then cut into an 8×8 grid; the score is the largest
share of a cell's pixels whose local SSIM is under 0.5: `changed_area`. A change spread thinly over the whole
image (anti-aliasing, another rasteriser) keeps every cell low; a curve that moved, a line added or a bar that
grew fills some cell. Images whose aspect ratios differ by more than `MAX_ASPECT` are different figures.

Before SSIM one image is stretched and moved (at most 12% and 6% per axis) to match the other best, and dark
strokes are widened by `THICKEN` px, so that a line one or two pixels off still overlaps. The settings and the
threshold (`THRESHOLD`) were measured on pairs (bench/image_pairs.py, bench/README.md): same-looking PNG
re-renders scored 0–0.33 (72/100/150 DPI, matplotlib 3.5 vs 3.11, sympy's adaptive sampling, a stem plot whose
axis range grew a little, a 3-D surface with another projection), changed plots 0.43–0.84 (a 10-sample bump,
an added line, 5% more amplitude, another frequency, fresh random noise). A plot drawn at another default
figure size with other font sizes scored 0.68: it is avoided by drawing at the stored figures' size
(environments.py), not by this comparison. matplotlib SVG figures do not come here: they compare by the data
they plot (svgplot.py).
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from typing import Any

WIDTH = 224  # px: both images are compared at this width (or the smaller image's, if narrower)
THICKEN = 3  # px: dark strokes are widened this much (a minimum filter) so that a line 1-2 px off still overlaps
BLUR = 1.5  # Gaussian sigma in px at that width
STRETCH = 0.12  # alignment: each axis of one image may be stretched by up to 12%
SHIFT_SHARE = 0.06  # alignment: and moved by up to 6% of its size
GRID = 8  # the SSIM map is judged in GRID × GRID cells
LOW_SSIM = 0.5  # a pixel whose local SSIM is under this is "strongly dissimilar"
THRESHOLD = 0.38  # changed_area above this: the figures differ
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
        img: Image.Image = Image.open(io.BytesIO(bytes(data)))
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
    from scipy.ndimage import gaussian_filter, grey_erosion
    from skimage.metrics import structural_similarity

    width = max(8, min(WIDTH, a.width, b.width))
    height = max(8, round(width / ((a.width / a.height + b.width / b.height) / 2)))
    small_a, small_b = a.resize((width, height), Image.Resampling.BOX), b.resize((width, height), Image.Resampling.BOX)
    small_b = _aligned(small_a, small_b)
    grey_a = gaussian_filter(grey_erosion(np.asarray(small_a, dtype=np.float32) / 255, size=THICKEN), BLUR)
    grey_b = gaussian_filter(grey_erosion(np.asarray(small_b, dtype=np.float32) / 255, size=THICKEN), BLUR)
    if min(grey_a.shape) < 7:
        return 0.0 if np.allclose(grey_a, grey_b, atol=0.02) else 1.0
    _, ssim = structural_similarity(grey_a, grey_b, data_range=1.0, gaussian_weights=True, sigma=1.5,
                                    use_sample_covariance=False, full=True)
    low = ssim < LOW_SSIM
    rows, cols = low.shape
    return float(max(low[i * rows // GRID:(i + 1) * rows // GRID, j * cols // GRID:(j + 1) * cols // GRID].mean()
                     for i in range(GRID) for j in range(GRID)
                     if (i + 1) * rows // GRID > i * rows // GRID and (j + 1) * cols // GRID > j * cols // GRID))


def _aligned(a: Any, b: Any) -> Any:
    """`b` stretched and moved (each axis scaled by at most `STRETCH`, shifted by at most `SHIFT_SHARE` of the
    image) to match `a` best, judged on small blurred copies: another figure size or a tight bounding box moves
    and stretches the axes while the plot stays the same, and SSIM is sensitive to exactly that. Local changes
    (a moved curve, an added line) cannot be aligned away."""
    import numpy as np
    from PIL import Image, ImageFilter

    probe = 96 / max(a.width, 1)
    size = (max(8, round(a.width * probe)), max(8, round(a.height * probe)))
    small_a = np.asarray(a.resize(size, Image.Resampling.BOX).filter(ImageFilter.GaussianBlur(1)), dtype=np.float32)
    small_b = b.resize(size, Image.Resampling.BOX).filter(ImageFilter.GaussianBlur(1))

    def cost(params: tuple[float, float, float, float]) -> float:
        moved = _transform(small_b, *params, scale=1.0)
        return float(np.abs(np.asarray(moved, dtype=np.float32) - small_a).mean())

    best = (1.0, 1.0, 0.0, 0.0)
    best_cost = cost(best)
    for step in (0.04, 0.02, 0.01):  # coordinate descent, coarse to fine
        improved = True
        while improved:
            improved = False
            for k, delta in ((0, step), (1, step), (2, step / 2), (3, step / 2)):
                for sign in (-1, 1):
                    trial = list(best)
                    trial[k] += sign * delta
                    if abs(trial[0] - 1) > STRETCH or abs(trial[1] - 1) > STRETCH or \
                            abs(trial[2]) > SHIFT_SHARE or abs(trial[3]) > SHIFT_SHARE:
                        continue
                    c = cost(tuple(trial))  # type: ignore[arg-type]
                    if c < best_cost - 1e-6:
                        best, best_cost, improved = tuple(trial), c, True  # type: ignore[assignment]
    return _transform(b, *best, scale=1.0)


def _transform(img: Any, sx: float, sy: float, dx: float, dy: float, scale: float) -> Any:
    """`img` scaled by (sx, sy) about its centre and shifted by (dx, dy) shares of its size; white fills in."""
    from PIL import Image

    w, h = img.size
    cx, cy = w / 2, h / 2
    # output (x, y) takes input ((x - cx - dx*w) / sx + cx, (y - cy - dy*h) / sy + cy)
    coeffs = (1 / sx, 0, cx - (cx + dx * w) / sx, 0, 1 / sy, cy - (cy + dy * h) / sy)
    return img.transform((w, h), Image.Transform.AFFINE, coeffs, resample=Image.Resampling.BILINEAR, fillcolor=255)
