"""Compare two matplotlib SVG figures by what they plot, in data coordinates, not by how they are drawn.

Another matplotlib or sympy version lays the same plot out differently: axes moved, labels elsewhere, a figure a
few points taller, spines centred. Pixels then differ everywhere while the curves are the same. A matplotlib SVG
carries what is needed to undo the layout: every tick mark's position with its label (`<!-- 0.5 -->`), and every
plotted element (lines, collections, markers, patches) clipped to its axes. So per axes:

1. the tick marks and their numeric labels give a linear map from SVG points to data, on each axis;
2. every clipped path and marker of the axes is mapped to data coordinates and drawn into a grid of
   `GRID` × `GRID` cells spanning the two figures' common data range;
3. the two drawings are compared with a distance transform: the share of one figure's drawn line cells farther
   than `TOLERANCE` cells (1% of the range) from anything the other drew, the larger of the two shares, is the
   figure's `moved` share; above `THRESHOLD` (2%) the plots differ, and so they do when one marker (a data
   point of a scatter or stem plot) has no marker of the other near it. Measured on the signals-and-systems
   course re-rendered with another matplotlib and sympy (bench/README.md): 110 of 112 same-data figures moved
   0–0.3%, one sympy curve sampled more finely 2.9%; a 10-sample bump moved 8%, 5% more amplitude 10%, an added
   line 23%.

Colours, line widths, fonts, labels and layout are ignored: what is compared is where the data are. Figures that
do not parse this way (not matplotlib, log or date axes whose labels are not plain numbers, no ticks) return
None and are compared as pictures instead (`images.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

GRID = 200
TOLERANCE = 2.0  # cells
THRESHOLD = 0.02  # share of drawn cells

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_TOKEN_RE = re.compile(rf"[MmLlHhVvCcSsQqTtZz]|{_NUMBER}")
_DATA_GROUP_RE = re.compile(r"^(?:line2d|LineCollection|PathCollection|PolyCollection|patch|QuadMesh|"
                            r"FillBetweenPolyCollection|EventCollection|Line3DCollection|image)_\d+$")
_MATHDEFAULT_RE = re.compile(r"\\mathdefault\{([^}]*)\}")


@dataclass
class AxesData:
    """What one axes plots: polylines and points in data coordinates, and its visible data range."""

    lines: list[list[tuple[float, float]]] = field(default_factory=list)
    points: list[tuple[float, float]] = field(default_factory=list)
    x_range: tuple[float, float] = (0.0, 1.0)
    y_range: tuple[float, float] = (0.0, 1.0)


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _tick_value(group: Any) -> float | None:
    for node in group.iter():
        if isinstance(node.tag, str):
            continue
        text = (node.text or "").strip()  # a comment: matplotlib writes each text's string as one
        if not text:
            continue
        text = _MATHDEFAULT_RE.sub(r"\1", text).strip("$ ").replace("\u2212", "-").replace("{", "").replace("}", "")
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _tick_position(group: Any, attr: str) -> float | None:
    for node in group.iter():
        if _local(node.tag) == "use" and node.get(attr) is not None:
            try:
                return float(node.get(attr))
            except ValueError:
                return None
    return None


def _axis_map(axes: Any, prefix: str, attr: str) -> tuple[float, float] | None:
    """(scale, offset) with data = scale * svg + offset, fitted to the labelled ticks (None if they disagree)."""
    pairs = []
    for group in axes.iter():
        gid = (group.get("id") or "") if isinstance(group.tag, str) else ""
        if _local(group.tag) == "g" and gid.startswith(prefix):
            value, pos = _tick_value(group), _tick_position(group, attr)
            if value is not None and pos is not None:
                pairs.append((pos, value))
    pairs = sorted(set(pairs))
    if len(pairs) < 2 or pairs[0][0] == pairs[-1][0]:
        return None
    (p0, v0), (p1, v1) = pairs[0], pairs[-1]
    scale = (v1 - v0) / (p1 - p0)
    offset = v0 - scale * p0
    span = abs(v1 - v0) or 1.0
    if any(abs(scale * p + offset - v) > 1e-3 * span for p, v in pairs):  # log, dates, category labels
        return None
    return scale, offset


def _polylines(d: str) -> list[list[tuple[float, float]]]:
    """The vertices of an SVG path (absolute and relative moves, lines, curve end points), one list per subpath."""
    tokens = _TOKEN_RE.findall(d)
    lines: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    x = y = 0.0
    start = (0.0, 0.0)
    command = ""
    i = 0
    arity = {"M": 2, "L": 2, "H": 1, "V": 1, "C": 6, "S": 4, "Q": 4, "T": 2, "Z": 0}
    while i < len(tokens):
        token = tokens[i]
        if token.isalpha():
            command = token
            i += 1
            if command in "Zz":
                if current:
                    current.append(start)
                x, y = start
            continue
        n = arity.get(command.upper(), 2)
        values = [float(v) for v in tokens[i:i + n]]
        i += n
        if len(values) < n or n == 0:
            break
        rel = command.islower()
        upper = command.upper()
        if upper == "H":
            x = values[0] + (x if rel else 0)
        elif upper == "V":
            y = values[0] + (y if rel else 0)
        else:
            nx, ny = values[-2], values[-1]
            x, y = (x + nx, y + ny) if rel else (nx, ny)
        if upper == "M":
            if current:
                lines.append(current)
            current = [(x, y)]
            start = (x, y)
            command = "l" if rel else "L"  # further pairs after a move are lines
        else:
            current.append((x, y))
    if current:
        lines.append(current)
    return lines


def plot_data(svg: str) -> list[AxesData] | None:
    """Each axes' plotted data, or None when the SVG is not a matplotlib figure this can read."""
    if "matplotlib" not in svg[:2000] and "xtick_" not in svg:
        return None
    import lxml.etree

    try:
        start = svg.find("<svg")
        root = lxml.etree.fromstring(svg[start:].encode("utf-8"), lxml.etree.XMLParser(huge_tree=False,
                                                                                     resolve_entities=False))
    except (lxml.etree.XMLSyntaxError, ValueError):
        return None
    out: list[AxesData] = []
    for axes in root.iter("{*}g"):
        if not (axes.get("id") or "").startswith("axes_"):
            continue
        xmap, ymap = _axis_map(axes, "xtick_", "x"), _axis_map(axes, "ytick_", "y")
        if xmap is None or ymap is None:
            return None
        data = AxesData()

        def to_data(p: tuple[float, float], xmap: tuple[float, float] = xmap,
                    ymap: tuple[float, float] = ymap) -> tuple[float, float]:
            return xmap[0] * p[0] + xmap[1], ymap[0] * p[1] + ymap[1]

        for child in axes:
            gid = (child.get("id") or "") if isinstance(child.tag, str) else ""
            if not _DATA_GROUP_RE.match(gid):
                continue
            clipped_group = any(n.get("clip-path") for n in child.iter("{*}g"))
            for node in child.iter():
                tag = _local(node.tag)
                if tag == "path" and (node.get("clip-path") or clipped_group) and node.get("d"):
                    if node.getparent() is not None and _local(node.getparent().tag) == "defs":
                        continue
                    data.lines += [[to_data(p) for p in line] for line in _polylines(node.get("d"))]
                elif tag == "use" and node.get("x") is not None and (clipped_group or node.get("clip-path")):
                    try:
                        data.points.append(to_data((float(node.get("x")), float(node.get("y") or 0))))
                    except ValueError:
                        continue
        background = axes.find("{*}g[@id='patch_2']/{*}path")
        corners = _polylines(background.get("d")) if background is not None and background.get("d") else []
        if corners and corners[0]:
            xs = [to_data(p)[0] for p in corners[0]]
            ys = [to_data(p)[1] for p in corners[0]]
            data.x_range, data.y_range = (min(xs), max(xs)), (min(ys), max(ys))
        out.append(data)
    return out or None


def _draw(data: AxesData, x_range: tuple[float, float], y_range: tuple[float, float]) -> Any:
    import numpy as np

    grid = np.zeros((GRID, GRID), dtype=bool)
    sx = (GRID - 1) / ((x_range[1] - x_range[0]) or 1.0)
    sy = (GRID - 1) / ((y_range[1] - y_range[0]) or 1.0)

    def mark(xs: Any, ys: Any) -> None:
        cols = np.round((xs - x_range[0]) * sx).astype(int)
        rows = np.round((ys - y_range[0]) * sy).astype(int)
        keep = (cols >= 0) & (cols < GRID) & (rows >= 0) & (rows < GRID)
        grid[rows[keep], cols[keep]] = True

    for line in data.lines:
        pts = np.asarray(line, dtype=float)
        if len(pts) == 1:
            mark(pts[:, 0], pts[:, 1])
            continue
        for (x0, y0), (x1, y1) in zip(pts[:-1], pts[1:], strict=True):
            steps = int(max(abs(x1 - x0) * sx, abs(y1 - y0) * sy) * 2) + 2
            if steps > 4 * GRID:
                steps = 4 * GRID
            t = np.linspace(0.0, 1.0, steps)
            mark(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t)
    if data.points:
        pts = np.asarray(data.points, dtype=float)
        mark(pts[:, 0], pts[:, 1])
    return grid


def moved_share(a: list[AxesData], b: list[AxesData]) -> tuple[float, int]:
    """(the largest share of one figure's drawn lines farther than TOLERANCE cells from anything the other drew,
    markers of either farther than that from every marker of the other): (1.0, 0) when the figures do not have
    the same number of axes. Markers are data points one by one, so a single moved marker counts."""
    import numpy as np
    from scipy.ndimage import distance_transform_edt

    if len(a) != len(b):
        return 1.0, 0
    worst, moved_points = 0.0, 0
    for one, two in zip(a, b, strict=True):
        x_range = (min(one.x_range[0], two.x_range[0]), max(one.x_range[1], two.x_range[1]))
        y_range = (min(one.y_range[0], two.y_range[0]), max(one.y_range[1], two.y_range[1]))
        lines_a = _draw(AxesData(lines=one.lines), x_range, y_range)
        lines_b = _draw(AxesData(lines=two.lines), x_range, y_range)
        if lines_a.any() != lines_b.any():
            return 1.0, 0
        if lines_a.any():
            far_from_b = distance_transform_edt(~lines_b)[lines_a] > TOLERANCE
            far_from_a = distance_transform_edt(~lines_a)[lines_b] > TOLERANCE
            worst = max(worst, float(np.mean(far_from_b)), float(np.mean(far_from_a)))
        points_a = _draw(AxesData(points=one.points), x_range, y_range)
        points_b = _draw(AxesData(points=two.points), x_range, y_range)
        if points_a.any() != points_b.any():
            return 1.0, 0
        if points_a.any():
            moved_points += int((distance_transform_edt(~points_b)[points_a] > TOLERANCE).sum())
            moved_points += int((distance_transform_edt(~points_a)[points_b] > TOLERANCE).sum())
    return worst, moved_points


def compare_plots(svg_a: str, svg_b: str) -> tuple[bool, str] | None:
    """(same data?, a note) for two matplotlib SVG figures; None when either cannot be read as one."""
    a, b = plot_data(svg_a), plot_data(svg_b)
    if a is None or b is None:
        return None
    share, points = moved_share(a, b)
    if share <= THRESHOLD and not points:
        return True, f"the plotted data are the same (matplotlib SVG compared in data coordinates; moved {share:.3f})"
    what = f"{share:.0%} of the drawn lines moved" if share > THRESHOLD else ""
    if points:
        what = (what + ", " if what else "") + f"{points} marker(s) moved"
    return False, f"the plotted data differ: {what} (matplotlib SVG compared in data coordinates)"
