"""Scale-corpus generator: N notebooks laid out like a firm's share, made from a folder of real notebooks.

    .venv/bin/python bench/scale_corpus.py N [--source ../shared/corpus] [--out /tmp/nbrecall-scale/N]
                                             [--seed 0] [--workers NPROC] [--malformed 0.005] [--duplicates 0.02]
                                             [--deprecated 0.03] [--force]

Why: the index and query benchmarks need a 41,000-notebook archive that behaves like the real one (the same
mix of code, prose, DataFrames, logs and images, the same failure modes) without copying private notebooks.
Each generated notebook is a real notebook of `--source` (sampled uniformly, so images keep their real share of
the bytes), perturbed so that no two are alike:

- variables renamed, consistently within the notebook (code, text outputs, inline code in markdown);
- numbers changed in sources and text/HTML outputs (same number of decimals; image bytes are left alone);
- sections (a markdown heading and the cells under it) reordered;
- `metadata.authors` set from a project team, `metadata.tags = ["deprecated"]` on a few.

Layout: `projects/<year>/<YY-NNN>/<name>.ipynb` (~85%), `reference/<topic>/…` and `scratch/<user>/…`; ~2% are
exact byte copies of an earlier notebook at another path, ~0.5% are malformed (truncated JSON, empty, an HTML
error page, JSON that is no notebook). Everything is a pure function of (seed, notebook number): the output does
not depend on the worker count, and a duplicate is made by generating its original again (nothing is held).

Streaming: the plan is a generator, workers read one source at a time and write one file at a time; memory
stays flat whatever N. `scale_manifest.tsv` in the output folder lists every file with its kind and origin.
"""

from __future__ import annotations

import argparse
import builtins
import json
import keyword
import multiprocessing as mp
import os
import random
import re
import shutil
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

YEARS = list(range(2015, 2025))
FIRST = ["Anna", "Bram", "Chen", "Daan", "Eva", "Femke", "Gert", "Hanna", "Ivo", "Joris", "Karin", "Lotte", "Maarten",
         "Nina", "Olaf", "Petra", "Quinten", "Rosa", "Sanne", "Tomas", "Ursula", "Vera", "Willem", "Yara", "Zoe"]
LAST = ["de Vries", "Jansen", "Bakker", "Visser", "Smit", "Meijer", "Mulder", "de Boer", "Bos", "Vos", "Peters",
        "Hendriks", "Dekker", "Brouwer", "Kok", "Verhoeven", "Schouten", "Kuipers", "Postma", "Huisman"]
TOPICS = ["standards", "methods", "training", "templates", "coefficients", "validation", "tooling", "examples"]
WORDS = ["hull", "ballast", "tank", "load", "span", "beam", "pump", "flow", "draft", "trim", "deck", "keel", "pile",
         "soil", "wave", "tide", "wind", "stress", "strain", "mass", "rate", "node", "grid", "case", "run", "fit",
         "base", "ref", "calc", "aft", "fwd", "port", "stbd", "mean", "peak", "net", "gross", "adj", "raw", "clean"]
NAME_SUFFIXES = ["", "", "", "", "_v2", "_v3", "_final", "_old", "_check", "_draft", "_rev1", "_copy"]
KEEP_NAMES = frozenset({*keyword.kwlist, *dir(builtins), "np", "pd", "plt", "sns", "tf", "torch", "sp", "sm", "mpl",
                        "self", "cls", "os", "sys", "re", "math", "json", "time", "nx", "ax", "fig", "axes", "In",
                        "Out", "get_ipython", "display"})
IMAGE_KEYS = ("image/png", "image/jpeg", "image/gif", "image/svg+xml", "application/pdf", "png", "jpeg", "svg")
TEXT_KEYS = ("text/plain", "text/html", "text/markdown", "text/latex", "text", "html", "latex")

_NUMBER = re.compile(r"(?<![\w.#%$\\-])(\d+\.\d+|\d{2,})(?![\w.])")
_ASSIGN = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*(?:\[[^\]\n]*\][ \t]*)?=(?!=)", re.M)
_DEF = re.compile(r"^[ \t]*(?:def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)
_FOR = re.compile(r"^[ \t]*for[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]+in\b", re.M)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INLINE_CODE = re.compile(r"`[^`\n]+`")


@dataclass(frozen=True)
class Content:
    """Everything a notebook's bytes depend on: generating the same Content twice gives the same bytes."""

    number: int  # the notebook number whose random stream perturbs the source
    source: int  # index into the sorted source list
    authors: tuple[str, ...]
    deprecated: bool


@dataclass(frozen=True)
class Task:
    """One file to write: where, what content, and how it is (or is not) damaged."""

    number: int
    rel: str
    content: Content
    kind: str  # "notebook" | "duplicate" | "malformed"
    mtime: float
    duplicate_of: str = ""


@dataclass
class Shares:
    malformed: float = 0.005
    duplicates: float = 0.02
    deprecated: float = 0.03


# ---------------------------------------------------------------------------------------------------- sources


def scan_sources(root: Path) -> tuple[list[Path], int, int]:
    """Sorted notebooks under `root` that parse as JSON notebooks, their total bytes and image bytes (one at a
    time: the corpus is never held)."""
    paths: list[Path] = []
    total = images = 0
    for path in sorted(root.rglob("*.ipynb")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        try:
            raw = path.read_bytes()
            nb = json.loads(raw)
        except (OSError, ValueError):
            continue
        if not isinstance(nb, dict) or not isinstance(nb.get("nbformat"), int):
            continue
        paths.append(path)
        total += len(raw)
        images += image_bytes(nb)
    return paths, total, images


def notebook_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    """The cell list, v4 (`cells`) or v3 (the first worksheet), as the same list object (edits stay in place)."""
    if isinstance(nb.get("cells"), list):
        return nb["cells"]
    sheets = nb.get("worksheets")
    if isinstance(sheets, list) and sheets and isinstance(sheets[0], dict) and isinstance(sheets[0].get("cells"), list):
        return sheets[0]["cells"]
    return []


def image_bytes(nb: dict[str, Any]) -> int:
    total = 0
    for cell in notebook_cells(nb):
        for output in cell.get("outputs") or []:
            if not isinstance(output, dict):
                continue
            data = output.get("data") if isinstance(output.get("data"), dict) else output
            total += sum(_text_len(data.get(key)) for key in IMAGE_KEYS)
        for attachment in (cell.get("attachments") or {}).values():
            if isinstance(attachment, dict):
                total += sum(_text_len(v) for v in attachment.values())
    return total


def _text_len(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(len(v) for v in value if isinstance(v, str))
    return 0


# ---------------------------------------------------------------------------------------------------- the plan


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _login(name: str) -> str:
    first, *rest = name.lower().split()
    return first[0] + "".join(rest).replace(" ", "")


def _slug(stem: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", stem.lower()).strip("_") or "notebook"


def plan(n: int, sources: list[Path], seed: int, shares: Shares) -> Iterator[Task]:
    """The files to write, in order; a generator so that N may be large. Only the names used per folder (no two
    files may share a path) and a window of recent notebooks (the candidates for duplicates) are kept."""
    rng = random.Random(f"plan:{seed}")
    staff = sorted({_person(rng) for _ in range(80)})
    stems = [_slug(p.stem) for p in sources]
    # more notebooks in later years: weight grows linearly
    year_weights = [1.0 + 0.25 * i for i in range(len(YEARS))]
    year_counts = [round(n * w / sum(year_weights)) for w in year_weights]
    year_counts[-1] += n - sum(year_counts)
    folder_names: dict[str, set[str]] = {}
    recent: deque[tuple[str, Content]] = deque(maxlen=500)
    project_no = {year: 0 for year in YEARS}
    number = 0
    for year, count in zip(YEARS, year_counts, strict=True):
        left = count
        while left > 0:
            project_no[year] += rng.randint(1, 4)
            code = f"{year % 100:02d}-{project_no[year]:03d}"
            team = rng.sample(staff, rng.randint(1, 3))
            size = min(left, max(2, int(rng.expovariate(1 / 18))))
            left -= size
            for _ in range(size):
                area = rng.random()
                if area < 0.85:
                    folder, authors = f"projects/{year}/{code}", tuple(rng.sample(team, rng.randint(1, len(team))))
                elif area < 0.90:
                    folder, authors = f"reference/{rng.choice(TOPICS)}", (rng.choice(staff),)
                else:
                    author = rng.choice(team)
                    folder, authors = f"scratch/{_login(author)}", (author,)
                roll = rng.random()
                day = rng.uniform(0, 364 * 86400)
                mtime = time.mktime((year, 1, 1, 0, 0, 0, 0, 0, 0)) + day
                if roll < shares.duplicates and recent:
                    original_rel, content = rng.choice(list(recent))
                    stem = Path(original_rel).stem
                    folder = rng.choice([str(Path(original_rel).parent), folder])
                    name = _unique(folder_names, folder, stem + rng.choice([" - Copy", "_copy", "_backup", ""]))
                    yield Task(number, f"{folder}/{name}.ipynb", content, "duplicate", mtime, original_rel)
                else:
                    source = rng.randrange(len(sources))
                    content = Content(number, source, authors, rng.random() < shares.deprecated)
                    stem = stems[source] + rng.choice(NAME_SUFFIXES)
                    name = _unique(folder_names, folder, stem)
                    rel = f"{folder}/{name}.ipynb"
                    kind = "malformed" if roll > 1.0 - shares.malformed else "notebook"
                    if kind == "notebook":
                        recent.append((rel, content))
                    yield Task(number, rel, content, kind, mtime)
                number += 1


def _unique(folder_names: dict[str, set[str]], folder: str, stem: str) -> str:
    """A name not yet used in `folder` (a clash gets `_2`, `_3`, …): no file overwrites another."""
    used = folder_names.setdefault(folder, set())
    name, i = stem, 2
    while name in used:
        name, i = f"{stem}_{i}", i + 1
    used.add(name)
    return name


# ---------------------------------------------------------------------------------------------------- perturbing


def _source_text(value: Any) -> tuple[str, bool]:
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str)), True
    return (value if isinstance(value, str) else ""), False


def _as_source(text: str, as_list: bool) -> Any:
    return text.splitlines(keepends=True) if as_list else text


def _edit(cell_or_output: dict[str, Any], key: str, fn: Any) -> None:
    if key not in cell_or_output:
        return
    text, as_list = _source_text(cell_or_output[key])
    if text:
        cell_or_output[key] = _as_source(fn(text), as_list)


def _code_key(cell: dict[str, Any]) -> str:
    return "source" if "source" in cell else "input"  # v3 code cells keep their code in `input`


def choose_renames(cells: list[dict[str, Any]], rng: random.Random) -> dict[str, str]:
    """Pick 3–10 names the notebook assigns, defines or loops over and give each a fresh, unused name."""
    code = "\n".join(_source_text(c.get(_code_key(c)))[0] for c in cells if c.get("cell_type") == "code")
    found: set[str] = set()
    for pattern in (_ASSIGN, _DEF, _FOR):
        found.update(pattern.findall(code))
    candidates = sorted(n for n in found if len(n) >= 2 and n not in KEEP_NAMES and not n.startswith("_"))
    if not candidates:
        return {}
    taken = set(_IDENT.findall(code))
    renames: dict[str, str] = {}
    for old in rng.sample(candidates, min(len(candidates), rng.randint(3, 10))):
        for _ in range(20):
            style = rng.random()
            if style < 0.4:
                new = f"{old}_{rng.choice(WORDS)}"
            elif style < 0.8:
                new = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
            else:
                new = f"{rng.choice(WORDS)}{rng.randint(1, 99)}"
            if new not in taken:
                taken.add(new)
                renames[old] = new
                break
    return renames


def renamer(renames: dict[str, str]) -> Any:
    if not renames:
        return lambda text: text
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in sorted(renames, key=len, reverse=True))
                         + r")(?!\w)")
    return lambda text: pattern.sub(lambda m: renames[m.group(1)], text)


def number_changer(rng: random.Random) -> Any:
    """Scale every multi-digit integer and every decimal by a random factor, keeping its number of decimals."""

    def change(match: re.Match[str]) -> str:
        token = match.group(1)
        factor = rng.uniform(0.75, 1.3)
        if "." in token:
            decimals = len(token.split(".", 1)[1])
            return f"{float(token) * factor:.{decimals}f}"
        if len(token) > 15 or token.startswith("0") or (len(token) == 4 and 1900 <= int(token) <= 2100):
            return token  # ids, zero-padded codes and years: not quantities
        return str(max(10, round(int(token) * factor)))

    return lambda text: _NUMBER.sub(change, text)


def split_sections(cells: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Cells grouped from one heading (markdown `#…` or a v3 heading cell) to the next."""
    sections: list[list[dict[str, Any]]] = [[]]
    for cell in cells:
        kind = cell.get("cell_type")
        heading = kind == "heading" or (
            kind == "markdown" and _source_text(cell.get("source"))[0].lstrip().startswith("#")
        )
        if heading and sections[-1]:
            sections.append([])
        sections[-1].append(cell)
    return sections


def reorder_sections(cells: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """Swap one to three pairs of sections after the first two (the preamble and the title stay on top)."""
    sections = split_sections(cells)
    movable = len(sections) - 2
    if movable >= 2 and rng.random() < 0.7:
        for _ in range(rng.randint(1, 3)):
            a, b = rng.sample(range(2, len(sections)), 2)
            sections[a], sections[b] = sections[b], sections[a]
    return [cell for section in sections for cell in section]


def perturb(nb: dict[str, Any], content: Content, seed: int, source_rel: str) -> dict[str, Any]:
    """The source notebook made into a new one (see the module docstring); edits `nb` in place."""
    rng = random.Random(f"nb:{seed}:{content.number}")
    cells = notebook_cells(nb)
    rename = renamer(choose_renames(cells, rng))
    numbers = number_changer(rng)

    def code(text: str) -> str:
        return numbers(rename(text))

    def inline(text: str) -> str:
        return numbers(_INLINE_CODE.sub(lambda m: rename(m.group(0)), text))

    for cell in cells:
        kind = cell.get("cell_type")
        if kind == "code":
            _edit(cell, _code_key(cell), code)
            for output in cell.get("outputs") or []:
                if not isinstance(output, dict):
                    continue
                _edit(output, "text", code)  # stream (v4) and v3 text outputs
                _edit(output, "evalue", rename)
                data = output.get("data")
                for holder in (data if isinstance(data, dict) else {}, output):
                    for key in TEXT_KEYS:
                        if key != "text" or holder is not output:
                            _edit(holder, key, code if key in ("text/plain", "text") else numbers)
        elif kind in ("markdown", "heading", "raw"):
            _edit(cell, "source", inline)
    cells[:] = reorder_sections(cells, rng)
    meta = nb.setdefault("metadata", {})
    meta["authors"] = [{"name": name} for name in content.authors]
    tags = [t for t in meta.get("tags", []) if isinstance(t, str)] if isinstance(meta.get("tags"), list) else []
    if content.deprecated:
        tags.append("deprecated")
    if tags:
        meta["tags"] = tags
    else:
        meta.pop("tags", None)
    meta["scale_corpus"] = {"source": source_rel, "seed": seed, "number": content.number}
    return nb


def render(content: Content, sources: list[Path], source_root: Path, seed: int) -> tuple[bytes, int]:
    """The notebook's bytes (as Jupyter writes them: indent 1, sorted keys) and its image bytes."""
    path = sources[content.source]
    nb = json.loads(path.read_bytes())
    nb = perturb(nb, content, seed, path.relative_to(source_root).as_posix())
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    return text.encode("utf-8"), image_bytes(nb)


def damage(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A malformed notebook, the ways they turn up on a share."""
    roll = rng.random()
    if roll < 0.7:
        return data[: rng.randint(1, max(1, len(data) - 2))], "truncated"
    if roll < 0.8:
        return b"", "empty"
    if roll < 0.9:
        page = "<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>\n"
        return page.encode(), "html"
    return json.dumps({"cells": "not a list", "metadata": None}).encode(), "not a notebook"


# ---------------------------------------------------------------------------------------------------- writing

_WORKER: dict[str, Any] = {}


def _init_worker(sources: list[Path], source_root: Path, out: Path, seed: int) -> None:
    _WORKER.update(sources=sources, root=source_root, out=out, seed=seed)


def write_one(task: Task) -> tuple[str, str, int, int, str]:
    """Generate and write one file; returns (rel, kind, bytes, image bytes, detail)."""
    sources, root, out, seed = _WORKER["sources"], _WORKER["root"], _WORKER["out"], _WORKER["seed"]
    data, images = render(task.content, sources, root, seed)
    detail = sources[task.content.source].relative_to(root).as_posix()
    if task.kind == "malformed":
        data, how = damage(data, random.Random(f"damage:{seed}:{task.number}"))
        images, detail = 0, f"{how} ({detail})"
    elif task.kind == "duplicate":
        detail = task.duplicate_of
    path = out / task.rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (task.mtime, task.mtime))
    return task.rel, task.kind, len(data), images, detail


def generate(
    n: int, source_root: Path, out: Path, seed: int = 0, workers: int = 0, shares: Shares | None = None
) -> dict[str, Any]:
    """Write N notebooks under `out`; returns the summary counts (also written to `scale_manifest.tsv`)."""
    start = time.perf_counter()
    sources, src_bytes, src_images = scan_sources(source_root)
    if not sources:
        raise SystemExit(f"{source_root}: no readable notebooks")
    out.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = images = deprecated = 0
    workers = workers or os.cpu_count() or 1
    tasks = plan(n, sources, seed, shares or Shares())

    def tally(task_iter: Iterator[tuple[str, str, int, int, str]]) -> None:
        nonlocal total, images
        with (out / "scale_manifest.tsv").open("w", encoding="utf-8") as manifest:
            manifest.write("path\tkind\tbytes\tfrom\n")
            for rel, kind, size, image, detail in task_iter:
                counts[kind] += 1
                areas[rel.split("/", 1)[0]] += 1
                total += size
                images += image
                manifest.write(f"{rel}\t{kind}\t{size}\t{detail}\n")

    def counted(task_iter: Iterator[Task]) -> Iterator[Task]:
        nonlocal deprecated
        for task in task_iter:
            deprecated += task.content.deprecated and task.kind != "malformed"
            yield task

    if workers == 1:
        _init_worker(sources, source_root, out, seed)
        tally(write_one(t) for t in counted(tasks))
    else:
        ctx = mp.get_context("fork" if sys.platform == "linux" else "spawn")
        with ctx.Pool(workers, _init_worker, (sources, source_root, out, seed), maxtasksperchild=2000) as pool:
            tally(pool.imap_unordered(write_one, counted(tasks), chunksize=16))
    return {
        "notebooks": sum(counts.values()),
        "bytes": total,
        "image_share": images / total if total else 0.0,
        "source_image_share": src_images / src_bytes if src_bytes else 0.0,
        "sources": len(sources),
        "malformed": counts["malformed"],
        "duplicates": counts["duplicate"],
        "deprecated": deprecated,
        "areas": dict(areas),
        "workers": workers,
        "seconds": time.perf_counter() - start,
    }


def print_summary(summary: dict[str, Any], out: Path) -> None:
    n = summary["notebooks"]
    rows = [
        ("output", str(out)),
        ("source notebooks", f"{summary['sources']:,}"),
        ("notebooks", f"{n:,}"),
        ("  projects / reference / scratch", " / ".join(f"{summary['areas'].get(a, 0):,}"
                                                         for a in ("projects", "reference", "scratch"))),
        ("bytes", f"{summary['bytes']:,} ({summary['bytes'] / 2**30:.2f} GiB)"),
        ("image share of bytes (source)", f"{summary['image_share']:.1%} ({summary['source_image_share']:.1%})"),
        ("malformed", f"{summary['malformed']:,} ({summary['malformed'] / max(n, 1):.2%})"),
        ("exact duplicates", f"{summary['duplicates']:,} ({summary['duplicates'] / max(n, 1):.2%})"),
        ("deprecated (tag)", f"{summary['deprecated']:,} ({summary['deprecated'] / max(n, 1):.2%})"),
        ("workers", str(summary["workers"])),
        ("seconds", f"{summary['seconds']:.1f} ({n / max(summary['seconds'], 1e-9):.0f} notebooks/s)"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", type=int, help="number of notebooks to write")
    parser.add_argument("--source", type=Path, default=Path("../shared/corpus"), help="folder of real notebooks")
    parser.add_argument("--out", type=Path, help="output folder (default /tmp/nbrecall-scale/N)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="processes (default: all cores)")
    parser.add_argument("--malformed", type=float, default=Shares.malformed)
    parser.add_argument("--duplicates", type=float, default=Shares.duplicates)
    parser.add_argument("--deprecated", type=float, default=Shares.deprecated)
    parser.add_argument("--force", action="store_true", help="empty the output folder first")
    args = parser.parse_args(argv)
    out = args.out or Path(f"/tmp/nbrecall-scale/{args.n}")
    if out.exists() and any(out.iterdir()):
        if not args.force:
            raise SystemExit(f"{out} is not empty (pass --force to replace it)")
        shutil.rmtree(out)
    summary = generate(args.n, args.source, out, args.seed, args.workers,
                       Shares(args.malformed, args.duplicates, args.deprecated))
    print_summary(summary, out)


if __name__ == "__main__":
    main()
