"""What the commands of `nbrecall` share: the Typer app and its classes, the options several commands take, the
settings, the executor, the console, progress bars, and the storage-fault, archive and filter helpers.

The command modules import from here and not from each other, except `evaluate`, whose `eval` runs `index` first
when there is no index; `nbrecall.cli` registers their commands on `app`. The underscore names are private to the
package. Heavy imports stay inside the functions: `import nbrecall.cli` is on the path of every command's start.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from nbrecall.config import ConfigError, Settings, load_settings

if TYPE_CHECKING:  # for the annotations only: the commands import their stages when they run (a fast start)
    from rich.progress import Progress

    from nbrecall.executor import Executor
    from nbrecall.records import SearchFilters
    from nbrecall.service import Archive
    from nbrecall.web.local_server import LocalServer


class _FlagsWithoutType:
    """Help that lists a flag without a `<bool>` after it: a flag takes no value (typer shows every option's
    type, flags included)."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


class _Command(_FlagsWithoutType, TyperCommand):
    pass


class _Group(_FlagsWithoutType, TyperGroup):
    pass


class _Typer(typer.Typer):
    def command(self, *args: Any, cls: Any = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or _Command, **kwargs)


app = _Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
)


def _console(stderr: bool = False) -> Console:
    """A console that wraps at the terminal's width, and not at all when the output is a file or a pipe (Rich's
    default there is 80 columns: a reason or a path cut over lines is lost to grep and to scripts)."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=100_000, soft_wrap=True)
    return console


err = _console(stderr=True)


def _plain(value: object) -> str:
    """A value shown as it is inside a Rich message: its brackets are text, not markup."""
    from rich.markup import escape

    return escape(str(value))


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        from nbrecall import __version__

        try:
            number = version("nbrecall")
        except PackageNotFoundError:  # run from a source tree that is not installed
            number = __version__
        sys.stdout.write(f"nbrecall {number}\n")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Searchable, answerable memory for an archive of Jupyter notebooks.

    Start with `nbrecall serve ROOT`: the page is up at once and ROOT is indexed behind it. `search` and `ask`
    answer through a running `serve` of the same index when there is one (it has the store and model loaded).
    """


ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="nbrecall.toml to read (default ./nbrecall.toml).")
]
IndexOpt = Annotated[
    Path | None, typer.Option("--index", help="Index folder (default .nbrecall or $NBRECALL_INDEX).")
]
StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="PostgreSQL URL (postgresql://USER:PASSWORD@HOST:PORT/DB) of a store shared by several indexers and "
        "servers; default $NBRECALL_STORE, \\[store] url, else the embedded index in the index folder.",
    ),
]
ExecutorOpt = Annotated[
    str | None,
    typer.Option(
        "--executor",
        help="Where the heavy work runs: local (a process pool here, the default), ray (a local Ray cluster, or the "
        "one $RAY_ADDRESS or `ray start` names), ray://HOST:PORT (a remote cluster's client server) or HOST:PORT "
        "(a cluster's GCS address); config: \\[executor] kind. Ray needs pip install 'nbrecall\\[ray]'.",
    ),
]


def _executor(settings: Settings, kind: str | None, workers: int | None = None) -> Executor:
    """The executor `--executor` or [executor] names; a bad name, missing Ray or an unreachable cluster exits 2."""
    from rich.markup import escape

    from nbrecall.executor import ExecutorError, make_executor

    cfg = settings.executor
    try:
        return make_executor(kind or cfg.kind, cfg.workers if workers is None else workers, cfg.retries)
    except ExecutorError as exc:
        err.print(f"[red]executor error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from exc


def _settings(config: Path | None, index: Path | None = None, store: str | None = None) -> Settings:
    flags: dict[str, Any] = {}
    if index is not None:
        flags["index_dir"] = str(index)
    if store:
        flags["store"] = {"url": store}
    try:
        return load_settings(config, flags=flags)
    except ConfigError as exc:
        err.print(f"[red]config error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc


@contextmanager
def _index_faults(settings: Settings, action: str) -> Iterator[None]:
    """Disk full, read-only folder or damaged index file: print which file and what to do (exit 4), no traceback."""
    from rich.markup import escape

    from nbrecall.index.faults import storage_fault

    try:
        yield
    except typer.Exit:
        raise
    except Exception as exc:
        fault = storage_fault(exc, settings.index_dir, action)
        if fault is None:
            raise
        err.print(f"[red]index error:[/red] {escape(str(fault))}", soft_wrap=True)
        raise typer.Exit(4) from exc


def _progress() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


def _filters(
    year: str | None, project: str | None, author: str | None, tag: str | None, include_deprecated: bool
) -> SearchFilters:
    from nbrecall.records import SearchFilters

    try:
        return SearchFilters.from_options(year, project, author, tag, include_deprecated)
    except ValueError as exc:
        err.print(f"[red]error:[/red] --{exc}")
        raise typer.Exit(2) from exc


YearOpt = Annotated[str | None, typer.Option("--year", help="A year or a range: 2015..2019.")]
ProjectOpt = Annotated[str | None, typer.Option("--project", help="Only notebooks of this project code.")]
AuthorOpt = Annotated[str | None, typer.Option("--author", help="Only notebooks whose author contains this.")]
TagOpt = Annotated[str | None, typer.Option("--tag", help="Only notebooks with this tag.")]
DeprecatedOpt = Annotated[
    bool, typer.Option("--include-deprecated", help="Also search deprecated notebooks.")
]
VersionsOpt = Annotated[
    bool, typer.Option("--all-versions", help="Every version of a notebook family as a result of its own.")
]


def _open_archive(settings: Settings) -> Archive:
    from nbrecall.service import Archive, IndexMissing

    try:
        with _index_faults(settings, "opening"):
            return Archive(settings)
    except IndexMissing as exc:
        err.print(f"[red]error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc


def _local_server(settings: Settings) -> LocalServer | None:
    from nbrecall.web.local_server import find_server

    return find_server(settings)


def _refuse_empty(text: str, hint: str) -> None:
    """An empty question, or one without a token (`index.terms.has_terms`), is refused (exit 2), as the HTTP API
    refuses it (422); `hint` says what to type instead."""
    from nbrecall.index.terms import NO_TERMS, has_terms

    if not text.strip():
        err.print(f"[red]error:[/red] the question is empty: {hint}")
        raise typer.Exit(2)
    if not has_terms(text):
        err.print(f"[red]error:[/red] {NO_TERMS}")
        raise typer.Exit(2)
