"""LLM token counts for converted text: OpenAI's cl100k_base, computed offline by `quicktok`.

Used for fidelity reports and LLM context budgets. Chunk budgets use the embedder's own tokenizer instead.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

TOKENIZER_NAME = "cl100k_base via quicktok"


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import quicktok

    return quicktok.get_encoding("cl100k_base")


_PIECE = 1 << 20  # characters counted at once: counting 50 MB at once took ~200 MB, the list of its ids ~430 MB


def count_llm_tokens(text: str) -> int:
    """Number of cl100k_base tokens in `text`, counted a piece at a time (the same count, bounded memory).

    No list of token ids is built, and long text is cut where cl100k's pre-tokenizer always cuts: after the last
    newline of a run, where only spaces or tabs, then a visible character, follow (its newline pieces end at the
    last newline of a run, and no other piece holds a newline), so the pieces' counts add up to the whole's.
    Text that spells a special token such as `<|endoftext|>` is counted as ordinary text, as before.
    """
    if not text:
        return 0
    encoding = _encoding()
    total, start = 0, 0
    while start < len(text):
        end = _piece_end(text, start + _PIECE)
        piece = text[start:end]
        try:
            total += int(encoding.count(piece))
        except ValueError:  # `count` refuses special tokens; `encode` reads them as ordinary text
            total += len(encoding.encode(piece))
        start = end
    return total


_CUT = re.compile(r"[\r\n](?=[ \t]*[^\s])")


def _piece_end(text: str, at: int) -> int:
    """The first cut at or after `at` (see `count_llm_tokens`), or the end of the text."""
    if at >= len(text):
        return len(text)
    match = _CUT.search(text, at - 1 if at > 0 else 0)
    return match.end() if match else len(text)
