"""The drift report (`nbrecall render --report FILE.html`): one static HTML page, the nightly rebuild artefact.

Counts by notebook status, changed cells by class (values, text, figure, error, random; format-only cells are
counted and listed apart, never as drift), the notebooks ranked by how much of their result changed, the most
frequent stale reasons, the modules the render environments lack (in the order to install them, with how many
notebooks each brings back), API errors by library, the stale notebooks, and every changed cell with a link
`/nb/<sha256>#cell-id=<id>` into the viewer and the start of its diff.
"""

from __future__ import annotations

import datetime as _dt
from html import escape
from pathlib import Path

from nbrecall.render.compare import CellComparison, RenderResult
from nbrecall.render.run import summarise

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}td,th{border-bottom:1px solid #ddd;padding:.25rem .6rem;
text-align:left;vertical-align:top}th{background:#f4f4f4}.n{text-align:right}pre{margin:0;font-size:12px;
white-space:pre-wrap;max-height:12em;overflow:auto;background:#fafafa}.fresh{color:#17652b}.changed{color:#8a5a00}
.stale,.failed{color:#a11}.badge{font-weight:600}.format,.random{color:#666}
"""

_CLASS_TEXT = {
    "values": "numbers beyond the tolerance", "text": "other text", "figure": "a figure that looks different",
    "error": "another exception", "random": "unseeded random numbers (cannot reproduce; not drift)",
    "format": "same content, other rendering (not badged)",
}


def report_html(results: list[RenderResult], title: str = "nbrecall drift report", link_base: str = "/nb") -> str:
    s = summarise(results)
    stamp = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
           f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>",
           f"<p>{s['notebooks']} notebooks rendered; generated {stamp}.</p>",
           "<h2>Notebooks by status</h2><table><tr><th>status</th><th class=n>notebooks</th></tr>"]
    for status, count in s["status"].items():
        out.append(f"<tr><td class='badge {status}'>{status}</td><td class=n>{count}</td></tr>")
    out.append("</table><h2>Cells by status</h2><table><tr><th>status</th><th class=n>cells</th></tr>")
    for status in ("same", "changed", "failed", "new"):
        out.append(f"<tr><td class='badge {status}'>{status}</td><td class=n>{s['cells'].get(status, 0)}</td></tr>")
    out.append("</table><h2>Changed cells by class</h2><table><tr><th>class</th><th class=n>cells</th>"
               "<th>what it means</th></tr>")
    for name, count in s["changes"].items():
        out.append(f"<tr><td class='badge {name}'>{name}</td><td class=n>{count}</td>"
                   f"<td>{escape(_CLASS_TEXT[name])}</td></tr>")
    out.append("</table>")
    ranking = s["ranking"]
    out.append(f"<h2>Notebooks by how much of the result changed ({len(ranking)})</h2><table><tr><th>notebook</th>"
               "<th class=n>changed cells</th><th class=n>share of compared cells</th><th>classes</th></tr>")
    for row in ranking:
        classes = ", ".join(f"{k} {v}" for k, v in row["classes"].items())
        out.append(f"<tr><td><a href='{escape(link_base)}/{escape(row['sha256'])}'>{escape(row['path'])}</a></td>"
                   f"<td class=n>{row['changed']} of {row['compared']}</td><td class=n>{row['share']:.0%}</td>"
                   f"<td>{escape(classes)}</td></tr>")
    out.append("</table><h2>Top failure reasons</h2><table><tr><th>reason</th><th class=n>notebooks</th></tr>")
    for reason, count in s["reasons"][:15]:
        out.append(f"<tr><td>{escape(reason)}</td><td class=n>{count}</td></tr>")
    out.append("</table>")
    out.append("<h2>Missing modules</h2>")
    if not s["missing_modules"]:
        out.append("<p>No notebook failed on a module its render environment lacks.</p>")
    for env, modules in sorted(s["missing_modules"].items()):
        out.append(f"<p>Environment <b>{escape(env)}</b>, in the order to install them (each brings back the "
                   "notebooks whose every missing module is then installed):</p><table><tr><th>module</th>"
                   "<th class=n>needed by</th><th class=n>brings back</th></tr>")
        for m in modules:
            out.append(f"<tr><td>{escape(m['module'])}</td><td class=n>{m['needed_by']}</td>"
                       f"<td class=n>{m['brings_back']}</td></tr>")
        out.append("</table>")
    out.append("<h2>API errors by library</h2><table><tr><th>library</th><th class=n>notebooks</th>"
               "<th>examples</th></tr>")
    for row in s["api_errors"]:
        examples = "<br>".join(escape(e) for e in row["examples"])
        out.append(f"<tr><td>{escape(row['library'])}</td><td class=n>{row['notebooks']}</td><td>{examples}</td></tr>")
    out.append("</table>")

    stale = sorted((r for r in results if r.status == "stale"), key=lambda r: (r.reason, r.path))
    out.append(f"<h2>Stale notebooks ({len(stale)})</h2><table><tr><th>notebook</th><th>reason</th>"
               "<th>first failing cell</th></tr>")
    for r in stale:
        failed = next((c for c in r.cells if c.status == "failed"), None)
        link = _link(link_base, r, failed.id if failed else None)
        detail = escape(failed.detail[:300]) if failed else escape("; ".join(r.notes)[:300])
        out.append(f"<tr><td><a href='{link}'>{escape(r.path)}</a></td><td>{escape(r.reason)}</td>"
                   f"<td><pre>{detail}</pre></td></tr>")
    out.append("</table>")

    changed = [(r, c) for r in results for c in r.cells if c.status == "changed"]
    order = {name: i for i, name in enumerate(("error", "values", "figure", "text", "random", ""))}
    out.append(f"<h2>Changed cells ({len(changed)})</h2><table><tr><th>notebook</th><th>cell</th><th>class</th>"
               "<th>diff (normalised outputs)</th></tr>")
    for r, c in sorted(changed, key=lambda rc: (order.get(rc[1].change, 9), rc[0].path, rc[1].index)):
        out.append(_cell_row(link_base, r, c))
    out.append("</table>")
    formatted = [(r, c) for r in results for c in r.cells if c.change == "format"]
    out.append(f"<details><summary><h2 style='display:inline'>Format only ({len(formatted)} cells)</h2>: same "
               "content in another rendering; not badged</summary><table><tr><th>notebook</th><th>cell</th>"
               "<th>class</th><th>what differs</th></tr>")
    for r, c in sorted(formatted, key=lambda rc: (rc[0].path, rc[1].index)):
        out.append(_cell_row(link_base, r, c))
    out.append("</table></details></body></html>")
    return "\n".join(out)


def _cell_row(link_base: str, r: RenderResult, c: CellComparison) -> str:
    return (f"<tr><td>{escape(r.path)}</td><td><a href='{_link(link_base, r, c.id)}'>#{c.index} "
            f"({escape(c.id)})</a></td><td class='badge {escape(c.change)}'>{escape(c.change)}</td>"
            f"<td><pre>{escape(c.detail)}</pre></td></tr>")


def _link(base: str, result: RenderResult, cell_id: str | None) -> str:
    link = f"{base}/{escape(result.sha256)}"
    return f"{link}#cell-id={escape(cell_id)}" if cell_id else link


def write_report(results: list[RenderResult], path: Path, **kwargs: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_html(results, **kwargs), encoding="utf-8")
    return path
