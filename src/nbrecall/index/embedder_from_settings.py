"""The embedder the settings name (`[embed]`), built where the index stage lives: the CLI, the archive (search)
and the executor workers all build it here, so a worker never reaches up to `service` for it."""

from __future__ import annotations

from pathlib import Path

from nbrecall.config import Settings
from nbrecall.index.embed import Embedder, load_embedder


def make_embedder(settings: Settings) -> Embedder:
    """The `[embed]` embedder, its built model cached in `cache_dir` (default: the index's `models` folder)."""
    cfg = settings.embed
    return load_embedder(cfg, Path(cfg.cache_dir) if cfg.cache_dir else settings.index_dir / "models")
