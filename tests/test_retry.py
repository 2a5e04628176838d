"""The one backoff rule of the HTTP clients (embedding and LLM endpoints)."""

from __future__ import annotations

from nbrecall.retry import RETRY_AFTER_CAP, backoff_delay


def test_exponential_from_the_base() -> None:
    assert [backoff_delay(i, 0.5) for i in range(3)] == [0.5, 1.0, 2.0]


def test_a_longer_retry_after_in_seconds_wins_and_is_capped() -> None:
    assert backoff_delay(0, 0.5, "3") == 3.0
    assert backoff_delay(0, 0.5, " 1.5 ") == 1.5
    assert backoff_delay(2, 0.5, "1") == 2.0  # shorter than the backoff: the backoff
    assert backoff_delay(0, 0.5, "3600") == RETRY_AFTER_CAP


def test_a_retry_after_that_is_not_seconds_is_ignored() -> None:
    for header in ("Wed, 21 Oct 2015 07:28:00 GMT", "-5", "inf", "", None):
        assert backoff_delay(1, 0.5, header) == 1.0
