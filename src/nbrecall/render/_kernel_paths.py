"""Windows/UNC path mapping, run inside the sandboxed kernel before any user code (and imported by `paths.py`).

Standard library only: this file is bound read-only into the sandbox and executed (in a namespace of its own,
`__name__ == "_nbrecall_paths"`) by a one-line IPython startup file, where nbrecall itself is not importable.
Rules arrive as JSON in the environment variable `NBRECALL_PATH_MAP` (a list of `[from, to]`, `to` already
absolute inside the sandbox), which is removed from `os.environ` once read.

What it patches, and so what reaches the data folder: `builtins.open` / `io.open` (hence `pathlib.Path.open`,
`read_text`, pandas and numpy readers, PIL, zipfile-based readers such as openpyxl), `os.open`, `os.stat`,
`os.lstat`, `os.access`, `os.listdir`, `os.scandir`, `os.chdir` (hence `os.path.exists/isfile/isdir/getsize`,
`pathlib` stat, `iterdir`, `glob`, `os.walk`) and `glob.glob` / `glob.iglob` (patterns). What it cannot reach:
opens done in C (`sqlite3.connect`, `h5py`, `netCDF4`, ...) — give those a POSIX rule (a bind mount) instead.
Matching is case-insensitive, `/` and `\\` are equivalent, and each remaining component is matched
case-insensitively against the data folder when the exact name does not exist (Windows semantics).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def _norm(text: str) -> str:
    return text.replace("/", "\\").rstrip("\\").lower()


def is_windows_path(text: str) -> bool:
    """`\\\\server\\share…`, `//server/share…` or `X:\\…` / `X:/…`."""
    if text[:2] in ("\\\\", "//") and len(text) > 2 and text[2] not in "\\/":
        return True
    return len(text) > 2 and text[0].isalpha() and text[1] == ":" and text[2] in "\\/"


def _resolve_ci(base: str, parts: list[str]) -> str:
    """Join `parts` under `base`, matching each component case-insensitively when the exact name is absent."""
    current = base
    for i, part in enumerate(parts):
        candidate = os.path.join(current, part)
        if not os.path.lexists(candidate):
            try:
                folded = part.casefold()
                match = next((n for n in sorted(_listdir(current)) if n.casefold() == folded), None)
            except OSError:
                match = None
            if match is None:
                return os.path.join(candidate, *parts[i + 1 :])
            candidate = os.path.join(current, match)
        current = candidate
    return current


def windows_target(text: str, rules: list[tuple[str, str]], resolve: bool = True) -> str | None:
    """The sandbox path for a Windows/UNC path under one of `rules` (longest `from` first), else None.

    With `resolve`, components missing under their exact name are looked up case-insensitively."""
    if not is_windows_path(text):
        return None
    key = _norm(text)
    for source, target in sorted(rules, key=lambda r: -len(_norm(r[0]))):
        prefix = _norm(source)
        if key == prefix or key.startswith(prefix + "\\"):
            rest = [p for p in text.replace("/", "\\")[len(prefix) :].split("\\") if p and p != "."]
            return _resolve_ci(target, rest) if resolve else os.path.join(target, *rest)
    return None


_listdir = os.listdir  # the unpatched one, for _resolve_ci


def install(rules: list[tuple[str, str]]) -> None:
    """Patch the file functions listed in the module docstring so Windows/UNC paths under `rules` resolve."""
    import builtins
    import functools
    import glob
    import io

    if not rules:
        return

    def mapped(path: Any) -> Any:
        if isinstance(path, int):
            return path
        try:
            raw = os.fspath(path)
        except TypeError:
            return path
        text = os.fsdecode(raw)
        target = windows_target(text, rules)
        if target is None:
            return path
        return os.fsencode(target) if isinstance(raw, bytes) else target

    def first_arg(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if args:
                args = (mapped(args[0]), *args[1:])
            for key in ("file", "path", "pathname"):
                if key in kwargs:
                    kwargs[key] = mapped(kwargs[key])
            return fn(*args, **kwargs)

        wrapper.__nbrecall_original__ = fn  # type: ignore[attr-defined]  # a marker attribute on the function
        return wrapper

    opener = first_arg(builtins.open)
    builtins.open = opener
    io.open = opener
    for name in ("open", "stat", "lstat", "access", "listdir", "scandir", "chdir"):
        setattr(os, name, first_arg(getattr(os, name)))
    glob.glob = first_arg(glob.glob)
    glob.iglob = first_arg(glob.iglob)
    try:  # IPython puts its own `open` (which captured io.open at import) into the user's namespace
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None and "open" in shell.user_ns:
        own = first_arg(shell.user_ns["open"])
        shell.user_ns["open"] = own
        if "open" in shell.user_ns_hidden:
            shell.user_ns_hidden["open"] = own


def _startup() -> None:
    import json

    raw = os.environ.pop("NBRECALL_PATH_MAP", "")
    if raw:
        install([(str(a), str(b)) for a, b in json.loads(raw)])


if __name__ == "_nbrecall_paths":
    # Executed by the sandbox's startup line in a namespace of its own, so no names leak to the user's.
    _startup()
