"""The servers: `nbrecall serve` (the search page, the viewer and the HTTP API, with ROOT indexed behind it) and
`nbrecall mcp` (MCP tools over stdio); both refuse to start on an answer ranking model they cannot use."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nbrecall.backends import describe
from nbrecall.cli.common import (
    ConfigOpt,
    ExecutorOpt,
    IndexOpt,
    StoreOpt,
    _executor,
    _index_faults,
    _open_archive,
    _plain,
    _settings,
    err,
)
from nbrecall.config import Settings

if TYPE_CHECKING:
    from nbrecall.ingest.live import LiveIndexer
    from nbrecall.service import Archive


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
        err.print(f"[red]error:[/red] {_plain(exc)}", soft_wrap=True)
        raise typer.Exit(2) from exc


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
            err.print(f"[red]error:[/red] --every {_plain(exc)}")
            raise typer.Exit(2) from exc
    token = token or None
    refusal = bind_refusal(host, token)
    if refusal:
        err.print(f"[red]error:[/red] {_plain(refusal)}", soft_wrap=True)
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
        err.print(f"[yellow]note:[/yellow] {_plain(exc)}: `search` and `ask` will not use this server",
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


def mcp(index_dir: IndexOpt = None, config: ConfigOpt = None, store: StoreOpt = None) -> None:
    """Run a Model Context Protocol server over stdio: tools `search`, `ask` and `get_cell` on this index."""
    from nbrecall.mcp_server import serve_stdio

    settings = _settings(config, index_dir, store)
    _check_ranker_model(settings)
    archive = _open_archive(settings)
    serve_stdio(archive, settings)
