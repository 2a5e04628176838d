"""What the reader repairs in a notebook's JSON before nbformat validates it, noting each repair.

Jupyter opens many files its schema rejects, with a warning: keys a front end or a tool added, required keys a
generator left out, an execution count saved while the cell ran (`"*"`). Quarantining them would lose notebooks
people can open, so the reader repairs what it can without guessing at content and says what it did
(`Notebook.notes`); what it cannot repair, nbformat's validator reports (`notebook.read`).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import nbformat

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# What nbformat 4.5's schema allows as a cell id; an editor or a tool may write another (`$illegal_chars`, a path)
CELL_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")


def replace_lone_surrogates(raw: dict[str, Any]) -> int:
    """Replace lone surrogates (valid JSON escapes such as `"\\udc80"`, but not encodable as UTF-8) in place.

    Left in, they make every later UTF-8 encode fail: the chunk store, the manifest and the converted files.
    Returns how many strings (values or keys) were changed. Iterative, so deep nesting cannot overflow here.
    """
    changed = 0

    def fix(value: str) -> str:
        nonlocal changed
        fixed = _LONE_SURROGATE.sub("\ufffd", value)
        if fixed != value:
            changed += 1
        return fixed

    stack: list[Any] = [raw]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in list(node):
                value = node[key]
                if isinstance(key, str) and _LONE_SURROGATE.search(key):
                    del node[key]
                    key = fix(key)
                    node[key] = value
                if isinstance(value, str):
                    node[key] = fix(value)
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                if isinstance(value, str):
                    node[i] = fix(value)
                elif isinstance(value, dict | list):
                    stack.append(value)
    return changed


_CELL_KEYS = {
    "code": {"id", "cell_type", "metadata", "source", "outputs", "execution_count"},
    "markdown": {"id", "cell_type", "metadata", "source", "attachments"},
    "raw": {"id", "cell_type", "metadata", "source", "attachments"},
}
# What the nbformat 4 schema lets each output carry. Front ends add their own keys (`transient`, a widget
# manager's `jetTransient`); Jupyter opens such a file with a warning, so the reader drops them too.
_OUTPUT_KEYS = {
    "stream": {"output_type", "name", "text"},
    "display_data": {"output_type", "data", "metadata"},
    "execute_result": {"output_type", "execution_count", "data", "metadata"},
    "error": {"output_type", "ename", "evalue", "traceback"},
}


_NOTEBOOK_KEYS = {"metadata", "nbformat_minor", "nbformat", "cells"}


def drop_unexpected_keys(node: dict[str, Any], notes: list[str]) -> None:
    """Remove keys the notebook, a cell type or an output type may not carry (tools add their own top-level keys,
    editors write e.g. `execution_count` on markdown cells, front ends a `transient` on display outputs)."""
    for key in sorted(set(node) - _NOTEBOOK_KEYS):
        del node[key]
        notes.append(f"repaired: removed unexpected top-level '{key}'")
    minor = node.get("nbformat_minor", 0)
    allow_id = isinstance(minor, int) and minor >= 5
    for i, cell in enumerate(node["cells"]):
        allowed = _CELL_KEYS[cell["cell_type"]] - (set() if allow_id else {"id"})
        for key in sorted(set(cell) - allowed):
            del cell[key]
            notes.append(f"repaired: removed unexpected '{key}' from {cell['cell_type']} cell {i}")
        outputs = cell.get("outputs") if cell["cell_type"] == "code" else None
        for j, output in enumerate(outputs if isinstance(outputs, list) else []):
            kept = _OUTPUT_KEYS.get(str(output.get("output_type"))) if isinstance(output, dict) else None
            for key in sorted(set(output) - kept) if kept else []:
                del output[key]
                notes.append(f"repaired: removed unexpected '{key}' from output {j} of cell {i}")


# What the nbformat 4 schema requires and a reader can supply without guessing at content: an empty container, an
# empty text, no execution count. A stream's missing `name` is the one guess (`stdout`), and it only decides how the
# text is labelled. Tools that write notebooks by hand (report generators, converters, old editors) leave these out;
# Jupyter opens such a file with a warning, so the index reads it too instead of quarantining it.
_REQUIRED_CELL: dict[str, dict[str, Any]] = {
    "code": {"metadata": {}, "source": "", "outputs": [], "execution_count": None},
    "markdown": {"metadata": {}, "source": ""},
    "raw": {"metadata": {}, "source": ""},
}
_REQUIRED_OUTPUT: dict[str, dict[str, Any]] = {
    "stream": {"name": "stdout", "text": ""},
    "display_data": {"data": {}, "metadata": {}},
    "execute_result": {"data": {}, "metadata": {}, "execution_count": None},
    "error": {"ename": "", "evalue": "", "traceback": []},
}


def fill_missing_keys(node: dict[str, Any], notes: list[str]) -> None:
    """Add the required keys a notebook, its cells or their outputs lack, each with the neutral value in
    `_REQUIRED_CELL` / `_REQUIRED_OUTPUT`, read an execution count that is not one as none, noting each repair, and
    drop a cell id the schema does not allow; any other key of the wrong type is left for the validator to
    report."""
    if "metadata" not in node:
        node["metadata"] = nbformat.NotebookNode()
        notes.append("repaired: added the missing notebook 'metadata' (empty)")
    if "nbformat_minor" not in node:
        node["nbformat_minor"] = 0
        notes.append("repaired: added the missing 'nbformat_minor' (0)")
    for i, cell in enumerate(node["cells"]):
        if "id" in cell and not (isinstance(cell["id"], str) and CELL_ID.match(cell["id"])):
            del cell["id"]  # the reader derives one from the cell's index and source (`read._build` notes it)
        for key, empty in _REQUIRED_CELL.get(cell["cell_type"], {}).items():
            if key not in cell:
                cell[key] = nbformat.from_dict(copy.deepcopy(empty))
                notes.append(f"repaired: added the missing '{key}' to {cell['cell_type']} cell {i} "
                             f"({json.dumps(empty)})")
        if cell["cell_type"] == "code" and not _count_or_none(cell.get("execution_count")):
            notes.append(f"repaired: cell {i}'s execution count {json.dumps(cell['execution_count'])[:40]} (a cell "
                         "saved while it ran shows '*') read as none")
            cell["execution_count"] = None
        outputs = cell.get("outputs") if cell["cell_type"] == "code" else None
        for j, output in enumerate(outputs if isinstance(outputs, list) else []):
            required = _REQUIRED_OUTPUT.get(str(output.get("output_type"))) if isinstance(output, dict) else None
            for key, empty in (required or {}).items():
                if key not in output:
                    output[key] = nbformat.from_dict(copy.deepcopy(empty))
                    notes.append(f"repaired: added the missing '{key}' to output {j} of cell {i} "
                                 f"({json.dumps(empty)})")
            if required and "execution_count" in required and not _count_or_none(output["execution_count"]):
                notes.append(f"repaired: output {j} of cell {i}: execution count "
                             f"{json.dumps(output['execution_count'])[:40]} read as none")
                output["execution_count"] = None


def _count_or_none(value: Any) -> bool:
    """What the schema allows as an execution count: an integer (not a boolean) or null."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool))
