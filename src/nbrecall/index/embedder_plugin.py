"""The built-in embedders as a plugin (`nbrecall.plugins`): `[embed] kind` "default", "onnx-folder", "openai"."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nbrecall.plugins import hookimpl

if TYPE_CHECKING:
    from nbrecall.config import Settings
    from nbrecall.index.embed import Embedder

KINDS = ("default", "onnx-folder", "openai")


@hookimpl
def nbrecall_embedder(settings: Settings, cache_dir: Path) -> Embedder | None:
    """`index.embed.load_embedder` for the built-in kinds; None for any other (a plugin's)."""
    if settings.embed.kind not in KINDS:
        return None
    from nbrecall.index.embed import load_embedder

    return load_embedder(settings.embed, cache_dir)
