"""`nbrecall status`: what the index holds (counts, embedding progress, figures, families, renders, links out of the
roots, what the last run kept although it could not see it) and its quarantined files, as tables or as one JSON
object."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from nbrecall.backends import describe
from nbrecall.cli.common import ConfigOpt, IndexOpt, StoreOpt, _console, _index_faults, _settings, err
from nbrecall.config import Settings

if TYPE_CHECKING:
    from nbrecall.protocols import Manifest


QUARANTINE_SHOWN = 10  # quarantined files `status` lists without --quarantined
ROOT_LOOK_SECONDS = 2.0  # how long `status` waits for an indexed root to answer


def roots_present(roots: list[str], timeout: float = ROOT_LOOK_SECONDS) -> dict[str, bool | None]:
    """Whether each root is there: True, False, or None when it does not answer within `timeout` seconds. A share
    whose server is down (a hard NFS or SMB mount) blocks `os.path.exists` for minutes, and `status` must still say
    what the index holds; each look runs in a daemon thread, all at once, and a look still blocked is left behind."""
    found: dict[str, bool] = {}

    def look(root: str) -> None:
        found[root] = os.path.exists(root)

    threads = [threading.Thread(target=look, args=(root,), daemon=True) for root in roots]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return {root: found.get(root) for root in roots}


def status(
    index_dir: IndexOpt = None,
    config: ConfigOpt = None,
    store: StoreOpt = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="One JSON object for scripts and monitors: every count, the embedding "
                     "progress, renders, each quarantined file with its reason, and what the last run kept."),
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
        roots = manifest.roots()
    present = roots_present([r.root for r in roots])
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
                    "outside_links": links, "figures": figures, "kept_by_last_run": last.get("kept") or [],
                    "roots": [{**asdict(r), "present": present[r.root]} for r in roots]}
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
    if len(roots) > 1 or not all(present.values()):
        # Where the files came from: a root indexed long ago, a share mounted elsewhere now (`nbrecall forget`)
        rt = Table(title="roots")
        for name in ("root", "files", "notebooks", "quarantined", "here"):
            rt.add_column(name, justify="left" if name in ("root", "here") else "right")
        for held in roots:
            rt.add_row(escape(held.root), f"{held.files:,}", f"{held.notebooks:,}", f"{held.quarantined:,}",
                       _here(present[held.root]))
        out.print(rt)
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
    for note in last.get("kept") or []:  # an empty root, a folder not listed, a file not read: kept as it was
        out.print(f"[yellow]kept by the last run:[/yellow] {escape(str(note))}", soft_wrap=True)
    quarantined = manifest.contents("quarantined")
    if quarantined:
        # The first few files in a table, the rest counted: 143 rows of Rich table took ~0.3 s of a 41k `status`.
        several = len(roots) > 1  # then a path is named with its root: `a.ipynb` may be in each
        files = [(os.path.join(root, rel) if several else rel, rec.reason) for rec in quarantined
                 for root, rel in manifest.paths_of(rec.sha256) or [(rec.root, rec.rel)]]
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


def _here(present: bool | None) -> str:
    if present is None:
        return f"[yellow]not answering[/yellow] (no reply in {ROOT_LOOK_SECONDS:g} s: a share that is down?)"
    return "yes" if present else "[yellow]missing[/yellow] (nbrecall forget?)"


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
