"""Token cost of nbrecall's markdown against nbconvert's MarkdownExporter on the same notebooks.

Why: `nbrecall convert` exists to hand notebooks to an LLM, so what it must beat is the stock conversion. Both
sides keep images out of the text: nbconvert's MarkdownExporter extracts output images and attachments into
`resources["outputs"]` (the files its FilesWriter would write; referenced, not counted), nbrecall writes them to
NAME_files/. Tokens are cl100k_base via `nbrecall.convert.tokens.count_llm_tokens`.

Both keep every source line, so a total ratio cannot fall much below the sources' share of nbconvert's text. What
the converter decides is the rest: headers, hints, outputs, markers. So per notebook the tokens of its cell
sources are subtracted from both sides (the non-source part), and the figures are:
- the median and the total of nbrecall / nbconvert per notebook (targets: median ≤ 1.10);
- the non-source part of nbrecall against nbconvert's, over the corpus (target ≤ 35 %);
- every source line kept (each cell's source, line by line, appears in nbrecall's markdown);
- with `--queries FILE.jsonl` (repeatable): every value answer a development set asks for ("answer" of a query)
  appears in the markdown of the query's notebook.

nbconvert leaves `data:image/…;base64` URIs pasted into markdown cells inline (it only extracts attachments): to
compare with images as files on both sides, those payloads are taken out of nbconvert's text (and out of the
sources) for every ratio; the ratio against nbconvert's text as it is is printed as well.

Wall times cover parsing and conversion only (not token counting, not file writing): nbconvert =
`nbformat.reads` + `MarkdownExporter.from_notebook_node`; nbrecall = `read_notebook_bytes` + `convert_notebook`
(including the static dependency analysis).

Run from the repo root (nbconvert is not a dependency of nbrecall: `.venv/bin/pip install nbconvert`):
  .venv/bin/python bench/convert_vs_nbconvert.py --corpus ../shared/corpus --queries ../shared/eval/queries.jsonl
"""

from __future__ import annotations

import argparse
import json
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
from nbrecall.notebook.outputs import FIGURE_PLACEHOLDER_RE, extract_markdown_images
from nbrecall.notebook.read import NotebookUnreadable, read_notebook_bytes

INLINE_IMAGE_RE = re.compile(r"data:image/[\w.+-]+;base64,[A-Za-z0-9+/=\s]*", re.I)
MEDIAN_TARGET = 1.10
NON_SOURCE_TARGET = 0.35


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
    source_tokens: int = 0
    lines_lost: int = 0
    markdown: str | None = None


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
            row.source_tokens = sum(count_llm_tokens(INLINE_IMAGE_RE.sub("data:image/…", c.source))
                                    for c in nb.cells if c.source)
            row.lines_lost = _lines_lost(nb, converted.markdown)
            row.markdown = converted.markdown
    return rows, t_nbc, t_nbr


def _lines_lost(nb: object, markdown: str) -> int:
    """Source lines that appear nowhere in the markdown (0 when all are kept). A markdown line that embeds an
    image (`attachment:` or a `data:` URI) is checked with the image replaced by its placeholder, as designed."""
    lost = 0
    for cell in nb.cells:  # type: ignore[attr-defined]
        source = cell.source
        if cell.is_markdown:
            source = extract_markdown_images(source, cell.attachments)[0]
        for line in source.splitlines():
            if line.strip() and not FIGURE_PLACEHOLDER_RE.search(line) and line not in markdown:
                lost += 1
    return lost


def value_answers(rows: list[Row], queries: list[Path]) -> tuple[int, list[str]]:
    """(value questions, those whose answer is not in their notebook's markdown)."""
    by_rel = {r.rel: r for r in rows}
    asked, missing = 0, []
    for path in queries:
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            query = json.loads(line)
            answer = query.get("answer")
            if not answer or query.get("notebook") not in by_rel:
                continue
            asked += 1
            markdown = by_rel[query["notebook"]].markdown or ""
            if str(answer) not in markdown:
                missing.append(f"{query.get('id')}: {answer!r} not in {query['notebook']}")
    return asked, missing


def _ratio(a: int | None, b: int | None) -> str:
    return f"{a / b:.1%}" if a is not None and b else "—"


def _num(value: int | None) -> str:
    return f"{value:,}" if value is not None else "failed"


def report(rows: list[Row], t_nbc: float, t_nbr: float, corpus: Path, queries: list[Path]) -> bool:
    both = [r for r in rows if r.nbc_tokens is not None and r.nbr_tokens is not None]
    nbc_raw = sum(r.nbc_tokens or 0 for r in both)
    nbc = sum(r.nbc_tokens_no_inline or 0 for r in both)  # images as files on both sides
    nbr = sum(r.nbr_tokens or 0 for r in both)
    src = sum(r.source_tokens for r in both)
    ratio = nbr / nbc if nbc else float("nan")
    non_source = (nbr - src) / (nbc - src) if nbc > src else float("nan")
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
    print(f"total tokens, nbconvert MarkdownExporter: {nbc:>12,}  (images as files; {nbc_raw:,} with the "
          "data:image URIs of markdown cells inline)")
    print(f"total tokens, nbrecall convert_notebook:  {nbr:>12,}")
    print(f"  of which cell sources (both sides):     {src:>12,}  ({_ratio(src, nbc)} of nbconvert's)")
    print(f"total ratio nbrecall / nbconvert:         {ratio:>12.1%}   (against nbconvert's text as it is: "
          f"{_ratio(nbr, nbc_raw)})")
    per_nb = [r.nbr_tokens / r.nbc_tokens_no_inline for r in both
              if r.nbc_tokens_no_inline and r.nbr_tokens is not None]
    median = statistics.median(per_nb) if per_nb else float("nan")
    ok_median = median <= MEDIAN_TARGET
    ok_non_source = non_source <= NON_SOURCE_TARGET
    print(f"per-notebook ratio: median {median:.2f}× (target ≤ {MEDIAN_TARGET:.2f}×: "
          f"{'PASS' if ok_median else 'FAIL'}), {sum(x > 1 for x in per_nb)} of {len(per_nb)} larger than nbconvert")
    print(f"non-source part (headers, hints, outputs, markers): nbrecall {nbr - src:,} / nbconvert {nbc - src:,} "
          f"= {non_source:.1%} (target ≤ {NON_SOURCE_TARGET:.0%}: {'PASS' if ok_non_source else 'FAIL'})")
    lost = sum(r.lines_lost for r in both)
    print(f"source lines not found in nbrecall's markdown: {lost} ({'PASS' if not lost else 'FAIL'})")
    for r in both:
        if r.lines_lost:
            print(f"  {r.lines_lost} line(s) lost in {r.rel}")
    ok_values = True
    if queries:
        asked, missing = value_answers(rows, queries)
        ok_values = not missing
        print(f"value answers in the markdown: {asked - len(missing)}/{asked} "
              f"({'PASS' if ok_values else 'FAIL'})")
        for item in missing:
            print(f"  missing {item}")
    print(f"image files: nbconvert resources/outputs {sum(r.nbc_images for r in both):,}, "
          f"nbrecall NAME_files/ {sum(r.nbr_images for r in both):,}")
    print(f"wall time (parse + convert, all notebooks): nbconvert {t_nbc:.1f} s, nbrecall {t_nbr:.1f} s")
    print()
    print("10 largest notebooks by file size:")
    header = f"{'file bytes':>12}  {'nbconvert tok':>13}  {'nbrecall tok':>12}  {'ratio':>6}  notebook"
    print(header)
    print("-" * len(header))
    for r in sorted(rows, key=lambda r: -r.size)[:10]:
        print(f"{r.size:>12,}  {_num(r.nbc_tokens_no_inline):>13}  {_num(r.nbr_tokens):>12}  "
              f"{_ratio(r.nbr_tokens, r.nbc_tokens_no_inline):>6}  {r.rel}")
    return ok_median and ok_non_source and not lost and ok_values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("../shared/corpus"))
    parser.add_argument("--max-output-chars", type=int, default=ConvertOptions().max_output_chars)
    parser.add_argument("--queries", type=Path, action="append", default=[],
                        help="a development set's queries.jsonl: check its value answers (repeatable)")
    args = parser.parse_args()
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}", file=sys.stderr)
        return 2
    rows, t_nbc, t_nbr = run(args.corpus, args.max_output_chars)
    return 0 if report(rows, t_nbc, t_nbr, args.corpus, args.queries) else 1


if __name__ == "__main__":
    sys.exit(main())
