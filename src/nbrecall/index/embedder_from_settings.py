"""The embedder the settings name (`[embed]`), built where the index stage lives: the CLI, the archive (search)
and the executor workers all build it here, so a worker never reaches up to `service` for it. The built-in kinds
and any plugin's come through the `nbrecall_embedder` hook (`nbrecall.plugins`)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import cast

from nbrecall.config import Settings
from nbrecall.index.embed import Embedder
from nbrecall.plugins import PluginManager, plugin_manager


def make_embedder(settings: Settings, plugins: PluginManager | None = None) -> Embedder:
    """The `[embed]` embedder, its built model cached in `cache_dir` (default: the index's `models` folder).
    `plugins`: the run's plugin manager (default: one built from `settings`)."""
    cfg = settings.embed
    cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else settings.index_dir / "models"
    manager = plugins if plugins is not None else plugin_manager(settings)
    embedder = manager.hook.nbrecall_embedder(settings=settings, cache_dir=cache_dir)
    if embedder is None:
        raise ValueError(f"unknown embedding kind {cfg.kind!r}; expected 'default', 'onnx-folder' or 'openai', "
                         "or a kind an installed plugin provides")
    # looked up statically: on Python 3.11 `isinstance(x, Embedder)` would read `dim`, which may probe an endpoint
    missing = [name for name in _INTERFACE if inspect.getattr_static(embedder, name, _MISSING) is _MISSING]
    if missing:
        raise TypeError(f"the embedder for kind {cfg.kind!r} ({type(embedder).__name__}) lacks {', '.join(missing)} "
                        "of the Embedder interface (index.embed.Embedder)")
    return cast(Embedder, embedder)  # a plugin's object, checked above


_INTERFACE = ("model_id", "dim", "max_tokens", "count_tokens", "embed")
_MISSING = object()
