"""Answer a question from the archive (architecture §9): search, then an LLM answer over the context or an
extractive one.

`stream_answer` yields `AnswerEvent`s: `notice` (why the answer is what it is: fallback, dropped citations),
`token` (pieces of text as they come), `citation` (each cited cell, after the text) and finally `done` with the
complete `Answer`. The CLI, the HTTP API (`/api/ask`, as server-sent events) and the MCP server all use it.

With `answer.base_url` and `answer.model` set, the model answers from the context and must cite cells; any
failure (no key, connection refused, time-out, 5xx after retries, a broken stream) gives the extractive answer
with a notice saying why. If the stream broke after tokens were sent, the notice says so and the extractive
answer follows; the `done` event always carries the answer to keep.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nbrecall.answer.answerers import make_answerer
from nbrecall.answer.candidates import RankedFact
from nbrecall.answer.compose import extractive_answer, pick_values
from nbrecall.answer.context import Context, ContextValue, build_context
from nbrecall.answer.llm import SYSTEM_PROMPT, LLMClient, LLMError, ThinkFilter, parse_citations, user_message
from nbrecall.answer.question import read_question
from nbrecall.answer.redact import redact_secrets
from nbrecall.answer.rerank import ordered_values
from nbrecall.answer.types import Answer, AnswerEvent
from nbrecall.config import Settings
from nbrecall.convert.tokens import count_llm_tokens
from nbrecall.index.terms import has_terms
from nbrecall.keys import KeyStoreError, resolve_api_key
from nbrecall.records import CellRecord, SearchFilters
from nbrecall.search.retrieve import SearchResult

if TYPE_CHECKING:
    from nbrecall.service import Archive


def llm_configured(settings: Settings) -> bool:
    return bool(settings.answer.base_url and settings.answer.model)


def answer(question: str, archive: Archive, settings: Settings, filters: SearchFilters | None = None) -> Answer:
    """The complete answer (the `done` event of `stream_answer`)."""
    final: Answer | None = None
    for event in stream_answer(question, archive, settings, filters):
        if event.type == "done":
            final = event.answer
    assert final is not None
    return final


def stream_answer(
    question: str, archive: Archive, settings: Settings, filters: SearchFilters | None = None
) -> Iterator[AnswerEvent]:
    """Search, then stream the answer: notices, tokens, citations, and `done` with the `Answer`."""
    question = " ".join(question.split())
    if not has_terms(question):  # empty, or punctuation and symbols alone
        yield from _events(Answer(question, "Ask a question about the notebooks.", [], "extractive",
                                  "empty question" if not question else "no words or numbers in the question"))
        return
    answerer = make_answerer(settings, archive.plugins)  # `[answer] kind`, through the plugin hook
    result = archive.search(question, filters)
    yield from answerer.stream(question, result, archive, filters)


@dataclass
class ExtractiveAnswerer:
    """The value, sentence or row that best answers (`compose.extractive_answer`), without an LLM."""

    settings: Settings

    def stream(
        self, question: str, result: SearchResult, archive: Archive, filters: SearchFilters | None
    ) -> Iterator[AnswerEvent]:
        found = extractive_answer(question, result, archive, filters)
        if self.settings.answer.base_url and not self.settings.answer.model:
            missing = "answer.base_url is set but answer.model is not (NBRECALL_LLM_MODEL): extractive answer shown"
            found.notice = f"{missing} ({found.notice})" if found.notice else missing
        yield from _events(found)


@dataclass
class LLMAnswerer:
    """The configured LLM, streamed over the context and citing cells; the extractive answer when it fails."""

    settings: Settings

    def stream(
        self, question: str, result: SearchResult, archive: Archive, filters: SearchFilters | None
    ) -> Iterator[AnswerEvent]:
        if not result.notebooks:
            found = extractive_answer(question, result, archive, filters)
            found.notice = "no matching notebook: the LLM was not asked"
            yield from _events(found)
            return
        yield from _llm_events(question, result, archive, self.settings, filters)


def _extra_cells(result: SearchResult, archive: Archive, max_notebooks: int) -> dict[str, list[CellRecord]]:
    """The other matching cells of the top notebooks (after their neighbourhoods), for leftover budget."""
    extra: dict[str, list[CellRecord]] = {}
    for nb in result.notebooks[:max_notebooks]:
        wanted = [h.cell for h in nb.hits[1:]]
        if not wanted:
            continue
        cells = {c.idx: c for c in archive.manifest.cells(nb.nb_sha)}
        extra[nb.nb_sha] = [cells[i] for i in wanted if i in cells]
    return extra


CONTEXT_VALUES = 12  # cells whose values take the value list's share of the LLM context, at most
# … and the cells whose values may fill what the context's cells leave unused (`context._fill_with_values`): the
# fill can only add lines, so it reaches further down the ranking than the share does
CONTEXT_FILL_VALUES = 40


def llm_context(question: str, result: SearchResult, archive: Archive, settings: Settings,
                filters: SearchFilters | None = None, ranked: list[RankedFact] | None = None) -> Context:
    """What the LLM is sent: the best value facts for the question, then the top notebooks' neighbourhoods and
    other matching cells, inside `answer.context_tokens` (`ranked`: the facts already ranked for the question)."""
    top = max(1, settings.retrieve.top_notebooks)
    values: list[ContextValue] = []
    if result.notebooks:
        if ranked is None:
            ranked = ordered_values(read_question(question), result, archive, filters)
        cells = {(c.nb_sha, c.fact.cell) for c in pick_values(ranked, CONTEXT_FILL_VALUES, distinct_values=False)}
        values = [ContextValue(c.fact.statement(), c.notebook, c.nb_sha, c.fact.cell, c.fact.cell_id, c.fact.heading)
                  for c in ranked if (c.nb_sha, c.fact.cell) in cells]
    context = build_context(
        result, settings.answer.context_tokens, max_notebooks=top, extra=_extra_cells(result, archive, top),
        values=values, share_cells=CONTEXT_VALUES,
    )
    if settings.answer.redact_secrets:  # credentials never leave for the model (`answer.redact`)
        redacted = redact_secrets(context.text)
        if redacted.kinds:
            context.text, context.redacted = redacted.text, redacted.kinds
            context.tokens = count_llm_tokens(context.text)
    return context


def _fallback(
    question: str, result: SearchResult, archive: Archive, notice: str, filters: SearchFilters | None = None
) -> Answer:
    found = extractive_answer(question, result, archive, filters)
    found.notice = notice if not found.notice else f"{notice} ({found.notice})"
    return found


def _llm_events(
    question: str, result: SearchResult, archive: Archive, settings: Settings, filters: SearchFilters | None = None
) -> Iterator[AnswerEvent]:
    try:
        client = LLMClient.from_settings(settings.answer, resolve_api_key(settings))
    except (KeyStoreError, LLMError) as exc:
        unused = f"LLM not used: {exc}; extractive answer shown"
        yield from _events(_fallback(question, result, archive, unused, filters))
        return
    context = llm_context(question, result, archive, settings, filters)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_message(question, context)},
    ]
    think = ThinkFilter()
    parts: list[str] = []
    try:
        for piece in client.stream_chat(messages):
            text = think.feed(piece)
            if text:
                parts.append(text)
                yield AnswerEvent("token", text=text)
        tail = think.flush()
        if tail:
            parts.append(tail)
            yield AnswerEvent("token", text=tail)
    except LLMError as exc:
        retried = f" after {client.attempts} attempts" if client.attempts > 1 else ""
        if parts:
            failed = f"LLM stream broke off ({exc}); the partial answer is replaced by the extractive answer"
        else:
            failed = f"LLM endpoint failed{retried} ({exc}); extractive answer shown"
        yield from _events(_fallback(question, result, archive, failed, filters))
        return
    text = think.sent.strip()  # the streamed pieces, less any reasoning an unopened `</think>` turned out to end
    if not text:
        empty = "LLM returned an empty answer; extractive answer shown"
        yield from _events(_fallback(question, result, archive, empty, filters))
        return
    citations, invented = parse_citations(text, context)
    notice: str | None = None
    if think.restarted:
        notice = "the model's reasoning was streamed before an unopened </think>; the final answer leaves it out"
    if invented:
        shown = ", ".join(invented[:5]) + (" …" if len(invented) > 5 else "")
        notice = f"dropped {len(invented)} citation(s) to cells that were not in the context: {shown}"
    elif not citations:
        notice = "the answer cites no cell of the context: check it against the notebooks searched"
    if think.restarted and notice and not notice.startswith("the model's"):
        notice = "the model's reasoning was streamed before an unopened </think> and is left out; " + notice
    if context.redacted:
        removed = (f"{len(context.redacted)} credential(s) in the notebooks were removed from the context sent to "
                   f"the model ({', '.join(sorted(set(context.redacted)))})")
        notice = f"{notice}; {removed}" if notice else removed
    final = Answer(question, text, citations, "llm", notice)
    if notice:
        yield AnswerEvent("notice", text=notice)
    for citation in citations:
        yield AnswerEvent("citation", citation=citation)
    yield AnswerEvent("done", answer=final)


def _events(found: Answer) -> Iterator[AnswerEvent]:
    """An already complete answer as events: notice, its text line by line, citations, done."""
    if found.notice:
        yield AnswerEvent("notice", text=found.notice)
    lines = found.text.splitlines(keepends=True)
    for line in lines:
        yield AnswerEvent("token", text=line)
    for citation in found.citations:
        yield AnswerEvent("citation", citation=citation)
    yield AnswerEvent("done", answer=found)
