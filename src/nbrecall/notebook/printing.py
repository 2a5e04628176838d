"""Which code printed a value: a cell's `print` calls with their literal text and the names they print, its
closing expression (what a result displays) and the statements its `%timeit` magics time.

A printed value is named by the code that made it (`print("Total ballast:", total)` names `1,284.6` "Total ballast"
and reads `total`); `facts.py` matches each printed line to its call. Read with the standard library's `ast`, magics
masked (`analysis.mask_magics`): no library maps output lines back to the calls that wrote them.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

__all__ = ["PrintCall", "last_expression", "match_print", "print_calls", "timed_statements"]


@dataclass
class PrintCall:
    """One `print(...)` call: the literal text it writes (split at its placeholders), the names it reads, its code
    line, and the expression a lone non-string argument prints (what names a bare printed value)."""

    literals: list[str]
    names: list[str]
    code: str
    label: str  # the first argument that is not a string (what a bare printed value is)


def _parse(source: str, tree: ast.Module | None) -> ast.Module | None:
    if tree is not None:
        return tree
    from nbrecall.notebook.analysis import mask_magics

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(mask_magics(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _literal_pieces(node: ast.AST) -> list[str]:
    out: list[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.extend(p.strip() for p in re.split(r"\{[^{}]*\}|%[-+ 0#]*\d*(?:\.\d+)?[a-zA-Z]", sub.value))
    return [p for p in out if len(p) >= 2]


def _names(node: ast.AST) -> list[str]:
    seen: dict[str, None] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id not in ("print", "round", "str", "format", "float", "int", "len"):
            seen.setdefault(sub.id, None)
        elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load):
            seen.setdefault(sub.attr, None)
    return list(seen)


def print_calls(source: str, tree: ast.Module | None) -> list[PrintCall]:
    """Every `print(...)` call of a cell, in source order, with its literal text and the names it prints."""
    tree = _parse(source, tree)
    if tree is None:
        return []
    lines = source.splitlines()
    found: list[tuple[int, int, PrintCall]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            code = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
            args = [a for a in node.args if not (isinstance(a, ast.Constant) and isinstance(a.value, str))]
            label = ast.unparse(args[0]) if len(args) == 1 and not _literal_pieces(node) else ""
            found.append((node.lineno, node.col_offset,
                          PrintCall(_literal_pieces(node), _names(node), code[:200], label[:80])))
    return [p for _, _, p in sorted(found, key=lambda item: (item[0], item[1]))]


def match_print(line: str, prints: list[PrintCall], index: int, n_lines: int) -> PrintCall | None:
    """The print call that wrote `line`: the one whose literal text the line holds (a loop prints many lines
    with one call), else by position when each call printed one line."""
    best: tuple[int, PrintCall] | None = None
    for p in prints:
        if p.literals and all(piece in line for piece in p.literals):
            score = sum(len(piece) for piece in p.literals)
            if best is None or score > best[0]:
                best = (score, p)
    if best is not None:
        return best[1]
    if len(prints) == n_lines and 0 <= index < len(prints):
        return prints[index]
    bare = [p for p in prints if not p.literals]
    return bare[0] if len(bare) == 1 else None


def last_expression(source: str, tree: ast.Module | None) -> tuple[str, list[str]]:
    """The cell's closing expression (what a result displays) and the names it reads."""
    tree = _parse(source, tree)
    if tree is not None and tree.body and isinstance(tree.body[-1], ast.Expr):
        node = tree.body[-1].value
        return ast.unparse(node)[:160], _names(node)
    lines = [ln.strip() for ln in source.strip().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return (lines[-1][:160] if lines else ""), []


_TIMEIT_MAGIC = re.compile(r"^\s*(%%?)timeit\b((?:\s+-\w+(?:\s*\d+)?)*)\s*(.*)$")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def timed_statements(source: str) -> list[tuple[str, list[str]]]:
    """Each `%timeit` (or `%%timeit`) of a cell in order: its line, and the names of the statement it times (for
    the cell magic, the body below it)."""
    lines = source.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = _TIMEIT_MAGIC.match(line)
        if m is None:
            continue
        statement = m.group(3) if m.group(1) == "%" else "\n".join(lines[i + 1 :])
        tree = _parse(statement, None)
        names = _names(tree) if tree is not None else list(dict.fromkeys(_IDENTIFIER.findall(statement)))
        out.append((line.strip()[:160], names[:20]))
    return out
