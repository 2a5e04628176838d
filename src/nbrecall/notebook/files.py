"""Find `.ipynb` files under a root: the walk shared by `convert` and the indexer's discover stage."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


class NotARegularFile(OSError):
    """The path is a FIFO, socket, device or folder: opening it for reading could block forever or never end."""

    def __init__(self, path: str | Path, mode: int) -> None:
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", str(path))


def printable_path(name: str) -> str:
    """`name` as text that encodes as UTF-8: bytes of a non-UTF-8 file name (held by Python as lone surrogates)
    shown as `\\xff` escapes. Names that are valid UTF-8 come back unchanged."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        pass
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # surrogates that are not escaped bytes: show them as \udxxx
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


_ESCAPED_BYTE = re.compile(r"\\x([89a-f][0-9a-f])")


def notebook_path(root: str, rel: str) -> Path:
    """The file of an indexed `(root, rel)`: `root` itself when it is a notebook, else `root / rel`. A `rel` recorded
    with `\xff` escapes (`printable_path`: a name that is not UTF-8, from a share with a legacy encoding) is turned
    back into the bytes it stands for, unless a file is named with those characters literally."""
    base = Path(root)
    if base.is_file():
        return base
    path = base / rel
    if "\\x" not in rel or os.path.lexists(path):
        return path
    return base / _ESCAPED_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), rel)


def open_regular(path: str | Path) -> BinaryIO:
    """Open `path` for binary reading, refusing anything but a regular file without blocking on it.

    A plain `open()` of a FIFO named `x.ipynb` waits for a writer forever; `O_NONBLOCK` makes the open return
    at once, and `fstat` on the open descriptor (no race with a rename) tells what it is.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(path, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path) -> bytes:
    """The bytes of a regular file (see `open_regular`)."""
    with open_regular(path) as handle:
        return handle.read()


def walk_notebooks(
    root: Path,
    *,
    skip_hidden: bool = True,
    exclude: list[str] | None = None,
    follow_symlinks: bool = False,
    enter: frozenset[str] = frozenset(),
    unlisted: Callable[[OSError], None] | None = None,
) -> Iterator[Path]:
    """Yield notebook files under `root` (or `root` itself if it is a file), in sorted order.

    Hidden folders and files (leading dot) and folders named in `exclude` (e.g. `.ipynb_checkpoints`) are
    skipped; folders named in `enter` are entered even when hidden (not when excluded). With `follow_symlinks`,
    folder symlink loops are cut by remembering visited real paths. A folder that cannot be listed (permissions, a
    share's network error) is skipped and given to `unlisted` (its `filename` is the folder).
    """
    excluded = set(exclude or [])
    if root.is_file():
        yield root
        return
    seen: set[str] = set()
    for folder, dirs, files in os.walk(root, followlinks=follow_symlinks, onerror=unlisted or (lambda _e: None)):
        if follow_symlinks:
            real = os.path.realpath(folder)
            if real in seen:
                dirs[:] = []
                continue
            seen.add(real)
        dirs[:] = sorted(
            d for d in dirs if d not in excluded and (d in enter or not (skip_hidden and d.startswith(".")))
        )
        for name in sorted(files):
            if name.endswith(".ipynb") and not (skip_hidden and name.startswith(".")):
                yield Path(folder) / name
