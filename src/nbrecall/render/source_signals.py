"""What a notebook's source says about comparing its outputs: cells whose results depend on random numbers drawn
without a seed (their drift is `random`, not a changed result), and whether it sets a display precision itself
(then fewer digits are a real difference). `compare` reads both."""

from __future__ import annotations

import re

from nbrecall.notebook.model import Notebook

_PRECISION_SET_RE = re.compile(
    r"set_printoptions|display\.precision|display\.float_format|%precision|pd\.options\.display|float_format"
)

_RNG_CALL_RE = re.compile(
    r"\b(?:np\.|numpy\.)?random\.(?!seed\b|default_rng\b|RandomState\b|Generator\b)\w+\s*\("
    r"|\bdefault_rng\(\s*\)|\bRandomState\(\s*\)|\.rvs\((?![^)]*random_state)|\brandn?\(|\buuid4\("
)
_SEED_RE = re.compile(
    r"\b(?:manual_)?seed\(\s*[\w.]|\bdefault_rng\(\s*[\w.]|\bRandomState\(\s*[\w.]|\brandom_state\s*=\s*\d"
)


def unseeded_random_cells(nb: Notebook) -> set[int]:
    """Code cells whose results may depend on random numbers drawn without a seed: a cell that draws them before
    any seed is set, and every cell that uses (through the dependency hints, transitively) a name it defines."""
    seeded = False
    drawing: set[int] = set()
    for cell in nb.code_cells:
        if _SEED_RE.search(cell.source):
            seeded = True
        if not seeded and _RNG_CALL_RE.search(cell.source):
            drawing.add(cell.index)
    if not drawing:
        return set()
    from nbrecall.notebook.analysis import analyse

    users: dict[int, set[int]] = {}
    for edge in analyse(nb).edges:
        users.setdefault(edge.src, set()).add(edge.dst)
    reached, todo = set(drawing), list(drawing)
    while todo:
        for nxt in users.get(todo.pop(), ()):
            if nxt not in reached:
                reached.add(nxt)
                todo.append(nxt)
    return reached


def sets_display_precision(nb: Notebook) -> bool:
    """Whether the notebook sets a display precision itself (then fewer digits are a real difference)."""
    return any(_PRECISION_SET_RE.search(c.source) for c in nb.code_cells)
