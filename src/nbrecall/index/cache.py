"""Embedding cache keyed by (text hash, model id): a re-run embeds only chunks whose text changed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np


class EmbeddingCache:
    """Vectors stored as float32 blobs in `<index>/embeddings.sqlite`."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (text_hash TEXT NOT NULL, model TEXT NOT NULL,"
            " vector BLOB NOT NULL, PRIMARY KEY (text_hash, model))"
        )

    def get_many(self, hashes: list[str], model: str) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(hashes), 500):
            part = hashes[start : start + 500]
            marks = ",".join("?" * len(part))
            for text_hash, blob in self.db.execute(
                f"SELECT text_hash, vector FROM vectors WHERE model = ? AND text_hash IN ({marks})",
                [model, *part],
            ):
                found[text_hash] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, items: dict[str, np.ndarray], model: str) -> None:
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO vectors (text_hash, model, vector) VALUES (?, ?, ?)",
                [(h, model, np.asarray(v, dtype=np.float32).tobytes()) for h, v in items.items()],
            )

    def close(self) -> None:
        self.db.close()
