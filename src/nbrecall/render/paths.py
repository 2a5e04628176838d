"""Path mapping for re-rendering: absolute POSIX and Windows/UNC paths in old notebooks → the data folder.

Rules come from `nbrecall.toml`:

    [render]
    data_dir = "/srv/nbrecall-data"
    [[render.path_map]]
    from = '\\\\srv-calc-01\\projects'   # UNC share
    to = 'projects'                      # relative to data_dir
    [[render.path_map]]
    from = 'P:\\'                        # drive letter
    to = 'projects'
    [[render.path_map]]
    from = '/mnt/share'                  # absolute POSIX path
    to = 'share'

Inside the sandbox the data folder is mounted read-only at `DATA_MOUNT` (`/data`). A POSIX rule becomes a
read-only bind mount (`<data_dir>/share` at `/mnt/share`), so it works for every kind of open, C-level ones
included. A Windows/UNC rule is applied by `_kernel_paths.py`, run in the kernel before user code, which patches
the Python file functions (see that module for the list and its limit: C-level opens are not reached).

`scan_notebook` reads the string literals of a notebook's code and reports the absolute paths no rule maps,
and the mapped ones whose target is missing from the data folder, before anything runs.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbrecall.notebook.model import Notebook
from nbrecall.render._kernel_paths import is_windows_path, windows_target

DATA_MOUNT = "/data"  # the data folder, read-only
PROJECT_MOUNT = "/project"  # the tree the notebook was found in, read-only; its own folder is a writable copy
HOME = "/home/nb"  # tmpfs

# Mount points a POSIX rule may not shadow: the system and the sandbox's own layout.
RESERVED = ("/bin", "/dev", "/etc", "/lib", "/lib64", "/proc", "/sbin", "/sys", "/tmp", "/usr", "/run",
            DATA_MOUNT, PROJECT_MOUNT, "/home")
# Absolute POSIX literals that are not data paths and are not worth reporting.
_SYSTEM_PREFIXES = ("/dev/", "/proc/", "/sys/", "/tmp/", "/usr/", "/etc/", "/bin/", "/lib/", "/var/", "/opt/conda")


class PathRuleError(ValueError):
    """A `[[render.path_map]]` entry that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class PathRule:
    """`source` (a POSIX, drive or UNC prefix, as written in notebooks) → `target` (relative to the data folder)."""

    source: str
    target: str

    @property
    def windows(self) -> bool:
        return is_windows_path(self.source) or bool(re.fullmatch(r"[A-Za-z]:[\\/]?", self.source))

    @property
    def sandbox_target(self) -> str:
        """Where the target lives inside the sandbox."""
        return posixpath.normpath(posixpath.join(DATA_MOUNT, self.target)) if self.target not in ("", ".") \
            else DATA_MOUNT

    @property
    def posix_source(self) -> str:
        return posixpath.normpath(self.source)


def parse_rules(raw: list[Any], reserved_extra: tuple[str, ...] = ()) -> list[PathRule]:
    """Check and convert the `path_map` tables of the config; raise `PathRuleError` with the entry's position."""
    rules: list[PathRule] = []
    for i, entry in enumerate(raw or []):
        where = f"render.path_map[{i}]"
        if isinstance(entry, PathRule):
            rules.append(entry)
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("from"), str) or "to" not in entry:
            raise PathRuleError(f"{where}: needs string keys 'from' and 'to'")
        unknown = set(entry) - {"from", "to"}
        if unknown:
            raise PathRuleError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        source, target = entry["from"], str(entry["to"])
        if posixpath.isabs(target) or ".." in Path(target).parts:
            raise PathRuleError(f"{where}: 'to' must be relative to the data folder, got {target!r}")
        rule = PathRule(source, target.strip("/") or ".")
        if not rule.windows:
            if not source.startswith("/") or rule.posix_source == "/":
                raise PathRuleError(f"{where}: 'from' must be an absolute POSIX path, a drive (P:\\) or a UNC "
                                    f"path (\\\\server\\share), got {source!r}")
            for r in RESERVED + reserved_extra:
                if rule.posix_source == r or rule.posix_source.startswith(r.rstrip("/") + "/") \
                        or r.startswith(rule.posix_source + "/"):
                    raise PathRuleError(f"{where}: {source!r} would shadow {r} inside the sandbox")
        rules.append(rule)
    return rules


def windows_rules(rules: list[PathRule]) -> list[tuple[str, str]]:
    """The `[from, sandbox target]` pairs handed to the kernel's startup file."""
    return [(r.source, r.sandbox_target) for r in rules if r.windows]


def posix_binds(rules: list[PathRule], data_dir: Path | None) -> tuple[list[tuple[Path, str]], list[str]]:
    """Read-only bind mounts `(host folder, sandbox path)` for POSIX rules, shortest first; and notes for rules
    whose target is missing from the data folder (those are not mounted)."""
    binds: list[tuple[Path, str]] = []
    notes: list[str] = []
    for rule in sorted((r for r in rules if not r.windows), key=lambda r: len(r.posix_source)):
        host = (data_dir / rule.target) if data_dir is not None else None
        if host is None or not host.exists():
            notes.append(f"path rule {rule.source} → {rule.target}: target not in the data folder, not mounted")
            continue
        binds.append((host.resolve(), rule.posix_source))
    return binds, notes


def map_path(text: str, rules: list[PathRule]) -> str | None:
    """The sandbox path an absolute path literal resolves to under `rules`, or None when no rule maps it.

    (Windows matching here is the kernel's, without the case-insensitive lookup of existing names.)
    """
    if is_windows_path(text):
        return windows_target(text, [(r.source, r.sandbox_target) for r in rules if r.windows], resolve=False)
    if not text.startswith("/"):
        return None
    norm = posixpath.normpath(text)
    for rule in sorted((r for r in rules if not r.windows), key=lambda r: -len(r.posix_source)):
        src = rule.posix_source
        if norm == src or norm.startswith(src + "/"):
            return norm  # bind-mounted at the same path
    return None


def host_path(sandbox_path: str, rules: list[PathRule], data_dir: Path | None) -> Path | None:
    """Where a sandbox path under the data folder or a POSIX rule lives on the host (for the missing-file check)."""
    if data_dir is None:
        return None
    for rule in sorted((r for r in rules if not r.windows), key=lambda r: -len(r.posix_source)):
        src = rule.posix_source
        if sandbox_path == src or sandbox_path.startswith(src + "/"):
            return data_dir / rule.target / sandbox_path[len(src) :].lstrip("/")
    if sandbox_path == DATA_MOUNT or sandbox_path.startswith(DATA_MOUNT + "/"):
        return data_dir / sandbox_path[len(DATA_MOUNT) :].lstrip("/")
    return None


@dataclass
class PathScan:
    """What the static scan of a notebook's string literals found (each list sorted, without duplicates)."""

    mapped: list[tuple[str, str]] = field(default_factory=list)  # (literal, sandbox path)
    unmapped: list[str] = field(default_factory=list)  # absolute paths no rule maps
    missing: list[str] = field(default_factory=list)  # mapped, but not in the data folder

    def to_dict(self) -> dict[str, Any]:
        return {"mapped": [list(m) for m in self.mapped], "unmapped": self.unmapped, "missing": self.missing}


_MAGIC_LINE = re.compile(r"^\s*[%!]")
_STRING_RE = re.compile(r"""[rRbBuU]{0,2}("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')""")
_URL_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def _literals(source: str) -> list[str]:
    """String constants of a code cell; IPython magic lines are blanked; Python-2 code falls back to a regex."""
    if source.lstrip().startswith("%%"):
        return []
    code = "\n".join("" if _MAGIC_LINE.match(line) else line for line in source.splitlines())
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        out = []
        for m in _STRING_RE.finditer(code):
            token = m.group(0)
            raw = token[: len(token) - len(m.group(1))].lower()
            body = m.group(1)[1:-1]
            out.append(body if "r" in raw else body.replace("\\\\", "\\"))
        return out
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _looks_like_path(text: str) -> bool:
    if "\n" in text or len(text) > 400 or len(text) < 3 or _URL_RE.match(text):
        return False
    if is_windows_path(text):
        return True
    if not text.startswith("/") or text.startswith("//") or " " in text.strip() and "/" not in text[1:]:
        return False
    if text.startswith(_SYSTEM_PREFIXES) or not re.match(r"^/[\w.\-~]", text):
        return False
    return "/" in text[1:] or "." in text


def scan_notebook(notebook: Notebook, rules: list[PathRule], data_dir: Path | None) -> PathScan:
    """Report absolute path literals of `notebook`'s code: mapped, unmapped, and mapped-but-missing."""
    mapped: dict[str, str] = {}
    unmapped: set[str] = set()
    missing: set[str] = set()
    for cell in notebook.code_cells:
        for literal in _literals(cell.source):
            text = literal.strip()
            if not _looks_like_path(text):
                continue
            target = map_path(text, rules)
            if target is None:
                unmapped.add(text)
                continue
            mapped[text] = target
            host = host_path(target, rules, data_dir)
            if host is not None and not any(ch in text for ch in "*?[{") and not host.exists():
                missing.add(text)
    return PathScan(sorted(mapped.items()), sorted(unmapped), sorted(missing))
