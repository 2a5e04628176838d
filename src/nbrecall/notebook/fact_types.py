"""The records of value facts (`Fact`), their bounds (`FactLimits`), and the accumulator a cell's readers add to.

Apart from `facts.py` (which reads a cell's outputs) so that the reader of printed text (`text_facts.py`) and the
cell-level reader share them without importing each other; `facts.py` re-exports `Fact` and `FactLimits`, the names
other stages import.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from nbrecall.notebook.model import Cell
from nbrecall.notebook.printed import to_number
from nbrecall.notebook.reprs import grid_values

# A label that holds a letter names something (`', '` or a bare `1719/1719` does not).
LETTER = re.compile(r"[^\W\d_]")


@dataclass
class FactLimits:
    per_cell: int = 24
    per_table: int = 40
    per_notebook: int = 400
    value_chars: int = 200  # a longer repr is no "value" (an array, a list of rows)
    # A printout longer than the index keeps (its head and tail lines) is read for values up to this many lines
    # and characters (its head and tail halves beyond): a report's values sit in its middle too
    stream_lines: int = 400
    stream_chars: int = 40_000


@dataclass
class Fact:
    """One value a notebook shows, with what names it and where it is."""

    cell: int
    cell_id: str
    value: str  # as printed: "3803.0", "0.182, 0.218", "{A: 4, B: -2}", "1.12+0.579j"
    label: str  # "total_ballast", "Total ballast aft", "64 · m11", "'n_neighbors'"
    shown: str  # the printed text that holds label and value, as the notebook shows it (what an answer quotes)
    unit: str = ""
    code: str = ""  # the code line that produced it (the print call, the last expression, the assignment)
    names: str = ""  # variables that code line reads, space-separated ("tauI", "ci_95_por2")
    heading: str = ""
    sentence: str = ""  # the markdown sentence just above the cell
    origin: str = "line"  # "result" | "line" | "entry" | "table" | "latex" | "input"
    position: int = 0  # order within the cell
    final: bool = True  # the last fact of its cell with this label (an iteration's result, not its first step)
    number: float | None = None  # the value as a number, when it is one number
    stale: bool = False  # the outputs it comes from could not be re-rendered
    seq: int = 0  # the sequence number of its chunk in the notebook (`ingest.chunk.Chunk.seq`), once chunked

    def statement(self) -> str:
        """`label = value unit`, or the printed text when that is shorter and says the same."""
        unit = f" {self.unit}" if self.unit and self.unit not in self.shown else ""
        return f"{self.shown}{unit}"

    def description(self) -> str:
        """What names the value and where it is: heading, the printed label and value, the variables behind it,
        the sentence above (what keyword search sees of a fact)."""
        parts = [self.heading, self.statement()]
        if self.names and self.names not in self.shown:
            parts.append(self.names)
        if self.sentence:
            parts.append(self.sentence)
        return "\n".join(p for p in parts if p)

    def name(self) -> str:
        """What the value is, without the value or where it is (`Input level dB`, `64 · m11 (% error)`): what a
        fact's vector is made of. Facts of one cell share their place, so their vectors tell them apart only by
        their names; the place is compared through the cell's own chunks (`answer.values`)."""
        named = " ".join(p for p in (self.label, self.unit) if p).strip()
        return named or self.names or self.shown


@dataclass
class CellFacts:
    """The facts of one cell as its outputs are read: each added with the cell's place, a value too long to be one
    (`FactLimits.value_chars`) left out."""

    cell: Cell
    heading: str
    sentence: str
    stale: bool
    limits: FactLimits
    found: list[Fact] = field(default_factory=list)

    def add(self, label: str, value: str, shown: str, origin: str, unit: str = "", code: str = "",
            names: Iterable[str] = ()) -> None:
        value = value.strip()
        if not value or len(value) > self.limits.value_chars:
            return
        self.found.append(Fact(
            cell=self.cell.index, cell_id=self.cell.id, value=value, label=label.strip()[:160],
            shown=shown.strip().replace("\n", " ")[:300], unit=unit, code=code, names=" ".join(names)[:160],
            heading=self.heading, sentence=self.sentence, origin=origin, number=to_number(value), stale=self.stale,
        ))

    def add_table(self, header: list[str], rows: list[list[str]], depth: int, code: str = "",
                  names: Iterable[str] = ()) -> None:
        """A table's numbers, each named by its row and column (`reprs.grid_values`), at most `limits.per_table`
        of them: an HTML table, a pipe table, an aligned or a drawn one alike."""
        for label, value, shown in grid_values(header, rows, depth)[: self.limits.per_table]:
            self.add(label, value, shown, "table", code=code, names=names)
