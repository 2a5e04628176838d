"""Write the bundled sample archive `samples/archive/` (a fictional engineering firm's notebook share).

Run from anywhere with the project venv:

    .venv/bin/python samples/make_samples.py

The script is deterministic: no clocks, no random ids, no network. Re-running it rewrites the same bytes
(PNG bytes depend on the local zlib build; every other byte is fixed by the code below).

The notebooks are not executed by Jupyter. Their outputs are produced here by running the cells' own
code (with a tiny in-process "kernel", `Kernel` below) wherever that is possible without a share drive or
matplotlib, so a re-execution in a real kernel reproduces the numbers. Outputs that cannot be produced that
way (shell escapes, `%%time`, figures) are written by hand and kept consistent with the code.

Layout written (see samples/README.md for what each file exercises):

    archive/projects/2017/17-042/ballast_distribution.ipynb   nbformat 4.5, cell ids, list sources
    archive/projects/2017/17-042/inputs/tanks.csv
    archive/projects/2018/18-007/mooring_loads.ipynb          nbformat 4.4, no ids, list sources
    archive/projects/2019/19-113/pile_capacity.ipynb          nbformat 4.5, string sources, error, reruns
    archive/projects/2014/14-003/stability_check.ipynb        nbformat 3 (worksheets, heading, pyout, pyerr)
    archive/projects/2016/16-021/old_coefficients.ipynb       nbformat 4.2, notebook tag "deprecated"
    archive/reference/glossary_hydrostatics.ipynb             nbformat 4.5, markdown heavy, data: URI image
    archive/scratch/broken.ipynb                              truncated JSON (must be quarantined)
"""

from __future__ import annotations

import ast
import base64
import contextlib
import hashlib
import inspect
import io
import json
import keyword
import re
import shutil
import struct
import sys
import uuid
import zlib
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
from nbformat import v4

HERE = Path(__file__).resolve().parent

# A Jupyter kernel is not a terminal: pandas then shows up to 20 columns and wraps wide frames at 80
# characters. A plain `python` process counts as a terminal (max_columns 0), so set the notebook default.
pd.set_option("display.max_columns", 20)
ARCHIVE = HERE / "archive"


# --------------------------------------------------------------------------------------------------------
# Small helpers: PNG drawing, ids, JSON writing
# --------------------------------------------------------------------------------------------------------


class Canvas:
    """An RGB pixel grid that can be written as a PNG with zlib + struct only."""

    def __init__(self, width: int, height: int, bg: tuple[int, int, int] = (255, 255, 255)) -> None:
        self.w, self.h = width, height
        self.px = [[bg for _ in range(width)] for _ in range(height)]

    def put(self, x: int, y: int, rgb: tuple[int, int, int]) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            self.px[y][x] = rgb

    def rect(self, x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int]) -> None:
        for y in range(min(y0, y1), max(y0, y1) + 1):
            for x in range(min(x0, x1), max(x0, x1) + 1):
                self.put(x, y, rgb)

    def line(self, x0: int, y0: int, x1: int, y1: int, rgb: tuple[int, int, int]) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(steps + 1):
            self.put(round(x0 + (x1 - x0) * i / steps), round(y0 + (y1 - y0) * i / steps), rgb)

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(c for rgb in row for c in rgb) for row in self.px)

        def chunk(tag: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9))
                + chunk(b"IEND", b""))

    def b64(self) -> str:
        return base64.b64encode(self.png()).decode("ascii")


BLACK, GREY, LIGHT = (34, 34, 34), (160, 160, 160), (230, 230, 230)
MPL_BLUE, MPL_ORANGE, MPL_GREEN = (31, 119, 180), (255, 127, 14), (44, 160, 44)


def cell_uuid(*parts: str) -> str:
    """A JupyterLab-looking cell id (uuid4 layout) derived from the given parts, so it never changes."""
    digest = hashlib.sha1("\0".join(parts).encode()).digest()[:16]
    return str(uuid.UUID(bytes=digest, version=4))


def ipython_input_name(count: int, source: str) -> str:
    return f"<ipython-input-{count}-{hashlib.sha1(source.encode()).hexdigest()[:12]}>"


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", newline="\n")


def write_v4(nb: nbformat.NotebookNode, path: Path, list_sources: bool) -> None:
    """Validate and write; list_sources=True is what Jupyter itself writes, False keeps single strings."""
    nbformat.validate(nb)
    if list_sources:
        text = nbformat.writes(nb, version=4)
    else:
        text = json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False)
    write_text(path, text.rstrip("\n") + "\n")


def kernel_py3(version: str) -> dict:
    return {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {
            "codemirror_mode": {"name": "ipython", "version": 3},
            "file_extension": ".py",
            "mimetype": "text/x-python",
            "name": "python",
            "nbconvert_exporter": "python",
            "pygments_lexer": "ipython3",
            "version": version,
        },
    }


def md(text: str, **kw) -> nbformat.NotebookNode:
    return v4.new_markdown_cell(text.strip("\n"), **kw)


# --------------------------------------------------------------------------------------------------------
# A tiny in-process kernel: runs cell code, captures stdout, the last expression and IPython tracebacks
# --------------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""(?P<str>\"\"\".*?\"\"\"|[rRfFbB]?'[^']*'|[rRfFbB]?"[^"]*")|(?P<com>\#.*)"""
                    r"""|(?P<num>\d+\.?\d*(?:[eE][-+]?\d+)?)"""
                    r"""|(?P<name>[A-Za-z_]\w*)|(?P<ws>\s+)|(?P<op>.)""")


def _highlight(line: str, palette: dict[str, str]) -> str:
    """Colour one source line the way IPython's traceback printer does (token by token)."""
    out = []
    for m in _TOKEN.finditer(line):
        kind, tok = m.lastgroup, m.group()
        if kind == "ws":
            out.append(tok)
        elif kind == "name":
            colour = palette["kw"] if keyword.iskeyword(tok) else palette["name"]
            out.append(f"{colour}{tok}\x1b[0m")
        else:
            out.append(f"{palette[kind]}{tok}\x1b[0m")
    return "".join(out)


IPY7 = {"str": "\x1b[0;34m", "com": "\x1b[0;31m", "num": "\x1b[0;36m", "name": "\x1b[0m", "kw": "\x1b[0;32m",
        "op": "\x1b[0;34m"}
IPY2 = {"str": "\x1b[1;33m", "com": "\x1b[1;31m", "num": "\x1b[1;36m", "name": "\x1b[0m", "kw": "\x1b[1;32m",
        "op": "\x1b[1;33m"}


class Kernel:
    """Run cell sources in one namespace, the way a Jupyter kernel would, and build nbformat-4 outputs."""

    def __init__(self, style: str = "ipython7", extra: dict | None = None) -> None:
        self.ns: dict = {"__name__": "__main__", **(extra or {})}
        self.sources: dict[str, str] = {}
        self.style = style

    def run(self, source: str, count: int, exec_source: str | None = None) -> list[nbformat.NotebookNode]:
        """Execute; `exec_source` (same line layout) replaces magics / share paths for the local run."""
        filename = ipython_input_name(count, source)
        self.sources[filename] = source
        code = exec_source if exec_source is not None else _strip_magics(source)
        assert code.count("\n") == source.count("\n"), "exec_source must keep the line layout"
        tree = ast.parse(code, filename)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        buf = io.StringIO()
        outputs: list[nbformat.NotebookNode] = []
        result = None
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(tree, filename, "exec"), self.ns)
                if last is not None:
                    result = eval(compile(ast.Expression(last.value), filename, "eval"), self.ns)
        except Exception as exc:  # the notebook shows the error, so do we
            if buf.getvalue():
                outputs.append(v4.new_output("stream", name="stdout", text=buf.getvalue()))
            outputs.append(self._error(exc))
            return outputs
        if buf.getvalue():
            outputs.append(v4.new_output("stream", name="stdout", text=buf.getvalue()))
        if result is not None:
            data = {"text/plain": repr(result)}
            if hasattr(result, "_repr_html_"):
                data["text/html"] = result._repr_html_()
            outputs.append(v4.new_output("execute_result", data=data, execution_count=count))
        return outputs

    def _error(self, exc: BaseException) -> nbformat.NotebookNode:
        ename, evalue = type(exc).__name__, str(exc)
        frames = []
        tb = exc.__traceback__
        while tb is not None:
            fname = tb.tb_frame.f_code.co_filename
            if fname in self.sources:
                frames.append(self._frame(tb, fname))
            tb = tb.tb_next
        if self.style == "ipython7":
            red, dash = "\x1b[0;31m", "\x1b[0;31m"
        else:
            red, dash = "\x1b[1;31m", "\x1b[1;31m"
        header = f"{red}{ename}\x1b[0m" + " " * (75 - len(ename) - 33) + "Traceback (most recent call last)"
        traceback = [f"{dash}{'-' * 75}\x1b[0m", header, *frames, f"{red}{ename}\x1b[0m: {evalue}"]
        return v4.new_output("error", ename=ename, evalue=evalue, traceback=traceback)

    def _frame(self, tb, fname: str) -> str:
        lines = self.sources[fname].split("\n")
        lineno = tb.tb_lineno
        func = tb.tb_frame.f_code.co_name
        args = "" if func == "<module>" else "(" + ", ".join(inspect.getargvalues(tb.tb_frame).args) + ")"
        ipy7 = self.style == "ipython7"
        palette = IPY7 if ipy7 else IPY2
        if ipy7:
            head = f"\x1b[0;32m{fname}\x1b[0m in \x1b[0;36m{func}\x1b[0;34m{args}\x1b[0m\n"
        else:
            head = f"\x1b[1;32m{fname}\x1b[0m in \x1b[0;36m{func}\x1b[1;34m{args or '()'}\x1b[0m\n"
        body = []
        for i in range(max(1, lineno - 2), min(len(lines), lineno + 2) + 1):
            text = lines[i - 1]
            code = _highlight(text, palette) + ("\x1b[0;34m\x1b[0m\x1b[0;34m\x1b[0m\x1b[0m" if ipy7 else "")
            if i == lineno:
                arrow = "-" * (5 - len(str(i))) + "> " + str(i)
                body.append(f"\x1b[0;32m{arrow}\x1b[0;31m {code}\n" if ipy7
                            else f"\x1b[1;32m{arrow}\x1b[1;33m {code}\x1b[0m\n")
            else:
                body.append(f"\x1b[1;32m{i:>7}\x1b[0m {code}\n")
        return head + "".join(body) + "\x1b[0m"


def _strip_magics(source: str) -> str:
    """Blank out IPython-only lines (`%...`, `!...`) so the rest runs as plain Python."""
    return "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.split("\n"))


def code(source: str, count: int | None, outputs=(), **kw) -> nbformat.NotebookNode:
    cell = v4.new_code_cell(source.strip("\n"), execution_count=count, outputs=list(outputs), **kw)
    return cell


# --------------------------------------------------------------------------------------------------------
# 17-042  PSV Nordhav (130 m) — ballast distribution        nbformat 4.5, cell ids, list sources
# --------------------------------------------------------------------------------------------------------

TANKS = [
    # tank, zone, frame_range, capacity_m3, fill_pct, lcg_m (from AP), tcg_m (+ starboard)
    ("APT", "aft", "0-10", 286.4, 100.0, 3.4, 0.0),
    ("WB 1P", "aft", "10-30", 512.0, 98.0, 11.8, -5.2),
    ("WB 1S", "aft", "10-30", 510.7, 97.2, 11.8, 5.2),
    ("WB 2P", "mid", "60-92", 458.6, 100.0, 45.6, -7.9),
    ("WB 2S", "mid", "60-92", 458.6, 100.0, 45.6, 7.9),
    ("AHT P", "mid", "96-112", 210.5, 0.0, 62.4, -10.6),
    ("AHT S", "mid", "96-112", 210.5, 0.0, 62.4, 10.6),
    ("WB 3P", "mid", "112-140", 471.2, 62.0, 75.6, -7.4),
    ("WB 3S", "mid", "112-140", 471.2, 62.0, 75.6, 7.4),
    ("WB 4P", "fwd", "150-176", 398.0, 96.0, 97.8, -5.6),
    ("WB 4S", "fwd", "150-176", 398.0, 95.5, 97.8, 5.6),
    ("FPT", "fwd", "190-208", 254.8, 100.0, 119.1, 0.0),
]


def tanks_csv() -> str:
    cols = "tank,zone,frame_range,capacity_m3,fill_pct,lcg_m,tcg_m"
    rows = [",".join(str(v) for v in row) for row in TANKS]
    return "\n".join([cols, *rows]) + "\n"


def ballast_figure() -> str:
    """64x48 bar chart of the tank volumes against LCG, drawn like matplotlib's default style."""
    c = Canvas(64, 48)
    c.line(8, 4, 8, 40, BLACK)  # y axis
    c.line(8, 40, 61, 40, BLACK)  # x axis
    for x in range(8, 62, 13):
        c.put(x, 41, BLACK)
    for y in range(40, 3, -9):
        c.put(7, y, BLACK)
    for x0, x1 in ((20, 44),):  # title placeholder strokes
        c.line(x0, 1, x1, 1, GREY)
    vmax = max(cap * fill / 100 for _, _, _, cap, fill, _, _ in TANKS)
    offsets: dict[float, int] = {}
    for _, _, _, cap, fill, lcg, _ in TANKS:
        vol = cap * fill / 100
        if vol == 0:
            continue
        x = 10 + round(lcg / 124.8 * 48)
        shift = offsets.get(lcg, 0)
        offsets[lcg] = shift + 3
        h = round(vol / vmax * 34)
        c.rect(x + shift, 39, x + shift + 1, 39 - h, MPL_BLUE)
    return c.b64()


def ballast_sketch() -> str:
    """A 'pasted screenshot' of the tank plan: hull profile with ballast tanks shaded."""
    c = Canvas(72, 24, (250, 250, 245))
    # hull profile: flat bottom, raked bow, transom stern
    c.line(4, 18, 58, 18, BLACK)
    c.line(58, 18, 68, 6, BLACK)
    c.line(4, 18, 2, 8, BLACK)
    c.line(2, 8, 68, 6, BLACK)
    c.line(10, 6, 10, 2, BLACK)
    c.rect(10, 2, 24, 5, (200, 200, 200))  # accommodation
    c.line(3, 15, 60, 15, GREY)  # tank top
    aft, mid, fwd = (120, 170, 220), (150, 200, 150), (230, 190, 120)
    c.rect(4, 10, 7, 17, aft)  # APT
    c.rect(8, 16, 18, 17, aft)  # WB 1
    c.rect(24, 16, 32, 17, mid)  # WB 2
    c.rect(35, 16, 44, 17, mid)  # WB 3
    c.rect(48, 16, 56, 17, fwd)  # WB 4
    c.rect(61, 10, 65, 14, fwd)  # FPT
    for x in range(6, 66, 6):  # frame ticks
        c.put(x, 20, GREY)
    return c.b64()


def build_ballast() -> nbformat.NotebookNode:
    name = "ballast_distribution"
    unc = r'''tanks = pd.read_csv(r"\\srv-calc-01\projects\2017\17-042\inputs\tanks.csv")'''
    local = f"tanks = pd.read_csv({str(ARCHIVE / 'projects/2017/17-042/inputs/tanks.csv')!r})"
    k = Kernel()

    cells = []
    cells.append(md("""
# PSV Nordhav (130 m) — ballast distribution, departure condition

Project **17-042**, ballast plan for the *PSV Nordhav* (LOA 130.0 m, LPP 124.8 m, B 24.0 m), loading
condition **LC03 "Departure, full consumables, 2,400 t deck cargo"**.

The vessel trims by the head with the deck cargo stowed forward of midships, so the aft ballast tanks are
pressed up to bring her to a trim of about 0.6 m by the stern at departure. This notebook adds up the
ballast water in each tank from the chief mate's sounding report, splits it into aft / midship / forward
groups and finds the centre of gravity of the ballast for the loading computer cross-check.
"""))
    cells.append(md("""
## Tank arrangement

Ballast tanks from the tank capacity plan (doc. 17-042-TCP-001 rev. B). Aft group: aft peak tank (APT) and
double-bottom tanks WB 1P/S, aft of the engine-room forward bulkhead at frame 30. Frame spacing 600 mm,
frame 0 at the aft perpendicular.

![sketch](attachment:sketch.png)
""", attachments={"sketch.png": {"image/png": ballast_sketch()}}))

    src_imports = """
%matplotlib inline
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
"""
    k.run(src_imports.strip("\n"), 1, exec_source="\nimport numpy as np\nimport pandas as pd\n")
    cells.append(code(src_imports, 1))

    src_const = """
LOA = 130.0            # length over all [m]
LPP = 124.8            # length between perpendiculars [m]
BEAM = 24.0            # moulded breadth [m]
FRAME_SPACING = 0.6    # [m], frame 0 at AP
RHO_SW = 1.025         # sea water density [t/m3]
"""
    k.run(src_const.strip("\n"), 2)
    cells.append(code(src_const, 2, metadata={"tags": ["parameters"]}))

    cells.append(md("""
## Tank soundings

Capacities are the 100 % volumes from the tank capacity plan; filling percentages come from the sounding
report of 14 Nov 2017 (ullage converted with the sounding tables, trim-corrected). The anti-heeling tanks
AHT P/S are kept empty at departure. Volume of ballast in each tank:

$$V_i = C_i \\cdot \\frac{f_i}{100}$$
"""))

    src_read = f"""
{unc}
tanks["volume_m3"] = (tanks.capacity_m3 * tanks.fill_pct / 100).round(1)
tanks[["tank", "frame_range", "capacity_m3", "fill_pct", "volume_m3"]]
"""
    outs = k.run(src_read.strip("\n"), 3, exec_source=src_read.strip("\n").replace(unc, local))
    cells.append(code(src_read, 3, outs))

    cells.append(md("""
## Ballast by zone

Zones follow the tank plan: **aft** = frames 0–30 (APT, WB 1P/S), **mid** = frames 60–140 (WB 2, AHT,
WB 3), **fwd** = frames 150–208 (WB 4P/S, FPT). Mass uses sea water at 1.025 t/m³.
"""))

    src_summary = """
summary = (tanks.groupby("zone")
                .agg(tanks=("tank", "count"), capacity_m3=("capacity_m3", "sum"),
                     volume_m3=("volume_m3", "sum"))
                .reindex(["aft", "mid", "fwd"]))
summary["mass_t"] = (summary.volume_m3 * RHO_SW).round(1)
summary
"""
    outs = k.run(src_summary.strip("\n"), 4)
    cells.append(code(src_summary, 4, outs))

    src_print = """
aft = summary.loc["aft", "volume_m3"]
print(f"Total ballast aft: {aft:,.1f} m3")
print(f"Total ballast mid: {summary.loc['mid', 'volume_m3']:,.1f} m3")
print(f"Total ballast fwd: {summary.loc['fwd', 'volume_m3']:,.1f} m3")
"""
    outs = k.run(src_print.strip("\n"), 5)
    assert "Total ballast aft: 1,284.6 m3" in outs[0]["text"], outs
    cells.append(code(src_print, 5, outs, metadata={"tags": ["results"]}))

    src_total = """
total_ballast = round(tanks.volume_m3.sum(), 1)
print("total_ballast =", total_ballast)
print("ballast mass  =", round(total_ballast * RHO_SW, 1), "t")
"""
    outs = k.run(src_total.strip("\n"), 6)
    assert "total_ballast = 3803.0" in outs[0]["text"], outs
    cells.append(code(src_total, 6, outs, metadata={"tags": ["results"]}))

    cells.append(md("""
## Centre of gravity of the ballast

LCG measured from the AP, TCG positive to starboard. The small port list moment from WB 1 and WB 4 being
unequal is within what the anti-heeling system takes out in harbour.
"""))

    src_cg = """
w = tanks.volume_m3 * RHO_SW
lcg = (w * tanks.lcg_m).sum() / w.sum()
tcg = (w * tanks.tcg_m).sum() / w.sum()
print(f"LCG of ballast: {lcg:.2f} m from AP")
print(f"TCG of ballast: {tcg:+.3f} m")
"""
    outs = k.run(src_cg.strip("\n"), 7)
    cells.append(code(src_cg, 7, outs))

    cells.append(md("""
## Distribution plot

Volume per tank against its LCG; port and starboard tanks side by side.
"""))

    src_plot = """
fig = plt.figure(figsize=(8, 3))
filled = tanks[tanks.volume_m3 > 0]
plt.bar(filled.lcg_m, filled.volume_m3, width=2.5)
plt.title("Ballast distribution along the hull")
plt.xlabel("Distance from AP [m]")
plt.ylabel("Ballast volume [m3]")
plt.xlim(0, LPP)
plt.show()
"""
    fig = v4.new_output("display_data", data={"image/png": ballast_figure(),
                                               "text/plain": "<Figure size 800x300 with 1 Axes>"},
                        metadata={"needs_background": "light"})
    cells.append(code(src_plot, 8, [fig], metadata={"tags": ["figure"]}))

    cells.append(md("""
## Notes

* Aft tanks pressed up (APT 100 %, WB 1P/S ≈ 97–98 %) — these give the stern trim; do not discharge
  before the deck cargo is landed.
* WB 3P/S at 62 % are slack: include their free surface moments in the stability booklet check
  (see the hydrostatics glossary in `reference/`).
* Results entered in the loading computer as LC03; difference in ballast mass < 0.5 t.
"""))

    src_export = """
tanks.to_csv("outputs/17-042_LC03_ballast.csv", index=False)
"""
    cells.append(code(src_export, 9))

    for i, cell in enumerate(cells):
        cell["id"] = cell_uuid(name, str(i))
    nb = v4.new_notebook(cells=cells)
    nb.metadata = {
        "authors": [{"name": "Ingrid Solberg"}, {"name": "Tomas Vik"}],
        **kernel_py3("3.6.3"),
        "toc": {"number_sections": False},
    }
    return nb


# --------------------------------------------------------------------------------------------------------
# 18-007  FSO Solbris — spread mooring line loads           nbformat 4.4, no ids, list sources
# --------------------------------------------------------------------------------------------------------

METOCEAN = {
    "direction": ["N", "NE", "E", "SE", "S", "SW", "W", "NW"],
    "Hs_m": [14.1, 10.6, 8.9, 10.2, 13.4, 15.8, 15.1, 14.6],
    "Tp_s": [16.8, 14.9, 13.7, 14.6, 16.4, 17.6, 17.2, 17.0],
    "U10_m_s": [33.5, 29.0, 26.5, 28.8, 32.7, 36.1, 35.2, 34.4],
    "Uc_m_s": [0.85, 0.70, 0.60, 0.75, 0.95, 1.05, 1.00, 0.90],
}


def build_mooring() -> nbformat.NotebookNode:
    k = Kernel()
    k.ns["_METOCEAN"] = METOCEAN
    cells = []
    cells.append(md("""
# 18-007 — Spread mooring analysis, FSO *Solbris*

Quasi-static line tensions for the 8-point spread mooring of the FSO *Solbris* at the Kvitfjell location,
water depth 340 m. Four bundles of two studless R4 chain lines; fairleads at 15 m below the waterline.

This is the early-phase check that sizes the chain before the coupled time-domain analysis: each line is
treated as an inextensible catenary with a grounded part, the vessel is offset in the worst direction and
the resulting top tensions are checked against the ULS criterion.
"""))
    cells.append(md("""
## Design basis

* DNV-OS-E301 *Position mooring*, ULS, consequence class 1: partial factors γ_mean = 1.10, γ_dyn = 1.50.
* 100-year metocean conditions from the met-ocean design basis (MDB rev. 2).
* Governing direction: 100-year storm from SW (Hs 15.8 m), vessel offset towards 045°.
* Mean offset 25.0 m (wind + current + mean drift); wave-frequency offset 9.4 m added for the maximum.
* Characteristic capacity S_C = 0.95 · MBL.
"""))

    src = """
import numpy as np
import pandas as pd
"""
    k.run(src.strip("\n"), 1)
    cells.append(code(src, 1))

    src = "!pip list | grep pandas"
    cells.append(code(src, 2, [v4.new_output("stream", name="stdout",
                                             text="pandas                             0.23.0     \n")]))

    src = """
metocean = pd.read_csv("/mnt/share/projects/2018/18-007/metocean/mdb_rev2_100yr.csv")
metocean
"""
    share_csv = 'pd.read_csv("/mnt/share/projects/2018/18-007/metocean/mdb_rev2_100yr.csv")'
    exec_src = src.strip("\n").replace(share_csv, "pd.DataFrame(_METOCEAN)")
    cells.append(code(src, 3, k.run(src.strip("\n"), 3, exec_source=exec_src)))

    cells.append(md("""
## Mooring line properties

Studless chain, grade R4, nominal diameter 84 mm, all-chain lines of 1,450 m. Minimum breaking load from
the class formula MBL = 0.0274 d² (44 − 0.08 d) kN (d in mm); submerged weight from a mass of
0.0199 d² kg/m and a steel buoyancy factor of 0.87.
"""))

    src = """
d = 84.0                                    # nominal chain diameter [mm]
MBL = 0.0274 * d**2 * (44 - 0.08 * d)       # [kN], R4 studless
w = 0.0199 * d**2 * 9.81 * 0.87 / 1000      # submerged weight [kN/m]
L = 1450.0                                  # line length [m]
h = 340.0 - 15.0                            # fairlead height above seabed [m]
S_C = 0.95 * MBL
print(f"MBL = {MBL:.1f} kN   S_C = {S_C:.1f} kN   w = {w:.3f} kN/m")
"""
    cells.append(code(src, 4, k.run(src.strip("\n"), 4)))

    src = """
lines = pd.DataFrame({
    "line": [f"L{i}" for i in range(1, 9)],
    "heading_deg": [40, 50, 130, 140, 220, 230, 310, 320],
    "X0_m": [1356.6, 1356.6, 1351.2, 1351.2, 1362.0, 1362.0, 1351.2, 1351.2],
})
lines
"""
    cells.append(code(src, 5, k.run(src.strip("\n"), 5)))

    cells.append(md("""
## Quasi-static catenary solution

For a line with a grounded part the suspended length is s = √(h² + 2 h a) with catenary parameter
a = H / w, and the horizontal distance from fairlead to anchor is

X(H) = (L − s) + a · asinh(s / a).

For each line and vessel offset the horizontal tension H is found by Newton iteration on X(H) = X₀ − Δx,
where Δx = offset · cos(line heading − offset direction). Top tension T = H + w h.
"""))

    src = """
def catenary_x(H, w, h, L):
    \"\"\"Horizontal fairlead-anchor distance of an inextensible catenary with a grounded part.\"\"\"
    a = H / w
    s = np.sqrt(h**2 + 2 * h * a)
    if s >= L:
        raise ValueError("line fully suspended - anchor uplift")
    return (L - s) + a * np.arcsinh(s / a)


def solve_H(X, w, h, L, H0, tol=1e-3, max_it=20):
    \"\"\"Newton iteration for the horizontal tension H [kN]; prints the iteration log.\"\"\"
    H = H0
    for it in range(1, max_it + 1):
        f = catenary_x(H, w, h, L) - X
        print(f"    it {it:2d}   H = {H:8.1f} kN   dX = {f:+9.4f} m")
        if abs(f) < tol:
            return H, it
        dfdH = (catenary_x(H + 1.0, w, h, L) - catenary_x(H, w, h, L)) / 1.0
        H = max(H - f / dfdH, 0.5 * H)
    raise RuntimeError(f"no convergence after {max_it} iterations")
"""
    cells.append(code(src, 6, k.run(src.strip("\n"), 6)))

    src = """
%%time
GREEN, YELLOW, RESET = "\\x1b[32m", "\\x1b[33m", "\\x1b[0m"
cases = {"intact": 0.0, "mean": 25.0, "max": 34.4}   # offset towards 045 deg (storm from SW) [m]
n, k, rows = len(cases) * len(lines), 0, []
for case, offset in cases.items():
    print(f"== case {case}: offset {offset:.1f} m towards 045 deg ==")
    H = 900.0
    for _, ln in lines.iterrows():
        k += 1
        print(f"\\r[{'#' * (20 * k // n):<20}] {k:2d}/{n}", end="\\r")
        X = ln.X0_m - offset * np.cos(np.radians(ln.heading_deg - 45))
        print(f"  {ln.line} (hdg {ln.heading_deg:03d})  X = {X:7.1f} m")
        H, its = solve_H(X, w, h, L, H0=H)
        T = H + w * h
        grounded = L - np.sqrt(h**2 + 2 * h * H / w)
        flag = f"  {YELLOW}WARNING grounded length {grounded:.0f} m < 100 m{RESET}" if grounded < 100 else ""
        print(f"  {GREEN}converged{RESET} in {its} it:  H = {H:7.1f} kN  T = {T:7.1f} kN{flag}")
        rows.append({"case": case, "line": ln.line, "H_kN": round(H, 1), "T_kN": round(T, 1),
                     "grounded_m": round(grounded, 1)})
res = pd.DataFrame(rows)
"""
    outs = k.run(src.strip("\n"), 7)
    n_lines = outs[0]["text"].count("\n")
    assert n_lines >= 60, n_lines
    outs[0]["text"] += "CPU times: user 41.7 ms, sys: 4.12 ms, total: 45.8 ms\nWall time: 44.3 ms\n"
    cells.append(code(src, 7, outs, metadata={"scrolled": True}))

    src = """
res.pivot(index="line", columns="case", values="T_kN")[["intact", "mean", "max"]]
"""
    cells.append(code(src, 8, k.run(src.strip("\n"), 8)))

    cells.append(md("""
## ULS check

Design tension T_d = γ_mean · T_mean + γ_dyn · T_dyn with T_mean the tension at the mean offset and
T_dyn = T_max − T_mean the wave-frequency part. Utilisation u = T_d / S_C must stay below 1.0.
"""))

    src = """
T = res.pivot(index="line", columns="case", values="T_kN")
uls = pd.DataFrame({"T_mean_kN": T["mean"], "T_dyn_kN": (T["max"] - T["mean"]).clip(lower=0).round(1)})
uls["T_d_kN"] = (1.10 * uls.T_mean_kN + 1.50 * uls.T_dyn_kN).round(1)
uls["utilisation"] = (uls.T_d_kN / S_C).round(3)
print(f"max utilisation {uls.utilisation.max():.3f} in line {uls.utilisation.idxmax()}")
uls
"""
    cells.append(code(src, 9, k.run(src.strip("\n"), 9)))

    cells.append(v4.new_raw_cell("""Summary for report 18-007-RPT-002 rev. A, section 5.3:
quasi-static ULS utilisation of the 84 mm R4 chain below 0.70 in all lines; detailed
coupled analysis to follow in phase 2.""", metadata={"raw_mimetype": "text/plain"}))

    cells.append(md("""
## Conclusions

* 84 mm R4 studless chain is adequate for the quasi-static ULS check with margin; the leeward lines
  (L1, L2) slacken but keep more than 100 m of chain on the seabed, so no anchor uplift.
* The most loaded lines are the windward bundle L5/L6 (headings 220–230°).
* Proceed with the coupled analysis (18-007 phase 2) using these pretensions as the intact case.
"""))

    nb = v4.new_notebook(cells=cells)
    nb.nbformat_minor = 4
    for cell in nb.cells:
        cell.pop("id", None)
    nb.metadata = {"authors": [{"name": "Marius Haugland"}], **kernel_py3("3.6.5")}
    return nb


# --------------------------------------------------------------------------------------------------------
# 19-113  Berth 4 quay extension — pile axial capacity      nbformat 4.5, string sources, error, out of order
# --------------------------------------------------------------------------------------------------------


def build_pile() -> nbformat.NotebookNode:
    name = "pile_capacity"
    k = Kernel()
    cells: list = []
    cells.append(md("""
# 19-113 — Berth 4 quay extension: axial capacity of the open-ended steel tube piles

Axial compression capacity of the Ø1219 mm open-ended steel pipe piles supporting the relieving platform of
the Berth 4 extension, from borehole BH-04 and CPT-04/CPT-05. Method: API RP 2GEO (2011) — α-method for
shaft friction in clay, β-method in sand, plugged end bearing N_c = 9 in clay at the tip.
"""))
    cells.append(md("""
## Soil profile (BH-04)

Layers with submerged unit weight γ', undrained shear strength s_u for clay layers and the 2GEO shaft
friction factor β with limiting unit friction for the sand layers. Seabed at −14.5 m CD.
"""))

    src_a = "import numpy as np\nimport pandas as pd"
    src_b = """soil = pd.DataFrame({
    "layer": [1, 2, 3, 4, 5],
    "soil": ["soft CLAY", "medium dense SAND", "firm CLAY", "dense SAND", "stiff CLAY"],
    "top_m": [0.0, 4.5, 12.0, 21.0, 30.0],
    "bottom_m": [4.5, 12.0, 21.0, 30.0, 42.0],
    "gamma_kN_m3": [6.5, 9.0, 7.5, 10.0, 8.5],
    "su_kPa": [18.0, np.nan, 55.0, np.nan, 140.0],
    "beta": [np.nan, 0.37, np.nan, 0.46, np.nan],
    "fs_lim_kPa": [np.nan, 81.0, np.nan, 96.0, np.nan],
})
soil"""
    src_c_old = """pile = {
    "D": 1.219,       # outside diameter [m]
    "t": 0.0254,      # wall thickness [m]
    "L_emb": 38.0,    # embedded length below seabed [m]
    "steel": "S355",
}
A_steel = np.pi / 4 * (pile["D"]**2 - (pile["D"] - 2 * pile["t"])**2)
print(f"A_steel = {A_steel:.4f} m2")"""
    src_c = src_c_old.replace("0.0254,      # wall thickness [m]",
                              "0.0286,      # wall thickness [m], rev. B")
    src_d = """def unit_shaft_friction(soil):
    \"\"\"API RP 2GEO unit shaft friction at the middle of each layer [kPa].\"\"\"
    df = soil.copy()
    df["thickness_m"] = df.bottom_m - df.top_m
    sigma_top = (df.gamma_kN_m3 * df.thickness_m).cumsum() - df.gamma_kN_m3 * df.thickness_m
    df["sigma_v_kPa"] = (sigma_top + df.gamma_kN_m3 * df.thickness_m / 2).round(1)
    psi = df.su_kPa / df.sigma_v_kPa
    alpha = np.where(psi <= 1.0, 0.5 * psi**-0.5, 0.5 * psi**-0.25).clip(max=1.0)
    clay = np.round(alpha * df.su_kPa, 1)
    sand = np.minimum(df.beta * df.sigma_v_kPa, df.fs_lim_kPa).round(1)
    df["f_s_kPa"] = np.where(df.su_kPa.notna(), clay, sand)
    return df[["layer", "soil", "thickness_m", "sigma_v_kPa", "f_s_kPa"]]

fs = unit_shaft_friction(soil)
fs"""
    src_e = """# LRFD check to ISO 19901-4 -- TODO: confirm resistance factors with client before using
gamma_R_shaft, gamma_R_base = 1.25, 1.25
Q_d = Q_s / gamma_R_shaft + Q_b / gamma_R_base
print(f"Q_d = {Q_d:,.0f} kN")"""
    src_f = """def base_area(p):
    return np.pi * p["pile_diameter"]**2 / 4

def end_bearing(p, su_tip, Nc=9.0):
    \"\"\"Plugged end bearing in clay, q_b = Nc * su (API RP 2GEO 8.1.4).\"\"\"
    return Nc * su_tip * base_area(p)

Q_b = end_bearing(pile, su_tip=soil.su_kPa.iloc[-1])
Q_b"""
    src_g = """def base_area(p):
    return np.pi * p["D"]**2 / 4

Q_b = end_bearing(pile, su_tip=soil.su_kPa.iloc[-1])
embedded = fs.thickness_m.clip(upper=np.maximum(pile["L_emb"] - soil.top_m, 0))
Q_s = (fs.f_s_kPa * np.pi * pile["D"] * embedded).sum()
print(f"Q_s = {Q_s:,.0f} kN  (shaft, outside only)")
print(f"Q_b = {Q_b:,.0f} kN  (plugged base, su = {soil.su_kPa.iloc[-1]:.0f} kPa)")"""
    src_h = """Q_ult = Q_s + Q_b
W_pile = A_steel * pile["L_emb"] * (78.5 - 10.05)     # submerged self weight [kN]
FS = 2.0                                              # API WSD, design environmental condition
Q_all = Q_ult / FS - W_pile
N_design = 4350.0                                     # max compression from the frame analysis [kN]
print(f"Q_ult = {Q_ult:,.0f} kN")
print(f"W_pile = {W_pile:,.0f} kN")
print(f"Q_allow = {Q_all:,.0f} kN  vs  N_design = {N_design:,.0f} kN  ->  "
      f"{'OK' if Q_all >= N_design else 'NOT OK'} (utilisation {N_design / Q_all:.2f})")"""

    # Run in the order the engineer did: A1 B2 D3 C4(old t) F5(error) G6 C7(rev. B wall) H8.
    out: dict[str, list] = {}
    out["a"] = k.run(src_a, 1)
    out["b"] = k.run(src_b, 2)
    out["d"] = k.run(src_d, 3)
    k.run(src_c_old, 4)
    out["f"] = k.run(src_f, 5)
    assert out["f"][-1]["output_type"] == "error" and out["f"][-1]["evalue"] == "'pile_diameter'"
    out["g"] = k.run(src_g, 6)
    out["c"] = k.run(src_c, 7)
    out["h"] = k.run(src_h, 8)
    assert "->  OK" in out["h"][0]["text"], out["h"]

    cells.append(code(src_a, 1, out["a"]))
    cells.append(code(src_b, 2, out["b"]))
    cells.append(md("""
## Pile geometry

Ø1219 × 28.6 mm (rev. B, was 25.4 mm in rev. A), S355, embedded 38.0 m below seabed — tip in the stiff
clay (layer 5).
"""))
    cells.append(code(src_c, 7, out["c"], metadata={"tags": ["parameters"]}))
    cells.append(md("""
## Unit shaft friction

Clay: f = α s_u with ψ = s_u / σ'_v, α = 0.5 ψ^−0.5 for ψ ≤ 1 and 0.5 ψ^−0.25 for ψ > 1, α ≤ 1.
Sand: f = β σ'_v, limited to f_lim. Values at the middle of each layer.
"""))
    cells.append(code(src_d, 3, out["d"]))
    cells.append(code(src_e, None, [], metadata={"tags": ["todo"]}))
    cells.append(md("""
## End bearing

The pile is assumed to plug in the stiff clay at the tip (static loading), so the end bearing acts on the
full base area: Q_b = 9 s_u · π D² / 4.
"""))
    cells.append(code(src_f, 5, out["f"]))
    cells.append(code(src_g, 6, out["g"]))
    cells.append(md("""
## Summary

Ultimate capacity, submerged self weight of the pile and allowable compression with FS = 2.0 against
the design compression from the frame analysis (load case ULS-7, ship impact + live load).
"""))
    cells.append(code(src_h, 8, out["h"]))
    cells.append(md("""
## Open points

1. LRFD cross-check (cell above the end-bearing section) not run yet — resistance factors to be agreed.
2. Confirm plugging with the CPT-05 tip resistance before the drivability study.
3. Set-up in clay not included (conservative for the installation check, not for the capacity).
"""))

    for i, cell in enumerate(cells):
        cell["id"] = cell_uuid(name, str(i))
    nb = v4.new_notebook(cells=cells)
    nb.metadata = kernel_py3("3.7.3")
    return nb


# --------------------------------------------------------------------------------------------------------
# 14-003  Survey vessel Havlys — intact stability check     nbformat 3, written by hand as JSON
# --------------------------------------------------------------------------------------------------------

WEIGHTS = {
    "item": ["Lightship", "Fuel oil", "Fresh water", "Lube oil & misc.", "Crew & stores",
             "Survey equipment (deck)", "ROV + LARS"],
    "mass_t": [1012.0, 142.0, 48.5, 6.3, 12.0, 38.0, 14.5],
    "vcg_m": [5.12, 1.35, 2.10, 1.90, 8.40, 9.60, 8.90],
    "fsm_tm": [0.0, 96.0, 31.2, 2.1, 0.0, 0.0, 0.0],
}


def v3_lines(text: str) -> list[str]:
    return text.splitlines(True)


def gz_figure(heel: np.ndarray, gz: np.ndarray) -> str:
    c = Canvas(64, 48)
    c.line(8, 4, 8, 40, BLACK)
    c.line(8, 40, 61, 40, BLACK)
    gmax = float(gz.max())
    pts = [(8 + round(float(a) / 60 * 52), 40 - round(float(g) / gmax * 32))
           for a, g in zip(heel, gz, strict=True)]
    c.line(8 + round(30 / 60 * 52), 39, 8 + round(30 / 60 * 52), 8, LIGHT)  # 30 deg
    c.line(9, 40 - round(0.2 / gmax * 32), 61, 40 - round(0.2 / gmax * 32), GREY)  # 0.20 m criterion
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        c.line(x0, y0, x1, y1, MPL_BLUE)
    return c.b64()


def old_html(df: pd.DataFrame) -> str:
    """pandas 0.13-era _repr_html_: a scrolling div around the table."""
    return ('<div style="max-height:1000px;max-width:1500px;overflow:auto;">\n' + df.to_html() + "\n</div>")


def build_stability() -> dict:
    k = Kernel(style="ipython2", extra={"_WEIGHTS": WEIGHTS})
    cells: list[dict] = []
    counter = [0]

    def heading(level: int, text: str) -> None:
        cells.append({"cell_type": "heading", "level": level, "metadata": {}, "source": v3_lines(text)})

    def markdown(text: str) -> None:
        cells.append({"cell_type": "markdown", "metadata": {}, "source": v3_lines(text.strip("\n"))})

    def v3_out(o: nbformat.NotebookNode, count: int) -> dict:
        if o.output_type == "stream":
            return {"output_type": "stream", "stream": o.name, "text": v3_lines(o.text)}
        if o.output_type == "error":
            return {"output_type": "pyerr", "ename": o.ename, "evalue": o.evalue, "traceback": o.traceback}
        return {"output_type": "pyout", "prompt_number": count, "metadata": {},
                "text": v3_lines(o.data["text/plain"])}

    def codecell(src: str, exec_source: str | None = None, outputs: list | None = None,
                 html: str | None = None) -> None:
        """Run the cell (py2-era code that also runs on py3) and store it in v3 shape."""
        counter[0] += 1
        n = counter[0]
        src = src.strip("\n")
        outs = [v3_out(o, n) for o in k.run(src, n, exec_source)]
        if outputs is not None:
            outs = outputs
        if html is not None:
            for o in outs:
                if o["output_type"] == "pyout":
                    o["html"] = v3_lines(old_html(eval(html, k.ns)))
        cells.append({"cell_type": "code", "collapsed": False, "input": v3_lines(src), "language": "python",
                      "metadata": {}, "outputs": outs, "prompt_number": n})

    heading(1, "Intact stability check \u2014 MV Havlys after lengthening")
    markdown("""
Project **14-003**. The survey vessel *Havlys* was lengthened by a 9.6 m midbody (frames 41–57) in the
spring yard period. This notebook repeats the intact stability check of the stability booklet for the
worst departure condition with the new lightship from the inclining test of 3 March 2014.

Criteria: IMO Intact Stability Code 2008, part A, 2.2 (general criteria).
""")
    heading(2, "Loading condition: departure, 100 % consumables")
    codecell("""
from __future__ import division
%pylab inline
import pandas as pd
""", outputs=[{"output_type": "stream", "stream": "stdout",
               "text": ["Populating the interactive namespace from numpy and matplotlib\n"]}])
    k.ns["np"] = np  # what %pylab puts in the namespace (among much else)
    src = "weights = pd.read_excel('LC2_departure.xlsx', 'weights')   # booklet sheet LC2\nweights"
    codecell(src, exec_source="weights = pd.DataFrame(_WEIGHTS)\nweights", html="weights")
    codecell("""
displ = weights.mass_t.sum()
KG = (weights.mass_t * weights.vcg_m).sum() / displ
FSC = weights.fsm_tm.sum() / displ            # free surface correction [m]
print("Displacement  %8.1f t" % displ)
print("KG (solid)    %8.3f m" % KG)
print("FSC           %8.3f m" % FSC)
""")
    heading(2, "Hydrostatics")
    markdown("""
KM from the hydrostatic tables of the lengthened hull (Havlys_hydro_2014.pdf, even keel), interpolated
on displacement. KG corrected for free surface gives the fluid metacentric height GM = KM − KG − FSC.
""")
    codecell("""
hyd_displ = np.array([1150., 1200., 1250., 1300., 1350.])
hyd_KM    = np.array([6.412, 6.338, 6.276, 6.224, 6.181])
KM = np.interp(displ, hyd_displ, hyd_KM)
GM_solid = KM - KG
GM = GM_solid - FSC
print("KM = %.3f m, GM solid = %.3f m, GM fluid = %.3f m" % (KM, GM_solid, GM))
""")
    heading(2, "GZ curve")
    markdown("""
Cross curves KN (m) at the displacement of the condition, read from the booklet at 10° steps.
GZ = KN − (KG + FSC) sin φ.
""")
    codecell("""
kn   = np.array([0.0, 1.118, 2.176, 3.094, 3.772, 4.186, 4.371])
heel = np.arange(0, 61, 5)
gz = kn - (KG + FSC) * np.sin(np.radians(heel))
""")
    codecell("""
heel = np.arange(0, 61, 10)
gz = kn - (KG + FSC) * np.sin(np.radians(heel))
phi = np.arange(0, 61)                      # 1 deg steps
gz1 = np.interp(phi, heel, gz)
def area(a, b):                             # [m rad], trapezoidal rule
    return np.sum((gz1[a:b] + gz1[a+1:b+1]) / 2) * np.radians(1)
print("GZ max %.3f m at %d deg" % (gz1.max(), phi[gz1.argmax()]))
print(np.round(gz, 3))
""")
    fig_src = """
plot(phi, gz1)
axhline(0.20, color='grey', ls='--')
title('GZ curve, LC2 departure')
xlabel('heel [deg]'); ylabel('GZ [m]')
"""
    gz_vals = k.ns["gz"]
    counter[0] += 1
    n = counter[0]
    cells.append({"cell_type": "code", "collapsed": False, "input": v3_lines(fig_src.strip("\n")),
                  "language": "python", "metadata": {}, "prompt_number": n, "outputs": [
                      {"output_type": "pyout", "prompt_number": n, "metadata": {},
                       "text": ["<matplotlib.text.Text at 0x7f3a2c1d5e90>"]},
                      {"output_type": "display_data", "metadata": {}, "png": gz_figure(k.ns["heel"], gz_vals),
                       "text": ["<matplotlib.figure.Figure at 0x7f3a2c14ad10>"]}]})
    heading(2, "IMO IS Code 2008 \u2014 general criteria")
    codecell("""
checks = pd.DataFrame([
    ("Area 0-30 deg [m rad]",   area(0, 30),  0.055),
    ("Area 0-40 deg [m rad]",   area(0, 40),  0.090),
    ("Area 30-40 deg [m rad]",  area(30, 40), 0.030),
    ("GZ at 30 deg [m]",        gz1[30],      0.200),
    ("Angle of GZ max [deg]",   phi[gz1.argmax()], 25.0),
    ("GM fluid [m]",            GM,           0.150),
], columns=["criterion", "value", "required"])
checks["ok"] = checks.value >= checks.required
checks.round(3)
""", html="checks.round(3)")
    assert bool(k.ns["checks"].ok.all())
    markdown("""
**Result:** all general criteria of the IS Code 2008 are met in LC2 with the new lightship. The smallest
margin is on the angle of maximum GZ (30° against 25° required); the deck crane must stay parked for
departure (see booklet note 7).
""")
    nb = {
        "metadata": {"name": "",
                     "signature": "sha256:" + hashlib.sha256(b"14-003 stability_check").hexdigest()},
        "nbformat": 3,
        "nbformat_minor": 0,
        "worksheets": [{"cells": cells, "metadata": {}}],
    }
    return nb


# --------------------------------------------------------------------------------------------------------
# 16-021  Fjellbekk WHP jacket — hydrodynamic coefficients  nbformat 4.2, tagged "deprecated"
# --------------------------------------------------------------------------------------------------------


def build_old_coefficients() -> nbformat.NotebookNode:
    k = Kernel()
    cells = []
    cells.append(md("""
> **SUPERSEDED (2019-02):** the drag coefficients below assumed 5 mm marine-growth roughness. The 2018
> marine growth survey measured hard growth with k ≈ 20 mm; use the updated coefficients in the
> 16-021 addendum. Kept for traceability of the 2016 design report only.

# Hydrodynamic coefficients for Morison loading — Fjellbekk WHP jacket (16-021)
"""))
    cells.append(md("""
## Basis

Drag and inertia coefficients per DNV-RP-C205 (2014) §6.7 for circular members in the splash zone and
below: C_D depends on the relative roughness k/D, C_M = 1.6 for rough members. Marine growth thickness
50 mm from +2 m to −40 m (increases the effective diameter), roughness height k = 5 mm.
"""))
    src = "import numpy as np\nimport pandas as pd"
    cells.append(code(src, 1, k.run(src, 1)))
    src = """
members = pd.DataFrame({
    "member": ["leg", "brace_X", "brace_H", "conductor", "riser_guard"],
    "D_m": [1.524, 0.762, 0.610, 0.610, 0.406],
    "t_mg_mm": [50, 50, 50, 50, 50],
})
members["D_eff_m"] = members.D_m + 2 * members.t_mg_mm / 1000
members
"""
    cells.append(code(src, 2, k.run(src.strip("\n"), 2)))
    cells.append(md("""
## Roughness dependent drag coefficient

DNV-RP-C205 eq. (6.7): C_D = 0.65 for k/D < 10⁻⁴ (smooth), C_D = (29 + 4 log₁₀(k/D)) / 20 for
10⁻⁴ < k/D < 10⁻², and C_D = 1.05 for k/D > 10⁻² (rough). **k = 5 mm** (superseded).
"""))
    src = """
k_rough = 0.005   # roughness height [m]  <-- superseded, survey 2018 gives 0.020

def cd_from_roughness(kD):
    if kD < 1e-4:
        return 0.65
    if kD < 1e-2:
        return (29 + 4 * np.log10(kD)) / 20
    return 1.05

members["k_D"] = (k_rough / members.D_eff_m).round(5)
members["Cd"] = members.k_D.apply(cd_from_roughness).round(3)
members["Cm"] = 1.6
members[["member", "D_eff_m", "k_D", "Cd", "Cm"]]
"""
    cells.append(code(src, 3, k.run(src.strip("\n"), 3)))
    cells.append(md("""
## Morison load per unit length (check)

f = ½ ρ C_D D u|u| + ρ C_M (π D² / 4) a, at the design wave crest phase: u = 2.4 m/s,
a = 1.1 m/s², ρ = 1.025 t/m³.
"""))
    src = """
rho, u, a = 1025.0, 2.4, 1.1
for _, m in members.iterrows():
    f_d = 0.5 * rho * m.Cd * m.D_eff_m * u * abs(u) / 1000
    f_i = rho * m.Cm * np.pi * m.D_eff_m**2 / 4 * a / 1000
    print("{:<12s} Cd={:.3f}  f_drag={:6.2f} kN/m  f_inertia={:6.2f} kN/m".format(m.member, m.Cd, f_d, f_i))
"""
    cells.append(code(src, 4, k.run(src.strip("\n"), 4)))
    src = """
print("* hydrodynamic coefficients for the wave load model, 16-021 rev. 0")
for _, m in members.iterrows():
    print("CDM {:<12s} {:6.3f} {:5.2f}".format(m.member.upper(), m.Cd, m.Cm))
"""
    cells.append(code(src, 5, k.run(src.strip("\n"), 5)))
    cells.append(md("""
## Notes

* Coefficients agreed with the client in the MoM of 12 May 2016 and used in design report
  16-021-RPT-004 rev. 0.
* The legs come out at C_D ≈ 0.95, the braces and conductors at ≈ 1.00–1.02 (k = 5 mm).
"""))

    nb = v4.new_notebook(cells=cells)
    nb.nbformat_minor = 2
    for cell in nb.cells:
        cell.pop("id", None)
    nb.metadata = {**kernel_py3("3.5.2"), "tags": ["deprecated"]}
    return nb


# --------------------------------------------------------------------------------------------------------
# reference/glossary_hydrostatics.ipynb                      nbformat 4.5, markdown heavy, data: URI image
# --------------------------------------------------------------------------------------------------------


def metacentre_diagram() -> str:
    """48x40 cross-section of a heeled hull with the waterline, B, G and M marked."""
    c = Canvas(48, 40)
    # heeled rectangular section (approx), waterline horizontal
    c.line(10, 14, 38, 20, BLACK)
    c.line(38, 20, 34, 36, BLACK)
    c.line(34, 36, 6, 30, BLACK)
    c.line(6, 30, 10, 14, BLACK)
    c.line(2, 22, 46, 22, MPL_BLUE)  # waterline
    c.line(24, 4, 21, 32, GREY)  # centreline (heeled)
    c.rect(23, 5, 24, 6, (214, 39, 40))  # M
    c.rect(22, 20, 23, 21, MPL_GREEN)  # G
    c.rect(25, 28, 26, 29, MPL_ORANGE)  # B (shifted)
    c.line(25, 28, 24, 6, LIGHT)  # buoyancy line of action up to M
    return c.b64()


def build_glossary() -> nbformat.NotebookNode:
    name = "glossary_hydrostatics"
    k = Kernel()
    uri = "data:image/png;base64," + metacentre_diagram()
    cells = []
    cells.append(md("""
# Hydrostatics and stability — glossary

Short definitions used across our stability, ballast and loading-condition notebooks, with the symbols
and sign conventions of the firm's calculation templates. Lengths in metres, masses in tonnes, heel
positive to starboard.
"""))
    cells.append(md("""
## Contents

1. Displacement and volume of displacement
2. Lightship weight
3. Deadweight
4. Centres: KB, KG, LCG, LCB
5. Metacentric height (GM)
6. Free surface effect
7. Righting lever GZ and intact stability criteria
8. TPC and MCT 1 cm
"""))
    cells.append(md("""
## 1. Displacement (Δ) and volume of displacement (∇)

**Displacement** Δ is the mass of the ship, equal to the mass of water she displaces: Δ = ρ ∇, with ∇ the
moulded (or extreme) underwater volume and ρ = 1.025 t/m³ for sea water. Displacement is the sum of
lightship weight and deadweight.
"""))
    cells.append(md("""
## 2. Lightship weight

**Lightship weight** is the mass of the ship complete and ready for service but with no cargo, fuel,
ballast, fresh water, stores, crew or passengers on board: hull steel, outfitting, machinery and
permanent liquids in machinery and piping. It is determined by an **inclining experiment** (which also
gives the lightship KG) and re-established after any conversion that changes it by more than 2 %.
"""))
    cells.append(md("""
## 3. Deadweight (DWT)

**Deadweight** is the difference between displacement and lightship weight at a given draught: the mass
the ship can carry as cargo, ballast, fuel, fresh water, stores, crew and effects.

DWT = Δ − lightship.  *Not* the same as cargo capacity: ballast and consumables count as deadweight.
"""))
    cells.append(md("""
## 4. Centres: KB, KG, LCG, LCB

* **K** — keel, the reference for vertical positions.
* **B** — centre of buoyancy, the centroid of the underwater volume; **KB** its height above K.
* **G** — centre of gravity of the ship; **KG** from the weight calculation (Σ m·z / Σ m).
* **LCG / LCB** — longitudinal positions of G and B, from the aft perpendicular (AP) in our templates.
  Trim results when LCG ≠ LCB.
"""))
    cells.append(md(f"""
## 5. Metacentric height (GM)

For small angles of heel the line of action of buoyancy passes through the **transverse metacentre M**.
Its height above the keel is KM = KB + BM with **BM = I_T / ∇**, I_T the transverse second moment of area
of the waterplane. The **metacentric height** is

$$GM = KM - KG = KB + BM - KG$$

GM > 0 means the ship is initially stable; the righting moment at small heel φ is Δ · GM · sin φ. Large GM
gives a stiff ship with short, violent roll periods; a small GM a tender ship.

![metacentre]({uri})

*Heeled section: waterline (blue), G (green), shifted B (orange), M (red).*
"""))
    src = """
# box barge L x B x T: KB = T/2, BM = B^2 / (12 T)
L, B, T, KG = 100.0, 20.0, 5.0, 7.0
KB = T / 2
BM = B**2 / (12 * T)
GM = KB + BM - KG
print(f"KB = {KB:.3f} m  BM = {BM:.3f} m  GM = {GM:.3f} m")
"""
    cells.append(code(src, 1, k.run(src.strip("\n"), 1), metadata={"tags": ["example"]}))
    cells.append(md("""
## 6. Free surface effect

A slack tank (neither empty nor pressed full) lets its liquid shift to the low side when the ship heels.
The effect on stability is as if G were raised by the **free surface correction**

$$FSC = \\frac{\\sum \\rho_t \\, i_t}{\\Delta}$$

where i_t is the transverse second moment of area of the liquid surface of tank t (l b³ / 12 for a
rectangular tank) and ρ_t the density of its liquid; ρ_t i_t is the **free surface moment** (FSM, t·m).
GM corrected for free surface is the **fluid GM**: GM_f = KM − KG − FSC. Press tanks full or keep them
empty to avoid it; the correction does not depend on how much liquid is in the tank.
"""))
    src = """
l, b, rho_t, displ = 12.0, 8.0, 1.025, 10250.0
i_t = l * b**3 / 12
FSM = rho_t * i_t
print(f"i_t = {i_t:.1f} m4  FSM = {FSM:.1f} t.m  FSC = {FSM / displ:.4f} m")
"""
    cells.append(code(src, 2, k.run(src.strip("\n"), 2), metadata={"tags": ["example"]}))
    cells.append(md("""
## 7. Righting lever GZ and intact stability criteria

At larger heel angles stability is described by the **righting lever** GZ(φ) = KN(φ) − KG sin φ, from the
cross curves KN. The IMO Intact Stability Code 2008 (part A 2.2) requires: area under GZ to 30° ≥ 0.055
m·rad, to 40° ≥ 0.090 m·rad, between 30° and 40° ≥ 0.030 m·rad; GZ ≥ 0.20 m at 30° or more; maximum GZ
at not less than 25°; initial GM (fluid) ≥ 0.15 m.
"""))
    cells.append(md("""
## 8. TPC and MCT 1 cm

* **TPC** — tonnes per centimetre immersion, TPC = ρ A_WP / 100.
* **MCT 1 cm** — moment to change trim one centimetre, MCT = Δ · GM_L / (100 L_PP).
"""))
    cells.append(md("""
## References

* IMO, *International Code on Intact Stability* (2008 IS Code), resolution MSC.267(85).
* Barrass & Derrett, *Ship Stability for Masters and Mates*.
* Internal: stability booklet template STB-T-01, loading computer validation procedure QP-NA-07.
"""))
    for i, cell in enumerate(cells):
        cell["id"] = cell_uuid(name, str(i))
    nb = v4.new_notebook(cells=cells)
    nb.metadata = {"authors": [{"name": "Ingrid Solberg"}], **kernel_py3("3.11.4")}
    return nb


# --------------------------------------------------------------------------------------------------------
# scratch/broken.ipynb — a save that was cut off (truncated JSON)
# --------------------------------------------------------------------------------------------------------


def build_broken() -> str:
    cells = [
        md("# scratch — deck load check, PSV Nordhav aft deck"),
        code("q_allow = 10.0   # t/m2, aft cargo deck\nA = 12.2 * 2.44 # 40 ft container footprint\n"
             "print(q_allow * A)", 1, [v4.new_output("stream", name="stdout", text="297.68\n")]),
        md("Containers on dunnage: check the point loads on the deck beams at frames 24-30."),
        code("P = 4 * 26.0    # four corner castings, 26 t each\nP / (4 * 0.178 * 0.162)", 2,
             [v4.new_output("execute_result", data={"text/plain": repr(4 * 26.0 / (4 * 0.178 * 0.162))},
                            execution_count=2)]),
        code("beams = pd.read_csv('/mnt/share/scratch/ingrid/deck_beams.csv')\nbeams.head()", None),
    ]
    for i, cell in enumerate(cells):
        cell["id"] = cell_uuid("broken", str(i))
    nb = v4.new_notebook(cells=cells)
    nb.metadata = kernel_py3("3.6.3")
    text = nbformat.writes(nb, version=4)
    # cut after a line ending in "," about two thirds in: what a save interrupted by a full disk leaves
    lines = text.splitlines(True)
    cut = max(i for i in range(len(lines) * 2 // 3) if lines[i].rstrip().endswith(","))
    return "".join(lines[: cut + 1])


# --------------------------------------------------------------------------------------------------------


def main() -> int:
    if ARCHIVE.exists():
        shutil.rmtree(ARCHIVE)
    p = ARCHIVE / "projects"
    write_text(p / "2017/17-042/inputs/tanks.csv", tanks_csv())
    write_v4(build_ballast(), p / "2017/17-042/ballast_distribution.ipynb", list_sources=True)
    write_v4(build_mooring(), p / "2018/18-007/mooring_loads.ipynb", list_sources=True)
    write_v4(build_pile(), p / "2019/19-113/pile_capacity.ipynb", list_sources=False)
    stability = build_stability()
    write_text(p / "2014/14-003/stability_check.ipynb", json.dumps(stability, sort_keys=True, indent=1,
                                                                   ensure_ascii=False) + "\n")
    write_v4(build_old_coefficients(), p / "2016/16-021/old_coefficients.ipynb", list_sources=True)
    write_v4(build_glossary(), ARCHIVE / "reference/glossary_hydrostatics.ipynb", list_sources=False)
    write_text(ARCHIVE / "scratch/broken.ipynb", build_broken())
    for path in sorted(ARCHIVE.rglob("*")):
        if path.is_file():
            print(path.relative_to(HERE), path.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
