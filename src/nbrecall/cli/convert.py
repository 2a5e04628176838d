"""`nbrecall convert`: notebooks rendered as LLM-addressable markdown, and the summary table of what it wrote."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from nbrecall.cli.common import ConfigOpt, _progress, _settings, err

if TYPE_CHECKING:
    from nbrecall.convert.run import ConvertResult


DEFAULT_CONVERT_DIR = "nbrecall-converted"


def convert(
    path: Annotated[Path, typer.Argument(help="A notebook or a folder of notebooks.")],
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help=f"Output folder (default: ./{DEFAULT_CONVERT_DIR} in the working "
                     "directory, never the archive); it is printed at the end."),
    ] = None,
    stdout: Annotated[
        bool, typer.Option("--stdout", help="Print the markdown of one notebook to stdout.")
    ] = False,
    max_output_chars: Annotated[
        int, typer.Option(help="Keep text outputs up to this size; longer → head/tail.")
    ] = 2000,
    describe_figures: Annotated[
        bool, typer.Option("--describe-figures", help="Add each figure's machine-made description ([vision] "
                           "describer; cached in the index folder's figures.sqlite) after its image.")
    ] = False,
    config: ConfigOpt = None,
) -> None:
    """Render notebooks as LLM-addressable markdown with a fidelity report and an SVG dependency map.

    Exit code: 0 when every notebook was converted, or some were and the unreadable ones are listed with their
    reasons; 1 when none could be converted; 2 for a wrong argument (no such path, --stdout on a folder).
    """
    from rich.markup import escape

    from nbrecall.convert.markdown import ConvertOptions
    from nbrecall.convert.run import convert_file
    from nbrecall.notebook.files import walk_notebooks

    settings = _settings(config)
    options = ConvertOptions(max_output_chars=max_output_chars)
    figure_store = None
    if describe_figures:
        from nbrecall.ingest.figures import CachedDescriptions, FigureWork
        from nbrecall.vision.factory import make_describer
        from nbrecall.vision.store import FigureStore

        describer = make_describer(settings)
        if describer is None:
            err.print("[red]error:[/red] --describe-figures needs a describer: [vision] kind = \"ocr\" or \"openai\" "
                      "in nbrecall.toml")
            raise typer.Exit(2)
        figure_store = FigureStore.of_index(settings.index_dir)
        work = FigureWork(describer, figure_store)
        options.describe_figure = CachedDescriptions(work)
    if not path.exists():
        err.print(f"[red]error:[/red] {escape(str(path))}: no such file or folder")
        raise typer.Exit(2)
    if stdout:
        if not path.is_file():
            err.print("[red]error:[/red] --stdout takes a single notebook file")
            raise typer.Exit(2)
        result = convert_file(path, None, options)
        if not result.ok or result.converted is None:
            err.print(f"[red]unreadable:[/red] {escape(str(path))}: {escape(str(result.reason))}")
            raise typer.Exit(1)
        sys.stdout.write(result.converted.markdown)
        return
    unlisted: list[OSError] = []
    files = list(walk_notebooks(path, skip_hidden=settings.discover.skip_hidden, exclude=settings.discover.exclude,
                                unlisted=unlisted.append, archives=settings.discover.zip_archives))
    for exc in unlisted:  # said, not skipped in silence: its notebooks are missing from the output
        err.print(f"[yellow]not listed:[/yellow] {escape(str(exc.filename))} ({escape(exc.strerror or str(exc))}): "
                  "its notebooks are not converted", soft_wrap=True)
    base = path if path.is_dir() else path.parent
    outdir = (out or Path(DEFAULT_CONVERT_DIR)).absolute()
    files = [f for f in files if not f.absolute().is_relative_to(outdir)]  # never an earlier run's copies
    results = []
    with _progress() as progress:
        task = progress.add_task("converting", total=len(files), rate="")
        for file in files:
            rel = file.relative_to(base)
            results.append(convert_file(file, outdir / rel.parent, options, display_path=str(rel)))
            progress.update(task, advance=1, rate=file.name[:40])
    _convert_summary(results)
    if figure_store is not None:
        for note in work.report.notes:
            err.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)
        figure_store.close()
    written = sum(r.ok for r in results)
    err.print(f"output folder: {escape(str(outdir))} ({written} of {len(results)} notebook(s) written)",
              highlight=False)
    if any(not r.ok for r in results):
        raise typer.Exit(1 if all(not r.ok for r in results) else 0)


def _convert_summary(results: list[ConvertResult]) -> None:
    from rich.markup import escape

    ok = [r for r in results if r.ok]
    measured = [(r.name, r.figures) for r in ok if r.figures is not None]  # every converted file is measured
    table = Table(title=f"converted {len(ok)} of {len(results)} notebooks")
    for column in (
        "notebook",
        "bytes before",
        "bytes after",
        "tokens before",
        "tokens after",
        "figures",
        "warnings",
    ):
        table.add_column(column, justify="left" if column == "notebook" else "right")
    shown = sorted(measured, key=lambda named: -named[1].bytes_before)[:20]
    for name, f in shown:
        table.add_row(
            escape(name),
            f"{f.bytes_before:,}",
            f"{f.bytes_after:,}",
            f"{f.tokens_before:,}",
            f"{f.tokens_after:,}",
            str(f.figures),
            str(f.warnings),
        )
    if measured:
        figures = [f for _name, f in measured]
        tb = sum(f.tokens_before for f in figures)
        ta = sum(f.tokens_after for f in figures)
        table.add_row(
            "[b]total[/b]",
            f"{sum(f.bytes_before for f in figures):,}",
            f"{sum(f.bytes_after for f in figures):,}",
            f"{tb:,}",
            f"{ta:,}",
            str(sum(f.figures for f in figures)),
            str(sum(f.warnings for f in figures)),
        )
    err.print(table)
    for r in results:
        if not r.ok:
            err.print(f"[yellow]unreadable[/yellow] {escape(str(r.source))}: {escape(str(r.reason))}",
                      highlight=False)
