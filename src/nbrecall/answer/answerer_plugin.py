"""The built-in answerers as a plugin (`nbrecall.plugins`): `[answer] kind` "" (automatic), "extractive", "llm"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbrecall.plugins import hookimpl

if TYPE_CHECKING:
    from nbrecall.answer.answerers import Answerer
    from nbrecall.config import Settings


@hookimpl
def nbrecall_answerer(settings: Settings) -> Answerer | None:
    """The LLM answerer for "llm", or for "" when an endpoint and a model are set; the extractive one for
    "extractive", or for "" without them; None for any other kind (a plugin's)."""
    kind = settings.answer.kind.strip().lower()
    if kind not in ("", "extractive", "llm"):
        return None
    from nbrecall.answer.answer import ExtractiveAnswerer, LLMAnswerer, llm_configured

    if kind == "llm" or (kind == "" and llm_configured(settings)):
        return LLMAnswerer(settings)
    return ExtractiveAnswerer(settings)
