"""Which wheels a notebook's imports need under Pyodide (`plan_wheels`): from the `render.pyodide_wheels` folder,
Pyodide's own lock file, the standard library or the notebook's folder; what is none of these is reported."""

from __future__ import annotations

import json
import re
import sys
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from functools import lru_cache
from pathlib import Path
from typing import Any

RUNNER_DIR = Path(__file__).with_name("pyodide_runner")
WHEELS_MOUNT = "/nbrecall/wheels"
OFFLINE = "package not available offline"
# the platform Pyodide's wheels are built for, for requirement markers of wheels in the folder
MARKER_ENV = {"sys_platform": "emscripten", "platform_system": "Emscripten", "platform_machine": "wasm32",
              "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython",
              "python_version": "3.14", "python_full_version": "3.14.2", "extra": ""}


def pyodide_package() -> Path:
    return RUNNER_DIR / "node_modules" / "pyodide"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Wheel:
    """A wheel file of the local folder."""

    file: str
    name: str  # normalised distribution name
    imports: list[str]
    requires: list[str]  # normalised names of its unconditional (for Pyodide) requirements


@lru_cache(maxsize=1)
def stdlib_modules() -> frozenset[str]:
    names = set(sys.stdlib_module_names)
    try:
        with zipfile.ZipFile(pyodide_package() / "python_stdlib.zip") as zf:
            names.update(n.split("/")[0].removesuffix(".py") for n in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        pass
    return frozenset(names)


@lru_cache(maxsize=1)
def _lock() -> dict[str, Any]:
    try:
        return dict(json.loads((pyodide_package() / "pyodide-lock.json").read_text())["packages"])
    except (OSError, ValueError, KeyError):
        return {}


def _wheel_compatible(file: str) -> bool:
    parts = file[: -len(".whl")].split("-")
    if len(parts) < 5:
        return False
    platform = parts[-1]
    return platform == "any" or "wasm32" in platform


def _read_wheel(path: Path) -> Wheel | None:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            info = next((n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")), None)
            meta = zf.read(f"{info}/METADATA").decode("utf-8", "replace") if info else ""
            top = zf.read(f"{info}/top_level.txt").decode() if info and f"{info}/top_level.txt" in names else ""
    except (OSError, zipfile.BadZipFile, KeyError):
        return None
    headers = HeaderParser().parsestr(meta)
    name = _normalise(headers.get("Name") or path.name.split("-")[0])
    imports = [t.strip() for t in top.splitlines() if t.strip()]
    if not imports:
        for entry in names:
            head = entry.split("/")[0]
            if head.endswith((".dist-info", ".data")) or head.startswith("_") and head.endswith(".pth"):
                continue
            mod = head.split(".")[0] if "/" not in entry else head
            if mod and mod.isidentifier():
                imports.append(mod)
    requires: list[str] = []
    for raw in headers.get_all("Requires-Dist") or []:
        try:
            from packaging.requirements import Requirement

            req = Requirement(raw)
        except Exception:
            continue
        if req.marker is not None:
            try:
                if not req.marker.evaluate(MARKER_ENV):
                    continue
            except Exception:
                continue
        requires.append(_normalise(req.name))
    return Wheel(path.name, name, sorted(set(imports)), requires)


@dataclass
class WheelPlan:
    """What to load for a notebook: `load` goes to `pyodide.loadPackage` (lock names or sandbox wheel paths)."""

    load: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # module → why
    notes: list[str] = field(default_factory=list)


def plan_wheels(imports: set[str], wheels_dir: Path | None, local: set[str]) -> WheelPlan:
    """Resolve the notebook's imports against the wheel folder, Pyodide's lock file and the standard library."""
    plan = WheelPlan()
    files: dict[str, Wheel] = {}
    if wheels_dir is not None and wheels_dir.is_dir():
        for path in sorted(wheels_dir.glob("*.whl")):
            if not _wheel_compatible(path.name):
                plan.notes.append(f"wheel {path.name}: not pure-Python nor wasm32, not usable in Pyodide")
                continue
            wheel = _read_wheel(path)
            if wheel is not None:
                files[path.name] = wheel
    lock = _lock()
    present = set(files)
    lock_files = {spec.get("file_name"): name for name, spec in lock.items()}
    folder = {w.name: w for f, w in files.items() if f not in lock_files}  # wheels not from Pyodide's release
    by_import: dict[str, Wheel] = {}
    for wheel in folder.values():
        for mod in wheel.imports:
            by_import.setdefault(mod, wheel)
    lock_by_import: dict[str, str] = {}
    for name, spec in lock.items():
        for mod in spec.get("imports") or []:
            lock_by_import.setdefault(mod, name)
    chosen: list[str] = []

    def missing_lock_files(name: str, seen: set[str]) -> list[str]:
        if name in seen:
            return []
        seen.add(name)
        spec = lock.get(name)
        if spec is None:
            return [name]
        out = [] if spec.get("file_name") in present else [str(spec.get("file_name") or name)]
        for dep in spec.get("depends") or []:
            out += missing_lock_files(dep, seen)
        return out

    def add_lock(name: str) -> list[str]:
        missing = missing_lock_files(name, set())
        if not missing and name not in chosen:
            chosen.append(name)
        return missing

    def add_wheel(wheel: Wheel, seen: set[str]) -> None:
        if wheel.name in seen:
            return
        seen.add(wheel.name)
        for req in wheel.requires:
            if req in folder:
                add_wheel(folder[req], seen)
            elif (req in lock and not add_lock(req)) or (req not in lock and req in stdlib_modules()):
                continue
            else:
                plan.notes.append(f"wheel {wheel.file} requires {req}: not in render.pyodide_wheels")
        path = f"{WHEELS_MOUNT}/{wheel.file}"
        if path not in chosen:
            chosen.append(path)

    for mod in sorted(imports):
        if mod in by_import:
            add_wheel(by_import[mod], set())
        elif mod in lock_by_import:
            missing = add_lock(lock_by_import[mod])
            if missing:
                plan.unavailable[mod] = ("a Pyodide package whose wheel files are not in render.pyodide_wheels: "
                                         + ", ".join(missing[:6]))
        elif mod in stdlib_modules() or mod in local or mod in ("js", "pyodide", "pyodide_js", "IPython"):
            continue
        else:
            plan.unavailable[mod] = "not in Pyodide's standard library nor in render.pyodide_wheels"
    plan.load = chosen
    for mod, why in plan.unavailable.items():
        plan.notes.append(f"{OFFLINE}: {mod} ({why})")
    return plan


def local_modules(folder: Path) -> set[str]:
    """Modules the notebook's own folder provides (`helper.py`, `pkg/`)."""
    names: set[str] = set()
    try:
        for entry in folder.iterdir():
            if entry.suffix == ".py" or (entry.is_dir() and entry.name.isidentifier()):
                names.add(entry.stem if entry.suffix == ".py" else entry.name)
    except OSError:
        pass
    return names
