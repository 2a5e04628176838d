"""The names one code cell defines, uses and imports: a scope-aware `ast` visitor over the masked source."""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from nbrecall.notebook.ipython_syntax import mask_magics
from nbrecall.notebook.model import Cell

KEEP_TREE_CHARS = 200_000  # a 100k-line cell's tree is hundreds of MB; such a cell is parsed again if needed


@dataclass
class CellDeps:
    index: int
    defines: list[str] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    parse_error: str | None = None


_IPYTHON_NAMES = {"get_ipython", "display", "In", "Out", "exit", "quit", "_", "__", "___", "_i", "_ii",
                  "_iii", "_ih", "_oh", "_dh"}
_IGNORED = frozenset(dir(builtins)) | _IPYTHON_NAMES
_HISTORY = re.compile(r"^_i{0,3}\d+$|^__\w+__$")


def _ignored(name: str) -> bool:
    return name in _IGNORED or bool(_HISTORY.match(name))


def unique_names(names: list[str]) -> list[str]:
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

    def _function_scope(self, args: ast.arguments, body: Sequence[ast.AST]) -> None:
        inner = _Scope("function")
        for arg in _all_args(args):
            inner.stores.add(arg.arg)
        for stmt in body:
            inner.visit(stmt)
        _, deferred = inner.free()
        self.defer(deferred)
        writes = [n for n in inner.declared_global if n in inner.stores] + inner.global_writes
        self.add_global_writes(unique_names(writes))

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
        self.add_global_writes(unique_names(inner.global_writes))
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
        self.add_global_writes(unique_names(inner.global_writes))

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp) -> None:
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
    if trees is not None and len(cell.source) <= KEEP_TREE_CHARS:
        trees[cell.source] = tree
    scope = _Scope("module")
    try:
        for stmt in tree.body:
            scope.visit(stmt)
        scope.finish_module()
    except RecursionError:
        deps.parse_error = "cannot analyse: nested too deeply"
        return deps, []
    deps.defines = unique_names(scope.defines)
    deps.uses = unique_names(scope.uses)
    deps.imports = unique_names(scope.imports)
    return deps, scope.star_imports
