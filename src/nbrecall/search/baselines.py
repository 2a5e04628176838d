"""The naive baselines nbrecall has to beat: three ways people usually load notebooks for retrieval.

- ``langchain``: one text per notebook as LangChain's ``NotebookLoader`` builds it with its defaults
  (``'{cell_type}' cell: '{source lines as a list repr}'`` plus a blank line per cell, cells joined by a
  space, no outputs), then cut into ~1,000-token chunks the way ``RecursiveCharacterTextSplitter`` does
  (separators: blank line, newline, space, nothing; kept at the start of the next piece; 200 tokens of
  overlap), lengths counted with the embedder's tokenizer. Each chunk records the cells whose text it holds.
- ``per-cell``: one chunk per non-empty cell, source only.
- ``per-cell+outputs``: one chunk per cell, source plus its text outputs (stream text, ``text/plain``,
  ``ename: evalue`` and traceback, ANSI colour codes removed); no images, no HTML.

Each is indexed into its own ``LanceStore`` and searched either by BM25 only or by vectors only (texts longer
than the model's window are simply truncated by the embedder, as a naive user's would be). Results are one per
chunk, in score order, no grouping by notebook.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nbrecall.index.cache import EmbeddingCache
from nbrecall.index.store import LanceStore
from nbrecall.notebook.files import walk_notebooks
from nbrecall.notebook.model import Cell, Notebook
from nbrecall.notebook.read import NotebookUnreadable, read_notebook
from nbrecall.records import ChunkRow, SearchFilters
from nbrecall.search.evaluate import SearchFn

log = logging.getLogger(__name__)

BASELINES = ("langchain", "per-cell", "per-cell+outputs")
MODES = ("bm25", "dense")
FORMAT_VERSION = 1  # bump when chunk texts change, so stored baselines are rebuilt
TOP_K = 50
CHUNK_TOKENS = 1000
CHUNK_OVERLAP = 200
BATCH_ROWS = 2000
SEPARATORS = ("\n\n", "\n", " ", "")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MARKER = "baseline.json"

TokenCounter = Callable[[list[str]], list[int]]


@dataclass
class BaselineChunk:
    notebook: str
    text: str
    cells: list[int]


def text_hash(text: str) -> str:
    """Same key as `nbrecall.ingest.chunk.text_hash`, so the embedding cache format is shared."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# --- (a) LangChain NotebookLoader + RecursiveCharacterTextSplitter ------------------------------------------


def source_lines(source: str) -> list[str]:
    """The source as nbformat stores it on disk: a list of lines, each keeping its newline."""
    return source.splitlines(keepends=True)


def langchain_text(nb: Notebook) -> tuple[str, list[tuple[int, int, int]]]:
    """NotebookLoader's page_content (default arguments) and (start, end, cell index) of each cell's text."""
    parts: list[str] = []
    spans: list[tuple[int, int, int]] = []
    pos = 0
    for n, cell in enumerate(nb.cells):
        if n:
            parts.append(" ")  # pandas .str.cat(sep=" ")
            pos += 1
        segment = f"'{cell.cell_type}' cell: '{source_lines(cell.source)}'\n\n"
        parts.append(segment)
        spans.append((pos, pos + len(segment), cell.index))
        pos += len(segment)
    return "".join(parts), spans


def _token_length(count_tokens: TokenCounter) -> Callable[[list[str]], list[int]]:
    """Tokens per text without the special tokens the counter adds once per text ([CLS]/[SEP])."""
    overhead = count_tokens([""])[0]
    return lambda texts: [max(0, n - overhead) for n in count_tokens(texts)] if texts else []


def _pieces(text: str, start: int, end: int, sep: str) -> list[tuple[int, int]]:
    """Spans of text[start:end] cut before each occurrence of `sep` (the separator starts the next piece)."""
    if sep == "":
        return [(i, i + 1) for i in range(start, end)]
    spans: list[tuple[int, int]] = []
    prev = start
    pos = text.find(sep, start, end)
    while pos != -1:
        if pos > prev:
            spans.append((prev, pos))
        prev = pos
        pos = text.find(sep, pos + len(sep), end)
    if end > prev:
        spans.append((prev, end))
    return spans


def _strip(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def _merge(text: str, spans: list[tuple[int, int]], lens: list[int], budget: int,
           overlap: int) -> list[tuple[int, int]]:
    """LangChain's `_merge_splits`, empty joiner: contiguous pieces up to `budget`, `overlap` carried over."""
    docs: list[tuple[int, int]] = []
    first = 0  # the current document is spans[first:i]
    total = 0
    for i, n in enumerate(lens):
        if i > first and total + n > budget:
            stripped = _strip(text, spans[first][0], spans[i - 1][1])
            if stripped:
                docs.append(stripped)
            while first < i and (total > overlap or (total + n > budget and total > 0)):
                total -= lens[first]
                first += 1
        total += n
    if first < len(spans):
        stripped = _strip(text, spans[first][0], spans[-1][1])
        if stripped:
            docs.append(stripped)
    return docs


def split_spans(text: str, length: Callable[[list[str]], list[int]], budget: int = CHUNK_TOKENS,
                overlap: int = CHUNK_OVERLAP, separators: tuple[str, ...] = SEPARATORS,
                start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """RecursiveCharacterTextSplitter (keep_separator=True, strip_whitespace=True), as (start, end) spans."""
    end = len(text) if end is None else end
    sep = separators[-1]
    rest: tuple[str, ...] = ()
    for i, candidate in enumerate(separators):
        if candidate == "":
            sep = candidate
            break
        if text.find(candidate, start, end) != -1:
            sep, rest = candidate, separators[i + 1:]
            break
    spans = _pieces(text, start, end, sep)
    if sep == "":  # one piece per character: count each distinct character once
        chars = sorted(set(text[start:end]))
        per_char = dict(zip(chars, length(chars), strict=True))
        lens = [per_char[text[a]] for a, _b in spans]
    else:
        lens = length([text[a:b] for a, b in spans])
    out: list[tuple[int, int]] = []
    good: list[tuple[int, int]] = []
    good_lens: list[int] = []
    for span, n in zip(spans, lens, strict=True):
        if n < budget:
            good.append(span)
            good_lens.append(n)
            continue
        if good:
            out.extend(_merge(text, good, good_lens, budget, overlap))
            good, good_lens = [], []
        if rest:
            out.extend(split_spans(text, length, budget, overlap, rest, span[0], span[1]))
        else:
            stripped = _strip(text, *span)
            if stripped:
                out.append(stripped)
    if good:
        out.extend(_merge(text, good, good_lens, budget, overlap))
    return out


def langchain_chunks(nb: Notebook, count_tokens: TokenCounter, budget: int = CHUNK_TOKENS,
                     overlap: int = CHUNK_OVERLAP) -> list[BaselineChunk]:
    text, cell_spans = langchain_text(nb)
    if not text.strip():
        return []
    chunks = []
    for a, b in split_spans(text, _token_length(count_tokens), budget, overlap):
        cells = [index for start, end, index in cell_spans if start < b and a < end]
        chunks.append(BaselineChunk(nb.path, text[a:b], cells))
    return chunks


# --- (b), (c) one chunk per cell ----------------------------------------------------------------------------


def output_text(cell: Cell) -> str:
    """A cell's text outputs joined: streams, text/plain, errors with traceback; ANSI codes removed."""
    parts: list[str] = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            plain = out.data.get("text/plain")
            if isinstance(plain, str):
                parts.append(plain)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
            parts.extend(out.traceback)
    return _ANSI.sub("", "\n".join(p.strip("\n") for p in parts if p.strip()))


def per_cell_chunks(nb: Notebook, with_outputs: bool) -> list[BaselineChunk]:
    chunks = []
    for cell in nb.cells:
        text = cell.source.strip("\n") if cell.source.strip() else ""
        if with_outputs and cell.is_code:
            outputs = output_text(cell)
            text = "\n".join(p for p in (text, outputs) if p)
        if text.strip():
            chunks.append(BaselineChunk(nb.path, text, [cell.index]))
    return chunks


def notebook_chunks(name: str, nb: Notebook, count_tokens: TokenCounter) -> list[BaselineChunk]:
    """The chunks baseline `name` makes of one notebook (`nb.path` is its path relative to the corpus)."""
    if name == "langchain":
        return langchain_chunks(nb, count_tokens)
    if name == "per-cell":
        return per_cell_chunks(nb, with_outputs=False)
    if name == "per-cell+outputs":
        return per_cell_chunks(nb, with_outputs=True)
    raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")


def corpus_files(corpus_root: Path) -> list[tuple[Path, str]]:
    base = corpus_root.resolve()
    return [(p, p.relative_to(base).as_posix())
            for p in walk_notebooks(base, skip_hidden=True, exclude=[".ipynb_checkpoints"])]


def iter_baseline_chunks(name: str, corpus_root: Path, count_tokens: TokenCounter,
                         skipped: list[str] | None = None) -> Iterator[list[BaselineChunk]]:
    """One list of chunks per readable notebook, streamed; unreadable files are appended to `skipped`."""
    for path, rel in corpus_files(corpus_root):
        try:
            nb = read_notebook(path, display_path=rel)
        except NotebookUnreadable as exc:
            log.warning("baseline %s: skipping %s", name, exc)
            if skipped is not None:
                skipped.append(rel)
            continue
        yield notebook_chunks(name, nb, count_tokens)


# --- indexing -----------------------------------------------------------------------------------------------


def _identity(name: str, corpus_root: Path, embedder: Any) -> dict[str, Any]:
    listing = [(rel, path.stat().st_size) for path, rel in corpus_files(corpus_root)]
    digest = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
    return {"format": FORMAT_VERSION, "baseline": name, "model": embedder.model_id,
            "max_tokens": int(embedder.max_tokens), "corpus": str(corpus_root.resolve()),
            "files": len(listing), "files_sha256": digest}


def _attach_vectors(rows: list[ChunkRow], embedder: Any, cache: EmbeddingCache) -> int:
    """Give every row its vector from the cache or the embedder; return how many texts were embedded."""
    hashes = [text_hash(r.text) for r in rows]
    found = cache.get_many(sorted(set(hashes)), embedder.model_id)
    missing: dict[str, str] = {}
    for h, row in zip(hashes, rows, strict=True):
        if h not in found:
            missing.setdefault(h, row.text)
    if missing:
        keys = list(missing)
        vectors = np.asarray(embedder.embed([missing[k] for k in keys]), dtype=np.float32)
        new = dict(zip(keys, vectors, strict=True))
        cache.put_many(new, embedder.model_id)
        found.update(new)
    for h, row in zip(hashes, rows, strict=True):
        row.vector = found[h]
    return len(missing)


def _rows(name: str, root: str, chunks: list[BaselineChunk]) -> list[ChunkRow]:
    rows = []
    for seq, chunk in enumerate(chunks):
        nb_sha = hashlib.sha256(chunk.notebook.encode("utf-8", "surrogatepass")).hexdigest()
        rows.append(ChunkRow(chunk_id=f"{nb_sha}:{seq}", nb_sha=nb_sha, notebook=chunk.notebook, root=root,
                             kind=name, cells=list(chunk.cells), cell_ids=[str(c) for c in chunk.cells],
                             anchor=chunk.cells[0], anchor_id=str(chunk.cells[0]), heading="",
                             text=chunk.text))
    return rows


def build_baseline(name: str, corpus_root: Path, out_dir: Path, embedder: Any, *,
                   batch_rows: int = BATCH_ROWS) -> LanceStore:
    """Index baseline `name` over the corpus into `out_dir/name`; reuse it if built for the same files+model.

    Vectors come from `out_dir/embeddings.sqlite` (keyed by text hash + model id) when already computed.
    Notebooks are streamed and written a batch of whole notebooks at a time, so memory stays bounded.
    """
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
    folder = out_dir / name
    marker = folder / MARKER
    identity = _identity(name, corpus_root, embedder)
    lance_dir = folder / "lance"
    if marker.is_file() and lance_dir.is_dir():
        try:
            stored = json.loads(marker.read_text(encoding="utf-8"))
        except ValueError:
            stored = {}
        if stored.get("identity") == identity:
            store = LanceStore(lance_dir, embedder.dim)
            if store.count() == stored.get("chunks"):
                log.info("baseline %s: reusing %s (%d chunks)", name, folder, store.count())
                return store
    if marker.exists():
        marker.unlink()
    if lance_dir.exists():
        shutil.rmtree(lance_dir)
    started = time.perf_counter()
    store = LanceStore(lance_dir, embedder.dim)
    cache = EmbeddingCache(out_dir / "embeddings.sqlite")
    root = str(corpus_root.resolve())
    skipped: list[str] = []
    pending: list[ChunkRow] = []
    notebooks = chunks = embedded = 0

    def flush() -> None:
        nonlocal embedded, chunks
        if not pending:
            return
        embedded += _attach_vectors(pending, embedder, cache)
        store.replace_notebooks([], pending)
        chunks += len(pending)
        log.info("baseline %s: %d notebooks, %d chunks, %d embedded, %.0f s", name, notebooks, chunks,
                 embedded, time.perf_counter() - started)
        pending.clear()

    try:
        for nb_chunks in iter_baseline_chunks(name, corpus_root, embedder.count_tokens, skipped):
            notebooks += 1
            pending.extend(_rows(name, root, nb_chunks))
            if len(pending) >= batch_rows:
                flush()
        flush()
    finally:
        cache.close()
    store.finish_run()
    seconds = time.perf_counter() - started
    marker.write_text(json.dumps({"identity": identity, "notebooks": notebooks, "chunks": chunks,
                                  "embedded": embedded, "skipped": skipped, "seconds": round(seconds, 1)},
                                 indent=1), encoding="utf-8")
    log.info("baseline %s: built in %.0f s (%d chunks, %d newly embedded, %d unreadable)", name, seconds,
             chunks, embedded, len(skipped))
    return store


# --- searching ----------------------------------------------------------------------------------------------


def _result(row: dict[str, Any], score: float) -> dict[str, Any]:
    cells = [int(c) for c in row.get("cells") or []]
    return {"notebook": row["notebook"], "cell": cells[0] if cells else int(row.get("anchor") or 0),
            "cells": cells, "score": score, "chunk_id": row["chunk_id"]}


def baseline_search(store: LanceStore, embedder: Any, mode: str, k: int = TOP_K) -> SearchFn:
    """A search function over a baseline store: BM25 only ("bm25") or vectors only ("dense"), top k chunks."""
    filters = SearchFilters(include_deprecated=True)
    if mode == "bm25":
        def search(query: str) -> list[dict[str, Any]]:
            return [_result(row, float(row.get("_score") or 0.0)) for row in store.keyword(query, k, filters)]
    elif mode == "dense":
        def search(query: str) -> list[dict[str, Any]]:
            if not query.strip():
                return []
            vector = np.asarray(embedder.embed([query]), dtype=np.float32)[0]
            results = []
            for row in store.vector(vector, k, filters):
                distance = row.get("_distance")
                if distance is None or np.isnan(distance):
                    continue
                results.append(_result(row, 1.0 - float(distance)))
            return results
    else:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    return search
