"""An embedder on any OpenAI-compatible `/embeddings` endpoint, over httpx."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nbrecall.index.embed.common import DEFAULT_MAX_TOKENS, EmbeddingServiceError, l2_normalise, reject_empty
from nbrecall.index.embed.integrity import PINNED_SHA256, bundled_minilm_dir, read_verified
from nbrecall.retry import wait_before_retry

if TYPE_CHECKING:
    import httpx
    from tokenizers import Tokenizer

OPENAI_BATCH = 50


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/embeddings`` endpoint (Ollama, vLLM, llama.cpp, a firm's gateway) over httpx.

    Sends batches of 50 and retries 429, 5xx and timeouts with exponential backoff (3 tries in all), because
    local servers shed load that way. Token counts are estimated with a local tokenizer (``tokenizer_dir``,
    else the bundled MiniLM one): the endpoint's own tokenizer is not reachable.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        batch_size: int = OPENAI_BATCH,
        tries: int = 3,
        backoff: float = 0.5,
        timeout: float = 60.0,
        tokenizer_dir: Path | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        import httpx

        self.url = url.rstrip("/")
        self.model = model
        self.model_id = f"{model}@{self.url}"
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.tries = max(1, tries)
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout, headers=headers)
        self._tokenizer_dir = tokenizer_dir
        self._counter: Tokenizer | None = None
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        """Vector size; asks the endpoint once if no vector has been seen yet."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Estimated word pieces per text (local tokenizer, untruncated)."""
        if self._counter is None:
            from tokenizers import Tokenizer

            if self._tokenizer_dir is not None:
                data = (self._tokenizer_dir / "tokenizer.json").read_bytes()
            else:
                data, _ = read_verified(
                    bundled_minilm_dir() / "tokenizer.json", PINNED_SHA256["tokenizer.json"]
                )
            counter = Tokenizer.from_str(data.decode("utf-8"))
            counter.no_padding()
            counter.no_truncation()
            self._counter = counter
        return [len(e.ids) for e in self._counter.encode_batch_fast(list(texts))] if texts else []

    def embed(self, texts: list[str]) -> np.ndarray:
        reject_empty(texts)
        parts = [self._post(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        if not parts:
            return np.empty((0, self._dim or 0), dtype=np.float32)
        return np.concatenate(parts, axis=0)

    def _post(self, batch: list[str]) -> np.ndarray:
        import httpx

        endpoint = f"{self.url}/embeddings"
        error = "no attempt made"
        for attempt in range(self.tries):
            retry_after: str | None = None
            try:
                resp = self._client.post(endpoint, json={"model": self.model, "input": batch})
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code == 429 or resp.status_code >= 500:
                    error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                    retry_after = resp.headers.get("retry-after")
                elif resp.status_code >= 400:
                    detail = f"HTTP {resp.status_code}: {resp.text[:500]}"
                    raise EmbeddingServiceError(f"POST {endpoint} -> {detail}")
                else:
                    return self._parse(resp, len(batch), endpoint)
            if attempt + 1 < self.tries:
                wait_before_retry(attempt, self.backoff, retry_after)
        raise EmbeddingServiceError(f"POST {endpoint} failed after {self.tries} tries; last error: {error}")

    def _parse(self, resp: httpx.Response, n: int, endpoint: str) -> np.ndarray:
        try:
            items = sorted(resp.json()["data"], key=lambda d: int(d["index"]))
            vectors = np.asarray([d["embedding"] for d in items], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            detail = f"unreadable response ({exc}): {resp.text[:200]}"
            raise EmbeddingServiceError(f"POST {endpoint}: {detail}") from exc
        if [int(d["index"]) for d in items] != list(range(n)) or vectors.ndim != 2:
            raise EmbeddingServiceError(f"POST {endpoint}: expected {n} vectors indexed 0..{n - 1}")
        if self._dim is None:
            self._dim = int(vectors.shape[1])
        elif vectors.shape[1] != self._dim:
            detail = f"vector size changed from {self._dim} to {vectors.shape[1]}"
            raise EmbeddingServiceError(f"POST {endpoint}: {detail}")
        return l2_normalise(vectors)

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model_id!r})"
