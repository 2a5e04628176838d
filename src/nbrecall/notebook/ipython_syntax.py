"""IPython syntax (magics, shell escapes, `?` help) masked into Python that `ast` parses, line numbers kept.

Masking, not IPython's `TransformerManager` (which the Pyodide backend uses to *run* cells): it turns `%time stmt`
and a `%%capture` body into strings passed to `get_ipython()`, which would hide the names they bind from the
dependency hints; the rules here are the ones `analysis._LIMITS` documents."""

from __future__ import annotations

import re

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
