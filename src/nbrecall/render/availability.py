"""Whether this machine can re-render (architecture §11): bubblewrap and prlimit work here, and an interpreter
runs and has ipykernel. Asked once per process (cached); `sandbox` and `pyodide` refuse to run without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from typing import Any


class SandboxUnavailable(RuntimeError):
    """bubblewrap or prlimit is missing or cannot create a sandbox here; nothing is run unsandboxed."""


@lru_cache(maxsize=1)
def sandbox_problem() -> str:
    """'' when bubblewrap and prlimit work here, else why not (one line)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap not found (install bubblewrap: apt-get install -y bubblewrap)"
    if shutil.which("prlimit") is None:
        return "prlimit not found (install util-linux)"
    try:
        probe = subprocess.run(
            [bwrap, "--unshare-net", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/",
             "--proc", "/proc", "--dev", "/dev", "true"],
            capture_output=True, timeout=20, text=True,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed to start: {exc}"
    if probe.returncode != 0:
        return f"bwrap cannot create a sandbox here: {probe.stderr.strip()[:200]}"
    return ""


def check_sandbox() -> None:
    problem = sandbox_problem()
    if problem:
        raise SandboxUnavailable(problem)


_PROBE = (
    "import sys, json, importlib.util as u; print(json.dumps({'paths': [sys.prefix, sys.base_prefix, "
    "sys.exec_prefix, sys.base_exec_prefix], 'version': list(sys.version_info[:3]), "
    "'ipykernel': u.find_spec('ipykernel') is not None}))"
)


@lru_cache(maxsize=32)
def interpreter_facts(python: str) -> dict[str, Any]:
    """Prefixes, version and whether ipykernel is there, for an interpreter (asked once per process);
    `{"problem": why}` when it cannot be run."""
    if os.path.abspath(python) == sys.executable:  # (a link to it elsewhere may find another environment)
        return {"paths": [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix],
                "version": list(sys.version_info[:3]), "ipykernel": True}
    if not os.access(python, os.X_OK):
        return {"problem": f"{python}: no such interpreter"}
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
        facts = json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return {"problem": f"{python} does not run: {str(exc)[:120]}"}
    return facts if isinstance(facts, dict) else {"problem": f"{python}: unexpected answer"}


def interpreter_problem(python: str) -> str:
    """'' when `python` can run a kernel (it runs and has ipykernel), else why not (one line)."""
    facts = interpreter_facts(python)
    if facts.get("problem"):
        return str(facts["problem"])
    if not facts.get("ipykernel"):
        return f"{python} has no ipykernel (install it in that environment: python -m pip install ipykernel)"
    return ""


@lru_cache(maxsize=32)
def interpreter_prefixes(python: str) -> tuple[str, ...]:
    """The folders the interpreter needs (its prefix, base prefix, executable's real location), deduplicated."""
    facts = interpreter_facts(python)
    if facts.get("problem"):
        raise SandboxUnavailable(str(facts["problem"]))
    paths = list(facts["paths"])
    real = os.path.realpath(python)
    paths.append(os.path.dirname(os.path.dirname(real)))
    paths.append(os.path.dirname(os.path.dirname(os.path.abspath(python))))  # the environment as named
    keep: list[str] = []
    for p in sorted({os.path.realpath(p) for p in paths} | {os.path.abspath(p) for p in paths}, key=len):
        if p in ("/", "/usr") or p.startswith("/usr/") or any(p.startswith(k + "/") for k in keep):
            continue
        keep.append(p)
    return tuple(keep)
