"""Token cost of nbrecall's markdown against nbconvert's MarkdownExporter on the same notebooks.

Why: `nbrecall convert` exists to hand notebooks to an LLM, so what it must beat is the stock conversion. Both
sides keep images out of the text: nbconvert's MarkdownExporter extracts output images and attachments into
`resources["outputs"]` (the files its FilesWriter would write; referenced, not counted), nbrecall writes them to
NAME_files/. Tokens are cl100k_base via `nbrecall.convert.tokens.count_llm_tokens`. Acceptance: nbrecall's total
is at most 35 % of nbconvert's.

nbconvert leaves `data:image/…;base64` URIs pasted into markdown cells inline (it only extracts attachments), so
a second, conservative ratio is printed with those payloads removed from nbconvert's text.

Wall times cover parsing and conversion only (not token counting, not file writing): nbconvert =
`nbformat.reads` + `MarkdownExporter.from_notebook_node`; nbrecall = `read_notebook_bytes` + `convert_notebook`
(including the static dependency analysis).

Run from the repo root:  .venv/bin/python bench/convert_vs_nbconvert.py [--corpus ../shared/corpus]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbconvert import MarkdownExporter

from nbrecall.convert.markdown import ConvertOptions, convert_notebook
from nbrecall.convert.tokens import TOKENIZER_NAME, count_llm_tokens
from nbrecall.notebook.read import NotebookUnreadable, read_notebook_bytes

INLINE_IMAGE_RE = re.compile(r"data:image/[\w.+-]+;base64,[A-Za-z0-9+/=\s]*", re.I)
ACCEPT = 0.35


@dataclass
class Row:
    rel: str
    size: int
    nbc_tokens: int | None = None
    nbc_tokens_no_inline: int | None = None
    nbc_images: int = 0
    nbc_error: str | None = None
    nbr_tokens: int | None = None
    nbr_images: int = 0
    nbr_error: str | None = None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:120] if text else ''}"


def run(corpus: Path, max_output_chars: int) -> tuple[list[Row], float, float]:
    exporter = MarkdownExporter()
    options = ConvertOptions(max_output_chars=max_output_chars)
    rows: list[Row] = []
    t_nbc = t_nbr = 0.0
    for path in sorted(corpus.rglob("*.ipynb")):
        rel = path.relative_to(corpus).as_posix()
        raw = path.read_bytes()
        row = Row(rel, len(raw))
        rows.append(row)

        nbc_text = None
        started = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                node = nbformat.reads(raw.decode("utf-8"), as_version=4)
                nbc_text, resources = exporter.from_notebook_node(
                    node, resources={"unique_key": path.stem, "output_files_dir": f"{path.stem}_files"})
            row.nbc_images = len(resources.get("outputs") or {})
        except Exception as exc:  # a stock-tool failure is a result, not a crash of the benchmark
            row.nbc_error = _one_line(exc)
        t_nbc += time.perf_counter() - started

        converted = None
        started = time.perf_counter()
        try:
            nb = read_notebook_bytes(raw, rel)
            converted = convert_notebook(nb, path.stem, options)
            row.nbr_images = len(converted.files)
        except NotebookUnreadable as exc:
            row.nbr_error = f"unreadable: {exc.reason}"
        except Exception as exc:
            row.nbr_error = _one_line(exc)
        t_nbr += time.perf_counter() - started

        if nbc_text is not None:
            row.nbc_tokens = count_llm_tokens(nbc_text)
            stripped = INLINE_IMAGE_RE.sub("data:image/…", nbc_text)
            row.nbc_tokens_no_inline = row.nbc_tokens if stripped == nbc_text else count_llm_tokens(stripped)
        if converted is not None:
            row.nbr_tokens = count_llm_tokens(converted.markdown)
    return rows, t_nbc, t_nbr


def _ratio(a: int | None, b: int | None) -> str:
    return f"{a / b:.1%}" if a is not None and b else "—"


def _num(value: int | None) -> str:
    return f"{value:,}" if value is not None else "failed"


def report(rows: list[Row], t_nbc: float, t_nbr: float, corpus: Path) -> bool:
    both = [r for r in rows if r.nbc_tokens is not None and r.nbr_tokens is not None]
    nbc = sum(r.nbc_tokens or 0 for r in both)
    nbc_strict = sum(r.nbc_tokens_no_inline or 0 for r in both)
    nbr = sum(r.nbr_tokens or 0 for r in both)
    ratio = nbr / nbc if nbc else float("nan")
    print(f"corpus: {corpus} — {len(rows)} notebooks, {sum(r.size for r in rows):,} bytes; tokens: {TOKENIZER_NAME}")
    print(f"converted by both: {len(both)}")
    print(f"nbconvert failed: {sum(r.nbc_error is not None for r in rows)}    "
          f"nbrecall failed: {sum(r.nbr_error is not None for r in rows)}")
    for r in rows:
        if r.nbc_error:
            print(f"  nbconvert failed on {r.rel}: {r.nbc_error}")
        if r.nbr_error:
            print(f"  nbrecall failed on {r.rel}: {r.nbr_error}")
    print()
    print(f"total tokens, nbconvert MarkdownExporter: {nbc:>12,}")
    print(f"total tokens, nbrecall convert_notebook:  {nbr:>12,}")
    verdict = "PASS" if ratio <= ACCEPT else "FAIL"
    print(f"ratio nbrecall / nbconvert:               {ratio:>12.1%}   (acceptance ≤ {ACCEPT:.0%}: {verdict})")
    print(f"conservative: nbconvert without inline data:image URIs in markdown cells: {nbc_strict:,} tokens → "
          f"ratio {_ratio(nbr, nbc_strict)}")
    per_nb = [r.nbr_tokens / r.nbc_tokens for r in both if r.nbc_tokens and r.nbr_tokens is not None]
    heaviest = max(both, key=lambda r: r.nbc_tokens or 0, default=None)
    if per_nb and heaviest is not None:
        rest_nbc, rest_nbr = nbc - (heaviest.nbc_tokens or 0), nbr - (heaviest.nbr_tokens or 0)
        print(f"per-notebook ratio: median {statistics.median(per_nb):.1%}, "
              f"{sum(x <= ACCEPT for x in per_nb)} of {len(per_nb)} notebooks ≤ {ACCEPT:.0%}, "
              f"{sum(x > 1 for x in per_nb)} larger than nbconvert")
        print(f"without the notebook nbconvert makes largest ({heaviest.rel}, {heaviest.nbc_tokens:,} tokens): "
              f"ratio {_ratio(rest_nbr, rest_nbc)}")
    print(f"image files: nbconvert resources/outputs {sum(r.nbc_images for r in both):,}, "
          f"nbrecall NAME_files/ {sum(r.nbr_images for r in both):,}")
    print(f"wall time (parse + convert, all notebooks): nbconvert {t_nbc:.1f} s, nbrecall {t_nbr:.1f} s")
    print()
    print("10 largest notebooks by file size:")
    header = f"{'file bytes':>12}  {'nbconvert tok':>13}  {'nbrecall tok':>12}  {'ratio':>6}  notebook"
    print(header)
    print("-" * len(header))
    for r in sorted(rows, key=lambda r: -r.size)[:10]:
        print(f"{r.size:>12,}  {_num(r.nbc_tokens):>13}  {_num(r.nbr_tokens):>12}  "
              f"{_ratio(r.nbr_tokens, r.nbc_tokens):>6}  {r.rel}")
    return ratio <= ACCEPT


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("../shared/corpus"))
    parser.add_argument("--max-output-chars", type=int, default=ConvertOptions().max_output_chars)
    args = parser.parse_args()
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}", file=sys.stderr)
        return 2
    rows, t_nbc, t_nbr = run(args.corpus, args.max_output_chars)
    return 0 if report(rows, t_nbc, t_nbr, args.corpus) else 1


if __name__ == "__main__":
    sys.exit(main())
