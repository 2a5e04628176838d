"""The `nbrecall` command line: thin wiring of the pipeline stages, with progress and summaries.

One module per command (or group of commands), on what they share in `common` (the Typer app, the shared options,
settings, executor, console and fault handling):

- `convert`: `convert` (notebooks as LLM-addressable markdown);
- `index`: `index` (an indexing run) and `forget` (folders or notebooks out of the index);
- `search`: `search` (through a running server or here) and the printing of its results;
- `status`: `status` (what the index holds);
- `evaluate`: `eval` (retrieval or answers measured on a query set);
- `serve`: `serve` (the web server, indexing behind it) and `mcp` (MCP over stdio);
- `ask`: `ask` (an answer citing cells);
- `keys`: the `key` group (`key set`, `key clear`);
- `render`: `render` (re-execution in a sandbox).

The commands are registered here, in the order `nbrecall --help` lists them. Importing this package stays fast:
each command imports its stages when it runs.
"""

from __future__ import annotations

from nbrecall.cli import ask, convert, evaluate, index, keys, render, search, serve, status
from nbrecall.cli.common import app

__all__ = ["app", "main"]

# Typer lists the commands in the order they are registered (and groups after them).
app.command()(convert.convert)
app.command()(index.index)
app.command()(index.forget)
app.command()(search.search)
app.command()(status.status)
app.command("eval")(evaluate.eval_command)
app.command()(serve.serve)
app.command()(ask.ask)
app.command()(serve.mcp)
app.add_typer(keys.key_app, name="key")
app.command()(render.render)


def main() -> None:
    app()
