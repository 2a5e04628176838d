"""Convert a notebook or a folder of notebooks to files: NAME.md, NAME.report.md, NAME.deps.svg, NAME_files/."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nbrecall.convert.depmap import render_dependency_svg
from nbrecall.convert.markdown import ConvertedNotebook, ConvertOptions, convert_notebook
from nbrecall.convert.report import FidelityFigures, measure, render_report
from nbrecall.notebook.files import printable_path, read_notebook_file
from nbrecall.notebook.model import Notebook
from nbrecall.notebook.read import NotebookUnreadable, read_notebook_bytes


@dataclass
class ConvertResult:
    """What happened to one file: written outputs, or the reason it could not be read."""

    source: Path
    name: str
    reason: str | None = None
    figures: FidelityFigures | None = None
    written: list[Path] = field(default_factory=list)
    converted: ConvertedNotebook | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def convert_file(
    path: Path, outdir: Path | None, options: ConvertOptions | None = None, display_path: str | None = None
) -> ConvertResult:
    """Convert one file; write outputs under `outdir` unless it is None. Never raises for bad input."""
    name = printable_path(path.stem)  # used in the markdown's links and headers, which must encode as UTF-8
    result = ConvertResult(path, name)
    try:
        raw = read_notebook_file(path)  # a file, or a notebook inside a zip archive
    except OSError as exc:
        result.reason = f"cannot read file: {exc.strerror or exc}"
        return result
    try:
        nb = read_notebook_bytes(raw, printable_path(display_path or str(path)))
    except NotebookUnreadable as exc:
        result.reason = exc.reason
        return result
    try:
        return _convert_and_write(nb, raw, name, outdir, options, result)
    except OSError as exc:
        result.reason = f"cannot write {exc.filename or 'output'}: {exc.strerror or exc}"
    except Exception as exc:  # a bug on one notebook must not stop a folder conversion: report it instead
        result.reason = f"internal error while converting: {type(exc).__name__}: {exc}"[:300]
    result.converted = result.figures = None
    return result


def _convert_and_write(
    nb: Notebook, raw: bytes, name: str, outdir: Path | None, options: ConvertOptions | None, result: ConvertResult
) -> ConvertResult:
    converted = convert_notebook(nb, name, options)
    result.converted = converted
    result.figures = measure(raw, converted)
    if outdir is None:
        return result
    outdir.mkdir(parents=True, exist_ok=True)
    md = outdir / f"{name}.md"
    md.write_text(converted.markdown, encoding="utf-8")
    report = outdir / f"{name}.report.md"
    report.write_text(render_report(nb, converted, result.figures), encoding="utf-8")
    svg = outdir / f"{name}.deps.svg"
    svg.write_text(render_dependency_svg(nb, converted.analysis, title=nb.path), encoding="utf-8")
    result.written = [md, report, svg]
    if converted.files:
        files_dir = outdir / f"{name}_files"
        files_dir.mkdir(exist_ok=True)
        for file_name, data in converted.files.items():
            (files_dir / file_name).write_bytes(data)
        result.written.append(files_dir)
    return result
