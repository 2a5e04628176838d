"""The describer `[vision]` configures (`make_describer`), and what of it the chunk texts depend on.

Apart from `vision.describe` so the describers (`ocr`, `remote`) can import the interface without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping

from nbrecall.config import ConfigError, Settings
from nbrecall.vision.describe import Describer


def make_describer(settings: Settings, env: Mapping[str, str] | None = None) -> Describer | None:
    """The describer `[vision] kind` names, or None when figures are not described (the default)."""
    kind = (settings.vision.kind or "").strip().lower()
    if kind in ("", "off", "none"):
        return None
    if kind == "ocr":
        from nbrecall.vision.ocr import OcrDescriber

        return OcrDescriber(settings.vision)
    if kind == "openai":
        from nbrecall.vision.remote import OpenAIDescriber, resolve_vision_key

        return OpenAIDescriber(settings.vision, api_key=resolve_vision_key(settings, env))
    raise ConfigError(f"vision.kind: unknown describer {settings.vision.kind!r} (known: \"ocr\", \"openai\")")


def fingerprint_part(settings: Settings) -> str:
    """What of `[vision]` the chunk texts depend on (turning it on or off re-chunks; the engine version does not)."""
    kind = (settings.vision.kind or "").strip().lower()
    if kind in ("", "off", "none"):
        return ""
    if kind == "openai":
        return f"; vision openai {settings.vision.model or ''}"
    return f"; vision {kind} {settings.vision.languages}"
