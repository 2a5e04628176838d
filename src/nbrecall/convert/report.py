"""The fidelity report that accompanies each converted notebook: what was kept, dropped and why."""

from __future__ import annotations

from dataclasses import dataclass

from nbrecall.convert.markdown import ConvertedNotebook
from nbrecall.convert.tokens import TOKENIZER_NAME, count_llm_tokens
from nbrecall.notebook.model import Notebook


@dataclass
class FidelityFigures:
    """Sizes before and after conversion, for the report and the `convert` summary table."""

    bytes_before: int
    bytes_after: int
    tokens_before: int
    tokens_after: int
    figures: int
    warnings: int


def measure(raw: bytes, converted: ConvertedNotebook) -> FidelityFigures:
    text = raw.decode("utf-8", "replace")
    return FidelityFigures(
        bytes_before=len(raw),
        bytes_after=len(converted.markdown.encode()),
        tokens_before=count_llm_tokens(text),
        tokens_after=count_llm_tokens(converted.markdown),
        figures=len(converted.files),
        warnings=len(converted.warnings),
    )


def render_report(nb: Notebook, converted: ConvertedNotebook, figures: FidelityFigures) -> str:
    """Markdown report: counts, sizes, the cell map, warnings and the limits of the analysis."""
    name = converted.name
    kinds: dict[str, int] = {}
    for record in converted.cells:
        kinds[record.cell_type] = kinds.get(record.cell_type, 0) + 1
    ratio = figures.tokens_after / figures.tokens_before if figures.tokens_before else 0.0
    lines = [
        f"# Fidelity report: {nb.path}",
        "",
        f"Converted to `{name}.md` with dependency map `{name}.deps.svg`"
        + (f" and {figures.figures} extracted figure file(s) in `{name}_files/`." if figures.figures
           else "; no figures."),
        "",
        "## Counts and sizes",
        "",
        "| what | before (.ipynb) | after (.md) |",
        "|---|---:|---:|",
        f"| bytes | {figures.bytes_before:,} | {figures.bytes_after:,} |",
        f"| tokens, {TOKENIZER_NAME} | {figures.tokens_before:,} | {figures.tokens_after:,} ({ratio:.0%}) |",
        f"| cells | {len(nb.cells)} | {len(converted.cells)} |",
        "",
        "Cells by type: " + (", ".join(f"{n} {t}" for t, n in sorted(kinds.items())) or "none") + ".",
        (f"Code cells executed: {converted.analysis.order.executed_fraction:.0%}; "
         f"dependency edges: {len(converted.analysis.edges)}; health score {converted.analysis.health:.2f}."
         if converted.analysis.order.counts else "No code cells with source: nothing ran."),
        f"Content sha256 `{nb.sha256}`; cell ids marked *derived* are made from index and source (the file has none, "
        "or a duplicate, for those cells).",
        "",
        "Every source line is kept; only outputs are filtered (images to files, long streams and texts to head "
        "and tail, tracebacks to first and last frames, DataFrames to the first rows with shape and types).",
        "",
        "## Cell map",
        "",
        "| cell | id | type | In | source chars | output chars before → after | figures | notes |",
        "|---:|---|---|---:|---:|---|---:|---|",
    ]
    for r in converted.cells:
        count = (
            ""
            if r.cell_type != "code"
            else (str(r.execution_count) if r.execution_count is not None else "—")
        )
        outputs = f"{r.output_chars_before:,} → {r.output_chars_after:,}" if r.cell_type == "code" else ""
        notes = "; ".join(r.notes).replace("|", "\\|")
        derived = " *derived*" if r.derived_id else ""
        lines.append(
            f"| {r.index} | `{r.cell_id}`{derived} | {r.cell_type} | {count} | {r.source_chars:,} | {outputs} "
            f"| {r.figures} | {notes} |"
        )
    lines += ["", "## Warnings", ""]
    lines += [f"- {w}" for w in converted.warnings] or ["- none"]
    lines += ["", "## Limits of the analysis", "", converted.analysis.limits, ""]
    return "\n".join(lines)
