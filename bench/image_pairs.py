"""Scores of the figure comparisons on pairs, to set and check their thresholds (render/images.py, svgplot.py).

    .venv/bin/python bench/image_pairs.py [RENDERS_DIR ...] [--dump DIR]

Synthetic pairs (drawn here with matplotlib, labelled): the same sine at 72/100/150 DPI and at another figure size,
and changed plots (a 10-sample bump, an added line, 5% more amplitude, 10% more frequency, a cosine, fresh random
noise), as PNG (perceptual changed area) and as SVG (moved share in data coordinates). Real pairs: every figure of
a stored render (`nbrecall render --out DIR`, or bench/render_corpus.py --out DIR) whose bytes differ from the
original's and which has no semantic twin, with its score; `--dump DIR` writes each pair side by side as PNG so a
person can label them (bench/README.md lists the labels used).
"""

from __future__ import annotations

import argparse
import base64
import io
import sys
from pathlib import Path

import numpy as np

from nbrecall.notebook.read import read_notebook
from nbrecall.render import images, svgplot
from nbrecall.render.output_items import _image_of, _semantic, comparable
from nbrecall.render.run import load_fresh_notebook, load_render


def _draw(y: np.ndarray, fmt: str, dpi: float = 100, size: tuple[float, float] = (6.4, 4.8), extra=None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.linspace(0, 10, len(y))
    fig, ax = plt.subplots(figsize=size)
    ax.plot(t, y)
    if extra is not None:
        ax.plot(t, extra)
    ax.set_xlabel("t / s")
    ax.set_title("displacement")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue().decode() if fmt == "svg" else base64.b64encode(buf.getvalue()).decode()


def synthetic() -> list[tuple[str, bool, dict, dict]]:
    t = np.linspace(0, 10, 200)
    base = np.sin(t)
    bump = base.copy()
    bump[100:110] += 0.3
    rng = np.random.default_rng(1)
    cases = [
        ("72 dpi", True, {"y": base, "dpi": 72}), ("150 dpi", True, {"y": base, "dpi": 150}),
        ("figure 6x4 at 72 dpi", True, {"y": base, "dpi": 72, "size": (6, 4)}),
        ("10-sample bump", False, {"y": bump}), ("added line", False, {"y": base, "extra": 0.2 * np.cos(t)}),
        ("5% more amplitude", False, {"y": 1.05 * base}), ("10% more frequency", False, {"y": np.sin(1.1 * t)}),
        ("cosine", False, {"y": np.cos(t)}),
        ("other noise", False, {"y": base + rng.normal(0, 0.05, 200), "base": base + rng.normal(0, 0.05, 200)}),
    ]
    out = []
    for name, same, kw in cases:
        reference = kw.pop("base", base)
        out.append((name, same, {"y": reference}, kw))
    return out


def _score_png(a: str, b: str) -> float:
    return images.changed_area(images.decode("image/png", a), images.decode("image/png", b))


def _score_svg(a: str, b: str) -> str:
    pa, pb = svgplot.plot_data(a), svgplot.plot_data(b)
    if pa is None or pb is None:
        return "unreadable"
    share, points = svgplot.moved_share(pa, pb)
    return f"{share:.3f}" + (f" +{points} markers" if points else "")


def real_pairs(folders: list[Path], dump: Path | None) -> None:
    print(f"\nreal pairs (PNG: changed area, threshold {images.THRESHOLD}; SVG: moved share, threshold "
          f"{svgplot.THRESHOLD})")
    count = 0
    for folder in folders:
        for stored in sorted(folder.glob("*.json")):
            result = load_render(folder, stored.stem)
            if result is None:
                continue
            fresh = load_fresh_notebook(folder, result.sha256, result.path)
            try:
                original = read_notebook(Path(result.path))
            except Exception:
                continue
            if fresh is None or original.sha256 != result.sha256:
                continue
            for cell in original.code_cells:
                if cell.index >= len(fresh.cells):
                    continue
                pairs = zip(comparable(cell.outputs), comparable(fresh.cells[cell.index].outputs),
                            strict=False)
                for a, b in pairs:
                    image_a, image_b = _image_of(a), _image_of(b)
                    if not image_a or not image_b or image_a[1] == image_b[1] or _semantic(a).keys() & \
                            _semantic(b).keys():
                        continue
                    if image_a[0] == image_b[0] == "image/svg+xml":
                        score = "svg " + _score_svg(image_a[1], image_b[1])
                    else:
                        verdict = images.compare_images(*image_a, *image_b)
                        score = f"png {verdict.changed_area:.3f}"
                    count += 1
                    print(f"{count:4d} {score:22s} {result.path} cell {cell.index}")
                    if dump is not None:
                        _dump(dump / f"{count:04d}.png", image_a, image_b)
    print(f"{count} real pairs")


def _dump(path: Path, image_a: tuple[str, str], image_b: tuple[str, str]) -> None:
    from PIL import Image

    a, b = images.decode(*image_a), images.decode(*image_b)
    if a is None or b is None:
        return
    side = Image.new("L", (a.width + b.width + 10, max(a.height, b.height)), 255)
    side.paste(a, (0, 0))
    side.paste(b, (a.width + 10, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    side.save(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("renders", nargs="*", type=Path)
    parser.add_argument("--dump", type=Path, default=None)
    args = parser.parse_args(argv)
    print(f"{'synthetic pair':22s} {'label':9s} {'PNG area':>9s} {'SVG moved':>10s}")
    worst_same, best_changed = 0.0, 1.0
    for name, same, ref, other in synthetic():
        png = _score_png(_draw(fmt="png", **ref), _draw(fmt="png", **other))
        svg = _score_svg(_draw(fmt="svg", **ref), _draw(fmt="svg", **other))
        worst_same = max(worst_same, png) if same else worst_same
        best_changed = min(best_changed, png) if not same else best_changed
        print(f"{name:22s} {'same' if same else 'changed':9s} {png:9.3f} {svg:>10s}")
    print(f"PNG: same at most {worst_same:.3f}, changed at least {best_changed:.3f} (threshold {images.THRESHOLD})")
    if args.renders:
        real_pairs(args.renders, args.dump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
