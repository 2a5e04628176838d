"""`nbrecall search`: the search itself, through a running `nbrecall serve` when there is one, and the results as a
person reads them (grouped by notebook, the query's words highlighted) or as the JSON contract."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nbrecall.cli.common import (
    AuthorOpt,
    ConfigOpt,
    DeprecatedOpt,
    IndexOpt,
    ProjectOpt,
    StoreOpt,
    TagOpt,
    VersionsOpt,
    YearOpt,
    _console,
    _filters,
    _index_faults,
    _local_server,
    _open_archive,
    _refuse_empty,
    _settings,
    err,
)
from nbrecall.config import Settings

if TYPE_CHECKING:
    from nbrecall.protocols import Manifest
    from nbrecall.search.retrieve import SearchResult


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

    from nbrecall.index.terms import has_terms

    if query != "-":
        _refuse_empty(query, "give some words to look for ('-' reads questions from stdin)")
    settings = _settings(config, index_dir, store)
    queries = [line.strip() for line in sys.stdin if line.strip()] if query == "-" else [query]
    for text in (q for q in queries if not has_terms(q)):  # stdin: such a line is skipped, the others answered
        err.print(f"skipped a question without words or numbers: {text!r}", soft_wrap=True, markup=False)
    queries = [q for q in queries if has_terms(q)]
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
