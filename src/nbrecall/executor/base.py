"""The executor seam (`Executor`), its error and the in-process executor; see the package docstring."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")
R = TypeVar("R")
OnError = Callable[[Any, BaseException], Any]

class ExecutorError(RuntimeError):
    """The executor cannot be used (Ray missing, cluster unreachable, bad setting, cluster lost mid-run)."""


@runtime_checkable
class Executor(Protocol):
    """What the indexer and the renderer need from an executor."""

    workers: int
    in_process: bool  # True when `fn` runs in the calling process (objects need not be picklable)

    @property
    def window(self) -> int:
        """Most items taken from the input and not yet yielded (the back-pressure bound)."""
        ...

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, on_error: OnError | None = None) -> Iterator[R]:
        """`fn(item)` for each item, in input order, with bounded work in flight."""
        ...

    def release(self) -> None:
        """Free what idle workers hold on this machine (the pool's processes); a later `map` starts them again."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...


class _Closing:
    """Context-manager plumbing shared by the executors."""

    def release(self) -> None:
        """Nothing held between maps (in process; a Ray cluster's workers are the cluster's)."""

    def close(self) -> None:  # pragma: no cover - overridden
        pass

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _failed(item: Any, exc: BaseException, on_error: OnError | None) -> Any:
    if on_error is None:
        raise exc
    return on_error(item, exc)


class InlineExecutor(_Closing):
    """Runs every task in the calling process, one at a time: tests, `workers = 1`, and the library default.

    `retries` re-runs a task whose `fn` raised, when `retry_exceptions` is set (a crash cannot be survived here).
    """

    in_process = True

    def __init__(self, retries: int = 0, retry_exceptions: bool = False) -> None:
        self.workers = 1
        self.retries = max(0, retries)
        self.retry_exceptions = retry_exceptions

    @property
    def window(self) -> int:
        return 1

    def map(self, fn: Callable[[T], R], items: Iterable[T], *, on_error: OnError | None = None) -> Iterator[R]:
        for item in items:
            attempts = 0
            while True:
                try:
                    result = fn(item)
                except Exception as exc:
                    if self.retry_exceptions and attempts < self.retries:
                        attempts += 1
                        continue
                    yield _failed(item, exc, on_error)
                    break
                yield result
                break

    def __repr__(self) -> str:
        return "InlineExecutor()"
