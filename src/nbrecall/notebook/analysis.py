"""Execution order, notebook health and static dependency hints (DESIGN §5 "execution honesty", §8).

Everything here reads `Notebook` objects only and never raises on a notebook: a cell that does not parse
is noted (`CellDeps.parse_error`) and contributes nothing; an unexpected failure degrades to an order-only
`Analysis` whose `limits` says so.

Per-cell names live in `cell_names` (a scope visitor), the masking of IPython syntax in `ipython_syntax`.
Dependency hints are static and approximate. Each code cell is parsed with `ast` after IPython syntax
(magics, shell escapes, `?` help) is masked out; the cell's *defines* are the names it binds at module level
and its *uses* the names it reads before binding them. A use gets an edge from the nearest cell above that
defines the name: the cell that would supply it in a top-to-bottom run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from nbrecall.notebook.cell_names import CellDeps, analyse_cell, unique_names
from nbrecall.notebook.ipython_syntax import mask_magics
from nbrecall.notebook.model import Cell, Notebook

__all__ = [
    "Analysis", "CellDeps", "DepEdge", "ExecutionOrder", "analyse", "analyse_cell", "analyse_order", "health_score",
    "mask_magics",
]

# ----------------------------------------------------------------------------------------------------
# Execution order


@dataclass
class ExecutionOrder:
    """What the stored execution counts say about how the notebook was run."""

    counts: list[tuple[int, int | None]]  # (cell index, count): non-empty code cells, document order
    monotonic: bool  # the counts that exist strictly increase in document order
    out_of_order: list[int]  # cells whose count is <= a count above them ("In[2] below In[5]")
    never_run: list[int]  # non-empty code cells with a null count
    executed_fraction: float  # share of non-empty code cells with a count (1.0 without code cells)
    ran_top_to_bottom: bool  # monotonic, all run, and counts exactly 1, 2, 3, … (a "Restart & Run All")
    has_errors: bool  # any error output
    error_cells: list[int]
    warnings: list[str]


@dataclass
class DepEdge:
    src: int  # defining cell index (always above dst)
    dst: int  # using cell index
    names: list[str]


@dataclass
class Analysis:
    order: ExecutionOrder
    cells: dict[int, CellDeps]  # code cells only
    edges: list[DepEdge]
    ambient: list[str]  # imported names, listed once (empty when imports_as_edges=True)
    warnings: list[str]  # dependency warnings, one per (cell, name)
    health: float
    limits: str
    # The syntax tree of each code cell that parsed, by source: the chunker, the caption finder and the input-file
    # scan read these instead of parsing every cell again. Only cells up to `KEEP_TREE_CHARS` are kept.
    trees: dict[str, ast.Module] = field(default_factory=dict, repr=False, compare=False)


_MAX_LISTED = 10  # cells named in one "never run" sentence
_MAX_ORDER_WARNINGS = 5
_MAX_ERROR_WARNINGS = 5


def analyse_order(nb: Notebook) -> ExecutionOrder:
    """Execution-order facts for the non-empty code cells of `nb`.

    A cell is *out of order* when its count is lower than or equal to a count above it (an equal count cannot
    come from one kernel session: it means cells were copied or notebooks merged). `ran_top_to_bottom` is
    strict: monotonic, every cell run, and the counts exactly 1, 2, 3, … with no gaps, which is what
    "Restart & Run All" leaves behind. Increasing counts with gaps are reported but not treated as such.
    """
    code = [c for c in nb.cells if c.is_code and c.source.strip()]
    counts = [(c.index, _count(c)) for c in code]
    out_of_order: list[int] = []
    order_warnings: list[str] = []
    best: tuple[int, int] | None = None  # (cell index, count) of the highest count so far
    for index, count in counts:
        if count is None:
            continue
        if best is not None and count <= best[1]:
            out_of_order.append(index)
            if len(order_warnings) < _MAX_ORDER_WARNINGS:
                order_warnings.append(f"Cell [{index}] In[{count}] runs below Cell [{best[0]}] In[{best[1]}]")
        else:
            best = (index, count)
    if len(out_of_order) > _MAX_ORDER_WARNINGS:
        more = len(out_of_order) - _MAX_ORDER_WARNINGS
        order_warnings.append(f"… and {more} more cell{'s' if more != 1 else ''} run out of order")

    never_run = [index for index, count in counts if count is None]
    present = [count for _, count in counts if count is not None]
    executed_fraction = len(present) / len(counts) if counts else 1.0
    monotonic = not out_of_order
    consecutive = present == list(range(1, len(present) + 1))
    ran_top_to_bottom = monotonic and not never_run and consecutive

    error_cells: list[int] = []
    error_warnings: list[str] = []
    for cell in nb.cells:
        if not cell.is_code:
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors:
            error_cells.append(cell.index)
            if len(error_warnings) < _MAX_ERROR_WARNINGS:
                first = errors[0]
                evalue = " ".join(first.evalue.split())
                if len(evalue) > 80:
                    evalue = evalue[:79] + "…"
                what = f"{first.ename or 'an error'}: {evalue}" if evalue else (first.ename or "an error")
                error_warnings.append(f"Cell [{cell.index}] raised {what}")
    if len(error_cells) > _MAX_ERROR_WARNINGS:
        more = len(error_cells) - _MAX_ERROR_WARNINGS
        error_warnings.append(f"… and {more} more cell{'s' if more != 1 else ''} with errors")

    messages = list(order_warnings)
    if never_run:
        if len(never_run) == len(counts) and len(counts) > 1:
            messages.append(f"All {len(counts)} code cells never run (no execution counts; outputs may have "
                            "been cleared)")
        else:
            listed = ", ".join(f"[{i}]" for i in never_run[:_MAX_LISTED])
            if len(never_run) > _MAX_LISTED:
                listed += ", …"
            noun = "code cell" if len(never_run) == 1 else "code cells"
            messages.append(f"{len(never_run)} {noun} never run: {listed}")
    if monotonic and present and not consecutive:
        messages.append(f"Execution counts increase but are not 1, 2, 3, … (In[{present[0]}] to "
                        f"In[{present[-1]}] over {len(present)} cells): cells were re-run or deleted between")
    messages.extend(error_warnings)
    return ExecutionOrder(
        counts=counts,
        monotonic=monotonic,
        out_of_order=out_of_order,
        never_run=never_run,
        executed_fraction=executed_fraction,
        ran_top_to_bottom=ran_top_to_bottom,
        has_errors=bool(error_cells),
        error_cells=error_cells,
        warnings=messages,
    )


def _count(cell: Cell) -> int | None:
    count = cell.execution_count
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def health_score(order: ExecutionOrder) -> float:
    """A 0..1 ranking signal: 1.0 for a notebook that ran cleanly top to bottom.

    health = 1
             − 0.4 × (share of non-empty code cells never run)
             − (0.15 + 0.15 × share of run cells that are out of order)   if not monotonic
             − (0.2 + 0.1 × share of code cells with an error output)     if any error
             − 0.05  if monotonic and fully run but the counts have gaps (not 1, 2, 3, …)
    clamped to [0, 1] and rounded to 3 places. A notebook without code cells scores 1.0.
    """
    score = 1.0 - 0.4 * (1.0 - order.executed_fraction)
    counted = sum(1 for _, count in order.counts if count is not None)
    if not order.monotonic:
        score -= 0.15 + 0.15 * len(order.out_of_order) / max(1, counted)
    if order.has_errors:
        score -= 0.2 + 0.1 * min(1.0, len(order.error_cells) / max(1, len(order.counts)))
    if order.monotonic and not order.never_run and not order.ran_top_to_bottom:
        score -= 0.05
    return round(min(1.0, max(0.0, score)), 3)


# ----------------------------------------------------------------------------------------------------
# Whole notebook

_LIMITS = (
    "Dependency hints come from static analysis of each cell's source with Python's ast module, not from "
    "running the notebook, so they are approximate. A cell defines the names it binds at top level "
    "(assignment, for and with targets, def, class, walrus, except-as, global inside a function) and uses"
    " the names it reads before binding them, including names read inside the functions it defines. An "
    "edge points to the nearest cell above that defines the name: the cell that would supply it in a top-"
    "to-bottom run, not necessarily the one that supplied it in the recorded session. Not seen: data flow"
    " through function calls, attributes and containers (df['x'] = … or obj.attr = … is a use of df or "
    "obj, not a new definition), names created by exec, eval, globals(), star imports, %run, %pylab or "
    "other magics, and anything a cell's outputs imply. IPython magics, shell escapes and help lines are "
    "masked before parsing (x = !ls keeps x defined; a %% cell magic other than %%time and %%capture "
    "hides the whole cell)."
)


_PYLAB = re.compile(r"^\s*%pylab\b", re.M)
_RUN = re.compile(r"^\s*%run\b", re.M)
# What `%pylab` binds (IPython.core.pylabtools.import_pylab), besides its two star imports.
_PYLAB_NAMES = ["numpy", "matplotlib", "pylab", "mlab", "pyplot", "np", "plt", "display", "figsize",
                "getfigs", "pylab.*", "numpy.*"]


def analyse(nb: Notebook, *, imports_as_edges: bool = False) -> Analysis:
    """Execution order, health and dependency hints for one notebook; never raises.

    Imported names are ambient by default: never an edge, never a warning, listed once in `ambient`. With
    `imports_as_edges=True` an import counts as a definition like any other (to measure the difference).
    """
    try:
        order = analyse_order(nb)
    except Exception as exc:  # defensive: the reader should never hand us anything that breaks this
        order = ExecutionOrder([], True, [], [], 1.0, False, False, [], [f"order not analysed: {exc}"])
    health = health_score(order)
    if not nb.is_python:
        limits = (f"This notebook's language is {nb.language}: dependency hints are computed for Python "
                  "notebooks only, so only execution order and health were analysed.")
        return Analysis(order, {}, [], [], [], health, limits)
    try:
        return _analyse_python(nb, order, health, imports_as_edges)
    except Exception as exc:  # never fail a notebook on an analysis bug: degrade to order only
        limits = f"Dependency analysis failed ({type(exc).__name__}); only execution order was analysed."
        return Analysis(order, {}, [], [], [], health, limits)


def _analyse_python(nb: Notebook, order: ExecutionOrder, health: float, imports_as_edges: bool) -> Analysis:
    cells: dict[int, CellDeps] = {}
    hidden_sources: dict[int, str] = {}  # cell index -> "the star import" / "%run" / "%pylab"
    trees: dict[str, ast.Module] = {}
    for cell in nb.code_cells:
        deps, stars = analyse_cell(cell, trees)
        cells[cell.index] = deps
        if _PYLAB.search(cell.source) and not cell.source.lstrip().startswith("%%"):
            deps.imports = unique_names(deps.imports + _PYLAB_NAMES)
            hidden_sources[cell.index] = "%pylab"
        elif stars:
            hidden_sources[cell.index] = "the star import"
        elif _RUN.search(cell.source) and not cell.source.lstrip().startswith("%%"):
            hidden_sources[cell.index] = "%run"

    definers: dict[str, list[int]] = {}
    imported: list[str] = []
    for index in sorted(cells):
        deps = cells[index]
        names = deps.defines + ([n for n in deps.imports if not n.endswith("*")] if imports_as_edges else [])
        for name in unique_names(names):
            definers.setdefault(name, []).append(index)
        imported.extend(deps.imports)
    imported = unique_names(imported)
    imported_names = {n for n in imported if not n.endswith("*")}

    failed = sorted(i for i, d in cells.items() if d.parse_error)
    edge_names: dict[tuple[int, int], list[str]] = {}
    dep_warnings: list[str] = []
    for index in sorted(cells):
        for name in cells[index].uses:
            where = definers.get(name, [])
            above = [i for i in where if i < index]
            if above:
                edge_names.setdefault((above[-1], index), []).append(name)
                continue
            if not imports_as_edges and name in imported_names:
                continue
            later = [i for i in where if i > index]
            unparsed = next((i for i in reversed(failed) if i < index), None)
            maybe = "" if unparsed is None else f" (Cell [{unparsed}] above did not parse and may define it)"
            if later:
                dep_warnings.append(f"Cell [{index}] uses {name} defined later in Cell [{later[0]}]")
            elif index in where:
                dep_warnings.append(f"Cell [{index}] uses {name} before defining it (no earlier definition)"
                                    + maybe)
            else:
                message = f"Cell [{index}] uses {name}, defined nowhere in the notebook"
                source = next((i for i in sorted(hidden_sources) if i <= index), None)
                if source is not None:
                    if not imports_as_edges:
                        continue  # names a star import, %pylab or %run may bind are ambient too
                    message += f" (may come from {hidden_sources[source]} in Cell [{source}])"
                dep_warnings.append(message + maybe)
    by_user = sorted(edge_names.items(), key=lambda item: (item[0][1], item[0][0]))
    edges = [DepEdge(src, dst, names) for (src, dst), names in by_user]

    notes = [_LIMITS]
    notes.append("Imported names count as definitions here (imports_as_edges=True)." if imports_as_edges else
                 "Imported names are ambient: listed once, never an edge or a warning, wherever imported.")
    if failed:
        listed = ", ".join(f"[{i}]" for i in failed[:_MAX_LISTED])
        listed += ", …" if len(failed) > _MAX_LISTED else ""
        noun = "cell does" if len(failed) == 1 else "cells do"
        notes.append(f"{len(failed)} code {noun} not parse as Python 3 and contribute nothing: {listed}.")
    if hidden_sources:
        kinds = sorted(set(hidden_sources.values()))
        first = min(hidden_sources)
        notes.append(f"This notebook uses {', '.join(kinds)}, which bind names the analysis cannot see"
                     + ("." if imports_as_edges else
                        f"; names used below Cell [{first}] and defined nowhere are taken to come from there "
                        "and get no warning."))
    return Analysis(
        order=order,
        cells=cells,
        edges=edges,
        ambient=[] if imports_as_edges else imported,
        warnings=dep_warnings,
        health=health,
        limits=" ".join(notes),
        trees=trees,
    )
