"""Notebook-level metadata and signals (architecture §7): year, project, author, tags, inputs, health, deprecated."""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath

from nbrecall.config import MetadataSettings
from nbrecall.notebook.analysis import Analysis, mask_magics
from nbrecall.notebook.model import Notebook
from nbrecall.plugins import PluginManager, metadata_fields

_READERS = {
    "read_csv",
    "read_excel",
    "read_parquet",
    "read_json",
    "read_table",
    "read_fwf",
    "read_hdf",
    "read_pickle",
    "read_feather",
    "read_sql",
    "open",
    "loadtxt",
    "genfromtxt",
    "load",
    "fromfile",
    "read_file",
    "imread",
    "Dataset",
    "open_dataset",
    "read_shp",
    "ExcelFile",
}
# A cell can only hold such a call if one of the names is followed by "(": most cells are skipped without parsing.
_READER_CALL = re.compile(r"\b(?:" + "|".join(sorted(_READERS)) + r")\s*\(")
_YEAR = re.compile(r"(?<!\d)(19[89]\d|20[0-4]\d)(?!\d)")


@dataclass
class InputFile:
    """A file the code reads, from a string literal; `sha256` when it resolves to a local file."""

    path: str
    cell: int
    sha256: str | None = None


@dataclass
class NotebookMeta:
    """What filters and priors need to know about a notebook."""

    year: int | None = None
    project: str = ""
    author: str = ""
    tags: list[str] = field(default_factory=list)
    language: str = ""
    language_version: str = ""
    deprecated: bool = False
    deprecated_reason: str = ""
    health: float = 1.0
    monotonic: bool = True
    executed_fraction: float = 1.0
    has_errors: bool = False
    inputs: list[InputFile] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)


def notebook_authors(nb: Notebook) -> str:
    authors = nb.metadata.get("authors")
    if isinstance(authors, list):
        names = [a.get("name", "") if isinstance(a, dict) else a for a in authors]
        return ", ".join(n for n in names if isinstance(n, str) and n)  # a name may be any JSON value
    author = nb.metadata.get("author")
    return str(author) if isinstance(author, str) else ""


def repo_root(folder: Path) -> Path | None:
    """The git work tree holding `folder` (the nearest parent with a `.git` folder or file), None outside one."""
    try:
        folder = folder.resolve()
    except (OSError, RuntimeError):
        return None
    for candidate in (folder, *folder.parents):
        try:
            if (candidate / ".git").exists():
                return candidate
        except OSError:
            return None
    return None


def _head(root: Path) -> str:
    """What HEAD points at (the ref's commit when it is a branch): the key that tells a repository has moved on."""
    try:
        git = root / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: PATH"
            git = (root / git.read_text(errors="replace").partition("gitdir:")[2].strip()).resolve()
        head = (git / "HEAD").read_text(errors="replace").strip()
        if head.startswith("ref:"):
            ref = git / head[4:].strip()
            return ref.read_text(errors="replace").strip() if ref.is_file() else head
        return head
    except OSError:
        return ""


# A repository's history is read once per process and HEAD (one `git log` for all its notebooks, not one per file):
# a bounded cache of a pure function of (work tree, HEAD), so a run over an archive of many repositories stays small.
@functools.lru_cache(maxsize=16)
def _repo_creators(root: str, head: str) -> dict[str, str]:
    """Notebook path (relative to the work tree) → the author of the commit that added it (the oldest add)."""
    del head  # part of the cache key only
    command = [
        "git", "-C", root, "-c", "core.quotepath=off", "-c", "log.showSignature=false", "-c", "core.fsmonitor=false",
        "-c", f"safe.directory={root}", "log", "-z", "--no-textconv", "--diff-filter=A", "--name-only",
        "--format=%x01%an", "--", "*.ipynb",
    ]
    try:
        done = subprocess.run(command, capture_output=True, timeout=120, check=False,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.SubprocessError):
        return {}
    if done.returncode != 0:
        return {}
    creators: dict[str, str] = {}
    for record in done.stdout.decode("utf-8", "replace").split("\x01"):
        author, _, names = record.partition("\0")
        for name in names.split("\0"):
            name = name.strip("\n")
            if name:
                creators[name] = author.strip()  # newest first: the oldest add is written last
    return creators


def git_author(path: Path) -> str:
    """Who added the notebook to its git repository ("" outside a repository, without git, or when untracked)."""
    root = repo_root(path.parent)
    if root is None:
        return ""
    try:
        rel = path.resolve().relative_to(root).as_posix()
    except (OSError, ValueError, RuntimeError):
        return ""
    return _repo_creators(str(root), _head(root)).get(rel, "")


def find_inputs(
    nb: Notebook, base: Path | None, trees: Mapping[str, ast.Module] | None = None
) -> list[InputFile]:
    """String literals passed to reading functions; resolved against the notebook's folder when possible.
    `trees` are the cells' syntax trees by source when the caller has them (`Analysis.trees`)."""
    found: list[InputFile] = []
    seen: set[str] = set()
    for cell in nb.code_cells:
        if not _READER_CALL.search(cell.source):
            continue
        tree = (trees or {}).get(cell.source)
        if tree is None:
            try:
                tree = ast.parse(mask_magics(cell.source))
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            arg = node.args[0]
            if (
                name in _READERS
                and isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and arg.value
            ):
                if arg.value in seen or len(arg.value) > 500:
                    continue
                seen.add(arg.value)
                found.append(InputFile(arg.value, cell.index, _resolve_sha(arg.value, base)))
    return found


def _resolve_sha(literal: str, base: Path | None) -> str | None:
    if (
        base is None
        or literal.startswith(("http://", "https://", "s3://", "\\\\"))
        or PureWindowsPath(literal).drive
    ):
        return None
    candidate = Path(literal) if Path(literal).is_absolute() else base / literal
    try:
        if candidate.is_file() and candidate.stat().st_size <= 512 * 1024**2:
            digest = hashlib.sha256()
            with candidate.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            return digest.hexdigest()
    except OSError:
        return None
    return None


def sidecar_tags(path: Path, suffix: str) -> list[str]:
    """Free-text tags from `NAME.tags.txt` beside the notebook: comma- or line-separated."""
    sidecar = path.with_name(path.stem + suffix)
    try:
        text = sidecar.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [t.strip() for t in re.split(r"[,\n]", text) if t.strip()]


def notebook_meta(
    nb: Notebook, rel_path: str, analysis: Analysis, settings: MetadataSettings, file_path: Path | None = None,
    plugins: PluginManager | None = None,
) -> NotebookMeta:
    """Metadata from path rules, the notebook's own metadata, sidecar tags and the analysis; then the fields of
    the metadata plugins (`plugins`' `nbrecall_notebook_metadata` hook), kept in `extra` and added to the tags as
    `name:value`, so the tag filter finds them (docs/architecture.md, "Plugins")."""
    meta = NotebookMeta(language=nb.language, language_version=nb.language_version)
    posix = rel_path.replace("\\", "/")
    for rule in settings.compiled_rules():
        match = rule.search(posix)
        if match:
            for key, value in match.groupdict().items():
                if value is None:
                    continue
                if key == "year" and value.isascii() and value.isdigit():  # "²".isdigit() too
                    meta.year = int(value) if int(value) < 2**31 else None  # the store's year is an int32
                elif key == "project":
                    meta.project = value
                elif key == "author":
                    meta.author = value
                else:
                    meta.extra[key] = value
    if meta.year is None:
        years = _YEAR.findall(posix)
        meta.year = int(years[-1]) if years else None
    # Never the file's owner: on a server that is the account that copied the share (`root`), not who wrote it
    meta.author = meta.author or notebook_authors(nb) or (git_author(file_path) if file_path else "")
    tags = nb.metadata.get("tags")
    tag_list = [str(t) for t in tags] if isinstance(tags, list) else []
    for cell in nb.cells:
        tag_list.extend(cell.tags)
    if file_path is not None:
        tag_list.extend(sidecar_tags(file_path, settings.sidecar_suffix))
    meta.tags = sorted(set(tag_list))
    deprecated_tags = set(settings.deprecated_tags) & set(meta.tags)
    if deprecated_tags:
        meta.deprecated, meta.deprecated_reason = True, f"tag {sorted(deprecated_tags)[0]}"
    for pattern in settings.deprecated_paths:
        if re.search(pattern, posix):
            meta.deprecated, meta.deprecated_reason = True, f"path matches {pattern}"
    order = analysis.order
    meta.health = analysis.health
    meta.monotonic = order.monotonic
    meta.executed_fraction = order.executed_fraction
    meta.has_errors = order.has_errors
    meta.inputs = find_inputs(nb, file_path.parent if file_path else None, analysis.trees)
    if plugins is not None:
        found = metadata_fields(plugins, posix, file_path, nb, meta)
        meta.extra.update(found)
        meta.tags = sorted(set(meta.tags) | {f"{key}:{value}" for key, value in found.items()})
    return meta
