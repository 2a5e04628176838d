"""`nbrecall ask`: an answer citing cells, streamed from a running `nbrecall serve` when there is one, else answered
here (the LLM if one is configured, else the extractive answer)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nbrecall.cli.common import (
    AuthorOpt,
    ConfigOpt,
    DeprecatedOpt,
    IndexOpt,
    ProjectOpt,
    StoreOpt,
    TagOpt,
    YearOpt,
    _filters,
    _local_server,
    _open_archive,
    _plain,
    _refuse_empty,
    _settings,
    err,
)
from nbrecall.config import Settings

if TYPE_CHECKING:
    from nbrecall.answer.types import AnswerEvent


def ask(
    question: Annotated[str, typer.Argument(help="The question, in your own words.")],
    index_dir: IndexOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as one JSON object.")] = False,
    extractive: Annotated[
        bool, typer.Option("--extractive", help="Do not ask the LLM even if one is configured.")
    ] = False,
    year: YearOpt = None,
    project: ProjectOpt = None,
    author: AuthorOpt = None,
    tag: TagOpt = None,
    include_deprecated: DeprecatedOpt = False,
    config: ConfigOpt = None,
    store: StoreOpt = None,
) -> None:
    """Answer a question from the notebooks, citing cells: streamed from the LLM if one is configured
    (answer.base_url / NBRECALL_LLM_BASE_URL), else the best matching value, row or sentence."""
    import json

    _refuse_empty(question, "ask something, e.g. nbrecall ask \"what ballast volume did we use aft\"")
    settings = _settings(config, index_dir, store)
    if extractive:
        settings.answer.base_url = None
        settings.answer.kind = "extractive"
    options = {"year": year, "project": project, "author": author, "tag": tag,
               "include_deprecated": include_deprecated}
    events = _answer_through_server(settings, question, options)
    refused: tuple[type[Exception], ...] = ()  # errors of this process's own answering, told as such
    if events is None:
        from nbrecall.answer.answer import stream_answer
        from nbrecall.answer.rerank import RankerModelError

        archive = _open_archive(settings)
        filters = _filters(year, project, author, tag, include_deprecated)
        events = stream_answer(question, archive, settings, filters)
        refused = (RankerModelError,)
    final = None
    streamed = False
    try:
        for event in events:
            if event.type == "done":
                final = event.answer
            elif as_json:
                continue
            elif event.type == "notice":
                if streamed:
                    sys.stdout.write("\n")
                from rich.markup import escape

                err.print(f"[yellow]note:[/yellow] {escape(event.text)}", highlight=False)
            elif event.type == "token":
                sys.stdout.write(event.text)
                sys.stdout.flush()
                streamed = True
    except refused as exc:
        err.print(f"[red]error:[/red] {_plain(exc)}", soft_wrap=True)
        raise typer.Exit(2) from exc
    if final is None:
        raise typer.Exit(1)
    if as_json:
        sys.stdout.write(json.dumps(final.as_dict(), ensure_ascii=False) + "\n")
        return
    sys.stdout.write("\n")
    if final.citations:
        sys.stdout.write("\nCited cells:\n")
        for c in final.citations:
            sys.stdout.write(f"  {c.label()}  id:{c.cell_id}\n")
    sys.stdout.write(f"\n({final.mode} answer)\n")
    sys.stdout.flush()


def _answer_through_server(
    settings: Settings, question: str, options: dict[str, Any]
) -> Iterator[AnswerEvent] | None:
    """The answer's events from a running `nbrecall serve` of this index and settings, as `AnswerEvent`s; None
    when there is none (or it does not answer): the caller answers here."""
    from nbrecall.web.local_server import ServerUnusable

    server = _local_server(settings)
    if server is None:
        return None
    try:
        stream = server.ask(question, options)
    except ServerUnusable:
        return None
    from nbrecall.answer.types import AnswerEvent

    def events() -> Iterator[AnswerEvent]:
        for data in stream:
            yield AnswerEvent.from_dict(data)

    return events()
