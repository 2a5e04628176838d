"""A Model Context Protocol server over stdio (`nbrecall mcp`): the archive as tools for an AI assistant.

Tools:
- `search(query, k, year, project, author, tag, include_deprecated)`: results in the JSON contract of
  `nbrecall search --json` (notebook, cell, cell id, kind, heading, snippet, …), best first.
- `ask(question, …filters)`: the answer text with its cited cells (LLM if configured, else extractive).
- `get_cell(notebook, cell)`: one cell of an indexed notebook (by its path in the index or its content sha):
  source, outputs (as indexed), cell id, type, execution count and the heading above it. Only notebooks in the
  index can be read: the path is looked up in the manifest, never opened on disk.

What a tool returns goes to the assistant's model: credentials the notebooks hold are replaced first
(`answer.redact`; `[answer] redact_secrets = false` leaves them), and `secrets_removed` says how many were.

Built on the official SDK (`mcp`, 2.x: `MCPServer`); stdout belongs to the protocol, logs go to stderr.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from nbrecall.answer.answer import answer as answer_question
from nbrecall.answer.places import heading_paths
from nbrecall.answer.redact import redact_all
from nbrecall.config import Settings
from nbrecall.index.terms import NO_TERMS, has_terms
from nbrecall.records import SearchFilters
from nbrecall.service import Archive

INSTRUCTIONS = (
    "nbrecall searches an archive of Jupyter notebooks. Use `search` to find the cells about a topic, a value "
    "or an error; `get_cell` to read a cell's full source and outputs; `ask` for a cited answer. Cite cells as "
    "[notebook › Cell n]."
)


class ToolInputError(ToolError):
    """A tool argument that cannot be used; the message (which says which and why) reaches the client."""


def parse_filters(
    year: str | None = None,
    project: str | None = None,
    author: str | None = None,
    tag: str | None = None,
    include_deprecated: bool = False,
) -> SearchFilters:
    """Filters as the CLI takes them; `year` is `2017` or a range `2015..2019` (either end open)."""
    try:
        return SearchFilters.from_options(year, project, author, tag, include_deprecated)
    except ValueError as exc:
        raise ToolInputError(str(exc)) from exc


def _resolve_notebook(archive: Archive, notebook: str) -> str:
    """The content sha of an indexed notebook named by its path in the index or by its sha (or a sha prefix)."""
    name = notebook.strip().replace("\\", "/")
    if not name:
        raise ToolInputError("notebook is empty: give a notebook path from the search results, or its sha")
    indexed = archive.manifest.indexed_shas()
    sha = archive.manifest.find_by_path(name)
    if sha is None and name.startswith("./"):
        sha = archive.manifest.find_by_path(name[2:])
    if sha is not None and sha in indexed:
        return sha
    lowered = name.lower()
    if len(lowered) >= 8 and all(c in "0123456789abcdef" for c in lowered):
        matches = [s for s in indexed if s.startswith(lowered)]
        if len(matches) == 1:
            return matches[0]
    raise ToolInputError(f"{notebook!r} is not a notebook in this index (use a path from the search results)")


def get_cell_data(archive: Archive, notebook: str, cell: int) -> dict[str, Any]:
    sha = _resolve_notebook(archive, notebook)
    records = archive.manifest.cells(sha)
    by_index = {c.idx: c for c in records}
    if cell not in by_index:
        last = max(by_index) if by_index else -1
        raise ToolInputError(f"{notebook!r} has no cell {cell} (cells 0..{last})")
    record = by_index[cell]
    paths = [rel for _root, rel in archive.manifest.paths_of(sha)]
    return {
        "notebook": paths[0] if paths else notebook,
        "paths": paths,
        "nb_sha": sha,
        "cell": record.idx,
        "cell_id": record.cell_id,
        "cell_type": record.cell_type,
        "execution_count": record.execution_count,
        "heading": heading_paths(records).get(cell, ""),
        "source": record.source,
        "outputs": record.outputs,
        "n_cells": len(records),
        "citation": f"[{paths[0] if paths else notebook} › Cell {record.idx}]",
    }


def _words(text: str) -> None:
    """A question without a letter or digit is refused, as the CLI and the HTTP API refuse it."""
    if not has_terms(text):
        raise ToolInputError(NO_TERMS)


def for_model(data: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """A tool's result as it goes to the assistant's model: credentials replaced (`answer.redact`, unless
    `[answer] redact_secrets = false`), with `secrets_removed` counting them when there were any."""
    if not settings.answer.redact_secrets:
        return data
    cleaned, kinds = redact_all(data)
    if kinds:
        cleaned["secrets_removed"] = len(kinds)
    return dict(cleaned)


def build_server(archive: Archive, settings: Settings) -> MCPServer:
    """The MCP server with its three tools bound to `archive`."""
    server = MCPServer("nbrecall", instructions=INSTRUCTIONS)

    @server.tool()
    def search(
        query: str,
        k: int = 10,
        year: str | None = None,
        project: str | None = None,
        author: str | None = None,
        tag: str | None = None,
        include_deprecated: bool = False,
    ) -> dict[str, Any]:
        """Search the notebook archive. Returns up to k results (best first), each naming the notebook, the cell
        index and id, the kind of chunk (code, text, table, figure, error…), the heading path and a snippet.
        Filters: year ("2017" or "2015..2019"), project code, author (substring), tag, include_deprecated."""
        _words(query)
        filters = parse_filters(year, project, author, tag, include_deprecated)
        k = max(1, min(int(k), 100))
        result = archive.search(query, filters)
        return for_model({"query": query, "results": [h.contract() for h in result.hits(k)]}, settings)

    @server.tool()
    def ask(
        question: str,
        year: str | None = None,
        project: str | None = None,
        author: str | None = None,
        tag: str | None = None,
        include_deprecated: bool = False,
    ) -> dict[str, Any]:
        """Answer a question from the notebooks. Returns the answer text with inline citations
        [notebook › Cell n], the cited cells, the mode ("llm" or "extractive"), a notice when something
        fell back or no value answered closely enough, and for a value question `values`: the best value and up
        to two alternatives from other cells, each with value, label, notebook, cell and year; `places`: the cells
        offered, best first (for a "where" question the cell found and up to two more of its notebook);
        `confidence`: for a value, the estimated chance (0-1) that the first one is the value asked for; `beside`:
        when that is under one half, up to two values printed next to it in its own cell, to compare it with.
        Same filters as `search`."""
        _words(question)
        filters = parse_filters(year, project, author, tag, include_deprecated)
        found = answer_question(question, archive, settings, filters)

        data = found.as_dict()
        for key, citations in (("citations", found.citations), ("places", found.places)):
            data[key] = [{**c.__dict__, "label": c.label()} for c in citations]  # `[notebook › Cell n]` to quote
        return for_model(data, settings)

    @server.tool()
    def get_cell(notebook: str, cell: int) -> dict[str, Any]:
        """Read one cell of an indexed notebook: its source, its outputs (as indexed: long outputs shortened,
        images as placeholders), cell id, type, execution count and the heading above it. `notebook` is a
        notebook path as given in search results, or the notebook's sha; `cell` is the 0-based cell index."""
        return for_model(get_cell_data(archive, notebook, int(cell)), settings)

    return server


def serve_stdio(archive: Archive, settings: Settings) -> None:
    """Run the server on stdin/stdout until the client closes the connection."""
    build_server(archive, settings).run("stdio")
