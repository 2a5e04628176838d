"""An embedder for tests of killed runs, in a module that spawned pool workers can import to unpickle it."""

from __future__ import annotations

import time

from conftest import HashEmbedder


class SlowTokens(HashEmbedder):
    """The test embedder, 0.05 s per token count: an index run whose workers are busy when it is killed."""

    def count_tokens(self, texts: list[str]) -> list[int]:
        time.sleep(0.05)
        return super().count_tokens(texts)
