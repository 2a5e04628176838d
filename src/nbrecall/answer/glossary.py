"""What a notebook's own text says its variables are: the meaning of `qs`, `Ku` or `tauI` is rarely in the name.

Engineers name values with symbols and explain them once, where they are set or in the prose: a comment on the
assignment (`qs = qs_bar  # inlet flow of suspension`), or a markdown sentence that defines the symbol ("where
$K_u$ is the ultimate gain"). A question asks in those words ("suspension flow", "ultimate gain"), never in the
symbol. `symbol_glossary` collects these explanations for one notebook so that a value printed under a symbol can
be matched by what the symbol means. Only the grammar of defining a symbol is read (an assignment's comment,
"SYMBOL is/denotes …"), never subject words.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable

_ASSIGNED = re.compile(r"^\s*(?P<names>[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*(?::[^=]+)?=(?!=)")
# "where $K_u$ is the ultimate gain", "$\tau_I$ denotes the integral time", "$q_s$: the suspension flow"
_DEFINED = re.compile(
    r"\$(?P<symbol>[^$]{1,30})\$\s*(?:is|are|denotes|represents|stands\s+for|=|:)\s+"
    r"(?P<meaning>(?:the\s+|an?\s+)?[^\W\d_][^$.,;:\n()]{2,80})",
    re.I,
)
_LATEX_NAME = re.compile(r"\\(?:mathrm|text|textrm|mathit|operatorname|bar|hat|tilde|overline)\s*")
_MAX_MEANING = 120
_SUFFIXES = ("_bar", "_0", "_init", "_ss")  # `qs_bar`, the steady value of `qs`, means what `qs` means


def symbol_key(name: str) -> str:
    """One spelling for a symbol as code and LaTeX write it: `tau_I`, `tauI`, `\\tau_{I}` → `taui`."""
    text = _LATEX_NAME.sub("", name.strip())
    text = re.sub(r"[\\{}_\s^*']", "", text)
    return text.lower()


def _split_comment(line: str) -> tuple[str, str] | None:
    """(the code before it, the comment) of a line of code that ends in a comment (None when none: a `#` inside a
    string is not one)."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                return line[: tok.start[1]], tok.string.lstrip("#").strip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None  # a line of a longer statement or string: not read
    return None


def _keys(name: str) -> list[str]:
    """The symbol's key, then the keys of its name without a steady or initial suffix (`qs_bar` → `qs`)."""
    return [symbol_key(name)] + [symbol_key(name[: -len(s)]) for s in _SUFFIXES
                                 if name.endswith(s) and len(name) > len(s)]


def _is_quantity(code: str) -> bool:
    """Whether an assignment sets a quantity from numbers and other quantities (`Ku = 4*h/(a*3.14)`, `qs = qs_bar`,
    `c = np.sqrt(g*h)`): its comment then says what the quantity is. An assignment that loads, builds or selects
    something (`df = pd.read_csv("wells.csv")`, `model = LinearRegression()`, `por = df["Por"].values`) has a comment
    that says what the line does ("read the file"), not what the name means."""
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return False
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.Assign, ast.AnnAssign)) or tree.body[0].value is None:
        return False
    for node in ast.walk(tree.body[0].value):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            return False
        if isinstance(node, ast.Call) and (node.keywords or not node.args):
            return False
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Dict)):
            return False
    return True


def symbol_glossary(cells: Iterable[tuple[str, str]]) -> dict[str, str]:
    """`symbol_key(name)` → what the notebook says it is, from (cell type, source) pairs in notebook order; the
    first explanation of a symbol wins (it is where the symbol is introduced)."""
    glossary: dict[str, str] = {}

    def add(symbol: str, meaning: str) -> None:
        meaning = " ".join(meaning.split())[:_MAX_MEANING].strip(" -–,")
        keys = _keys(symbol)
        if not keys[0] or not meaning or not re.search(r"[^\W\d_]{3}", meaning):
            return
        for key in keys:
            glossary.setdefault(key, meaning)

    for cell_type, source in cells:
        if cell_type == "code":
            for line in source.splitlines():
                assigned = _ASSIGNED.match(line) if "#" in line else None
                split = _split_comment(line) if assigned is not None else None
                if assigned is not None and split is not None and split[1] and _is_quantity(split[0]):
                    for name in assigned.group("names").split(","):
                        add(name.strip(), split[1])
        elif cell_type == "markdown":
            for m in _DEFINED.finditer(source):
                add(m.group("symbol"), m.group("meaning"))
    return glossary


def meaning_of(names: Iterable[str], glossary: dict[str, str]) -> str:
    """What the notebook says the given variable names are, joined (empty when it says nothing)."""
    found = dict.fromkeys(glossary[k] for name in names for k in _keys(name) if k in glossary)
    return "; ".join(found)
