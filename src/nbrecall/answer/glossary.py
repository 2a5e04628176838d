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

# "where $K_u$ is the ultimate gain", "$\tau_I$ denotes the integral time", "$q_s$: the suspension flow"
_DEFINED = re.compile(
    r"\$(?P<symbol>[^$]{1,30})\$\s*(?:is|are|denotes|represents|stands\s+for|=|:)\s+"
    r"(?P<meaning>(?:the\s+|an?\s+)?[^\W\d_][^$.,;:\n()]{2,80})",
    re.I,
)
_LATEX_NAME = re.compile(r"\\(?:mathrm|text|textrm|mathit|operatorname|bar|hat|tilde|overline)\s*")
_MAX_MEANING = 120


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


def _quantity_names(code: str) -> list[str]:
    """The names an assignment of a quantity sets (`Ku = 4*h/(a*3.14)`, `Kp, Ki = 1.0, 0.2`, `c = np.sqrt(g*h)`),
    and the name it copies (`qs = qs_bar`: one quantity under two names, which its comment explains both); none
    when the line sets no quantity. An assignment that loads, builds or selects something (`df =
    pd.read_csv("wells.csv")`, `model = LinearRegression()`, `por = df["Por"].values`) has a comment that says what
    the line does ("read the file"), not what the name means."""
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return []
    statement = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
        return []
    value = statement.value
    for node in ast.walk(value):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            return []
        if isinstance(node, ast.Call) and (node.keywords or not node.args):
            return []
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp, ast.Dict)):
            return []
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    names = [n.id for t in targets for n in ([t] if isinstance(t, ast.Name) else getattr(t, "elts", []))
             if isinstance(n, ast.Name)]
    if names and isinstance(value, ast.Name):
        names.append(value.id)
    return names


def symbol_glossary(cells: Iterable[tuple[str, str]]) -> dict[str, str]:
    """`symbol_key(name)` → what the notebook says it is, from (cell type, source) pairs in notebook order; the
    first explanation of a symbol wins (it is where the symbol is introduced)."""
    glossary: dict[str, str] = {}

    def add(symbol: str, meaning: str) -> None:
        meaning = " ".join(meaning.split())[:_MAX_MEANING].strip(" -–,")
        key = symbol_key(symbol)
        if key and meaning and re.search(r"[^\W\d_]{3}", meaning):
            glossary.setdefault(key, meaning)

    for cell_type, source in cells:
        if cell_type == "code":
            for line in source.splitlines():
                split = _split_comment(line) if "#" in line and "=" in line else None
                if split is not None and split[1]:
                    for name in _quantity_names(split[0]):
                        add(name, split[1])
        elif cell_type == "markdown":
            for m in _DEFINED.finditer(source):
                add(m.group("symbol"), m.group("meaning"))
    return glossary


def meaning_of(names: Iterable[str], glossary: dict[str, str]) -> str:
    """What the notebook says the given variable names are, joined (empty when it says nothing)."""
    found = dict.fromkeys(glossary[k] for k in map(symbol_key, names) if k in glossary)
    return "; ".join(found)
