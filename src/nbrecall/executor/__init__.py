"""Where the heavy per-notebook stages run: in this process, in a local process pool, or on a Ray cluster.

One seam, `Executor.map(fn, items)`: results come back in input order, and at most `window` items (a few per
worker) are taken from `items` and not yet given back, so a 41,000-notebook archive never has more than a
handful of notebooks' results in memory. A task that fails (after its retries) raises at its place in the order,
or becomes `on_error(item, exc)` when the caller passes one: the indexer turns it into a quarantine reason, the
renderer into a stale result, so one bad notebook never stops a run.

`fn` and the items must be picklable for `ProcessExecutor` and `RayExecutor` (a module-level function or a
dataclass with `__call__`); results must be picklable too.

The package: `base` (the seam, its error, the in-process executor), `pool` (the process pool and the workers'
tie to their parent), `ray_cluster` (Ray); here, choosing one from the settings.
"""

from __future__ import annotations

from nbrecall.executor.base import Executor, ExecutorError, InlineExecutor
from nbrecall.executor.pool import ProcessExecutor, die_with_parent
from nbrecall.executor.ray_cluster import RayExecutor

__all__ = [
    "EXECUTOR_KINDS",
    "Executor",
    "ExecutorError",
    "InlineExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "die_with_parent",
    "make_executor",
    "parse_kind",
]


# --- choosing one from the settings -----------------------------------------------------------------------------

EXECUTOR_KINDS = "local | ray | ray://HOST:PORT | HOST:PORT"


def parse_kind(kind: str) -> tuple[str, str | None]:
    """("local", None), ("ray", None), ("ray", address); ExecutorError for anything else."""
    value = (kind or "local").strip()
    if value in ("local", "inline"):
        return value, None
    if value == "ray":
        return "ray", None
    if value.startswith("ray://") and len(value) > len("ray://"):
        return "ray", value
    host, sep, port = value.rpartition(":")
    if sep and host and port.isdigit():
        return "ray", value
    raise ExecutorError(f"executor {kind!r}: expected one of {EXECUTOR_KINDS}")


def make_executor(kind: str = "local", workers: int = 0, retries: int = 2) -> Executor:
    """The executor a setting names: "local" is a process pool (inline when `workers` is 1), "inline" this process,
    "ray" / "ray://HOST:PORT" / "HOST:PORT" a Ray cluster (`workers` 0: as many as the cluster has CPUs)."""
    name, address = parse_kind(kind)
    if name == "inline" or (name == "local" and workers == 1):
        return InlineExecutor()
    if name == "local":
        return ProcessExecutor(workers or None, retries=retries)
    return RayExecutor(address, workers or None, retries=retries)
