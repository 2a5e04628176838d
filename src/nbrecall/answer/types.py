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


@dataclass
class Answer:
    """A complete answer: text with inline citations, the cited cells, and how it was made."""

    question: str
    text: str
    citations: list[Citation] = field(default_factory=list)
    mode: str = "extractive"  # "extractive" | "llm"
    notice: str | None = None  # e.g. "LLM endpoint failed (timeout); extractive answer shown"


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
            data["answer"] = {
                "question": self.answer.question,
                "text": self.answer.text,
                "mode": self.answer.mode,
                "notice": self.answer.notice,
                "citations": [c.__dict__ for c in self.answer.citations],
            }
        return data
