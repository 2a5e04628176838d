"""Keep the native heap of a process that writes the embedded store bounded (glibc only; elsewhere a no-op).

LanceDB and Arrow allocate from many threads, and glibc gives each contending thread its own malloc arena (up to
8 per core), which keeps memory freed by one thread from serving another and from going back to the system. On
an index run over 41,000 notebooks (2.5M chunks) the keyword index update in `optimize()` peaked at 1,777 MiB
and left 1,612 MiB resident; with two arenas it peaked at 1,192 MiB, and a `malloc_trim` afterwards brought the
process back to ~400 MiB, at the same speed (bench/README.md, "41,000 notebooks again").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from functools import lru_cache

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # mallopt parameter number in glibc's malloc.h
ARENAS = 2


@lru_cache(maxsize=1)
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - musl has neither: no-op there
    except (OSError, AttributeError):
        return None
    return libc


def bound_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas for threads created from now on (call before the store starts its threads).
    Returns whether the cap was applied; an environment's own `MALLOC_ARENA_MAX` is left alone."""
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, int(arenas)))


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (after a large, short-lived allocation such as an index
    update), so the next step's peak does not stack on memory that is free but still resident."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
