"""An OpenAI-compatible chat-completions client (Ollama, vLLM, llama.cpp server, hosted APIs) that streams.

Server-sent events: `data: {json}` lines, ending with `data: [DONE]`. Connection errors, 429 and 5xx are retried
with exponential backoff, but only before the first token (a half-streamed answer is never silently restarted).
`<think>…</think>` blocks are removed from the stream, also when a tag is split across chunks. Citations in the
answer are parsed back into `Citation`s and kept only when they name a cell that was in the context.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from nbrecall.answer.context import Context
from nbrecall.answer.types import Citation
from nbrecall.config import AnswerSettings
from nbrecall.retry import wait_before_retry

SYSTEM_PROMPT = """\
You answer questions about an engineering firm's archive of Jupyter notebooks. Use only the notebook cells given \
in the context below the question. Each notebook starts with a line "# Notebook: PATH" and each of its cells with \
a header "## Cell [n] · type:… · id:…".

Rules:
- Cite every statement with the cell it comes from, written exactly as [PATH › Cell n], using the notebook path \
and the cell number from the context, e.g. [projects/2017/17-042/ballast.ipynb › Cell 8].
- Cite only cells that appear in the context. Never invent a notebook, a cell, a value or a result.
- Quote numbers, units and names exactly as they appear in the cell sources and outputs.
- If the context does not answer the question, say so in one sentence and cite the closest cell.
- Answer briefly: a few sentences, the value or the place first."""

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class LLMError(RuntimeError):
    """The endpoint could not give an answer (after retries, or after the stream had started)."""


def user_message(question: str, context: Context) -> str:
    return f"Question: {question}\n\nContext:\n\n{context.text}\n\nQuestion (again): {question}"


class ThinkFilter:
    """Removes `<think>…</think>` blocks from a stream of text pieces; tags may be split across pieces.

    A `</think>` with no opening tag (some servers put the opening tag in the prompt template) ends a block that
    began at the start of the stream: what was before it is dropped if it has not been sent yet; if it has,
    `restarted` is set and `sent` (the answer so far) starts again after the tag.
    """

    OPEN = "<think>"
    CLOSE = "</think>"

    def __init__(self) -> None:
        self.buffer = ""
        self.inside = False
        self.started = False  # any visible text sent yet
        self.sent = ""  # the visible answer so far
        self.restarted = False

    @staticmethod
    def _partial(text: str, tag: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of `tag` (case-insensitive)."""
        lowered = text.lower()
        for n in range(min(len(tag) - 1, len(text)), 0, -1):
            if lowered.endswith(tag[:n]):
                return n
        return 0

    def feed(self, piece: str) -> str:
        self.buffer += piece
        out: list[str] = []
        while self.buffer:
            lowered = self.buffer.lower()
            if self.inside:
                end = lowered.find(self.CLOSE)
                if end < 0:
                    keep = self._partial(self.buffer, self.CLOSE)
                    self.buffer = self.buffer[len(self.buffer) - keep :] if keep else ""
                    break
                self.buffer = self.buffer[end + len(self.CLOSE) :]
                self.inside = False
                continue
            start = lowered.find(self.OPEN)
            orphan = lowered.find(self.CLOSE)
            if orphan >= 0 and (start < 0 or orphan < start):
                # `</think>` without `<think>`: what came before it was thinking too
                self.buffer = self.buffer[orphan + len(self.CLOSE) :]
                if self.sent or out:
                    self.restarted = True
                    self.sent, self.started = "", False
                    out.clear()
                continue
            if start < 0:
                keep = max(self._partial(self.buffer, self.OPEN), self._partial(self.buffer, self.CLOSE))
                emit, self.buffer = (self.buffer[:-keep], self.buffer[-keep:]) if keep else (self.buffer, "")
                out.append(emit)
                break
            out.append(self.buffer[:start])
            self.buffer = self.buffer[start + len(self.OPEN) :]
            self.inside = True
        return self._visible("".join(out))

    def flush(self) -> str:
        rest = "" if self.inside else self.buffer
        self.buffer = ""
        return self._visible(rest)

    def _visible(self, text: str) -> str:
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        self.sent += text
        return text


def strip_think(text: str) -> str:
    """`text` without its think blocks (the non-streaming form of `ThinkFilter`)."""
    f = ThinkFilter()
    f.feed(text)
    f.flush()
    return f.sent.strip()


_CITATION = re.compile(
    r"\[\s*(?P<nb>[^\[\]›»\n]+?)\s*(?:›|»|>|::|,)\s*Cells?\s*\[?\s*(?P<cells>\d+(?:\s*\]?\s*(?:,|&|and|–|-)\s*"
    r"(?:Cells?\s*)?\[?\s*\d+)*)\s*\]?\s*\]",
    re.I,
)


def parse_citations(text: str, context: Context) -> tuple[list[Citation], list[str]]:
    """Citations in `text` that name cells of the context (in order, once each), and the invented ones.

    A notebook may be named by its full path or by a path suffix that fits exactly one notebook of the context.
    """
    citable = context.citable()
    notebooks = context.notebooks
    valid: list[Citation] = []
    invented: list[str] = []
    seen: set[tuple[str, int]] = set()
    for m in _CITATION.finditer(text):
        name = m.group("nb").strip().strip("`'\"")
        if name in notebooks:
            notebook: str | None = name
        else:
            fits = [nb for nb in notebooks if nb.endswith("/" + name) or nb.endswith(name)]
            notebook = fits[0] if len(fits) == 1 else None
        numbers = [int(n) for n in re.findall(r"\d+", m.group("cells"))]
        for n in numbers:
            cell = citable.get((notebook, n)) if notebook else None
            if cell is None:
                invented.append(f"[{name} › Cell {n}]")
                continue
            if (cell.notebook, cell.cell) not in seen:
                seen.add((cell.notebook, cell.cell))
                valid.append(cell.citation())
    return valid, invented


@dataclass
class LLMClient:
    """Streams a chat completion; `attempts` counts the requests made by the last call (for tests and logs)."""

    base_url: str
    model: str
    api_key: str | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    retries: int = 2
    backoff: float = 0.5
    max_tokens: int = 800
    temperature: float = 0.1
    attempts: int = 0
    retry_log: list[str] = field(default_factory=list)

    @classmethod
    def from_settings(cls, settings: AnswerSettings, api_key: str | None) -> LLMClient:
        if not settings.base_url or not settings.model:
            raise LLMError("no LLM configured (set answer.base_url and answer.model, or NBRECALL_LLM_BASE_URL "
                           "and NBRECALL_LLM_MODEL)")
        return cls(
            base_url=settings.base_url,
            model=settings.model,
            api_key=api_key,
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.timeout,
            retries=max(0, settings.retries),
            backoff=max(0.0, settings.backoff),
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
        )

    @property
    def url(self) -> str:
        base = self.base_url.rstrip("/")
        return base if base.endswith("/chat/completions") else f"{base}/chat/completions"

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _payload(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }

    def _wait(self, attempt: int, response: httpx.Response | None = None) -> None:
        wait_before_retry(attempt, self.backoff, response.headers.get("retry-after") if response is not None else None)

    def stream_chat(self, messages: list[dict[str, str]]) -> Iterator[str]:
        """Content pieces as they arrive (think blocks not yet removed). Raises `LLMError` on failure."""
        timeout = httpx.Timeout(self.read_timeout, connect=self.connect_timeout)
        self.attempts = 0
        self.retry_log = []
        with httpx.Client(timeout=timeout) as client:
            for attempt in range(self.retries + 1):
                self.attempts += 1
                last = attempt == self.retries
                started = False
                try:
                    with client.stream("POST", self.url, json=self._payload(messages), headers=self._headers()) as r:
                        if r.status_code in _RETRY_STATUS:
                            r.read()
                            reason = f"HTTP {r.status_code}"
                            if last:
                                raise LLMError(f"{reason} from {self.url}: {_error_text(r)}")
                            self.retry_log.append(reason)
                            self._wait(attempt, r)
                            continue
                        if r.status_code >= 400:
                            r.read()
                            raise LLMError(f"HTTP {r.status_code} from {self.url}: {_error_text(r)}")
                        for piece in _pieces(r):
                            started = True
                            yield piece
                        return
                except LLMError:
                    raise
                except httpx.TimeoutException as exc:
                    reason = f"timed out ({type(exc).__name__})"
                    if started or last:
                        raise LLMError(f"{reason} talking to {self.url}") from exc
                except (httpx.TransportError, httpx.StreamError) as exc:
                    reason = f"connection failed ({type(exc).__name__}: {exc})"
                    if started or last:
                        raise LLMError(f"{reason} talking to {self.url}") from exc
                self.retry_log.append(reason)
                self._wait(attempt)


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            return str(error.get("message") or error)[:300]
        if error:
            return str(error)[:300]
    except ValueError:
        pass
    return response.text[:300] or response.reason_phrase


def _pieces(response: httpx.Response) -> Iterator[str]:
    """Content deltas of a streamed chat completion (or the message of a non-streamed one)."""
    kind = response.headers.get("content-type", "")
    if "application/json" in kind:  # a server that ignored `stream: true`
        data = json.loads(response.read())
        content = (data.get("choices") or [{}])[0].get("message", {}).get("content")
        if content:
            yield content
        return
    for line in response.iter_lines():
        line = line.strip()
        if not line or line.startswith(":") or not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            data = json.loads(payload)
        except ValueError as exc:
            raise LLMError(f"unreadable stream event: {payload[:120]!r}") from exc
        if isinstance(data, dict) and data.get("error"):
            error = data["error"]
            raise LLMError(f"error in stream: {error.get('message') if isinstance(error, dict) else error}")
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or choice.get("message") or {}
            content = delta.get("content")
            if content:
                yield content
