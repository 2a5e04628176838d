"""Find `.ipynb` files under a root: the walk shared by `convert` and the indexer's discover stage."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def walk_notebooks(
    root: Path, *, skip_hidden: bool = True, exclude: list[str] | None = None, follow_symlinks: bool = False
) -> Iterator[Path]:
    """Yield notebook files under `root` (or `root` itself if it is a file), in sorted order.

    Hidden folders and files (leading dot) and folders named in `exclude` (e.g. `.ipynb_checkpoints`) are
    skipped. With `follow_symlinks`, folder symlink loops are cut by remembering visited real paths.
    """
    excluded = set(exclude or [])
    if root.is_file():
        yield root
        return
    seen: set[str] = set()
    for folder, dirs, files in os.walk(root, followlinks=follow_symlinks, onerror=lambda _e: None):
        if follow_symlinks:
            real = os.path.realpath(folder)
            if real in seen:
                dirs[:] = []
                continue
            seen.add(real)
        dirs[:] = sorted(d for d in dirs if d not in excluded and not (skip_hidden and d.startswith(".")))
        for name in sorted(files):
            if name.endswith(".ipynb") and not (skip_hidden and name.startswith(".")):
                yield Path(folder) / name
