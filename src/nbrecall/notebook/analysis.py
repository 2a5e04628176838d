"""Execution order, notebook health and static dependency hints (DESIGN §5 "execution honesty", §8).

Everything here reads `Notebook` objects only and never raises on a notebook: a cell that does not parse
is noted (`CellDeps.parse_error`) and contributes nothing; an unexpected failure degrades to an order-only
`Analysis` whose `limits` says so.

Dependency hints are static and approximate. Each code cell is parsed with `ast` after IPython syntax
(magics, shell escapes, `?` help) is masked out; the cell's *defines* are the names it binds at module level
and its *uses* the names it reads before binding them. A use gets an edge from the nearest cell above that
defines the name: the cell that would supply it in a top-to-bottom run.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
import warnings
from dataclasses import dataclass, field

from nbrecall.notebook.model import Cell, Notebook

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
class CellDeps:
    index: int
    defines: list[str] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    parse_error: str | None = None


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
    # scan read these instead of parsing every cell again. Only cells up to `_KEEP_TREE_CHARS` are kept.
    trees: dict[str, ast.Module] = field(default_factory=dict, repr=False, compare=False)


_KEEP_TREE_CHARS = 200_000  # a 100k-line cell's tree is hundreds of MB; such a cell is parsed again if needed
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
# Masking IPython syntax

_MAGIC_ASSIGN = re.compile(r"^(\s*)([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=\s*[!%]")
_MAYBE_IPYTHON = re.compile(r"^\s*[%!?]|\?\s*$|=\s*[!%]", re.M)
_TIME = re.compile(r"%time\s+(\S.*)$")  # `%time stmt` runs stmt in the user namespace
_HELP = re.compile(r"^\?{1,2}\S.*|^[\w.\[\]()'\"*]+\?{1,2}$")
# Cell magics whose body is ordinary Python run in the user namespace: only their first line is masked.
_PYTHON_BODY_CELL_MAGICS = {"time", "capture"}


def mask_magics(source: str) -> str:
    """Replace IPython-only syntax with Python that parses, keeping line numbers.

    - A `%%` cell magic masks the whole cell (every line blank), except `%%time` and `%%capture`, whose body
      is Python run in the user namespace: only their first line is masked.
    - A line magic (`%matplotlib inline`), shell escape (`!pip install x`) or help line (`df.head?`, `?df`)
      becomes `pass` at the same indentation, so an enclosing block stays valid; a trailing backslash masks
      the continuation lines too.
    - `x = !ls` and `x = %who_ls` become `x = None`: the target stays defined.
    - `%time` runs Python in the user namespace, so `%time y = f(x)` becomes `y = f(x)` and
      `x = %time f()` becomes `x = f()`.

    Only lines that start a statement are considered: a `%` that continues a bracketed expression (string
    formatting) or a line inside a triple-quoted string is left alone.
    """
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    if not _MAYBE_IPYTHON.search(text):
        return text  # the common case: plain Python, nothing to lex
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return text
    start = 0
    head = lines[first].strip()
    if head.startswith("%%"):
        name = head[2:].split(None, 1)[0] if head[2:].strip() else ""
        if name not in _PYTHON_BODY_CELL_MAGICS:
            return "\n".join("" for _ in lines)
        lines[first] = ""
        start = first + 1

    out = lines[:start]
    state = _LexState()
    masking_continuation = False
    for line in lines[start:]:
        if masking_continuation:
            out.append("")
            masking_continuation = line.rstrip().endswith("\\")
            continue
        if state.at_statement_start():
            masked = _mask_line(line)
            if masked is not None:
                out.append(masked)
                masking_continuation = line.rstrip().endswith("\\")
                continue
        state.feed(line)
        out.append(line)
    return "\n".join(out)


def _mask_line(line: str) -> str | None:
    """The masked form of a statement-starting line, or None when it is plain Python."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    indent = line[: len(line) - len(line.lstrip())]
    timed = _TIME.match(stripped)
    if timed and not stripped.endswith("\\"):
        return f"{indent}{timed.group(1)}"
    if stripped[0] in "%!":
        return f"{indent}pass"
    assign = _MAGIC_ASSIGN.match(line)
    if assign:
        timed = _TIME.match(line[assign.end() - 1:].strip())
        value = timed.group(1) if timed and not stripped.endswith("\\") else "None"
        return f"{assign.group(1)}{assign.group(2)} = {value}"
    if _HELP.match(stripped):
        return f"{indent}pass"
    return None


class _LexState:
    """Just enough of Python's lexer to know whether the next physical line starts a statement."""

    def __init__(self) -> None:
        self.depth = 0
        self.string: str | None = None  # the open quote delimiter
        self.continued = False  # the last line ended with a backslash outside a string

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.string is None and not self.continued

    def feed(self, line: str) -> None:
        self.continued = False
        i, n = 0, len(line)
        while i < n:
            if self.string is not None:
                if line[i] == "\\":
                    i += 2
                    continue
                if line.startswith(self.string, i):
                    i += len(self.string)
                    self.string = None
                    continue
                i += 1
                continue
            ch = line[i]
            if ch == "#":
                break
            if ch in "([{":
                self.depth += 1
            elif ch in ")]}":
                self.depth = max(0, self.depth - 1)
            elif ch in "'\"":
                self.string = ch * 3 if line.startswith(ch * 3, i) else ch
                i += len(self.string)
                continue
            elif ch == "\\" and not line[i + 1:].strip():
                self.continued = True
                break
            i += 1
        if self.string is not None and len(self.string) == 1 and not line.endswith("\\"):
            self.string = None  # an unterminated one-line string: a syntax error the parser will report


# ----------------------------------------------------------------------------------------------------
# Per-cell names

_IPYTHON_NAMES = {"get_ipython", "display", "In", "Out", "exit", "quit", "_", "__", "___", "_i", "_ii",
                  "_iii", "_ih", "_oh", "_dh"}
_IGNORED = frozenset(dir(builtins)) | _IPYTHON_NAMES
_HISTORY = re.compile(r"^_i{0,3}\d+$|^__\w+__$")


def _ignored(name: str) -> bool:
    return name in _IGNORED or bool(_HISTORY.match(name))


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


class _Scope(ast.NodeVisitor):
    """Collects bindings and reads for one scope; nested scopes are analysed recursively.

    kind is "module", "function", "class" or "comprehension". The module scope is order-aware: a read counts
    as a use only if the name is not bound earlier in the cell. Inner scopes report their free names upward:
    class bodies and comprehensions run at once (immediate reads of the enclosing scope), function and lambda
    bodies run later (deferred: checked against everything the cell binds).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.stores: set[str] = set()
        self.loads: list[str] = []
        self.deferred: list[str] = []
        self.walrus: set[str] = set()  # comprehension only: walrus targets bound in the enclosing scope
        self.declared_global: set[str] = set()
        self.declared_nonlocal: set[str] = set()
        self.global_writes: list[str] = []
        # module scope only
        self.defines: list[str] = []
        self.uses: list[str] = []
        self.imports: list[str] = []
        self.star_imports: list[str] = []

    # ---- hooks
    def load(self, name: str) -> None:
        if self.kind == "module":
            if name not in self.stores and not _ignored(name):
                self.uses.append(name)
        else:
            self.loads.append(name)

    def store(self, name: str) -> None:
        self.stores.add(name)
        if self.kind == "module":
            self.defines.append(name)

    def bind_walrus(self, name: str) -> None:
        if self.kind == "comprehension":
            self.walrus.add(name)
        else:
            self.store(name)

    def bind_import(self, name: str) -> None:
        self.stores.add(name)
        if self.kind == "module":
            self.imports.append(name)

    def defer(self, names: list[str]) -> None:
        self.deferred.extend(names)

    def add_global_writes(self, names: list[str]) -> None:
        if self.kind == "module":
            for name in names:
                self.store(name)
        else:
            self.global_writes.extend(names)

    # ---- results
    def free(self) -> tuple[list[str], list[str]]:
        """(immediate, deferred) names this scope reads from its enclosing scopes."""
        if self.kind == "function":
            local = self.stores - self.declared_global - self.declared_nonlocal
            skip = local | self.declared_nonlocal
            names = [n for n in self.loads + self.deferred if n not in skip]
            return [], names
        if self.kind == "class":
            return [n for n in self.loads if n not in self.stores], list(self.deferred)
        # comprehension
        return ([n for n in self.loads if n not in self.stores],
                [n for n in self.deferred if n not in self.stores])

    def finish_module(self) -> None:
        for name in self.deferred:
            if name not in self.stores and not _ignored(name):
                self.uses.append(name)

    # ---- names
    def visit_Constant(self, node: ast.Constant) -> None:
        pass  # nothing to see, and ast.NodeVisitor's default is slow (deprecated-alias lookups)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.store(node.id)
        else:
            self.load(node.id)

    def visit_Global(self, node: ast.Global) -> None:
        self.declared_global.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.declared_nonlocal.update(node.names)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.bind_import(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "__future__":
            return  # compiler switches, not names anyone uses
        for alias in node.names:
            if alias.name == "*":
                module = "." * (node.level or 0) + (node.module or "")
                if self.kind == "module":
                    self.star_imports.append(module)
                    self.imports.append(f"{module}.*")
            else:
                self.bind_import(alias.asname or alias.name)

    # ---- statements whose evaluation order differs from field order
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self.load(node.target.id)
            self.store(node.target.id)
        else:
            self.visit(node.target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.annotation)
        if node.value is not None or not isinstance(node.target, ast.Name):
            self.visit(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        for stmt in node.body + node.orelse:
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.visit(item.optional_vars)
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncWith = visit_With

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self.bind_walrus(node.target.id)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.store(node.name)
        for stmt in node.body:
            self.visit(stmt)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self.store(node.name)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.store(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self.generic_visit(node)
        if node.rest:
            self.store(node.rest)

    # ---- nested scopes
    def _visit_arguments_outside(self, args: ast.arguments) -> None:
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.visit(default)
        for arg in _all_args(args):
            if arg.annotation is not None:
                self.visit(arg.annotation)

    def _function_scope(self, args: ast.arguments, body: list[ast.AST]) -> None:
        inner = _Scope("function")
        for arg in _all_args(args):
            inner.stores.add(arg.arg)
        for stmt in body:
            inner.visit(stmt)
        _, deferred = inner.free()
        self.defer(deferred)
        writes = [n for n in inner.declared_global if n in inner.stores] + inner.global_writes
        self.add_global_writes(_unique(writes))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._visit_arguments_outside(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self.store(node.name)
        self._function_scope(node.args, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_arguments_outside(node.args)
        self._function_scope(node.args, [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            self.visit(expr)
        inner = _Scope("class")
        for stmt in node.body:
            inner.visit(stmt)
        immediate, deferred = inner.free()
        for name in immediate:
            self.load(name)
        self.defer(deferred)
        self.add_global_writes(_unique(inner.global_writes))
        self.store(node.name)

    def _comprehension(self, generators: list[ast.comprehension], parts: list[ast.AST]) -> None:
        if not generators:
            return
        self.visit(generators[0].iter)  # evaluated in the enclosing scope
        inner = _Scope("comprehension")
        for i, gen in enumerate(generators):
            if i:
                inner.visit(gen.iter)
            inner.visit(gen.target)
            for cond in gen.ifs:
                inner.visit(cond)
        for part in parts:
            inner.visit(part)
        immediate, deferred = inner.free()
        for name in immediate:
            self.load(name)
        self.defer(deferred)
        for name in sorted(inner.walrus):
            self.bind_walrus(name)
        self.add_global_writes(_unique(inner.global_writes))

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._comprehension(node.generators, [node.elt])

    visit_SetComp = visit_ListComp

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        self._comprehension(node.generators, [node.elt])

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node.generators, [node.key, node.value])


def _all_args(args: ast.arguments) -> list[ast.arg]:
    return args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]


def _parse(source: str) -> tuple[ast.Module | None, str | None]:
    masked = mask_magics(source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return ast.parse(masked), None
            except SyntaxError as first:
                # IPython removes the first line's indentation from the whole cell before running it.
                dedented = textwrap.dedent(masked)
                if dedented != masked:
                    try:
                        return ast.parse(dedented), None
                    except SyntaxError:
                        pass
                line = f"line {first.lineno}: " if first.lineno else ""
                return None, f"{line}{first.msg}"
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return None, f"cannot parse: {type(exc).__name__}: {str(exc)[:80]}"


def analyse_cell(cell: Cell, trees: dict[str, ast.Module] | None = None) -> tuple[CellDeps, list[str]]:
    """The names one code cell defines, uses and imports, plus the modules it star-imports; the cell's syntax tree
    goes into `trees` when given (see `Analysis.trees`)."""
    deps = CellDeps(index=cell.index)
    if not cell.source.strip():
        return deps, []
    tree, error = _parse(cell.source)
    if tree is None:
        deps.parse_error = error
        return deps, []
    if trees is not None and len(cell.source) <= _KEEP_TREE_CHARS:
        trees[cell.source] = tree
    scope = _Scope("module")
    try:
        for stmt in tree.body:
            scope.visit(stmt)
        scope.finish_module()
    except RecursionError:
        deps.parse_error = "cannot analyse: nested too deeply"
        return deps, []
    deps.defines = _unique(scope.defines)
    deps.uses = _unique(scope.uses)
    deps.imports = _unique(scope.imports)
    return deps, scope.star_imports


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


def _is_python(nb: Notebook) -> bool:
    language = (nb.language or "python").lower()
    return language.startswith("python") or language in {"ipython", "ipython3"}


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
    if not _is_python(nb):
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
            deps.imports = _unique(deps.imports + _PYLAB_NAMES)
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
        for name in _unique(names):
            definers.setdefault(name, []).append(index)
        imported.extend(deps.imports)
    imported = _unique(imported)
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
