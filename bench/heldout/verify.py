#!/usr/bin/env python3
"""Check the held-out notebook question set line by line (standard library only).

Usage:
    python3 verify.py [QUERIES] [--corpus DIR] [--eval2-corpus DIR] [--root NAME=DIR ...] [--exclude JSONL:CORPUS ...]
                      [--max-per-repo N]
    python3 verify.py ../heldout_b/queries.jsonl --exclude ../../../shared/eval/queries.jsonl:corpus \
        --exclude ../../../shared/eval2/queries.jsonl:eval2 --exclude queries.jsonl:
      (the second held-out set: the first one's notebooks are off limits too; an empty CORPUS, or a line's own
      `corpus` field, says which corpus each excluded line is over)

Defaults: QUERIES = queries.jsonl next to this file, corpus roots
../shared/corpus ("corpus") and ../shared/eval2/corpus ("eval2"), and the
exclusion lists ../shared/eval/queries.jsonl (over "corpus") and
../shared/eval2/queries.jsonl (over "eval2").

Per line it checks:
  - JSON parses; fields id, query, kind, notebook, cells, answer, note, corpus present;
    id unique; kind is "value" or "where"; corpus is "corpus", "eval2" or a NAME given by --root
  - the notebook (and each "also" path) exists under its corpus root and parses;
    cell indices are ints within range of the nbformat-4 cell list
  - the notebook / also paths are not named (notebook or also) by an existing set
  - value: answer is a non-empty string found verbatim in an output of a listed cell
    (stream text, text/plain, text/html, text/latex, text/markdown, error text),
    after stripping ANSI escape sequences
  - where: answer is null
  - the query has 3-25 whitespace-separated words (6-22 is the target; lengths
    outside it are reported as notes, not failures)
  - no run of 5 consecutive word tokens (lower-cased \\w+ tokens) of the query occurs
    in the source of any listed cell
It also prints counts per kind, per corpus and per top-level repository folder and
fails if a repository folder holds more than 4 questions (`--max-per-repo N` for a larger set).
Exit status 0 when every check passes, 1 otherwise.
"""
import json
import os
import re
import sys
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))  # ../shared beside the checkout
ROOTS = {"corpus": os.path.join(SHARED, "corpus"), "eval2": os.path.join(SHARED, "eval2", "corpus")}
EXISTING = [(os.path.join(SHARED, "eval", "queries.jsonl"), "corpus"),
            (os.path.join(SHARED, "eval2", "queries.jsonl"), "eval2")]
REQUIRED = ("id", "query", "kind", "notebook", "cells", "answer", "note", "corpus")
ESC = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
WORD = re.compile(r"\w+", re.UNICODE)
NGRAM = 5
MAX_PER_REPO = 4


def text_of(value):
    """nbformat stores multi-line strings either as a string or a list of lines."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return str(value)


def output_texts(output):
    """All searchable text carried by one code-cell output."""
    kind = output.get("output_type")
    if kind == "stream":
        return [text_of(output.get("text"))]
    if kind == "error":
        return ["{}: {}".format(output.get("ename", ""), output.get("evalue", "")),
                "\n".join(text_of(t) for t in output.get("traceback") or [])]
    if kind in ("execute_result", "display_data"):
        data = output.get("data") or {}
        return [text_of(data[m]) for m in ("text/plain", "text/html", "text/latex", "text/markdown")
                if m in data]
    # nbformat-3 style results, in case such a notebook is ever listed
    if kind in ("pyout", "pyerr"):
        return [text_of(output.get(k)) for k in ("text", "html", "latex", "markdown") if k in output]
    return []


def read_notebook(path):
    """Return a list of cells as dicts {type, source, outputs:[text,...]} in nbformat-4 order."""
    with open(path, encoding="utf-8") as fh:
        nb = json.load(fh)
    if nb.get("nbformat", 4) >= 4 and "cells" in nb:
        raw = nb["cells"]
        v3 = False
    else:  # flatten nbformat-3 worksheets; heading cells count as one markdown cell each
        raw = [c for ws in nb.get("worksheets", []) for c in ws.get("cells", [])]
        v3 = True
    cells = []
    for c in raw:
        src = text_of(c.get("input") if v3 and c.get("cell_type") == "code" else c.get("source"))
        outs = []
        for o in c.get("outputs", []) or []:
            outs.extend(ESC.sub("", t) for t in output_texts(o))
        cells.append({"type": c.get("cell_type"), "source": src, "outputs": outs})
    return cells


def tokens(s):
    return [t.lower() for t in WORD.findall(s)]


def shared_ngram(query, sources, n=NGRAM):
    q = tokens(query)
    if len(q) < n:
        return None
    grams = set()
    for s in sources:
        t = tokens(s)
        grams.update(tuple(t[i:i + n]) for i in range(len(t) - n + 1))
    for i in range(len(q) - n + 1):
        g = tuple(q[i:i + n])
        if g in grams:
            return " ".join(g)
    return None


def load_excluded(pairs):
    excluded = set()
    for path, corpus in pairs:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                q = json.loads(line)
                where = q.get("corpus") or corpus  # a held-out set names each line's corpus
                excluded.add((where, q["notebook"]))
                for extra in q.get("also") or []:
                    excluded.add((where, extra))
    return excluded


def parse_args(argv):
    queries = os.path.join(HERE, "queries.jsonl")
    roots = dict(ROOTS)
    existing = []
    max_per_repo = MAX_PER_REPO
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--corpus":
            roots["corpus"] = argv[i + 1]
            i += 2
        elif a == "--eval2-corpus":
            roots["eval2"] = argv[i + 1]
            i += 2
        elif a == "--root":  # a further corpus, outside ../shared: NAME=DIR
            name, _, root = argv[i + 1].partition("=")
            roots[name] = root
            i += 2
        elif a == "--max-per-repo":
            max_per_repo = int(argv[i + 1])
            i += 2
        elif a == "--exclude":
            path, _, corp = argv[i + 1].rpartition(":")
            existing.append((path, corp))
            i += 2
        else:
            queries = a
            i += 1
    return queries, roots, existing or list(EXISTING), max_per_repo


def main(argv):
    qpath, roots, existing, max_per_repo = parse_args(argv)
    excluded = load_excluded(existing)
    problems = []
    notes = []
    cache = {}
    seen = set()
    by_kind, by_corpus, by_repo = Counter(), Counter(), Counter()
    kind_repo = defaultdict(Counter)
    nbs = set()
    n = 0

    def cells_for(corpus, rel):
        key = (corpus, rel)
        if key not in cache:
            cache[key] = read_notebook(os.path.join(roots[corpus], rel))
        return cache[key]

    with open(qpath, encoding="utf-8") as fh:
        lines = fh.readlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        n += 1
        try:
            q = json.loads(line)
        except ValueError as exc:
            problems.append(f"line {lineno}: invalid JSON ({exc})")
            continue
        qid = q.get("id") or f"line {lineno}"

        def fail(msg, qid=qid):
            problems.append(f"{qid}: {msg}")

        absent = [f for f in REQUIRED if f not in q]
        if absent:
            fail("missing field(s) {}".format(", ".join(absent)))
            continue
        if qid in seen:
            fail("id used twice")
        seen.add(qid)
        kind, corpus, rel = q["kind"], q["corpus"], q["notebook"]
        if kind not in ("value", "where"):
            fail(f"kind must be value or where, got {kind!r}")
        if corpus not in roots:
            fail(f"corpus must be one of {sorted(roots)}, got {corpus!r}")
            continue
        repo = rel.split("/", 1)[0]
        by_kind[kind] += 1
        by_corpus[corpus] += 1
        by_repo[(corpus, repo)] += 1
        kind_repo[(corpus, repo)][kind] += 1
        nbs.add((corpus, rel))

        words = q["query"].split()
        if not 3 <= len(words) <= 25:
            fail(f"query has {len(words)} words (allowed 3-25)")
        elif not 6 <= len(words) <= 22:
            notes.append(f"{qid}: {len(words)} words, outside the 6-22 target length")

        for p in [rel] + list(q.get("also") or []):
            if (corpus, p) in excluded:
                fail(f"notebook {p} is named by an existing question set")
        try:
            cells = cells_for(corpus, rel)
        except (OSError, ValueError) as exc:
            fail(f"cannot read notebook {rel} ({exc})")
            continue
        for p in q.get("also") or []:
            try:
                cells_for(corpus, p)
            except (OSError, ValueError) as exc:
                fail(f"cannot read also-notebook {p} ({exc})")

        idx = q["cells"]
        if not isinstance(idx, list) or not idx or not all(isinstance(i, int) and not isinstance(i, bool) for i in idx):
            fail("cells must be a non-empty list of integers")
            continue
        bad = [i for i in idx if i < 0 or i >= len(cells)]
        if bad:
            fail(f"cell index(es) {bad} outside 0..{len(cells) - 1}")
            continue
        chosen = [cells[i] for i in idx]

        if kind == "value":
            ans = q["answer"]
            if not isinstance(ans, str) or not ans:
                fail("value question needs a non-empty string answer")
            elif not any(ans in text for c in chosen for text in c["outputs"]):
                fail(f"answer {ans!r} not found in the outputs of cells {idx}")
        elif q["answer"] is not None:
            fail("where question must have answer null")

        hit = shared_ngram(q["query"], [c["source"] for c in chosen])
        if hit:
            fail(f"query shares {NGRAM} consecutive words with target source: {hit!r}")

    for (corpus, repo), k in sorted(by_repo.items()):
        if k > max_per_repo:
            problems.append(f"repository {corpus}/{repo} has {k} questions (max {max_per_repo})")

    print(f"{qpath}: {n} questions over {len(nbs)} notebooks")
    print("by kind:  ", dict(sorted(by_kind.items())))
    print("by corpus:", dict(sorted(by_corpus.items())))
    for corpus in sorted(roots):
        vals = sum(kind_repo[k]["value"] for k in kind_repo if k[0] == corpus)
        whs = sum(kind_repo[k]["where"] for k in kind_repo if k[0] == corpus)
        print(f"  {corpus:<6s} value={vals} where={whs}")
    print("by repository folder (value/where):")
    for (corpus, repo), k in sorted(by_repo.items()):
        c = kind_repo[(corpus, repo)]
        print(f"  {corpus:<6s} {repo:<72s} {k} ({c['value']}/{c['where']})")
    for note in notes:
        print("note (not a failure): " + note)
    if problems:
        print(f"FAILED ({len(problems)} problem(s)):")
        for p in problems:
            print("  " + p)
        return 1
    print(f"OK: all {n} questions pass")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
