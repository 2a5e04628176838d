"""Tasks for tests/test_executor.py, in a module of their own so that spawned pool workers and Ray workers import
only this (light) module to unpickle them."""

from __future__ import annotations

import os
import time
from pathlib import Path


def square(x: int) -> int:
    time.sleep(0.002 * ((x * 7) % 5))  # finish out of order
    return x * x


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is bad")
    return x


class Flaky:
    """Raises (or kills its worker, `crash=True`) the first `times` calls per item; counts calls in `folder`, so
    it works across processes."""

    def __init__(self, folder: Path, times: int = 1, crash: bool = False, only: int | None = None) -> None:
        self.folder, self.times, self.crash, self.only = Path(folder), times, crash, only

    def __call__(self, x: int) -> int:
        if self.only is not None and x != self.only:
            return x
        marker = self.folder / f"{x}.calls"
        calls = int(marker.read_text()) if marker.exists() else 0
        marker.write_text(str(calls + 1))
        if calls < self.times:
            if self.crash:
                os._exit(7)  # a dead worker, as after a segfault or an OOM kill
            raise RuntimeError(f"flaky {x} (call {calls + 1})")
        return x


class Sleeper:
    """Writes its worker's pid to `folder`, then sleeps: a task still running when its parent is killed."""

    def __init__(self, folder: Path, seconds: float = 600.0) -> None:
        self.folder, self.seconds = Path(folder), seconds

    def __call__(self, x: int) -> int:
        (self.folder / f"{os.getpid()}.pid").write_text(str(x))
        time.sleep(self.seconds)
        return x

