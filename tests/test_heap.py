"""The native-heap bounds the embedded store applies (glibc)."""

from __future__ import annotations

import platform
import sys

import pytest

from nbrecall.index.heap import bound_arenas, release_free_memory

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)


@glibc
def test_arenas_are_capped_unless_the_environment_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert bound_arenas(2) is True
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert bound_arenas(2) is False  # the user's own setting wins
    release_free_memory()
