"""The shapes answers take, shared by the CLI, the HTTP API (server-sent events) and the MCP server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Citation:
    """A cell an answer rests on, cited as `[notebook › Cell n]`."""

    notebook: str
    cell: int
    cell_id: str
    nb_sha: str = ""

    def label(self) -> str:
        return f"[{self.notebook} › Cell {self.cell}]"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Citation:
        """The citation from its JSON form (its fields by name; other keys, such as a value's, are ignored)."""
        return cls(str(data["notebook"]), int(data["cell"]), str(data["cell_id"]), str(data.get("nb_sha", "")))


@dataclass
class FoundValue:
    """A value an answer gives: as printed, what names it, and the cell it is copied from."""

    value: str
    label: str
    shown: str  # the printed text holding label and value
    unit: str
    citation: Citation
    year: int | None = None
    stale: bool = False
    score: float = 0.0
    meaning: str = ""  # what the notebook says its variable is, when `shown` does not say it ("ultimate gain")

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "label": self.label, "shown": self.shown, "unit": self.unit,
                "notebook": self.citation.notebook, "cell": self.citation.cell, "cell_id": self.citation.cell_id,
                "nb_sha": self.citation.nb_sha, "year": self.year, "stale": self.stale,
                "score": round(self.score, 4), "meaning": self.meaning}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FoundValue:
        """The value from its JSON form (`as_dict`), as a client of the HTTP API receives it."""
        return cls(str(data["value"]), str(data.get("label", "")), str(data.get("shown", "")),
                   str(data.get("unit", "")), Citation.from_dict(data), data.get("year"), bool(data.get("stale")),
                   float(data.get("score", 0.0)), str(data.get("meaning", "")))


@dataclass
class Answer:
    """A complete answer: text with inline citations, the cited cells, and how it was made.

    A value answer also lists `values`: the best first, then up to two alternatives from other cells or
    notebooks ("also found"); when it is uncertain, `beside` lists the values closest to the first in its own
    printout. A place answer offers up to two other cells of its notebook (`places`). `kind` is what the question
    asked for (`value`, `where`, `term`, `general`)."""

    question: str
    text: str
    citations: list[Citation] = field(default_factory=list)
    mode: str = "extractive"  # "extractive" | "llm"
    notice: str | None = None  # e.g. "LLM endpoint failed (timeout); extractive answer shown"
    values: list[FoundValue] = field(default_factory=list)
    kind: str = ""
    # The cells offered as the answer, best first: a value answer's values' cells; a place answer's cell, then up
    # to two more cells of its notebook that retrieval found next (what `cell@3` of `nbrecall eval --answers` reads)
    places: list[Citation] = field(default_factory=list)
    # A value answer's chance that its first value is the one asked for (`answer.confidence`); None otherwise
    confidence: float | None = None
    # An uncertain value answer's closest rivals printed in the first value's own cell (`compose.beside_values`):
    # not alternatives (those come from other cells), but what to compare the first value with in the printout
    beside: list[FoundValue] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The answer's JSON form: what `ask --json`, `/api/ask` and the MCP `ask` tool give."""
        return {
            "question": self.question,
            "text": self.text,
            "mode": self.mode,
            "notice": self.notice,
            "kind": self.kind,
            "citations": [c.__dict__ for c in self.citations],
            "values": [v.as_dict() for v in self.values],
            "places": [c.__dict__ for c in self.places],
            "confidence": None if self.confidence is None else round(self.confidence, 3),
            "beside": [v.as_dict() for v in self.beside],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Answer:
        """The answer from its JSON form (the `answer` of a `done` event): what `ask` reads from a running server,
        so that its `--json` says all that an answer made here says."""
        return cls(str(data["question"]), str(data["text"]), [Citation.from_dict(c) for c in data.get("citations", [])],
                   str(data.get("mode", "extractive")), data.get("notice"),
                   [FoundValue.from_dict(v) for v in data.get("values", [])], str(data.get("kind", "")),
                   [Citation.from_dict(c) for c in data.get("places", [])],
                   None if data.get("confidence") is None else float(data["confidence"]),
                   [FoundValue.from_dict(v) for v in data.get("beside", [])])


@dataclass
class AnswerEvent:
    """One event of a streamed answer: `token` (text piece), `notice`, `citation`, or `done` (with the answer)."""

    type: str
    text: str = ""
    citation: Citation | None = None
    answer: Answer | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": self.type}
        if self.text:
            data["text"] = self.text
        if self.citation is not None:
            data["citation"] = self.citation.__dict__
        if self.answer is not None:
            data["answer"] = self.answer.as_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnswerEvent:
        """The event from its JSON form (`as_dict`): one server-sent event of `/api/ask`."""
        citation, answer = data.get("citation"), data.get("answer")
        return cls(str(data.get("type", "")), str(data.get("text", "")),
                   Citation.from_dict(citation) if citation else None, Answer.from_dict(answer) if answer else None)
