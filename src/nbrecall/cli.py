"""The `nbrecall` command line: thin wiring of the pipeline stages, with progress and summaries."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperCommand, TyperGroup

from nbrecall.backends import describe
from nbrecall.config import ConfigError, Settings, load_settings

if TYPE_CHECKING:  # for the annotations only: the commands import their stages when they run (a fast start)
    from rich.progress import Progress

    from nbrecall.answer.types import AnswerEvent
    from nbrecall.convert.run import ConvertResult
    from nbrecall.executor import Executor
    from nbrecall.ingest.live import LiveIndexer
    from nbrecall.protocols import Manifest
    from nbrecall.records import SearchFilters
    from nbrecall.search.evaluate import Query
    from nbrecall.search.retrieve import SearchResult
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


@app.command()
def convert(
    path: Annotated[Path, typer.Argument(help="A notebook or a folder of notebooks.")],
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help=f"Output folder (default: ./{DEFAULT_CONVERT_DIR} in the working "
                     "directory, never the archive); it is printed at the end."),
    ] = None,
    stdout: Annotated[
        bool, typer.Option("--stdout", help="Print the markdown of one notebook to stdout.")
    ] = False,
    max_output_chars: Annotated[
        int, typer.Option(help="Keep text outputs up to this size; longer → head/tail.")
    ] = 2000,
    describe_figures: Annotated[
        bool, typer.Option("--describe-figures", help="Add each figure's machine-made description ([vision] "
                           "describer; cached in the index folder's figures.sqlite) after its image.")
    ] = False,
    config: ConfigOpt = None,
) -> None:
    """Render notebooks as LLM-addressable markdown with a fidelity report and an SVG dependency map.

    Exit code: 0 when every notebook was converted, or some were and the unreadable ones are listed with their
    reasons; 1 when none could be converted; 2 for a wrong argument (no such path, --stdout on a folder).
    """
    from rich.markup import escape

    from nbrecall.convert.markdown import ConvertOptions
    from nbrecall.convert.run import convert_file
    from nbrecall.notebook.files import walk_notebooks

    settings = _settings(config)
    options = ConvertOptions(max_output_chars=max_output_chars)
    figure_store = None
    if describe_figures:
        from nbrecall.ingest.figures import CachedDescriptions, FigureWork
        from nbrecall.vision.factory import make_describer
        from nbrecall.vision.store import FigureStore

        describer = make_describer(settings)
        if describer is None:
            err.print("[red]error:[/red] --describe-figures needs a describer: [vision] kind = \"ocr\" or \"openai\" "
                      "in nbrecall.toml")
            raise typer.Exit(2)
        figure_store = FigureStore.of_index(settings.index_dir)
        work = FigureWork(describer, figure_store)
        options.describe_figure = CachedDescriptions(work)
    if not path.exists():
        err.print(f"[red]error:[/red] {escape(str(path))}: no such file or folder")
        raise typer.Exit(2)
    if stdout:
        if not path.is_file():
            err.print("[red]error:[/red] --stdout takes a single notebook file")
            raise typer.Exit(2)
        result = convert_file(path, None, options)
        if not result.ok or result.converted is None:
            err.print(f"[red]unreadable:[/red] {escape(str(path))}: {escape(str(result.reason))}")
            raise typer.Exit(1)
        sys.stdout.write(result.converted.markdown)
        return
    files = list(
        walk_notebooks(path, skip_hidden=settings.discover.skip_hidden, exclude=settings.discover.exclude)
    )
    base = path if path.is_dir() else path.parent
    outdir = (out or Path(DEFAULT_CONVERT_DIR)).absolute()
    files = [f for f in files if not f.absolute().is_relative_to(outdir)]  # never an earlier run's copies
    results = []
    with _progress() as progress:
        task = progress.add_task("converting", total=len(files), rate="")
        for file in files:
            rel = file.relative_to(base)
            results.append(convert_file(file, outdir / rel.parent, options, display_path=str(rel)))
            progress.update(task, advance=1, rate=file.name[:40])
    _convert_summary(results)
    if figure_store is not None:
        for note in work.report.notes:
            err.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)
        figure_store.close()
    written = sum(r.ok for r in results)
    err.print(f"output folder: {escape(str(outdir))} ({written} of {len(results)} notebook(s) written)",
              highlight=False)
    if any(not r.ok for r in results):
        raise typer.Exit(1 if all(not r.ok for r in results) else 0)


DEFAULT_CONVERT_DIR = "nbrecall-converted"


def _convert_summary(results: list[ConvertResult]) -> None:
    from rich.markup import escape

    ok = [r for r in results if r.ok]
    measured = [(r.name, r.figures) for r in ok if r.figures is not None]  # every converted file is measured
    table = Table(title=f"converted {len(ok)} of {len(results)} notebooks")
    for column in (
        "notebook",
        "bytes before",
        "bytes after",
        "tokens before",
        "tokens after",
        "figures",
        "warnings",
    ):
        table.add_column(column, justify="left" if column == "notebook" else "right")
    shown = sorted(measured, key=lambda named: -named[1].bytes_before)[:20]
    for name, f in shown:
        table.add_row(
            escape(name),
            f"{f.bytes_before:,}",
            f"{f.bytes_after:,}",
            f"{f.tokens_before:,}",
            f"{f.tokens_after:,}",
            str(f.figures),
            str(f.warnings),
        )
    if measured:
        figures = [f for _name, f in measured]
        tb = sum(f.tokens_before for f in figures)
        ta = sum(f.tokens_after for f in figures)
        table.add_row(
            "[b]total[/b]",
            f"{sum(f.bytes_before for f in figures):,}",
            f"{sum(f.bytes_after for f in figures):,}",
            f"{tb:,}",
            f"{ta:,}",
            str(sum(f.figures for f in figures)),
            str(sum(f.warnings for f in figures)),
        )
    err.print(table)
    for r in results:
        if not r.ok:
            err.print(f"[yellow]unreadable[/yellow] {escape(str(r.source))}: {escape(str(r.reason))}",
                      highlight=False)


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


@app.command()
def index(
    roots: Annotated[list[Path], typer.Argument(help="Folders (or notebooks) to index.")],
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    store: StoreOpt = None,
    no_vectors: Annotated[
        bool, typer.Option("--no-vectors", help="Keyword index only; skip embedding.")
    ] = False,
    defer_vectors: Annotated[
        bool,
        typer.Option(
            "--defer-vectors",
            help="Make every notebook keyword-searchable and stop; vectors are queued for the next run.",
        ),
    ] = False,
    executor: ExecutorOpt = None,
) -> None:
    """Index notebook archives: incremental, resumable, one writer at a time."""
    import time

    from rich.markup import escape

    from nbrecall.backends import index_exists
    from nbrecall.executor import ExecutorError
    from nbrecall.index.embedder_from_settings import make_embedder
    from nbrecall.ingest.lock import IndexLocked
    from nbrecall.ingest.pipeline import run_index
    from nbrecall.plugins import plugin_manager
    from nbrecall.service import open_store

    settings = _settings(config, index_dir, store)
    if no_vectors:
        settings.embed.enabled = False
    for root in roots:
        if not root.exists():
            err.print(f"[red]error:[/red] {_plain(root)}: no such file or folder")
            raise typer.Exit(2)
    with _index_faults(settings, "opening"):
        index_exists(settings)  # a bad store URL or a server that is down: said now, before the model loads
    pool = _executor(settings, executor)  # an unreachable cluster is said now too
    plugins = plugin_manager(settings)
    embedder = make_embedder(settings, plugins)
    with _index_faults(settings, "opening"):
        chunks = open_store(settings, embedder.dim)
    started = time.perf_counter()
    with _progress() as progress:
        task = progress.add_task("indexing", total=None, rate="")

        phase, since = "indexing", started

        def report(stage: str, done: int, total: int) -> None:
            nonlocal phase, since
            if stage != phase:  # phase 2: the same bar counts chunks given a vector
                phase, since = stage, time.perf_counter()
                progress.update(task, description=stage)
            rate = done / max(time.perf_counter() - since, 1e-9)
            unit = "chunks/s" if stage == "embedding" else "figures/s" if stage.startswith("describ") else "notebooks/s"
            progress.update(task, completed=done, total=total, rate=f"{rate:.1f} {unit}")

        try:
            with pool, _index_faults(settings, "indexing"):
                result = run_index(roots, settings, embedder, chunks, progress=report, defer_vectors=defer_vectors,
                                   executor=pool, plugins=plugins)
        except IndexLocked as exc:
            err.print(f"[red]locked:[/red] {_plain(exc)}")
            raise typer.Exit(3) from exc
        except ExecutorError as exc:  # a worker cannot build like this run, or the cluster went away
            err.print(f"[red]executor error:[/red] {escape(str(exc))}; finished batches are kept", soft_wrap=True)
            raise typer.Exit(2) from exc
        if progress.tasks[0].total is None:  # nothing to index or embed: say so, not `0/?`
            progress.update(task, description="up to date", total=result.files, completed=result.files,
                            rate="files checked")
    elapsed = time.perf_counter() - started
    table = Table(title=f"indexed into {describe(settings)} in {elapsed:.1f} s")
    table.add_column("what")
    table.add_column("count", justify="right")
    for label, value in [
        ("files seen", result.files),
        ("files hashed", result.hashed),
        ("new or changed files", result.changed),
        ("deleted files", result.deleted_files),
        ("notebooks indexed", result.notebooks_indexed),
        ("  re-indexed for a new or removed render", result.rerendered),
        ("quarantined", len(result.quarantined)),
        ("chunks written", result.chunks_written),
        ("texts embedded", result.texts_embedded),
        ("embedding cache hits", result.embed_cache_hits),
        ("chunks waiting for a vector", result.vectors_pending),
        ("notebooks removed", result.notebooks_removed),
    ]:
        table.add_row(label, f"{value:,}")
    if result.figures is not None:
        table.add_row("figures described", f"{result.figures.described:,}")
        table.add_row("figures not described (failed)", f"{result.figures.failed:,}")
    for stage, seconds in result.seconds.items():
        table.add_row(f"time: {stage}", f"{seconds:.1f} s")
    err.print(table)
    for note in result.figures.notes if result.figures is not None else []:
        err.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)
    for rel, reason in result.quarantined:
        err.print(f"[yellow]quarantined[/yellow] {escape(str(rel))}: {escape(str(reason))}", highlight=False)


def _open_archive(settings: Settings) -> Archive:
    from nbrecall.service import Archive, IndexMissing

    try:
        with _index_faults(settings, "opening"):
            return Archive(settings)
    except IndexMissing as exc:
        err.print(f"[red]error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="The question; '-' reads one query per line from stdin.")],
    index_dir: IndexOpt = None,
    k: Annotated[int, typer.Option("-k", help="Number of results.")] = 10,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the JSON contract (JSON Lines with '-').")
    ] = False,
    year: YearOpt = None,
    project: ProjectOpt = None,
    author: AuthorOpt = None,
    tag: TagOpt = None,
    include_deprecated: DeprecatedOpt = False,
    all_versions: VersionsOpt = False,
    config: ConfigOpt = None,
    store: StoreOpt = None,
) -> None:
    """Find the cells that answer a question; results grouped by notebook, one per family of versions.

    Answered by a running `nbrecall serve` of the same index and settings when there is one (no start-up; set
    NBRECALL_SERVER=off to open the index here instead)."""
    import json

    _refuse_empty(query)
    settings = _settings(config, index_dir, store)
    queries = [line.strip() for line in sys.stdin if line.strip()] if query == "-" else [query]
    options = {"year": year, "project": project, "author": author, "tag": tag,
               "include_deprecated": include_deprecated, "all_versions": all_versions}
    queries = _search_through_server(settings, queries, k, as_json, options)
    if not queries:
        return
    archive = _open_archive(settings)
    filters = _filters(year, project, author, tag, include_deprecated)
    for text in queries:
        with _index_faults(settings, "searching"):
            result = archive.search(text, filters, all_versions=all_versions)
        hits = result.hits(k)
        if as_json:
            sys.stdout.write(
                json.dumps({"query": text, "results": [h.contract() for h in hits]}, ensure_ascii=False)
                + "\n"
            )
            sys.stdout.flush()
        else:
            _print_hits(text, result, k, archive.manifest)


def _refuse_empty(text: str) -> None:
    """An empty question is refused (exit 2), as the HTTP API refuses it (422)."""
    if not text.strip():
        err.print("[red]error:[/red] the question is empty: give some words to look for ('-' reads questions "
                  "from stdin)")
        raise typer.Exit(2)


def _local_server(settings: Settings) -> LocalServer | None:
    from nbrecall.web.local_server import find_server

    return find_server(settings)


SEARCH_NOTEBOOKS = 10  # notebooks a search groups its hits into (`Archive.search`'s default)


def _search_through_server(
    settings: Settings, queries: list[str], k: int, as_json: bool, options: dict[str, Any]
) -> list[str]:
    """Answer `queries` through a running `nbrecall serve` of this index (`web.local_server`); returns the ones
    left to answer here (all of them without a usable server, the rest if it goes away midway)."""
    import json

    from nbrecall.web.local_server import ServerUnusable

    server = _local_server(settings)
    if server is None:
        return queries
    for position, text in enumerate(queries):
        try:
            payload = server.search(text, k, options)
        except ServerUnusable:  # gone, hung, or a 422 for a filter: the direct path says why
            return queries[position:]
        # The direct path groups into at most 10 notebooks; the API into k: keep what it would show.
        groups = payload.get("notebooks", [])[:SEARCH_NOTEBOOKS]
        if as_json:
            extra = ("nb_id", "url")
            results = [{key: value for key, value in hit.items() if key not in extra}
                       for group in groups for hit in group["hits"]][:k]
            sys.stdout.write(json.dumps({"query": text, "results": results}, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        else:
            _print_groups(text, [{**g, "warning": g.get("warning") if g.get("render_status") else None}
                                 for g in groups], k)
    return []


_RENDER_STYLE = {"fresh": "green", "changed": "yellow", "stale": "red"}


def _print_hits(text: str, result: SearchResult, k: int, manifest: Manifest | None = None) -> None:
    from nbrecall.ingest.renders import render_summary

    groups = []
    for nb in result.notebooks:
        content = manifest.content(nb.nb_sha) if manifest is not None else None
        render = render_summary(content.meta if content is not None else None)
        first = nb.hits[0]
        groups.append({
            "path": nb.notebook, "year": first.year, "project": first.project, "author": first.author,
            "deprecated": first.deprecated, "stale": first.stale, "render_status": render["render_status"],
            "warning": render["warning"], "checkpoint_of": nb.checkpoint_of, "n_versions": nb.n_versions,
            "versions": nb.versions,
            "hits": [{"cell": h.cell, "kind": h.kind, "cell_id": h.cell_id, "heading": h.heading,
                      "snippet": h.snippet, "notebook": h.notebook, "version_of": h.version_of,
                      "checkpoint_of": h.checkpoint_of} for h in nb.hits],
        })
    _print_groups(text, groups, k)


def _print_groups(text: str, groups: list[dict[str, Any]], k: int) -> None:
    """Results as a person reads them: notebook by notebook (path, year · project · author, flags), then each
    hit's cell, kind, cell id, heading and snippet with the query's words highlighted; at most `k` hits."""
    from rich.markup import escape

    out = _console()
    terms: set[str] = set()
    if out.is_terminal:  # highlighting is styling, which rich leaves out of a pipe: skip the search stack there
        from nbrecall.index.terms import query_terms

        terms = query_terms(text)
    shown = 0
    out.print(f"[b]{escape(text)}[/b]")
    for nb in groups:
        if shown >= k:
            break
        meta = " · ".join(str(x) for x in (nb["year"], nb["project"], nb["author"]) if x)
        flags = " [yellow]deprecated[/yellow]" if nb["deprecated"] else ""
        if nb["render_status"]:
            style = _RENDER_STYLE[nb["render_status"]]
            flags += f" [{style}]re-rendered: {nb['render_status']}[/{style}]"
        elif nb["stale"]:
            flags += " [red]stale[/red]"
        out.print(f"\n[b cyan]{escape(nb['path'])}[/b cyan]  [dim]{escape(meta)}[/dim]{flags}")
        if nb.get("checkpoint_of"):
            out.print(f"  [yellow]in an older checkpoint of {escape(nb['checkpoint_of'])}[/yellow]")
        if nb["warning"]:
            out.print(f"  [red]⚠ {escape(nb['warning'])}[/red]")
        for hit in nb["hits"]:
            if shown >= k:
                break
            shown += 1
            snippet = escape(hit["snippet"])
            for term in sorted(terms, key=len, reverse=True):
                snippet = _highlight(snippet, term)
            where = ""
            if hit.get("version_of"):
                where = (f" [yellow]in an older checkpoint of {escape(hit['checkpoint_of'])}[/yellow]"
                         if hit.get("checkpoint_of")
                         else f" [yellow]in another version: {escape(hit['notebook'])}[/yellow]")
            out.print(
                f"  [magenta]Cell {hit['cell']}[/magenta]{where} [dim]{hit['kind']} · "
                f"#cell-id={escape(hit['cell_id'])} · {escape(hit['heading'])}[/dim]\n    {snippet}"
            )
        n_versions, listed = nb.get("n_versions") or 0, nb.get("versions") or []
        if n_versions:
            out.print(f"  [dim]{n_versions} other version{'s' if n_versions > 1 else ''}:[/dim]")
            for version in listed:
                out.print(f"    [dim]{escape(_version_line(version))}[/dim]")
            if n_versions > len(listed):
                out.print(f"    [dim]… and {n_versions - len(listed)} more[/dim]")
    if not groups:
        out.print("no results")


def _version_line(version: dict[str, Any]) -> str:
    """One other version of a family as the CLI lists it: path · year · author · modified, and its flags."""
    parts = [str(version["notebook"])]
    parts += [str(version[key]) for key in ("year", "author") if version.get(key)]
    if version.get("modified"):
        parts.append(f"modified {version['modified']}")
    if version.get("checkpoint_of"):
        parts.append(f"checkpoint of {version['checkpoint_of']}")
    if version.get("deprecated"):
        parts.append("deprecated")
    if version.get("matched"):
        parts.append("matches too")
    return " · ".join(parts)


def _highlight(text: str, term: str) -> str:
    import re

    return re.sub(f"(?i)(?<![\\w\\[])({re.escape(term)})", r"[b yellow]\1[/b yellow]", text)


QUARANTINE_SHOWN = 10  # quarantined files `status` lists without --quarantined


@app.command()
def status(
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    store: StoreOpt = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="One JSON object for scripts and monitors: every count, the embedding "
                     "progress, renders, and each quarantined file with its reason."),
    ] = False,
    all_quarantined: Annotated[
        bool,
        typer.Option("--quarantined", help=f"List every quarantined file with its reason (without it: the count "
                     f"and the first {QUARANTINE_SHOWN})."),
    ] = False,
) -> None:
    """What the index holds, and the quarantined files with their reasons (the first few; --quarantined: all)."""
    import json

    from rich.markup import escape

    from nbrecall.backends import index_exists, open_manifest

    settings = _settings(config, index_dir, store)
    with _index_faults(settings, "reading"):
        exists = index_exists(settings)
    if not exists:
        err.print(f"[red]error:[/red] {describe(settings)}: no index here; run `nbrecall index ROOT` first")
        raise typer.Exit(2)
    with _index_faults(settings, "reading"):
        manifest = open_manifest(settings, readonly=True)
        stats = manifest.stats()
    share = stats["embedded"] / stats["chunks"] if stats["chunks"] else 1.0
    figures = _figure_counts(settings, manifest)
    from nbrecall.index.family_store import family_store

    families = family_store(manifest)
    family_counts: tuple[int, int] | None = None
    if families is not None:
        with _index_faults(settings, "reading"):
            family_counts = families.counts()
    if as_json:
        with _index_faults(settings, "reading"):
            quarantine = [
                {"root": root, "path": rel, "sha256": rec.sha256, "reason": rec.reason}
                for rec in manifest.contents("quarantined")
                for root, rel in (manifest.paths_of(rec.sha256) or [(rec.root, rec.rel)])
            ]
            renders = manifest.render_counts()
            last = manifest.last_run()
        counts = {key.replace(" ", "_"): value for key, value in stats.items()}
        if family_counts is not None:
            counts["families"], counts["notebooks_in_families"] = family_counts
        links = [{"path": str(rel), "target": str(target)} for rel, target in last.get("outside_links") or []]
        document = {"index": describe(settings), "counts": counts,
                    "embedding_progress": round(share, 4), "renders": renders, "quarantined": quarantine,
                    "outside_links": links, "figures": figures}
        sys.stdout.write(json.dumps(document, ensure_ascii=False) + "\n")
        return
    out = _console()
    table = Table(title=f"index {describe(settings)}")
    table.add_column("what")
    table.add_column("count", justify="right")
    for key, value in stats.items():
        table.add_row(key, f"{value:,}")
    table.add_row("embedding progress", f"{share:.0%}")
    if figures is not None:
        for key in ("described", "waiting", "failed"):
            table.add_row(f"figures {key}", f"{figures[key]:,}")
        table.add_row("figure description cache", f"{int(figures['cache_bytes']) / 1024:,.0f} KiB")
    if family_counts is not None:
        table.add_row("notebook families (2+ versions)", f"{family_counts[0]:,}")
        table.add_row("  notebooks in them", f"{family_counts[1]:,}")
    out.print(table)
    renders = manifest.render_counts()
    if renders:
        r = Table(title="notebooks by render status (as indexed)")
        r.add_column("render status")
        r.add_column("notebooks", justify="right")
        for key in ("fresh", "changed", "stale", "not_rendered"):
            r.add_row(key.replace("_", " "), f"{renders[key]:,}")
        for item in renders["stale_reasons"][:10]:
            r.add_row(f"  stale: {escape(str(item['reason']))}", f"{item['count']:,}")
        out.print(r)
    last = manifest.last_run()
    links = last.get("outside_links") or []
    if links:
        total = int(last.get("outside_links_total") or len(links))
        lt = Table(title=f"{total} notebook(s) read through symbolic links out of the roots (follow_symlinks)")
        lt.add_column("file")
        lt.add_column("link target")
        for rel, target in links:
            lt.add_row(str(rel), str(target))
        if total > len(links):
            lt.add_row(f"… and {total - len(links)} more", "")
        out.print(lt)
    quarantined = manifest.contents("quarantined")
    if quarantined:
        # The first few files in a table, the rest counted: 143 rows of Rich table took ~0.3 s of a 41k `status`.
        files = [(rel, rec.reason) for rec in quarantined
                 for _root, rel in manifest.paths_of(rec.sha256) or [(rec.root, rec.rel)]]
        shown = files if all_quarantined else files[:QUARANTINE_SHOWN]
        q = Table(title=f"{len(files):,} quarantined file(s): retried when their content changes")
        q.add_column("file")
        q.add_column("reason")
        for rel, reason in shown:
            q.add_row(escape(rel), escape(reason))  # `'^[a-zA-Z0-9-_]+$'` is no markup
        out.print(q)
        if len(shown) < len(files):
            out.print(f"… and {len(files) - len(shown):,} more: `nbrecall status --quarantined` lists them all "
                      "(`--json` too)", soft_wrap=True, markup=False)


def _figure_counts(settings: Settings, manifest: Manifest) -> dict[str, int | str] | None:
    """Raster figures of the indexed notebooks by description state (None when figures were never described)."""
    from nbrecall.vision.store import FILE_NAME, FigureStore

    path = settings.index_dir / FILE_NAME
    if not path.is_file():
        return None
    figures = FigureStore(path, readonly=True)
    try:
        counts: dict[str, int | str] = dict(figures.counts(manifest.indexed_shas()))
        counts["cache_bytes"] = figures.cache_bytes()
        counts["describer"] = settings.vision.kind or "off"
        return counts
    finally:
        figures.close()


@app.command("eval")
def eval_command(
    queries: Annotated[
        Path, typer.Argument(help="Queries in JSON Lines (format of shared/eval/queries.jsonl).")
    ],
    root: Annotated[Path, typer.Option("--root", help="The corpus the query paths are relative to.")],
    index_dir: IndexOpt = None,
    baselines: Annotated[
        bool, typer.Option("--baselines", help="Also run the naive-loader baselines.")
    ] = False,
    show_misses: Annotated[bool, typer.Option("--misses", help="List the queries that missed.")] = False,
    all_versions: VersionsOpt = False,
    answers: Annotated[
        bool, typer.Option("--answers", help="Measure the extractive answers instead (value@1, value@3, cell@1, "
                           "and the share of value questions whose value is in the LLM context).")
    ] = False,
    config: ConfigOpt = None,
    store: StoreOpt = None,
) -> None:
    """Measure retrieval on a query set: nb@1, nb@3, nb@5, MRR and cell@10c, overall and per kind, and the
    distinct notebook families among the first five results; with --answers, the answers: the expected value
    first (value@1) or among three (value@3), a right first cell."""
    from nbrecall.backends import index_exists
    from nbrecall.search.evaluate import evaluate, load_queries, resolve_copies

    settings = _settings(config, index_dir, store)
    with _index_faults(settings, "opening"):
        exists = index_exists(settings)
    if not exists:
        err.print(f"indexing {root} into {describe(settings)} first")
        index([root], index_dir=settings.index_dir, config=config, no_vectors=False, store=settings.store.url)
    archive = _open_archive(settings)
    items = load_queries(queries)
    resolve_copies(items, root)  # the cells of `also` copies that are right cells too (search.evaluate)
    if answers:
        _eval_answers(archive, settings, items, root, show_misses)
        return

    def run(text: str) -> list[dict[str, Any]]:
        return [h.contract() for h in archive.search(text, all_versions=all_versions).hits(30)]

    tables = {"nbrecall": evaluate(items, run)}
    if baselines:
        from nbrecall.search.baselines import BASELINES, baseline_search, build_baseline

        work = settings.index_dir / "baselines"
        for name in BASELINES:
            baseline = build_baseline(name, root, work, archive.embedder)
            for mode in ("bm25", "dense"):
                tables[f"{name} {mode}"] = evaluate(items, baseline_search(baseline, archive.embedder, mode))
    out = _console()
    columns = ["nb@1", "nb@3", "nb@5", "MRR", "cell@10c", "cell@10c strict", "fam@5"]
    overall = Table(title=f"{len(items)} queries over {root}" + (" (all versions)" if all_versions else ""))
    overall.add_column("system")
    for column in columns:
        overall.add_column(column, justify="right")
    for name, (table, _outcomes) in tables.items():
        overall.add_row(name, *(f"{table['all'].get(c, float('nan')):.3f}" for c in columns))
    out.print(overall)
    table, outcomes = tables["nbrecall"]
    kinds = Table(title="nbrecall per kind")
    kinds.add_column("kind")
    kinds.add_column("n", justify="right")
    for column in columns:
        kinds.add_column(column, justify="right")
    for kind, values in table.items():
        kinds.add_row(kind, str(int(values["n"])), *(f"{values.get(c, float('nan')):.3f}" for c in columns))
    out.print(kinds)
    if show_misses:
        for outcome in outcomes:
            if outcome.notebook_rank != 1 or not outcome.cell_hit:
                q = outcome.query
                out.print(
                    f"[yellow]{q.id}[/yellow] {q.kind} nb rank {outcome.notebook_rank} cell "
                    f"{'hit' if outcome.cell_hit else 'miss'}: {q.query}"
                )


def _where_the_value_ranks(expected: str, shown: list[str], beside: list[str] | None = None) -> str:
    """For a missed value: whether the reader found it (a ranking miss: a model trained on your own questions,
    `bench/ranker_fit.py`, may fix it) or not (the value was not read from the outputs at all), and whether the
    answer named it beside its first value (`Answer.beside`: the reader saw it there)."""
    from nbrecall.answer.evaluate import holds_value

    rank = next((i for i, text in enumerate(shown) if holds_value(expected, text)), None)
    if rank is None:
        return f"no value candidate holds it ({len(shown)} candidates): it was not read as a value, or shown otherwise"
    named = any(holds_value(expected, text) for text in beside or [])
    return f"it is value candidate {rank + 1} of {len(shown)}: found, ranked lower" + (
        "; the answer names it beside the first value" if named else "")


def _eval_answers(archive: Archive, settings: Settings, items: list[Query], root: Path, show_misses: bool) -> None:
    from nbrecall.answer.answer import llm_context
    from nbrecall.answer.compose import extractive_answer
    from nbrecall.answer.evaluate import by_confidence, evaluate_answers
    from nbrecall.answer.question import read_question
    from nbrecall.answer.rerank import ordered_values
    from nbrecall.answer.types import Answer

    candidates: dict[str, list[str]] = {}  # with --misses, per question: what its value candidates show, best first

    def ask(text: str) -> tuple[Answer, str | None]:
        result = archive.search(text)
        ranked = ordered_values(read_question(text), result, archive) if result.notebooks else []
        if show_misses:
            candidates[text] = [c.fact.statement() for c in ranked]
        context = llm_context(text, result, archive, settings, ranked=ranked).text
        return extractive_answer(text, result, archive, ranked=ranked), context

    table, outcomes = evaluate_answers(items, ask)
    out = Console()
    columns = ["n", "value@1", "value@3", "cell@1", "cell@1 strict", "cell@3", "context"]
    kinds = Table(title=f"extractive answers: {len(items)} queries over {root}")
    kinds.add_column("kind")
    for column in columns:
        kinds.add_column(column, justify="right")
    for kind, values in table.items():
        kinds.add_row(kind, *(("" if c not in values else str(int(values[c])) if c == "n" else f"{values[c]:.3f}")
                              for c in columns))
    out.print(kinds)
    levels = by_confidence(outcomes)
    if any(n for n, _ in levels.values()):
        out.print("value answers by confidence (the answer's own estimate; right = the expected value first): "
                  + " · ".join(f"{level} {n}" + (f" ({right / n:.2f} right)" if n else "")
                               for level, (n, right) in levels.items()))
    if show_misses:
        from rich.markup import escape

        for o in outcomes:
            if o.value_first is False or not o.cell_first:
                q = o.query
                first = o.answer.citations[0] if o.answer.citations else None
                got = f"{first.notebook} › Cell {first.cell}" if first else "no citation"
                out.print(f"[yellow]{q.id}[/yellow] {q.kind}: {escape(q.query)}")
                if o.value_first is False:
                    out.print(f"   expected {escape(q.answer or '')!s}; answered: "
                              f"{escape(o.answer.text.splitlines()[0] if o.answer.text else '')}")
                    beside = [v.shown for v in o.answer.beside]
                    out.print(f"   {_where_the_value_ranks(q.answer or '', candidates.get(q.query, []), beside)}")
                if not o.cell_first:
                    out.print(f"   cell: expected {q.notebook} › {q.cells}; cited {escape(got)}")


def _check_ranker_model(settings: Settings) -> None:
    """A server (`serve`, `mcp`) whose answer ranking model cannot be used refuses to start (exit 2, naming the
    file) instead of failing every question it is asked."""
    try:
        from nbrecall.answer.rerank import RankerModelError, check_model
    except ModuleNotFoundError:  # a build without answers serves search alone
        return
    try:
        check_model(settings.answer)
    except RankerModelError as exc:
        err.print(f"[red]error:[/red] {_escape_markup(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from exc


@app.command()
def serve(
    roots: Annotated[
        list[Path] | None,
        typer.Argument(help="Folders (or notebooks) to index in the background while serving; without them, "
                       "serve the index as it is."),
    ] = None,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Index again what changes under ROOT (file-system events, debounced): a "
                     "notebook saved there is searchable within a minute."),
    ] = False,
    every: Annotated[
        str | None,
        typer.Option("--every", help="Also look for changes under ROOT this often (30s, 10m, 1h): network shares "
                     "(SMB, NFS) send no events for changes made on other machines."),
    ] = None,
    no_vectors: Annotated[
        bool, typer.Option("--no-vectors", help="With ROOT: keyword index only; skip embedding.")
    ] = False,
    executor: ExecutorOpt = None,
    index_dir: IndexOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to bind; anything but loopback needs a token.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="NBRECALL_TOKEN",
            help="Require this token (Bearer header or cookie): at least 16 visible ASCII characters.",
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A Host name clients use to reach the server (repeatable; config: \\[serve] allowed_hosts). "
            "Loopback names and the --host address are always answered; any other Host header gets a 400.",
        ),
    ] = None,
    ssl_certfile: Annotated[
        Path | None, typer.Option("--ssl-certfile", help="Serve HTTPS with this certificate (PEM).")
    ] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option("--ssl-keyfile", help="The certificate's private key.")] = None,
    config: ConfigOpt = None,
    store: StoreOpt = None,
) -> None:
    """Serve the search page, the notebook viewer and the HTTP API (uvicorn).

    With ROOT the page is up at once and ROOT is indexed behind it, batch by batch (keyword-searchable first,
    vectors after, as `nbrecall index` does); the page shows how far it is and answers from what is indexed so
    far. `--watch` and `--every` keep it fresh afterwards."""
    from nbrecall.web.security import allowed_hosts, bind_refusal

    roots = list(roots or [])
    for root in roots:
        if not root.exists():
            err.print(f"[red]error:[/red] {root}: no such file or folder")
            raise typer.Exit(2)
    if (watch or every or no_vectors) and not roots:
        err.print("[red]error:[/red] --watch, --every and --no-vectors need ROOT: the folders to index")
        raise typer.Exit(2)
    every_seconds = None
    if every:
        from nbrecall.ingest.live import parse_duration

        try:
            every_seconds = parse_duration(every)
        except ValueError as exc:
            err.print(f"[red]error:[/red] --every {_escape_markup(str(exc))}")
            raise typer.Exit(2) from exc
    token = token or None
    refusal = bind_refusal(host, token)
    if refusal:
        err.print(f"[red]error:[/red] {_escape_markup(refusal)}", soft_wrap=True)
        raise typer.Exit(2)
    if (ssl_certfile is None) != (ssl_keyfile is None):
        err.print("[red]error:[/red] HTTPS needs both --ssl-certfile and --ssl-keyfile")
        raise typer.Exit(2)
    settings = _settings(config, index_dir, store)
    if no_vectors:
        settings.embed.enabled = False
    _check_ranker_model(settings)
    hosts = allowed_hosts(host, [*settings.serve.allowed_hosts, *(allowed_host or [])])
    from nbrecall.service import IndexMissing
    from nbrecall.web.app import UVICORN_OPTIONS, create_app, uvicorn_log_config

    live = None
    try:
        with _index_faults(settings, "opening"):
            if roots:
                live, archive = _live_indexer(settings, roots, watch, every_seconds, executor)
                web = create_app(settings, token=token, allowed_hosts=hosts, archive=archive, live=live)
            else:
                web = create_app(settings, token=token, allowed_hosts=hosts)
    except IndexMissing as exc:
        err.print(f"[red]error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    import uvicorn

    from nbrecall.web.local_server import ServerRecord

    scheme = "https" if ssl_certfile else "http"
    shown = f"[{host}]" if ":" in host else host
    err.print(f"nbrecall serving {describe(settings)} on {scheme}://{shown}:{port}/")
    err.print(f"answering Host names: {', '.join(hosts)}", soft_wrap=True)
    if token:
        err.print(f"open {scheme}://{shown}:{port}/?token=<your token> once to sign in this browser")
    if live is not None:
        how = " and watching it" if watch else ""
        how += f", looking for changes every {every}" if every else ""
        err.print(f"indexing {', '.join(map(str, roots))} in the background{how}: the page shows how far it is",
                  soft_wrap=True)
        live.start()
    web.state.web.heavy.start()  # the render processes, ready before the first viewer page
    tls = bool(ssl_certfile and ssl_keyfile)
    server_config = uvicorn.Config(
        web, host=host, port=port, log_level="info", log_config=uvicorn_log_config(),
        ssl_certfile=str(ssl_certfile) if tls else None, ssl_keyfile=str(ssl_keyfile) if tls else None,
        **UVICORN_OPTIONS,
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            web.state.web.close()  # renders in flight end now (their requests get the plain page), not in 10 s
            super().handle_exit(sig, frame)

    try:
        record = ServerRecord.announce(settings, host, port, token=bool(token), tls=tls)
        web.server_instance = record.instance  # type: ignore[attr-defined]
    except OSError as exc:  # a read-only index folder: serve anyway; the CLI opens the index itself
        record = None
        err.print(f"[yellow]note:[/yellow] {_escape_markup(str(exc))}: `search` and `ask` will not use this server",
                  soft_wrap=True)
    try:
        Server(server_config).run()
    finally:
        if record is not None:
            record.withdraw(settings)
        web.state.web.close()


def _live_indexer(
    settings: Settings, roots: list[Path], watch: bool, every: float | None, executor: str | None
) -> tuple[LiveIndexer, Archive]:
    """The background indexing of `serve ROOT`, on an index created now if there is none: the server's archive
    and the indexer share the embedder and the store (one model, one set of caches in memory)."""
    from nbrecall.index.embedder_from_settings import make_embedder
    from nbrecall.ingest.live import LiveIndexer
    from nbrecall.service import Archive, prepare_index

    _executor(settings, executor).close()  # a bad name or an unreachable cluster is said now (exit 2)
    embedder = make_embedder(settings)
    store = prepare_index(settings, embedder)
    archive = Archive(settings, _embedder=embedder, _store=store)
    live = LiveIndexer(roots, settings, embedder, store, watch=watch, every=every,
                       make_executor=lambda: _executor(settings, executor))
    return live, archive


def _escape_markup(text: str) -> str:
    from rich.markup import escape

    return escape(text)


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question, in your own words.")],
    index_dir: IndexOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as one JSON object.")] = False,
    extractive: Annotated[
        bool, typer.Option("--extractive", help="Do not ask the LLM even if one is configured.")
    ] = False,
    year: YearOpt = None,
    project: ProjectOpt = None,
    author: AuthorOpt = None,
    tag: TagOpt = None,
    include_deprecated: DeprecatedOpt = False,
    config: ConfigOpt = None,
    store: StoreOpt = None,
) -> None:
    """Answer a question from the notebooks, citing cells: streamed from the LLM if one is configured
    (answer.base_url / NBRECALL_LLM_BASE_URL), else the best matching value, row or sentence."""
    import json

    if not question.strip():  # as _refuse_empty, with an example of a question
        err.print("[red]error:[/red] the question is empty: ask something, e.g. nbrecall ask \"what ballast volume "
                  "did we use aft\"")
        raise typer.Exit(2)
    settings = _settings(config, index_dir, store)
    if extractive:
        settings.answer.base_url = None
        settings.answer.kind = "extractive"
    options = {"year": year, "project": project, "author": author, "tag": tag,
               "include_deprecated": include_deprecated}
    events = _answer_through_server(settings, question, options)
    refused: tuple[type[Exception], ...] = ()  # errors of this process's own answering, told as such
    if events is None:
        from nbrecall.answer.answer import stream_answer
        from nbrecall.answer.rerank import RankerModelError

        archive = _open_archive(settings)
        filters = _filters(year, project, author, tag, include_deprecated)
        events = stream_answer(question, archive, settings, filters)
        refused = (RankerModelError,)
    final = None
    streamed = False
    try:
        for event in events:
            if event.type == "done":
                final = event.answer
            elif as_json:
                continue
            elif event.type == "notice":
                if streamed:
                    sys.stdout.write("\n")
                from rich.markup import escape

                err.print(f"[yellow]note:[/yellow] {escape(event.text)}", highlight=False)
            elif event.type == "token":
                sys.stdout.write(event.text)
                sys.stdout.flush()
                streamed = True
    except refused as exc:
        err.print(f"[red]error:[/red] {_escape_markup(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from exc
    if final is None:
        raise typer.Exit(1)
    if as_json:
        sys.stdout.write(json.dumps(final.as_dict(), ensure_ascii=False) + "\n")
        return
    sys.stdout.write("\n")
    if final.citations:
        sys.stdout.write("\nCited cells:\n")
        for c in final.citations:
            sys.stdout.write(f"  {c.label()}  id:{c.cell_id}\n")
    sys.stdout.write(f"\n({final.mode} answer)\n")
    sys.stdout.flush()


def _answer_through_server(
    settings: Settings, question: str, options: dict[str, Any]
) -> Iterator[AnswerEvent] | None:
    """The answer's events from a running `nbrecall serve` of this index and settings, as `AnswerEvent`s; None
    when there is none (or it does not answer): the caller answers here."""
    from nbrecall.web.local_server import ServerUnusable

    server = _local_server(settings)
    if server is None:
        return None
    try:
        stream = server.ask(question, options)
    except ServerUnusable:
        return None
    from nbrecall.answer.types import AnswerEvent

    def events() -> Iterator[AnswerEvent]:
        for data in stream:
            yield AnswerEvent.from_dict(data)

    return events()


@app.command()
def mcp(index_dir: IndexOpt = None, config: ConfigOpt = None, store: StoreOpt = None) -> None:
    """Run a Model Context Protocol server over stdio: tools `search`, `ask` and `get_cell` on this index."""
    from nbrecall.mcp_server import serve_stdio

    settings = _settings(config, index_dir, store)
    _check_ranker_model(settings)
    archive = _open_archive(settings)
    serve_stdio(archive, settings)


key_app = _Typer(cls=_Group, no_args_is_help=True, help="API keys for the LLM endpoint, stored encrypted (Fernet).")
app.add_typer(key_app, name="key")


KeyForOpt = Annotated[str, typer.Option("--for", help="Whose key: llm (answers) or vision (figure describer).")]


def _key_name(purpose: str) -> str:
    if purpose not in ("llm", "vision"):
        err.print(f"[red]error:[/red] --for {_plain(purpose)}: say llm or vision")
        raise typer.Exit(2)
    return purpose


@key_app.command("set")
def key_set(index_dir: IndexOpt = None, config: ConfigOpt = None, purpose: KeyForOpt = "llm") -> None:
    """Store the LLM's (or with --for vision, the figure describer's) API key, encrypted: read from stdin when
    piped, else from a hidden prompt (never argv).

    Needs NBRECALL_SECRET_KEY_FILE (a file holding a Fernet key) or NBRECALL_SECRET_KEY.
    """
    from nbrecall.keys import KeyStoreError, load_fernet, store_api_key

    settings = _settings(config, index_dir)
    try:
        load_fernet()  # refuse before asking for the key
    except KeyStoreError as exc:
        err.print(f"[red]refused:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    if sys.stdin.isatty():
        api_key = typer.prompt("API key", hide_input=True, confirmation_prompt=False)
    else:
        api_key = sys.stdin.readline().strip()
    try:
        path = store_api_key(settings, api_key, name=_key_name(purpose))
    except KeyStoreError as exc:
        err.print(f"[red]refused:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    variable = "NBRECALL_VISION_API_KEY" if _key_name(purpose) == "vision" else "NBRECALL_LLM_API_KEY"
    err.print(f"API key stored, encrypted, in {path} ({variable}, when set, still wins)")


@key_app.command("clear")
def key_clear(index_dir: IndexOpt = None, config: ConfigOpt = None, purpose: KeyForOpt = "llm") -> None:
    """Forget the stored LLM (or --for vision) API key."""
    from nbrecall.keys import KeyStoreError, clear_api_key, secrets_path

    settings = _settings(config, index_dir)
    try:
        removed = clear_api_key(settings, name=_key_name(purpose))
    except KeyStoreError as exc:
        err.print(f"[red]error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    err.print("stored API key removed" if removed else f"no API key stored in {secrets_path(settings)}")


@app.command()
def render(
    roots: Annotated[list[Path], typer.Argument(help="Folders (or notebooks) to re-render.")],
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Data folder, read-only at /data in the sandbox (config: render.data_dir)."),
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Notebooks run in parallel (default 2).")] = None,
    cell_timeout: Annotated[
        float | None, typer.Option("--cell-timeout", help="Seconds per cell before the run stops (default 60).")
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Write the drift report (HTML) here.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Results folder (default <index>/renders).")] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="kernel (default; an IPython kernel) or pyodide (Pyodide, CPython 3.14 in WebAssembly, under "
            "Node.js), both in bubblewrap (config: render.backend). Pyodide limits: only the standard library is "
            "built in; numpy, pandas, matplotlib or any other package need pure-Python or wasm32 wheels in the "
            "render.pyodide_wheels folder (nothing is downloaded), else the notebook is stale: package not "
            "available offline; no subprocesses, threads or sockets; IPython magics and shell escapes fail "
            "their cell (%matplotlib, %load_ext, %autoreload, %config are skipped); 32-bit, at most 4 GB; start "
            "~3 s per notebook. Needs Node.js and, in set-up: npm ci --prefix src/nbrecall/render/pyodide_runner",
        ),
    ] = None,
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    executor: ExecutorOpt = None,
) -> None:
    """Re-execute notebooks in a sandbox and report which outputs still reproduce.

    Each notebook runs in bubblewrap (no network, read-only interpreter and data folder, throw-away home,
    cleared environment, memory/CPU limits, per-cell timeout); Windows/UNC and absolute paths are mapped onto
    the data folder by the render.path_map rules of nbrecall.toml. Status per notebook: fresh (outputs
    reproduce), changed (ran, outputs differ) or stale (could not re-execute: missing file, import error,
    timeout, memory, kernel died, ...). Results go to <out>/<sha256>.json and .ipynb; the notebook files are
    never modified. Needs bubblewrap and prlimit; without them nothing runs and every notebook is recorded
    stale (sandbox unavailable), exit code 3. With --executor ray each notebook is a Ray task and its sandbox
    runs on the worker's node (results are stored here).
    """
    import time

    from nbrecall.render.availability import sandbox_problem
    from nbrecall.render.environments import EnvironmentRuleError
    from nbrecall.render.paths import PathRuleError
    from nbrecall.render.pyodide import BACKENDS, pyodide_problem
    from nbrecall.render.report import write_report
    from nbrecall.render.run import RenderOptions, discover, render_many, summarise

    settings = _settings(config, index_dir)
    for root in roots:
        if not root.exists():
            err.print(f"[red]error:[/red] {_plain(root)}: no such file or folder")
            raise typer.Exit(2)
    if data is not None and not data.is_dir():
        err.print(f"[red]error:[/red] --data {data}: not a folder")
        raise typer.Exit(2)
    try:
        options = RenderOptions.from_settings(settings, out_dir=out, data_dir=data)
    except (PathRuleError, EnvironmentRuleError) as exc:
        err.print(f"[red]config error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    if workers is not None:
        options.workers = max(1, workers)
    if cell_timeout is not None:
        options.limits.cell_timeout = cell_timeout
    if backend is not None:
        options.backend = backend
    if options.backend not in BACKENDS:
        err.print(f"[red]error:[/red] --backend {options.backend}: not one of {', '.join(BACKENDS)}")
        raise typer.Exit(2)
    from nbrecall.executor import ExecutorError, parse_kind

    try:
        distributed = parse_kind(executor or settings.executor.kind)[0] == "ray"
    except ExecutorError as exc:
        err.print(f"[red]executor error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    # Locally the sandbox is checked here; on Ray each worker checks its own node (a notebook there without
    # bubblewrap is recorded stale with the reason).
    problem = "" if distributed else pyodide_problem() if options.backend == "pyodide" else sandbox_problem()
    if problem:
        err.print(f"[red]sandbox unavailable:[/red] {_plain(problem)}; notebooks are recorded stale, none is run")
    pool = _executor(settings, executor, workers) if distributed else None
    items = discover(roots, settings.discover.exclude)
    started = time.perf_counter()
    results = []
    with _progress() as progress:
        task = progress.add_task("rendering", total=len(items), rate="")
        try:
            for result in render_many(items, options, executor=pool):
                results.append(result)
                per_min = len(results) * 60 / max(time.perf_counter() - started, 1e-9)
                progress.update(task, completed=len(results), rate=f"{per_min:.1f} notebooks/min")
        except ExecutorError as exc:
            err.print(f"[red]executor error:[/red] {_plain(exc)}; finished renders are stored")
            raise typer.Exit(2) from exc
        finally:
            if pool is not None:
                pool.close()
    elapsed = time.perf_counter() - started
    summary = summarise(results)
    table = Table(title=f"rendered {len(results)} notebooks into {options.out_dir} in {elapsed:.1f} s")
    table.add_column("what")
    table.add_column("count", justify="right")
    for status, count in summary["status"].items():
        table.add_row(status, str(count))
    for reason, count in summary["reasons"][:10]:
        table.add_row(f"  stale: {reason}", str(count))
    for status in ("same", "changed", "failed", "new"):
        table.add_row(f"cells {status}", str(summary["cells"].get(status, 0)))
    for change, count in summary["changes"].items():
        if count:
            table.add_row(f"  {change}" + (" (format only, not badged)" if change == "format" else ""), str(count))
    for env, modules in summary["missing_modules"].items():
        shown = ", ".join(f"{m['module']} ({m['brings_back']})" for m in modules[:5])
        table.add_row(f"missing modules [{env}] (notebooks brought back)", shown)
    table.add_row("notebooks/min", f"{len(results) * 60 / max(elapsed, 1e-9):.1f}")
    err.print(table)
    if report is not None:
        write_report(results, report)
        err.print(f"drift report: {report}")
    if problem:
        raise typer.Exit(3)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
