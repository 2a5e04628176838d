"""What an answerer is (`Answerer`) and which one `[answer] kind` names (`make_answerer`), through the
`nbrecall_answerer` hook (`nbrecall.plugins`): the built-in extractive and LLM answerers register through it
(`answer.answerer_plugin`), and so does a plugin's."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol, cast

from nbrecall.config import ConfigError, Settings
from nbrecall.plugins import PluginManager, plugin_manager

if TYPE_CHECKING:
    from nbrecall.answer.types import AnswerEvent
    from nbrecall.records import SearchFilters
    from nbrecall.search.retrieve import SearchResult
    from nbrecall.service import Archive


class Answerer(Protocol):
    """Answers one question from its search result."""

    def stream(
        self, question: str, result: SearchResult, archive: Archive, filters: SearchFilters | None
    ) -> Iterator[AnswerEvent]:
        """Notices, text tokens and citations, then one `done` event carrying the complete `Answer`.
        `archive` gives the manifest (cells, facts) and a second search; `filters` are the question's."""
        ...


def make_answerer(settings: Settings, plugins: PluginManager | None = None) -> Answerer:
    """The answerer `[answer] kind` names ("": the LLM when `base_url` and `model` are set, else extractive);
    ConfigError for a kind no plugin provides. `plugins`: the caller's manager (default: built from `settings`)."""
    manager = plugins if plugins is not None else plugin_manager(settings)
    answerer = manager.hook.nbrecall_answerer(settings=settings)
    if answerer is None:
        raise ConfigError(f"answer.kind: unknown answerer {settings.answer.kind!r} (known: \"\", \"extractive\", "
                          "\"llm\", or a kind an installed plugin provides)")
    if not callable(inspect.getattr_static(answerer, "stream", None)):
        raise ConfigError(f"answer.kind {settings.answer.kind!r}: the plugin's answerer "
                          f"({type(answerer).__name__}) has no stream(question, result, archive, filters)")
    return cast(Answerer, answerer)  # a plugin's object, checked above
