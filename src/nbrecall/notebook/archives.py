"""Notebooks inside zip archives: a finished project is often zipped on the share, and its notebooks are still the
firm's memory.

A notebook inside `projects/2017.zip` is known by the path `projects/2017.zip/calc/ballast.ipynb`: the zip file,
then the member's name. Nothing is extracted to disk; a member is read with the standard library's `zipfile` (no
other library reads zip archives better for this, and it needs no dependency). Members are read whole into memory,
each under the same size cap as a notebook file, checked while decompressing (a member's declared size can lie).
Zips inside zips are not entered.
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ZIP_SUFFIX = ".zip"
# What `zipfile` raises for a damaged or unusual archive besides `BadZipFile` (found by cutting and corrupting
# archives: multi-disk and unknown compression methods, a bad deflate stream, a header cut short)
_DAMAGED = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, ValueError, zlib.error)


class MemberUnreadable(OSError):
    """A member of a zip archive that cannot be read: encrypted, too large, or a damaged archive."""


@dataclass(frozen=True)
class ZipMember:
    """A notebook inside a zip archive: its name in the archive, its uncompressed size, whether it is encrypted."""

    name: str
    size: int
    encrypted: bool


def is_zip_name(name: str) -> bool:
    return name.lower().endswith(ZIP_SUFFIX)


def in_archive(rel: str) -> bool:
    """Whether an indexed path names a notebook inside a zip archive. Such a path is the last choice for a content a
    plain file also holds: a backup zip beside the live folder must not become the path answers cite."""
    return ".zip/" in rel.lower()


def list_members(archive: Path, *, skip_hidden: bool = True, exclude: frozenset[str] = frozenset(),
                 enter: frozenset[str] = frozenset()) -> list[ZipMember]:
    """The `.ipynb` members of `archive`, sorted by name, with the walk's rules for folders: hidden ones (and
    macOS's `__MACOSX` resource forks) skipped unless named in `enter`, those in `exclude` never entered. Raises
    `OSError` (a `zipfile.BadZipFile` is turned into one) when the archive cannot be listed."""
    try:
        with zipfile.ZipFile(archive) as handle:
            infos = handle.infolist()
    except _DAMAGED as exc:
        raise OSError(f"not a readable zip archive ({type(exc).__name__}: {exc})") from exc
    members = []
    for info in infos:
        if info.is_dir() or not info.filename.endswith(".ipynb"):
            continue
        parts = PurePosixPath(info.filename).parts
        if info.filename.startswith("/") or ".." in parts:  # a name that points outside the archive: never read
            continue
        folders, name = parts[:-1], parts[-1]
        if "__MACOSX" in folders or any(part in exclude for part in folders) or (skip_hidden and (
                name.startswith(".") or any(p.startswith(".") and p not in enter for p in folders))):
            continue
        members.append(ZipMember(info.filename, info.file_size, bool(info.flag_bits & 0x1)))
    return sorted(members, key=lambda m: m.name)


def split_member(path: str | Path) -> tuple[Path, str] | None:
    """`(archive, member name)` when `path` names a member of a zip archive on disk (a component ending in `.zip`
    is a regular file and the path goes on inside it); None for any other path."""
    parts = Path(path).parts
    for i in range(len(parts) - 1, 0, -1):
        if not is_zip_name(parts[i - 1]):
            continue
        archive = Path(*parts[:i])
        try:
            if stat.S_ISREG(os.stat(archive).st_mode):
                return archive, "/".join(parts[i:])
        except OSError:
            continue
    return None


def read_member(archive: Path, name: str, max_bytes: int | None = None) -> bytes:
    """The bytes of member `name` of `archive`; `MemberUnreadable` says why not (encrypted, larger than
    `max_bytes`, damaged)."""
    try:
        with zipfile.ZipFile(archive) as handle:
            info = handle.getinfo(name)
            if info.flag_bits & 0x1:
                raise MemberUnreadable(f"encrypted inside {archive.name}: nbrecall cannot read it")
            with handle.open(info) as member:
                data = member.read() if max_bytes is None else member.read(max_bytes + 1)
    except KeyError as exc:
        raise FileNotFoundError(f"no member {name} in {archive.name}") from exc
    except (*_DAMAGED, RuntimeError) as exc:  # RuntimeError: a member encrypted without the flag said so
        raise MemberUnreadable(f"cannot read it from {archive.name} ({type(exc).__name__}: {exc})") from exc
    if max_bytes is not None and len(data) > max_bytes:
        raise MemberUnreadable(f"larger than {max_bytes // 2**20} MB once decompressed")
    return data
