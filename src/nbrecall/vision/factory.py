"""The describer `[vision]` configures (`make_describer`), and what of it the chunk texts depend on.

Apart from `vision.describe` so the describers (`ocr`, `remote`) can import the interface without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping

from nbrecall.config import ConfigError, Settings
from nbrecall.plugins import PluginManager, plugin_manager
from nbrecall.vision.describe import Describer


def make_describer(
    settings: Settings, env: Mapping[str, str] | None = None, plugins: PluginManager | None = None
) -> Describer | None:
    """The describer `[vision] kind` names, or None when figures are not described (the default). The built-in
    kinds and any plugin's come through the `nbrecall_figure_describer` hook (`plugins`: the caller's manager,
    default one built from `settings`)."""
    kind = (settings.vision.kind or "").strip().lower()
    if kind in ("", "off", "none"):
        return None
    manager = plugins if plugins is not None else plugin_manager(settings)
    describer: Describer | None = manager.hook.nbrecall_figure_describer(settings=settings, env=env)
    if describer is None:
        raise ConfigError(f"vision.kind: unknown describer {settings.vision.kind!r} (known: \"ocr\", \"openai\", "
                          "or a kind an installed plugin provides)")
    return describer


def fingerprint_part(settings: Settings) -> str:
    """What of `[vision]` the chunk texts depend on (turning it on or off re-chunks; the engine version does not)."""
    kind = (settings.vision.kind or "").strip().lower()
    if kind in ("", "off", "none"):
        return ""
    if kind == "openai":
        return f"; vision openai {settings.vision.model or ''}"
    return f"; vision {kind} {settings.vision.languages}"
