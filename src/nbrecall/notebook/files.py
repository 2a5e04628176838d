"""Find `.ipynb` files under a root: the walk shared by `convert` and the indexer's discover stage."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from nbrecall.notebook.archives import is_zip_name, list_members, read_member, split_member

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
    if base.is_file() and not is_zip_name(base.name):
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


def read_notebook_file(path: str | Path) -> bytes:
    """The bytes of a notebook: a regular file, or a member of a zip archive named as `archive.zip/inner/x.ipynb`
    (`notebook.archives`). A file of that name on disk wins."""
    try:
        return read_regular(path)
    except (NotADirectoryError, FileNotFoundError):
        member = split_member(path)
        if member is None:
            raise
        return read_member(*member)


def notebook_exists(path: str | Path) -> bool:
    """Whether `path` is a notebook file on disk or a member of a zip archive on disk."""
    if os.path.isfile(path):
        return True
    member = split_member(path)
    if member is None:
        return False
    try:
        return any(m.name == member[1] for m in list_members(member[0], skip_hidden=False))
    except OSError:
        return False


def content_sha256(path: str | Path) -> str:
    """The SHA-256 of a notebook's bytes (`read_notebook_file`'s), a regular file read in blocks."""
    digest = hashlib.sha256()
    try:
        with open_regular(path) as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except (NotADirectoryError, FileNotFoundError):
        member = split_member(path)
        if member is None:
            raise
        digest.update(read_member(*member))
    return digest.hexdigest()


def walk_notebooks(
    root: Path,
    *,
    skip_hidden: bool = True,
    exclude: list[str] | None = None,
    follow_symlinks: bool = False,
    enter: frozenset[str] = frozenset(),
    unlisted: Callable[[OSError], None] | None = None,
    archives: bool = False,
) -> Iterator[Path]:
    """Yield notebook files under `root` (or `root` itself if it is a file), in sorted order.

    Hidden folders and files (leading dot) and folders named in `exclude` (e.g. `.ipynb_checkpoints`) are
    skipped; folders named in `enter` are entered even when hidden (not when excluded). With `follow_symlinks`,
    folder symlink loops are cut by remembering visited real paths. A folder that cannot be listed (permissions, a
    share's network error) is skipped and given to `unlisted` (its `filename` is the folder). With `archives`, the
    notebooks inside each zip archive are yielded as `archive.zip/inner/x.ipynb` (the same rules for folders inside
    it); an archive that cannot be listed goes to `unlisted` like a folder.
    """
    excluded = set(exclude or [])
    if root.is_file():
        if archives and is_zip_name(root.name):  # a zip archive named as the root: its notebooks
            yield from _archive_notebooks(root, skip_hidden, frozenset(excluded), enter, unlisted)
            return
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
            if skip_hidden and name.startswith("."):
                continue
            if name.endswith(".ipynb"):
                yield Path(folder) / name
            elif archives and is_zip_name(name):
                yield from _archive_notebooks(Path(folder) / name, skip_hidden, frozenset(excluded), enter, unlisted)


def _archive_notebooks(archive: Path, skip_hidden: bool, exclude: frozenset[str], enter: frozenset[str],
                       unlisted: Callable[[OSError], None] | None) -> Iterator[Path]:
    """The notebooks inside zip `archive` as paths through it; one that cannot be listed goes to `unlisted`."""
    try:
        members = list_members(archive, skip_hidden=skip_hidden, exclude=exclude, enter=enter)
    except OSError as exc:
        if unlisted is not None:
            unlisted(OSError(exc.errno, exc.strerror or str(exc), str(archive)))
        return
    for member in members:
        yield archive.joinpath(*member.name.split("/"))
