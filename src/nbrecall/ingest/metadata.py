"""Notebook-level metadata and signals (DESIGN §5): year, project, author, tags, inputs, health, deprecated."""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath

from nbrecall.config import MetadataSettings
from nbrecall.notebook.analysis import Analysis, mask_magics
from nbrecall.notebook.model import Notebook

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


def file_owner(path: Path) -> str:
    try:
        return path.owner()
    except (OSError, KeyError, NotImplementedError):
        return ""


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
    nb: Notebook, rel_path: str, analysis: Analysis, settings: MetadataSettings, file_path: Path | None = None
) -> NotebookMeta:
    """Metadata from path rules, the notebook's own metadata, sidecar tags and the analysis."""
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
    meta.author = meta.author or notebook_authors(nb) or (file_owner(file_path) if file_path else "")
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
    return meta
