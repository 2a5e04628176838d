"""What every embedder shares: its errors, the empty-text check and L2 normalisation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    pass

DEFAULT_MAX_TOKENS = 256  # word pieces, when a model folder does not say


class EmbeddingServiceError(RuntimeError):
    """An embedding endpoint failed (after retries) or answered with something unusable."""


def reject_empty(texts: Sequence[str]) -> None:
    """Empty texts are caller bugs: a vector of [CLS][SEP] would match everything weakly and silently."""
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"text at index {i} is {type(t).__name__}, not str")
        if not t.strip():
            raise ValueError(f"text at index {i} is empty or whitespace-only; refusing to embed it")


def l2_normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)

