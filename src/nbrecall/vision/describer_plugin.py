"""The built-in figure describers as a plugin (`nbrecall.plugins`): `[vision] kind` "ocr" and "openai"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from nbrecall.plugins import hookimpl

if TYPE_CHECKING:
    from nbrecall.config import Settings
    from nbrecall.vision.describe import Describer


@hookimpl
def nbrecall_figure_describer(settings: Settings, env: Mapping[str, str] | None) -> Describer | None:
    """Tesseract OCR (offline) or an OpenAI-compatible vision endpoint; None for any other kind (a plugin's)."""
    kind = (settings.vision.kind or "").strip().lower()
    if kind == "ocr":
        from nbrecall.vision.ocr import OcrDescriber

        return OcrDescriber(settings.vision)
    if kind == "openai":
        from nbrecall.vision.remote import OpenAIDescriber, resolve_vision_key

        return OpenAIDescriber(settings.vision, api_key=resolve_vision_key(settings, env))
    return None
