"""The values of a printed text: a result's `text/plain` or a stream, read whole, as a table or line by line.

How one line, a repr or a table is read is `printed.py` and `reprs.py`; here those readers are chosen for a text
(a one-line result, a dict IPython printed one entry per line, a Series, a table of `|` rows, aligned or drawn
columns, then every other line), and each value is named by what printed it: the print call whose literal text the
line holds, the cell's closing expression, the line above that ends with `:`, or the header of the loop's block.
"""

from __future__ import annotations

from nbrecall.notebook.fact_types import LETTER, CellFacts, Fact
from nbrecall.notebook.printed import NOISE, NUMBER, line_facts, to_number
from nbrecall.notebook.printing import PrintCall, match_print
from nbrecall.notebook.reprs import (
    aligned_tables,
    call_entries,
    dict_entries,
    drawn_tables,
    numpy_scalars,
    pipe_table,
    series_entries,
    unit_reprs,
)


def text_facts(acc: CellFacts, text: str, origin: str, prints: list[PrintCall], expr: tuple[str, list[str]]) -> None:
    """The values of one printed text (`origin` "line": a stream; "result": a result's `text/plain`) added to `acc`:
    a result read whole (a scalar, a dict, a Series), a printout as a table (`|` rows, aligned columns, a drawn frame)
    or line by line (`printed.line_facts`), each value named by the print call that wrote its line (`prints`) or by
    the cell's closing expression (`expr`: code and the names it reads)."""
    lines = [ln.rstrip() for ln in numpy_scalars(unit_reprs(text)).splitlines()]
    content = [ln for ln in lines if ln.strip() and not NOISE.match(ln)]
    if not content:
        return
    code, expr_names = expr
    if origin == "result":
        whole = "\n".join(content).strip()
        if len(content) > 1 and whole.startswith("{") and whole.endswith("}"):
            # IPython pretty-prints a dict wider than the console one entry per line: still one dict. Only a dict
            # of numbers, one entry per line; anything else (nested values, objects' reprs with their settings, a
            # key holding a comma) is read line by line as before, which keeps the numbers inside
            keyed = dict_entries(whole)
            if len(keyed) == len(content) and all(to_number(v) is not None for _, v, _ in keyed):
                for key, value, shown in keyed:
                    acc.add(key, value, shown, "entry", code=code, names=expr_names)
                return
        if len(content) == 1 and NUMBER.search(whole) and len(whole) <= acc.limits.value_chars:
            shown = f"{code} = {whole}" if code else whole
            read = line_facts(whole)
            label, number, unit, whole_line = read[0] if len(read) == 1 else ("", "", "", "")
            if not label and unit and whole_line == whole:
                # a bare quantity (`134.7 kilonewton`, a units library's result): its number is the value, the
                # rest its unit
                acc.add(code, number, shown, "result", unit=unit, code=code, names=expr_names)
                return
            acc.add(code, whole, shown, "result", code=code, names=expr_names)
            keyed = dict_entries(whole)
            for key, value, shown in keyed:
                acc.add(key, value, shown, "entry", code=code, names=expr_names)
            if not keyed and not whole.startswith(("[", "(", "array(")):
                for label, value, unit, shown in read[1:]:
                    acc.add(label, value, shown, "entry", unit=unit, code=code, names=expr_names)
            return
        series = series_entries(content)
        if series is not None:
            entries, name = series
            for key, value in entries:
                label = f"{key} · {name}" if name else key
                acc.add(label, value, f"{key}  {value}", "entry", code=code, names=[*expr_names, name])
            return
    pipes = [ln for ln in content if ln.count("|") >= 1]
    if len(pipes) >= 3 and len(pipes) == len(content):
        table = pipe_table(pipes)
        if table is not None:
            acc.add_table(*table, 1, code=code, names=expr_names)
            return
    drawn = drawn_tables(content)
    inside = {i for table in drawn for i in range(table.first, table.last + 1)}
    tables = {table.first: table for table in aligned_tables([
        "" if i in inside else line for i, line in enumerate(content)])}  # a drawn table's rows are its own
    tables.update((table.first, table) for table in drawn)
    previous = ""
    block = ""  # the last line that names what follows without a value of its own (a loop's block header)
    blocks: list[str] = []  # for each fact this text adds, the block header above it
    start = len(acc.found)
    skip_to = -1
    for i, line in enumerate(content):
        if i <= skip_to:
            continue
        pr = match_print(line, prints, i, len(content)) if origin == "line" else None
        line_code = pr.code if pr else code
        names = pr.names if pr else expr_names
        if i in tables:  # a table printed as aligned text: each number named by its row and column
            aligned = tables[i]
            acc.add_table(aligned.header, aligned.rows, 1, code=line_code, names=names)
            skip_to, previous = aligned.last, ""
            continue
        stripped = line.strip()
        called = call_entries(stripped)
        if called:  # `KNeighborsClassifier(n_neighbors=13, …)`: the repr as one value, and its arguments
            label = (pr.label if pr else "") or (code if origin == "result" else "")
            acc.add(label, stripped, f"{label} = {stripped}" if label else stripped, origin, code=line_code,
                    names=names)
            for key, value, shown in called:
                acc.add(key, value, shown, "entry", code=line_code, names=names)
            previous = ""
            continue
        if stripped[:1] in "([{" and stripped[-1:] == {"(": ")", "[": "]", "{": "}"}[stripped[:1]]:
            # a repr (`[['0', '3'], …]`, `(0.0, 64.0)`, a dict): one value, and a dict's entries
            if NUMBER.search(stripped):
                label = (pr.label if pr else "") or (code if origin == "result" else "") or previous.rstrip(":")
                acc.add(label, stripped, f"{label} = {stripped}" if label else stripped, origin, code=line_code,
                        names=names)
            for key, value, shown in dict_entries(stripped):
                acc.add(key, value, shown, "entry", code=line_code, names=names)
            previous = ""
            continue
        found = line_facts(line)
        if not found:
            previous = line.strip() if len(line.strip()) <= 80 else ""
            if LETTER.search(previous) and not NUMBER.search(previous) and "  " not in previous \
                    and not previous.endswith("\\"):  # prose, not a table's header line
                blocks.extend([block] * (len(acc.found) - start - len(blocks)))  # the facts so far stood under it
                block = previous.rstrip(":")
            continue
        for label, value, unit, shown in found:
            if not label:  # a bare value: named by the line above (`Mean accuracy:`), or by what printed it
                label = previous.rstrip(":") if previous.endswith(":") else (pr.label if pr else "") or (
                    code if origin == "result" else "")
                shown = f"{label}: {shown}" if label and label not in shown else shown
            acc.add(label, value, shown, origin, unit=unit, code=line_code, names=names)
        previous = ""
    blocks.extend([block] * (len(acc.found) - start - len(blocks)))
    _name_by_block(acc.found[start:], blocks)


def _name_by_block(facts: list[Fact], headers: list[str]) -> None:
    """A label printed more than once under different block headers (`Integrating High-sensitivity RCM` / `The
    ECS is 3.57 K`, then `Integrating Low-sensitivity RCM` / `The ECS is 2.22 K`) is a loop's printout: each value
    is named by its block's header too (`Integrating High-sensitivity RCM · The ECS`), as a table's value is by
    its row, when the headers come from one template (`_one_template`). Other labels are left as they are. In
    place."""
    under: dict[str, set[str]] = {}
    for fact, header in zip(facts, headers, strict=True):
        if fact.label:
            under.setdefault(fact.label, set()).add(header)
    for fact, header in zip(facts, headers, strict=True):
        if header and _one_template(under.get(fact.label, set())):
            fact.label = f"{header} · {fact.label}"[:160]


def _one_template(headers: set[str]) -> bool:
    """Two headers or more printed from one template: all start with the same word or all end with it
    (`Integrating High-sensitivity RCM`, `Integrating Low-sensitivity RCM`). A training log's generated samples
    between its validation lines share neither and are no headers."""
    if len(headers) < 2 or "" in headers:
        return False
    words = [h.split() for h in headers]
    return len({w[0] for w in words}) == 1 or len({w[-1] for w in words}) == 1
