"""Discover: walk the roots, stat every notebook, hash only what changed since the manifest last saw it.

Symbolic links do not lead out of the roots unless `[discover] follow_symlinks` says so: without it, folder
links are not entered and a file link whose target lies outside every root is not read (it is listed, with the
reason, among the quarantined files); links that stay inside the roots are read as before. With it, links are
followed, but only to files the indexing user may read, and each notebook reached outside the roots is listed
in `Discovery.outside` (`nbrecall status` shows them), so that nothing from elsewhere is indexed unseen.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISLNK, S_ISREG

from nbrecall.config import DiscoverSettings
from nbrecall.notebook.archives import (
    MemberUnreadable,
    ZipMember,
    in_archive,
    is_zip_name,
    list_members,
    read_member,
    split_member,
)
from nbrecall.notebook.checkpoints import CHECKPOINTS  # Jupyter's autosave folder: its copies are versions
from nbrecall.notebook.files import NotARegularFile, content_sha256, printable_path, walk_notebooks
from nbrecall.records import FileRecord


@dataclass
class Discovery:
    """The state of the roots against the manifest."""

    files: list[FileRecord] = field(default_factory=list)  # every file now present (new state)
    changed: list[FileRecord] = field(default_factory=list)  # new or changed content since last run
    touched: list[FileRecord] = field(default_factory=list)  # stat changed but same content
    deleted: list[tuple[str, str]] = field(default_factory=list)  # (root, rel) gone from disk
    unreadable: list[tuple[str, str, str]] = field(default_factory=list)  # (root, rel, reason)
    outside: list[tuple[str, str, str]] = field(default_factory=list)  # (root, rel, target) reached by a link
    empty_roots: list[tuple[str, int]] = field(default_factory=list)  # (root, files kept): held none of its files
    unlisted: list[tuple[str, str, str, int]] = field(default_factory=list)  # (root, folder, reason, files kept)
    unread: list[tuple[str, str, str]] = field(default_factory=list)  # (root, rel, reason): indexed, kept as it was
    hashed: int = 0


LINK_OUT = (
    "a symbolic link to a file outside the indexed roots: not followed (set [discover] follow_symlinks = true "
    "to index what links point to)"
)
LINK_UNREADABLE = "a symbolic link out of the indexed roots to a file this user may not read: not followed"


def too_large(size: int, cap_mb: float) -> str:
    """The quarantine reason of a file over `[discover] max_file_mb`."""
    return (f"larger than [discover] max_file_mb ({size / 2**20:,.0f} MB > {cap_mb:,.0f} MB): not read, so that "
            "indexing stays within memory; raise the setting to index it")


def empty_root_note(root: str, kept: int) -> str:
    """What a run says of a root that held none of the notebooks indexed from it (`Discovery.empty_roots`)."""
    return (f"{root} holds none of the {kept:,} notebook files indexed from it (a share that is not mounted?): they "
            "stay in the index; if the folder was emptied on purpose, `nbrecall forget` it (or set [discover] "
            "prune_empty_roots = true)")


def unread_note(root: str, rel: str, reason: str) -> str:
    """What a run says of an indexed file it could not read this time (`Discovery.unread`)."""
    return f"{rel} ({reason}): it stays in the index as it was until it can be read"


def unlisted_note(root: str, folder: str, reason: str, kept: int) -> str:
    """What a run says of a folder it could not list (`Discovery.unlisted`)."""
    where = root if folder == "." else f"{root}/{folder}"
    return (f"{where} could not be listed ({reason}): the {kept:,} notebook files indexed from it stay in the index "
            "as they were until it can be read")


def _unreadable(result: Discovery, old: FileRecord | None, problem: tuple[str, str, str]) -> None:
    """A file that cannot be stat'ed or read this time (permissions, a share's network error): one indexed before
    keeps its last state and is named in `unread`, since the error may pass; one never read is quarantined with the
    reason (and looked at again by the next run)."""
    if old is not None and old.mtime_ns:  # (a quarantined file is recorded with size and mtime 0)
        result.files.append(old)
        result.unread.append(problem)
    else:
        result.unreadable.append(problem)


def _keep_unlisted(result: Discovery, root_key: str, base: Path, errors: list[OSError],
                   known: dict[tuple[str, str], FileRecord], seen: set[tuple[str, str]]) -> None:
    """A folder the walk could not list is no evidence that its notebooks are gone: the files indexed from it keep
    their last state (not deleted), and the run says which folder, why and how many."""
    for exc in errors:
        try:
            folder = Path(str(exc.filename)).relative_to(base).as_posix() if exc.filename else "."
        except ValueError:  # a folder reached through a link: its files are keyed under the link, not known here
            continue
        prefix = "" if folder == "." else folder + "/"
        kept = [old for key, old in known.items()
                if key[0] == root_key and key not in seen and key[1].startswith(prefix)]
        for old in kept:
            seen.add((old.root, old.rel))
            result.files.append(old)
        result.unlisted.append((root_key, folder, exc.strerror or str(exc), len(kept)))


def files_under(paths: list[Path], known: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The indexed files (`known`'s `(root, rel)` keys) at or under one of `paths`: every file of a root that is, or
    lies in, one of them, and the files of a root that holds one of them. A path is compared in absolute form and
    with its links resolved as far as it exists (roots are recorded resolved), so a share that is gone can be named
    still."""
    wanted = sorted({form for p in paths for form in (os.path.abspath(p), os.path.realpath(p))})
    found = []
    for root, rel in known:
        for path in wanted:
            if _inside(root, [path]):
                found.append((root, rel))
                break
            if _inside(path, [root]) and path != root:  # a folder or a notebook inside the root
                inner = Path(os.path.relpath(path, root)).as_posix()
                if rel == inner or rel.startswith(inner + "/"):
                    found.append((root, rel))
                    break
    return found


def forget_conflict(forget: list[Path], roots: list[Path]) -> str | None:
    """Why a run cannot forget `forget` while it indexes `roots` (one holds the other, compared in absolute form),
    or None when it can."""
    for gone in forget:
        for root in roots:
            a, b = os.path.abspath(gone), os.path.abspath(root)
            if _inside(a, [b]) or _inside(b, [a]):
                return (f"{gone}: cannot forget what this run indexes ({root}); to keep a folder out of a root, name "
                        "it in [discover] exclude")
    return None


def _inside(real: str, roots: list[str]) -> bool:
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


class _Archives:
    """The zip archives met in one walk, each listed once more here (its members' sizes and flags), and the
    archive's own stat: a member is taken as unchanged while its archive's size and modification time are."""

    def __init__(self) -> None:
        self._listed: dict[Path, tuple[os.stat_result | None, dict[str, ZipMember]]] = {}

    def member(self, archive: Path, name: str) -> tuple[os.stat_result, ZipMember] | None:
        """The archive's stat and member `name` of it; None when the archive changed or went since the walk."""
        if archive not in self._listed:
            try:
                self._listed[archive] = (os.stat(archive),
                                         {m.name: m for m in list_members(archive, skip_hidden=False)})
            except OSError:
                self._listed[archive] = (None, {})
        stat, members = self._listed[archive]
        found = members.get(name)
        return (stat, found) if stat is not None and found is not None else None


def _member_record(result: Discovery, archives: _Archives, archive: Path, name: str, key: tuple[str, str],
                   old: FileRecord | None, settings: DiscoverSettings) -> None:
    """Discover member `name` of zip `archive`: unchanged while the archive's size and modification time are (its
    size is the member's, its time the archive's), else read from the archive and hashed."""
    root_key, rel = key
    found = archives.member(archive, name)
    if found is None:
        _unreadable(result, old, (root_key, rel, "cannot read it from its zip archive (the archive changed)"))
        return
    stat, member = found
    if member.encrypted:
        result.unreadable.append((root_key, rel, f"encrypted inside {archive.name}: nbrecall cannot read it"))
        return
    cap = int(settings.max_file_mb * 2**20) if settings.max_file_mb else None
    if cap is not None and member.size > cap:
        result.unreadable.append((root_key, rel, too_large(member.size, settings.max_file_mb)))
        return
    if old is not None and not settings.rehash and (old.size, old.mtime_ns) == (member.size, stat.st_mtime_ns):
        result.files.append(old)
        return
    try:
        data = read_member(archive, name, cap)
    except MemberUnreadable as exc:
        result.unreadable.append((root_key, rel, str(exc)))
        return
    except OSError as exc:
        _unreadable(result, old, (root_key, rel, f"cannot read it from {archive.name}: {exc.strerror or exc}"))
        return
    result.hashed += 1
    record = FileRecord(root_key, rel, member.size, stat.st_mtime_ns, hashlib.sha256(data).hexdigest())
    result.files.append(record)
    (result.touched if old is not None and old.sha256 == record.sha256 else result.changed).append(record)


def discover(
    roots: list[Path], known: dict[tuple[str, str], FileRecord], settings: DiscoverSettings
) -> Discovery:
    """Compare what is on disk under `roots` with `known` (the manifest's files)."""
    if settings.checkpoints not in ("versions", "skip"):
        raise ValueError(f"[discover] checkpoints = {settings.checkpoints!r}: use \"versions\" or \"skip\"")
    checkpoints = settings.checkpoints == "versions"
    result = Discovery()
    seen: set[tuple[str, str]] = set()
    real_roots = [os.path.realpath(r) for r in roots]
    archives = _Archives()
    for root in roots:
        root_key = str(root.resolve())
        base = root.resolve()
        errors: list[OSError] = []
        single = base.is_file() and not is_zip_name(base.name)
        for path in walk_notebooks(
            base,
            skip_hidden=settings.skip_hidden,
            exclude=list(settings.exclude) + ([] if checkpoints else [CHECKPOINTS]),
            follow_symlinks=settings.follow_symlinks,
            enter=frozenset([CHECKPOINTS]) if checkpoints else frozenset(),
            unlisted=errors.append,
            archives=settings.zip_archives,
        ):
            rel = path.name if single else path.relative_to(base).as_posix()
            shown = printable_path(rel)
            key = (root_key, shown)
            if key in seen:
                continue
            seen.add(key)
            # a notebook inside a zip archive (names are looked at first: an ordinary notebook costs no system call)
            zipped = split_member(path) if settings.zip_archives and (in_archive(rel) or is_zip_name(base.name)) \
                else None
            if zipped is not None:
                _member_record(result, archives, *zipped, (root_key, shown), known.get(key), settings)
                continue
            # The manifest, the store and every page need text that encodes as UTF-8: a name that is not UTF-8 (a
            # share with a legacy encoding) is recorded with its bytes escaped, and read back through
            # `notebook_path`; `path` is the file itself
            rel = shown
            # Without follow_symlinks the walk enters no folder link, so only the file itself can be one (one
            # lstat); with it, any folder on the way may be, so the file's real path is what counts.
            link = settings.follow_symlinks or _is_link(path)
            if link:
                real = os.path.realpath(path)
                if not _inside(real, real_roots):
                    if not settings.follow_symlinks:
                        result.unreadable.append((root_key, rel, LINK_OUT))
                        continue
                    if os.path.exists(real):  # a broken link is reported below, as before
                        if not os.access(real, os.R_OK, effective_ids=_EFFECTIVE):
                            result.unreadable.append((root_key, rel, LINK_UNREADABLE))
                            continue
                        result.outside.append((root_key, rel, real))
            try:
                stat = path.stat()
            except FileNotFoundError:
                if not os.path.lexists(path):  # vanished since the walk: gone, like a deleted file
                    seen.discard(key)
                    continue
                result.unreadable.append((root_key, rel, "broken symbolic link (its target does not exist)"))
                continue
            except OSError as exc:
                _unreadable(result, known.get(key), (root_key, rel, f"cannot stat: {exc.strerror or exc}"))
                continue
            if not S_ISREG(stat.st_mode):
                kind = NotARegularFile(path, stat.st_mode).strerror
                result.unreadable.append((root_key, rel, f"cannot read file: {kind}"))
                continue
            if settings.max_file_mb and stat.st_size > settings.max_file_mb * 2**20:
                result.unreadable.append((root_key, rel, too_large(stat.st_size, settings.max_file_mb)))
                continue
            old = known.get(key)
            if old is not None and not settings.rehash and (old.size, old.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
                result.files.append(old)
                continue
            try:
                sha = content_sha256(path)
            except FileNotFoundError:
                seen.discard(key)  # vanished between stat and read
                continue
            except OSError as exc:
                _unreadable(result, old, (root_key, rel, f"cannot read file: {exc.strerror or exc}"))
                continue
            result.hashed += 1
            record = FileRecord(root_key, rel, stat.st_size, stat.st_mtime_ns, sha)
            result.files.append(record)
            (result.touched if old is not None and old.sha256 == sha else result.changed).append(record)
        _keep_unlisted(result, root_key, base, errors, known, seen)
    root_keys = {str(r.resolve()) for r in roots}
    gone = [k for k in known if k[0] in root_keys and k not in seen]
    if not settings.prune_empty_roots:  # an empty mount point must not wipe what was indexed from the share
        held = {k[0] for k in seen}
        empty = {root: sum(1 for k in gone if k[0] == root) for root in root_keys - held}
        result.empty_roots = sorted((root, n) for root, n in empty.items() if n)
        gone = [k for k in gone if k[0] not in empty]
    result.deleted = gone
    return result


_EFFECTIVE = os.access in os.supports_effective_ids


def _is_link(path: Path) -> bool:
    try:
        return S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False
