"""How long to wait before trying a request again: the one backoff rule of every HTTP client here (the embedding
endpoint, the LLM endpoint).

Exponential backoff from `base` seconds, or the server's `Retry-After` when it asks for longer: its seconds form
only (an HTTP date is ignored), capped, so a misconfigured server cannot stall an index run or an answer.
"""

from __future__ import annotations

import re
import time

RETRY_AFTER_CAP = 30.0  # seconds
_SECONDS = re.compile(r"\d+(?:\.\d+)?")


def backoff_delay(attempt: int, base: float, retry_after: str | None = None) -> float:
    """Seconds to wait after failed try number `attempt` (from 0): `base * 2**attempt`, or `retry_after` (the
    header's value) when it is a number of seconds and longer, at most `RETRY_AFTER_CAP`."""
    delay = base * (2**attempt)
    text = (retry_after or "").strip()
    if _SECONDS.fullmatch(text):
        delay = max(delay, min(float(text), RETRY_AFTER_CAP))
    return delay


def wait_before_retry(attempt: int, base: float, retry_after: str | None = None) -> None:
    """Sleep `backoff_delay(attempt, base, retry_after)`."""
    time.sleep(backoff_delay(attempt, base, retry_after))
