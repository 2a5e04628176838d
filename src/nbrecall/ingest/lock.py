"""One writer per index: an exclusive, non-blocking file lock with a message that says who holds it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType


class IndexLocked(RuntimeError):
    """Another process is writing to this index."""


class WriterLock:
    """`with WriterLock(index_dir):` — released by the OS if the process dies, so a crash never wedges the index."""

    def __init__(self, index_dir: Path) -> None:
        self.path = index_dir / "write.lock"
        self.handle: int | None = None

    def __enter__(self) -> WriterLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise IndexLocked(
                f"{self.path.parent}: another nbrecall process (pid {holder}) is writing to this "
                "index; wait for it to finish, then run again"
            ) from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.handle = fd
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            os.close(self.handle)
            self.handle = None
