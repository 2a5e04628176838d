"""`nbrecall render`: notebooks re-executed in a sandbox (bubblewrap, or Pyodide under Node.js), locally or on Ray,
and the table of what still reproduces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from nbrecall.cli.common import ConfigOpt, ExecutorOpt, IndexOpt, _executor, _plain, _progress, _settings, err


def render(
    roots: Annotated[list[Path], typer.Argument(help="Folders (or notebooks) to re-render.")],
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Data folder, read-only at /data in the sandbox (config: render.data_dir)."),
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Notebooks run in parallel (default 2).")] = None,
    cell_timeout: Annotated[
        float | None, typer.Option("--cell-timeout", help="Seconds per cell before the run stops (default 60).")
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Write the drift report (HTML) here.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Results folder (default <index>/renders).")] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="kernel (default; an IPython kernel) or pyodide (Pyodide, CPython 3.14 in WebAssembly, under "
            "Node.js), both in bubblewrap (config: render.backend). Pyodide limits: only the standard library is "
            "built in; numpy, pandas, matplotlib or any other package need pure-Python or wasm32 wheels in the "
            "render.pyodide_wheels folder (nothing is downloaded), else the notebook is stale: package not "
            "available offline; no subprocesses, threads or sockets; IPython magics and shell escapes fail "
            "their cell (%matplotlib, %load_ext, %autoreload, %config are skipped); 32-bit, at most 4 GB; start "
            "~3 s per notebook. Needs Node.js and, in set-up: npm ci --prefix src/nbrecall/render/pyodide_runner",
        ),
    ] = None,
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    executor: ExecutorOpt = None,
) -> None:
    """Re-execute notebooks in a sandbox and report which outputs still reproduce.

    Each notebook runs in bubblewrap (no network, read-only interpreter and data folder, throw-away home,
    cleared environment, memory/CPU limits, per-cell timeout); Windows/UNC and absolute paths are mapped onto
    the data folder by the render.path_map rules of nbrecall.toml. Status per notebook: fresh (outputs
    reproduce), changed (ran, outputs differ) or stale (could not re-execute: missing file, import error,
    timeout, memory, kernel died, ...). Results go to <out>/<sha256>.json and .ipynb; the notebook files are
    never modified. Needs bubblewrap and prlimit; without them nothing runs and every notebook is recorded
    stale (sandbox unavailable), exit code 3. With --executor ray each notebook is a Ray task and its sandbox
    runs on the worker's node (results are stored here).
    """
    import time

    from nbrecall.render.availability import sandbox_problem
    from nbrecall.render.environments import EnvironmentRuleError
    from nbrecall.render.paths import PathRuleError
    from nbrecall.render.pyodide import BACKENDS, pyodide_problem
    from nbrecall.render.report import write_report
    from nbrecall.render.run import RenderOptions, discover, render_many, summarise

    settings = _settings(config, index_dir)
    for root in roots:
        if not root.exists():
            err.print(f"[red]error:[/red] {_plain(root)}: no such file or folder")
            raise typer.Exit(2)
    if data is not None and not data.is_dir():
        err.print(f"[red]error:[/red] --data {data}: not a folder")
        raise typer.Exit(2)
    try:
        options = RenderOptions.from_settings(settings, out_dir=out, data_dir=data)
    except (PathRuleError, EnvironmentRuleError) as exc:
        err.print(f"[red]config error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    if workers is not None:
        options.workers = max(1, workers)
    if cell_timeout is not None:
        options.limits.cell_timeout = cell_timeout
    if backend is not None:
        options.backend = backend
    if options.backend not in BACKENDS:
        err.print(f"[red]error:[/red] --backend {options.backend}: not one of {', '.join(BACKENDS)}")
        raise typer.Exit(2)
    from nbrecall.executor import ExecutorError, parse_kind

    try:
        distributed = parse_kind(executor or settings.executor.kind)[0] == "ray"
    except ExecutorError as exc:
        err.print(f"[red]executor error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    # Locally the sandbox is checked here; on Ray each worker checks its own node (a notebook there without
    # bubblewrap is recorded stale with the reason).
    problem = "" if distributed else pyodide_problem() if options.backend == "pyodide" else sandbox_problem()
    if problem:
        err.print(f"[red]sandbox unavailable:[/red] {_plain(problem)}; notebooks are recorded stale, none is run")
    pool = _executor(settings, executor, workers) if distributed else None
    items = discover(roots, settings.discover.exclude)
    started = time.perf_counter()
    results = []
    with _progress() as progress:
        task = progress.add_task("rendering", total=len(items), rate="")
        try:
            for result in render_many(items, options, executor=pool):
                results.append(result)
                per_min = len(results) * 60 / max(time.perf_counter() - started, 1e-9)
                progress.update(task, completed=len(results), rate=f"{per_min:.1f} notebooks/min")
        except ExecutorError as exc:
            err.print(f"[red]executor error:[/red] {_plain(exc)}; finished renders are stored")
            raise typer.Exit(2) from exc
        finally:
            if pool is not None:
                pool.close()
    elapsed = time.perf_counter() - started
    summary = summarise(results)
    table = Table(title=f"rendered {len(results)} notebooks into {options.out_dir} in {elapsed:.1f} s")
    table.add_column("what")
    table.add_column("count", justify="right")
    for status, count in summary["status"].items():
        table.add_row(status, str(count))
    for reason, count in summary["reasons"][:10]:
        table.add_row(f"  stale: {reason}", str(count))
    for status in ("same", "changed", "failed", "new"):
        table.add_row(f"cells {status}", str(summary["cells"].get(status, 0)))
    for change, count in summary["changes"].items():
        if count:
            table.add_row(f"  {change}" + (" (format only, not badged)" if change == "format" else ""), str(count))
    for env, modules in summary["missing_modules"].items():
        shown = ", ".join(f"{m['module']} ({m['brings_back']})" for m in modules[:5])
        table.add_row(f"missing modules [{env}] (notebooks brought back)", shown)
    table.add_row("notebooks/min", f"{len(results) * 60 / max(elapsed, 1e-9):.1f}")
    err.print(table)
    if report is not None:
        write_report(results, report)
        err.print(f"drift report: {report}")
    if problem:
        raise typer.Exit(3)
