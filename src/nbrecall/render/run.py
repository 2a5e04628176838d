"""Render notebooks: read, scan paths, execute in the sandbox, compare, store — one notebook or many in a pool.

Stored per notebook, named by the SHA-256 of the original file (so a result stays valid until the file changes):

    <out>/<sha256>.json    RenderResult.to_dict(): status, reason, per-cell statuses, path scan, execution facts
    <out>/<sha256>.ipynb   the executed copy (nbformat 4.5; cell ids are the original's ids, synthetic ones too)

`<out>` defaults to `<index>/renders`. The original files are only ever read.
"""

from __future__ import annotations

import datetime as _dt
import json
import multiprocessing
import os
import platform
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbformat import v4

from nbrecall.notebook.model import Notebook
from nbrecall.notebook.read import NotebookUnreadable, read_notebook, read_notebook_bytes, sha256_bytes
from nbrecall.render.availability import SandboxUnavailable, interpreter_facts, interpreter_problem, sandbox_problem
from nbrecall.render.compare import (
    CHANGE_CLASSES,
    RESULT_CLASSES,
    RenderResult,
    compare_notebook,
    stale_result,
)
from nbrecall.render.environments import (
    EnvironmentRule,
    kernel_config_for,
    parse_environments,
    pick_environment,
)
from nbrecall.render.outcome import Execution, describe
from nbrecall.render.paths import PathRule, parse_rules, scan_notebook
from nbrecall.render.pyodide import (
    describe_pyodide,
    execute_notebook_pyodide,
    pyodide_problem,
    refine_reason,
    runner_version,
)
from nbrecall.render.sandbox import Limits, SandboxSpec, execute_notebook
from nbrecall.render.text_compare import CompareOptions


@dataclass
class RenderOptions:
    """Everything a render needs; `from_settings` builds it from `Settings.render` plus the index folder."""

    out_dir: Path
    data_dir: Path | None = None
    rules: list[PathRule] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    python: str = sys.executable
    workers: int = 2
    copy_limit_mb: int = 256
    compare: CompareOptions = field(default_factory=CompareOptions)
    hide: list[Path] = field(default_factory=list)  # folders the sandbox must not see (the index)
    write: bool = True
    backend: str = "kernel"  # "kernel" (nbclient + IPython kernel) or "pyodide" (see render/pyodide.py)
    pyodide_wheels: Path | None = None  # the pyodide backend's local wheel folder
    environments: list[EnvironmentRule] = field(default_factory=list)  # [[render.environment]], first match wins
    project_kernel_config: bool = True  # load the project's ipython_kernel_config.py into the kernel
    pin_display: bool = True  # matplotlib dpi / default figure size as the stored figures show them

    @classmethod
    def from_settings(cls, settings: Any, out_dir: Path | None = None, data_dir: Path | None = None) -> RenderOptions:
        r = settings.render
        index_dir = Path(settings.index_dir)
        out = out_dir or (Path(r.out_dir) if r.out_dir else index_dir / "renders")
        data = data_dir or (Path(r.data_dir) if r.data_dir else None)
        return cls(
            out_dir=out,
            data_dir=data,
            rules=parse_rules(r.path_map),
            limits=Limits(cell_timeout=r.cell_timeout, notebook_timeout=r.notebook_timeout,
                          memory_mb=r.memory_mb, cpu_seconds=r.cpu_seconds, processes=r.processes),
            python=r.python or sys.executable,
            workers=r.workers,
            copy_limit_mb=r.copy_limit_mb,
            compare=CompareOptions(rel_tol=r.rel_tol, compare_stderr=r.compare_stderr,
                                   image_threshold=r.image_threshold),
            hide=[index_dir, out],
            backend=r.backend,
            pyodide_wheels=Path(r.pyodide_wheels) if r.pyodide_wheels else None,
            environments=parse_environments(r.environment),
            project_kernel_config=r.project_kernel_config,
            pin_display=r.pin_display,
        )


def to_executable(notebook: Notebook) -> nbformat.NotebookNode:
    """An nbformat-4.5 node with the notebook's cells (sources and ids; no outputs) for a fresh run."""
    cells = []
    for cell in notebook.cells:
        if cell.cell_type == "code":
            node = v4.new_code_cell(cell.source, id=cell.id)
        elif cell.cell_type == "markdown":
            node = v4.new_markdown_cell(cell.source, id=cell.id)
        else:
            node = v4.new_raw_cell(cell.source, id=cell.id)
        if cell.tags:
            node.metadata["tags"] = list(cell.tags)
        cells.append(node)
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _environment(python: str, backend: str = "kernel", name: str = "") -> dict[str, str]:
    if backend == "pyodide":
        return {"python": "pyodide " + runner_version(), "platform": platform.platform(terse=True),
                "backend": "bwrap+pyodide", "name": "pyodide"}
    version = interpreter_facts(python).get("version")
    return {"python": ".".join(map(str, version)) if version else python, "interpreter": python,
            "platform": platform.platform(terse=True), "backend": "bwrap", "name": name or "default"}


def _relative(path: Path, root: Path | None) -> str:
    try:
        return path.resolve().relative_to((root or path.parent).resolve()).as_posix()
    except ValueError:
        return path.name


def render_notebook(path: Path, root: Path | None, options: RenderOptions) -> tuple[RenderResult, Any]:
    """Render one notebook file; returns the result and the executed notebook node (None if it did not run)."""
    shown = str(path)
    started = time.monotonic()
    stamp = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    try:
        data = path.read_bytes()
    except OSError as exc:
        return stale_result(shown, "", f"unreadable: {exc.strerror or exc}"), None
    sha = sha256_bytes(data)
    try:
        original = read_notebook_bytes(data, shown)
    except NotebookUnreadable as exc:
        return stale_result(shown, sha, f"unreadable: {exc.reason}"), None
    scan = scan_notebook(original, options.rules, options.data_dir)
    rule = pick_environment(options.environments, _relative(path, root), original)
    python = rule.python if rule is not None else options.python

    def finish(result: RenderResult) -> RenderResult:
        result.paths = scan.to_dict()
        result.rendered_at = stamp
        result.environment = _environment(python, options.backend, rule.name if rule else "")
        result.execution.setdefault("duration_s", round(time.monotonic() - started, 3))
        return result

    if original.language not in ("python", "python3", "python2", ""):
        return finish(stale_result(shown, sha, f"kernel not available: {original.language}")), None
    problem = pyodide_problem() if options.backend == "pyodide" else sandbox_problem()
    if problem:
        return finish(stale_result(shown, sha, "sandbox unavailable", [problem])), None
    if options.backend != "pyodide":
        problem = interpreter_problem(python)
        if problem:
            name = rule.name if rule is not None else "default"
            return finish(stale_result(shown, sha, f"environment unavailable: {name}", [problem])), None
    project = root if root is not None and root.is_dir() else path.parent
    kernel_config, config_notes = kernel_config_for(
        original, path.parent, project, rule, options.project_kernel_config, options.pin_display
    ) if options.backend != "pyodide" else ("", [])
    spec = SandboxSpec(
        workdir=path.parent, project_dir=project,
        data_dir=options.data_dir, rules=options.rules, hide=options.hide, python=python,
        limits=options.limits, copy_limit_mb=options.copy_limit_mb, kernel_config=kernel_config,
    )
    execution: Execution
    try:
        if options.backend == "pyodide":
            execution = execute_notebook_pyodide(to_executable(original), spec, options.pyodide_wheels)
        else:
            execution = execute_notebook(to_executable(original), spec)
    except SandboxUnavailable as exc:
        return finish(stale_result(shown, sha, "sandbox unavailable", [str(exc)])), None
    executed = execution.notebook
    fresh = read_notebook_bytes(nbformat.writes(executed).encode("utf-8"), shown)
    result = compare_notebook(original, fresh, execution, options.compare)
    refine_reason(result, execution)
    result.execution = describe(execution) | describe_pyodide(execution)
    result.notes = list(execution.notes) + config_notes
    if scan.unmapped:
        result.notes.append(f"{len(scan.unmapped)} absolute path(s) no rule maps: " + ", ".join(scan.unmapped[:5]))
    return finish(result), executed


def render_file_name(sha256: str, suffix: str = ".json") -> str:
    return f"{sha256}{suffix}"


def write_render(result: RenderResult, executed: Any, out_dir: Path) -> Path:
    """Store `<sha>.json` (+ `<sha>.ipynb` when the notebook ran); write-then-rename, so readers see whole files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    key = result.sha256 or sha256_bytes(result.path.encode())
    target = out_dir / render_file_name(key)
    if executed is not None:
        nb_path = out_dir / render_file_name(key, ".ipynb")
        tmp = nb_path.with_suffix(".ipynb.tmp")
        tmp.write_text(nbformat.writes(executed), encoding="utf-8")
        os.replace(tmp, nb_path)
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, target)
    return target


def load_render(out_dir: Path, sha256: str) -> RenderResult | None:
    """The stored result for a notebook hash, or None."""
    path = out_dir / render_file_name(sha256)
    try:
        return RenderResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def load_fresh_notebook(out_dir: Path, sha256: str, display_path: str) -> Notebook | None:
    """The executed copy as a `Notebook` (fresh outputs, original cell ids), or None when there is none."""
    path = out_dir / render_file_name(sha256, ".ipynb")
    if not path.is_file():
        return None
    try:
        return read_notebook(path, display_path=display_path)
    except NotebookUnreadable:
        return None


def recompare(out_dir: Path, sha256: str, options: RenderOptions | None = None) -> RenderResult | None:
    """Judge a stored render again with today's comparison rules, without running anything: the original file
    (it must still have the content `sha256`) against the stored executed copy and execution facts. None when
    the file changed or the notebook never ran."""
    from nbrecall.render.outcome import CellError, classify

    stored = load_render(out_dir, sha256)
    if stored is None:
        return None
    try:
        data = Path(stored.path).read_bytes()
    except OSError:
        return None
    if sha256_bytes(data) != sha256:
        return None
    fresh = load_fresh_notebook(out_dir, sha256, stored.path)
    if fresh is None:
        return stored
    facts = stored.execution
    execution = Execution(
        notebook=None,
        errors=[CellError(**e) for e in facts.get("errors", [])],
        executed=list(facts.get("executed", [])), not_run=list(facts.get("not_run", [])),
        timed_out=facts.get("timed_out"), died_at=facts.get("died_at"),
        notebook_timeout=bool(facts.get("notebook_timeout")), kernel_died=bool(facts.get("kernel_died")),
        exit_code=facts.get("exit_code"), stderr="",
    )
    execution.reason = classify(execution)
    original = read_notebook_bytes(data, stored.path)
    result = compare_notebook(original, fresh, execution, (options.compare if options else CompareOptions()))
    for name in ("paths", "execution", "notes", "rendered_at", "environment"):
        setattr(result, name, getattr(stored, name))
    if stored.status == "stale" and result.status != "stale":  # a reason the comparison alone cannot see
        result.status, result.reason = stored.status, stored.reason
    return result


# ---------------------------------------------------------------------------------------------------------------
# Many notebooks


def discover(roots: Iterable[Path], exclude: list[str] | None = None) -> list[tuple[Path, Path | None]]:
    """`(notebook, root)` pairs: every notebook under each root (a file root is its own root's parent)."""
    from nbrecall.notebook.files import walk_notebooks

    pairs: list[tuple[Path, Path | None]] = []
    for root in roots:
        base = root if root.is_dir() else root.parent
        for nb in walk_notebooks(root, exclude=exclude or [".ipynb_checkpoints"]):
            pairs.append((nb, base))
    return pairs


def _worker(path: str, root: str | None, options: RenderOptions) -> dict[str, Any]:
    result, executed = render_notebook(Path(path), Path(root) if root else None, options)
    if options.write:
        write_render(result, executed, options.out_dir)
    return result.to_dict()


@dataclass
class RenderTask:
    """One notebook's sandboxed render as an executor task (`nbrecall.executor`), e.g. a Ray task.

    The sandbox goes with the task: bubblewrap, prlimit and the timeouts run on the worker's node exactly as
    locally (without bubblewrap there the notebook is recorded `stale: sandbox unavailable`, never run bare).
    The worker writes nothing: it returns the result and the executed notebook, and the caller stores them, so
    results land in the caller's index folder whichever node ran the notebook."""

    options: RenderOptions

    def __call__(self, item: tuple[str, str | None]) -> tuple[dict[str, Any], Any]:
        path, root = item
        result, executed = render_notebook(Path(path), Path(root) if root else None, self.options)
        return result.to_dict(), executed


def _render_through(
    executor: Any, items: list[tuple[Path, Path | None]], options: RenderOptions,
    on_result: Callable[[RenderResult], None] | None,
) -> Iterator[RenderResult]:
    """`render_many` on an executor: results in input order, written here (see `RenderTask`)."""

    def failed(item: tuple[str, str | None], exc: BaseException) -> tuple[dict[str, Any], Any]:
        from nbrecall.executor import ExecutorError

        if isinstance(exc, ExecutorError):
            raise exc
        return stale_result(item[0], "", f"render error: {type(exc).__name__}", [str(exc)[:300]]).to_dict(), None

    work = [(str(path), str(root) if root else None) for path, root in items]
    for data, executed in executor.map(RenderTask(options), work, on_error=failed):
        result = RenderResult.from_dict(data)
        if options.write:
            write_render(result, executed, options.out_dir)
        if on_result is not None:
            on_result(result)
        yield result


def render_many(
    items: list[tuple[Path, Path | None]],
    options: RenderOptions,
    on_result: Callable[[RenderResult], None] | None = None,
    executor: Any = None,
) -> Iterator[RenderResult]:
    """Render `items` with `options.workers` processes (spawned); yield results as they finish.

    With an `executor` (`nbrecall.executor`, e.g. Ray) each notebook is one of its tasks instead, and
    results come in input order."""
    if not items:
        return
    if executor is not None:
        yield from _render_through(executor, items, options, on_result)
        return
    workers = max(1, options.workers)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        pending: dict[Future[dict[str, Any]], Path] = {}
        queue = list(items)
        while queue or pending:
            while queue and len(pending) < workers * 2:
                path, root = queue.pop(0)
                pending[pool.submit(_worker, str(path), str(root) if root else None, options)] = path
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                path = pending.pop(fut)
                try:
                    result = RenderResult.from_dict(fut.result())
                except Exception as exc:  # a worker crash must not stop the run
                    result = stale_result(str(path), "", f"render error: {type(exc).__name__}", [str(exc)[:300]])
                if on_result is not None:
                    on_result(result)
                yield result


def summarise(results: list[RenderResult]) -> dict[str, Any]:
    """Counts by status, reasons by frequency, cell counts and change classes, the notebooks ranked by how much
    of their result changed, missing modules and API errors: what the CLI table and the drift report show."""
    status = Counter(r.status for r in results)
    reasons = Counter(r.reason for r in results if r.status == "stale")
    cells: Counter[str] = Counter()
    changes: Counter[str] = Counter()
    for r in results:
        cells.update(r.counts())
        changes.update({k: v for k, v in r.changes().items() if v})
    return {
        "notebooks": len(results),
        "status": {s: status.get(s, 0) for s in ("fresh", "changed", "stale")},
        "reasons": reasons.most_common(),
        "cells": dict(cells),
        "changes": {c: changes.get(c, 0) for c in CHANGE_CLASSES},
        "ranking": rank_notebooks(results),
        "missing_modules": missing_modules(results),
        "api_errors": api_errors(results),
    }


def rank_notebooks(results: list[RenderResult]) -> list[dict[str, Any]]:
    """Notebooks whose result changed, most first: the share of their compared cells whose result changed
    (values, text, figure, error; not format or random), then the count."""
    rows = []
    for r in results:
        changed = r.result_changed()
        if not changed:
            continue
        compared = sum(1 for c in r.cells if c.status in ("same", "changed"))
        by_class = {k: v for k, v in r.changes().items() if v and k in RESULT_CLASSES}
        rows.append({"path": r.path, "sha256": r.sha256, "changed": changed, "compared": compared,
                     "share": round(changed / max(compared, 1), 3), "classes": by_class})
    return sorted(rows, key=lambda row: (-row["share"], -row["changed"], row["path"]))


_NO_MODULE_RE = re.compile(r"No module named '([^']+)'")
_CANNOT_IMPORT_RE = re.compile(r"cannot import name '([^']+)' from '([^']+)'")
_NO_ATTRIBUTE_RE = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")


def _fresh_errors(result: RenderResult) -> list[dict[str, Any]]:
    """The fresh run's errors in cells that failed (errors the original did not have)."""
    failed = {c.index for c in result.cells if c.status == "failed"}
    return [e for e in result.execution.get("errors", []) if e.get("index") in failed]


def missing_modules(results: list[RenderResult]) -> dict[str, list[dict[str, Any]]]:
    """Per render environment, the modules notebooks could not import, in the order to install them: each time
    the module that brings back the most notebooks (those whose every missing module is then installed), with
    how many notebooks need it. A dotted name whose package exists (`sympy.foo`) is an API change, not here."""
    needs: dict[str, dict[str, set[str]]] = {}
    for r in results:
        env = str(r.environment.get("name") or "default")
        for error in _fresh_errors(r):
            if error.get("ename") not in ("ModuleNotFoundError", "ImportError"):
                continue
            match = _NO_MODULE_RE.search(str(error.get("evalue", "")))
            if match and "." not in match.group(1):
                needs.setdefault(env, {}).setdefault(r.path, set()).add(match.group(1))
    out: dict[str, list[dict[str, Any]]] = {}
    for env, per_notebook in needs.items():
        installed: set[str] = set()
        remaining = set().union(*per_notebook.values())
        order = []
        while remaining:
            best = max(sorted(remaining), key=lambda m: _module_gain(m, per_notebook, installed))
            back, need = _module_gain(best, per_notebook, installed)
            order.append({"module": best, "needed_by": need, "brings_back": back})
            installed.add(best)
            remaining.discard(best)
        out[env] = order
    return out


def _module_gain(module: str, per_notebook: dict[str, set[str]], installed: set[str]) -> tuple[int, int]:
    """(notebooks installing `module` next would bring back, notebooks that need it)."""
    back = sum(1 for mods in per_notebook.values() if module in mods and mods <= installed | {module})
    return back, sum(1 for mods in per_notebook.values() if module in mods)


def api_errors(results: list[RenderResult]) -> list[dict[str, Any]]:
    """Errors raised where a library's API moved, by library: an installed package raised it (the traceback's
    innermost frame), or a name is gone from a module (`cannot import name`, `module 'x' has no attribute`,
    `No module named 'pkg.sub'`). Counted in notebooks, with up to three examples each."""
    by_library: dict[str, dict[str, Any]] = {}
    for r in results:
        for error in _fresh_errors(r):
            ename, evalue = str(error.get("ename", "")), str(error.get("evalue", ""))
            library = str(error.get("library") or "")
            if not library:
                for pattern, group in ((_CANNOT_IMPORT_RE, 2), (_NO_ATTRIBUTE_RE, 1), (_NO_MODULE_RE, 1)):
                    match = pattern.search(evalue)
                    if match and (pattern is not _NO_MODULE_RE or "." in match.group(1)):
                        library = match.group(group).split(".")[0]
                        break
            if not library:
                continue
            entry = by_library.setdefault(library, {"library": library, "notebooks": set(), "examples": []})
            entry["notebooks"].add(r.path)
            example = f"{ename}: {evalue}"[:160]
            if example not in entry["examples"] and len(entry["examples"]) < 3:
                entry["examples"].append(example)
    rows = [{**e, "notebooks": len(e["notebooks"])} for e in by_library.values()]
    return sorted(rows, key=lambda e: (-e["notebooks"], e["library"]))
