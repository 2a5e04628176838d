"""LLM token counts for converted text: OpenAI's cl100k_base, computed offline by `quicktok`.

Used for fidelity reports and LLM context budgets. Chunk budgets use the embedder's own tokenizer instead.
"""

from __future__ import annotations

from functools import lru_cache

TOKENIZER_NAME = "cl100k_base via quicktok"


@lru_cache(maxsize=1)
def _encoding():  # type: ignore[no-untyped-def]
    import quicktok

    return quicktok.get_encoding("cl100k_base")


def count_llm_tokens(text: str) -> int:
    """Number of cl100k_base tokens in `text`."""
    if not text:
        return 0
    return len(_encoding().encode(text))
