"""The embedder the settings name (`[embed]`), built where the index stage lives: the CLI, the archive (search)
and the executor workers all build it here, so a worker never reaches up to `service` for it."""

from __future__ import annotations

from pathlib import Path

from nbrecall.config import Settings
from nbrecall.index.embed import Embedder, EmbedSettings, load_embedder


def make_embedder(settings: Settings) -> Embedder:
    cfg = settings.embed
    return load_embedder(
        EmbedSettings(
            kind=cfg.kind,
            path=cfg.path,
            url=cfg.url,
            model=cfg.model,
            api_key=cfg.api_key,
            batch_size=cfg.batch_size,
            threads=cfg.threads,
        ),
        Path(cfg.cache_dir) if cfg.cache_dir else settings.index_dir / "models",
    )
