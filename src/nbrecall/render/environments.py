"""Render environments: which interpreter runs a notebook, and the display defaults it ran with.

An archive spans years of library versions: one interpreter for every notebook makes old notebooks stale for
reasons nobody cares about (`np.float` is gone, a sympy function moved). `[[render.environment]]` rules in
nbrecall.toml map notebooks to interpreters the administrator keeps (a virtualenv or a conda env with ipykernel
inside), first match wins, else `render.python` (default: nbrecall's own):

    [[render.environment]]
    name = "py36-2018"                    # shown in results and the drift report
    python = "/opt/envs/py36/bin/python"  # or env = "/opt/envs/py36" (its bin/python)
    path = "courses/2018/*"               # glob on the path under its root (`*` crosses folders), optional
    kernel = "python3"                    # the notebook's kernelspec name, optional
    language_version = "3.6"              # prefix of the notebook's language_info.version, optional
    kernel_config = ""                    # an IPython config file for its kernels, optional

A rule with no `path`, `kernel` or `language_version` matches every notebook (a default). The sandbox binds the
chosen interpreter's prefixes read-only (`availability.interpreter_prefixes`).

Display defaults (`kernel_config_for`): the kernel also gets the IPython configuration the notebook was rendered
with, so a figure is drawn at the original's size instead of compared across sizes: the project's own
`ipython_kernel_config.py` (the nearest one in the notebook's folder or above it, up to the root it was found
under: course repositories ship one to set figure formats and DPI), then matplotlib's `figure.dpi` and default
`figure.figsize` as the stored figures show them (PNG resolution and `<Figure size WxH …>` of figures whose
cell sets no size) and the inline backend's figure formats (PNG, SVG, PDF) the stored figures have.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbrecall.notebook.model import Notebook

PROJECT_CONFIG_NAMES = ("ipython_kernel_config.py",)
_RULE_KEYS = {"name", "python", "env", "path", "kernel", "language_version", "kernel_config"}


class EnvironmentRuleError(ValueError):
    """A `[[render.environment]]` rule that cannot be used; the message names the rule and the key."""


@dataclass
class EnvironmentRule:
    name: str
    python: str
    path: str = ""
    kernel: str = ""
    language_version: str = ""
    kernel_config: str = ""

    def matches(self, rel_path: str, notebook: Notebook) -> bool:
        if self.path and not (fnmatch.fnmatchcase(rel_path, self.path)
                              or fnmatch.fnmatchcase(rel_path, self.path.rstrip("/") + "/*")):
            return False
        if self.kernel and notebook.kernel_name != self.kernel:
            return False
        if self.language_version:
            want = self.language_version.split(".")
            have = (notebook.language_version or "").split(".")
            if have[: len(want)] != want:
                return False
        return True


def parse_environments(raw: list[dict[str, Any]]) -> list[EnvironmentRule]:
    """Rules from the config's list of tables; `env = FOLDER` means FOLDER/bin/python."""
    rules: list[EnvironmentRule] = []
    for number, item in enumerate(raw, 1):
        where = f"render.environment #{number}"
        if not isinstance(item, dict):
            raise EnvironmentRuleError(f"{where}: must be a table")
        unknown = set(item) - _RULE_KEYS
        if unknown:
            raise EnvironmentRuleError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                                       f"(known: {', '.join(sorted(_RULE_KEYS))})")
        python = str(item.get("python") or "")
        if not python and item.get("env"):
            python = str(Path(str(item["env"])) / "bin" / "python")
        if not python:
            raise EnvironmentRuleError(f"{where}: needs python = '/path/to/bin/python' or env = '/path/to/env'")
        if not Path(python).is_absolute():
            raise EnvironmentRuleError(f"{where}: python must be an absolute path, not {python!r}")
        rules.append(EnvironmentRule(
            name=str(item.get("name") or Path(python).parent.parent.name or python),
            python=python, path=str(item.get("path") or ""), kernel=str(item.get("kernel") or ""),
            language_version=str(item.get("language_version") or ""),
            kernel_config=str(item.get("kernel_config") or ""),
        ))
    return rules


def pick_environment(rules: list[EnvironmentRule], rel_path: str, notebook: Notebook) -> EnvironmentRule | None:
    """The first rule that matches the notebook (its path under its root, kernel, language version), or None."""
    return next((rule for rule in rules if rule.matches(rel_path, notebook)), None)


# ---------------------------------------------------------------------------------------------------------------
# Display defaults

_FIGURE_SIZE_RE = re.compile(r"<Figure size (\d+)x(\d+) with \d+ Axes>")
_SETS_SIZE_RE = re.compile(r"figsize|set_size_inches|rcParams|rc\(|style\.use|%config|set_dpi|dpi\s*=")


def _png_dpi(value: Any) -> float | None:
    """The resolution matplotlib wrote into a PNG (its pHYs chunk), read from the header only."""
    from PIL import Image

    try:
        data = base64.b64decode("".join(str(value).split())[:4096] + "==", validate=False)
        img = Image.open(io.BytesIO(data))
        if "matplotlib" not in str(img.info.get("Software", "")).lower():
            return None
        dpi = img.info.get("dpi")
    except (OSError, ValueError, binascii.Error, SyntaxError):
        return None
    return round(float(dpi[0])) if dpi else None


_FORMATS = {"image/png": "png", "image/svg+xml": "svg", "application/pdf": "pdf", "image/jpeg": "jpeg"}


def figure_formats(notebook: Notebook) -> set[str]:
    """The inline backend's figure formats as the stored matplotlib figures show them (`{"svg", "pdf"}`), when
    at least three quarters of them agree; else an empty set."""
    seen: Counter[frozenset[str]] = Counter()
    for cell in notebook.code_cells:
        for out in cell.outputs:
            if _FIGURE_SIZE_RE.search(str(out.data.get("text/plain", ""))) or "Figure" in str(
                    out.data.get("text/plain", ""))[:40]:
                formats = frozenset(_FORMATS[m] for m in out.data if m in _FORMATS)
                if formats:
                    seen[formats] += 1
    if not seen:
        return set()
    formats, count = seen.most_common(1)[0]
    return set(formats) if count >= sum(seen.values()) * 0.75 else set()


def display_defaults(notebook: Notebook) -> dict[str, Any]:
    """matplotlib rc values (`figure.dpi`, `figure.figsize`) that the stored figures were drawn with, when they
    say so consistently; {} otherwise."""
    dpis: Counter[float] = Counter()
    sizes: Counter[tuple[int, int]] = Counter()
    for cell in notebook.code_cells:
        free = not _SETS_SIZE_RE.search(cell.source)
        for out in cell.outputs:
            if "image/png" not in out.data or (out.metadata or {}).get("image/png", {}).get("width"):
                continue  # a PNG shown at another width (retina) does not tell the figure's dpi
            dpi = _png_dpi(out.data["image/png"])
            if dpi is None:
                continue
            if free:
                dpis[dpi] += 1
            match = _FIGURE_SIZE_RE.search(str(out.data.get("text/plain", "")))
            if match and free:
                sizes[(int(match.group(1)), int(match.group(2)))] += 1
    if not dpis:
        return {}
    dpi, count = dpis.most_common(1)[0]
    if count < sum(dpis.values()) * 0.75 or not 30 <= dpi <= 300:
        return {}
    rc: dict[str, Any] = {"figure.dpi": dpi}
    if sizes:
        (width, height), count = sizes.most_common(1)[0]
        if count >= sum(sizes.values()) * 0.75:
            rc["figure.figsize"] = [round(width / dpi, 3), round(height / dpi, 3)]
    return rc


def project_kernel_config(notebook_dir: Path, root: Path | None) -> Path | None:
    """The nearest `ipython_kernel_config.py` in the notebook's folder or above it, up to `root`."""
    folder = notebook_dir.resolve()
    top = root.resolve() if root is not None else folder
    while True:
        for name in PROJECT_CONFIG_NAMES:
            candidate = folder / name
            if candidate.is_file():
                return candidate
        if folder == top or folder.parent == folder or not folder.is_relative_to(top):
            return None
        folder = folder.parent


def kernel_config_for(notebook: Notebook, notebook_dir: Path, root: Path | None,
                      rule: EnvironmentRule | None, use_project_config: bool = True,
                      pin_display: bool = True) -> tuple[str, list[str]]:
    """The text of an IPython config file for the notebook's kernel ('' when nothing is to be set) and notes
    saying what it sets. Later parts win: the project's file, the rule's file, then the stored figures' rc."""
    parts: list[str] = []
    notes: list[str] = []
    files = []
    if use_project_config:
        found = project_kernel_config(notebook_dir, root)
        if found is not None:
            files.append(found)
    if rule is not None and rule.kernel_config:
        files.append(Path(rule.kernel_config))
    for path in files:
        try:
            parts.append(path.read_text(encoding="utf-8"))
            notes.append(f"kernel configured by {path.name} ({path.parent})")
        except (OSError, UnicodeDecodeError) as exc:
            notes.append(f"kernel config {path} not read: {exc}")
    # PDF copies are never compared (only drawn images are): not asking for them saves the kernel the time
    formats = (figure_formats(notebook) - {"pdf"} or {"svg"}) if pin_display and figure_formats(notebook) else set()
    if formats:
        parts.append(f"c.InlineBackend.figure_formats = {sorted(formats)!r}")
        notes.append("figures drawn as " + ", ".join(sorted(formats)) + " as the stored figures are")
    rc = display_defaults(notebook) if pin_display else {}
    if rc:
        parts.append(f"c.InlineBackend.rc.update({rc!r})")
        notes.append("figures drawn with the stored figures' " + ", ".join(f"{k} = {v}" for k, v in rc.items()))
    text = "\n".join(parts)
    return (text + "\n" if text else ""), notes
