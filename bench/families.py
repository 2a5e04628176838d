"""Notebook families of an index: list them, check the copies a query set knows, sweep the thresholds.

    python bench/families.py --index /tmp/wt20/idx2 --queries ../shared/eval2/queries.jsonl [--list] [--sweep]
                             [--results RESULTS.jsonl]

Reads the index's manifest only (signatures, families, paths). `--list` prints every family of two or more with
its members; the `also` fields of the query set name copies of a query's notebook: each such pair is reported
joined or not. `--sweep` recomputes families from the stored signatures over all pairs (exact pairwise estimates,
no LSH: what the LSH may miss shows as a difference from the stored families) for several thresholds.
`--results` reads the JSON Lines of `nbrecall search - --json -k 30` (of any nbrecall version, e.g. main before
families, over the query set's questions in order) and gives the distinct families among the first five results
(fam@5, as `nbrecall eval` counts it), the families taken from this index by path: "before" for a version that
does not group.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from nbrecall.config import FamilySettings
from nbrecall.index.family_store import family_store
from nbrecall.index.manifest import SqliteManifest
from nbrecall.notebook.checkpoints import is_checkpoint, saved_path
from nbrecall.protocols import Manifest


def _paths(manifest: Manifest) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for sha, rel in manifest.db.execute("SELECT sha256, rel FROM files ORDER BY rel"):
        out.setdefault(sha, []).append(rel)
    return out


def also_pairs(queries: Path) -> list[tuple[str, str]]:
    pairs: set[tuple[str, str]] = set()
    for line in queries.read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            for other in q.get("also") or []:
                pairs.add((q["notebook"], other))
    return sorted(pairs)


def components(n: int, edges: list[tuple[int, int]]) -> list[int]:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return [find(i) for i in range(n)]


def fam_at_5(results: Path, queries: Path, family_of: dict[str, str]) -> None:
    """fam@5 (and nb@1, nb@3 as a check against `nbrecall eval`) of stored search results, families by path."""
    from nbrecall.search.evaluate import judge, load_queries, metrics

    items = load_queries(queries)
    lines = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(lines) != len(items) or any(r["query"] != q.query.strip() for r, q in zip(lines, items, strict=False)):
        raise SystemExit(f"{results}: expected one line per query of {queries}, in order")
    outcomes = []
    for item, line in zip(items, lines, strict=True):
        for hit in line["results"]:
            if not hit.get("family"):  # results of a version before families, or with families off ("")
                hit["family"] = family_of.get(hit["notebook"], hit["notebook"])
        outcomes.append(judge(item, line["results"]))
    m = metrics(outcomes)
    print(f"\n{results}: {len(items)} queries; nb@1 {m['nb@1']:.3f}  nb@3 {m['nb@3']:.3f}  "
          f"cell@10c {m['cell@10c']:.3f}  fam@5 {m['fam@5']:.3f} (families of this index)")


def repo(rel: str) -> str:
    return rel.split("/", 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--queries", type=Path)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--results", type=Path, help="search JSON Lines to count families in the top 5 of")
    args = parser.parse_args()
    manifest = SqliteManifest(args.index / "manifest.sqlite", readonly=True)
    store = family_store(manifest)
    if store is None:
        print("no families in this index (made before families, or with [families] enabled = false)")
        return 1
    paths = _paths(manifest)
    shas = sorted(sha for sha in paths if manifest.content(sha) and manifest.content(sha).status == "indexed")
    family = store.families_of(shas)
    groups: dict[str, list[str]] = {}
    for sha in shas:
        groups.setdefault(family.get(sha, sha), []).append(sha)
    multi = sorted((g for g in groups.values() if len(g) > 1), key=lambda g: (-len(g), min(paths[s][0] for s in g)))
    sizes: dict[int, int] = {}
    for g in multi:
        sizes[len(g)] = sizes.get(len(g), 0) + 1
    cross = [g for g in multi if len({repo(paths[s][0]) for s in g}) > 1]
    print(f"{len(shas)} indexed contents, {sum(len(p) for p in paths.values())} files; {len(multi)} families of two "
          f"or more holding {sum(len(g) for g in multi)} contents; sizes {dict(sorted(sizes.items()))}; "
          f"{len(cross)} span two or more top-level folders")
    print(f"stored with: {store.state()}")
    if args.list:
        for i, g in enumerate(multi, 1):
            print(f"\nfamily {i} ({len(g)}):")
            for sha in sorted(g, key=lambda s: paths[s][0]):
                extra = f"  (+{len(paths[sha]) - 1} identical)" if len(paths[sha]) > 1 else ""
                mark = f"  [checkpoint of {saved_path(paths[sha][0])}]" if is_checkpoint(paths[sha][0]) else ""
                print(f"  {paths[sha][0]}{extra}{mark}")
    by_path = {rel: sha for sha, rels in paths.items() for rel in rels}
    if args.queries:
        print(f"\ncopies named by the `also` fields of {args.queries}:")
        joined = 0
        pairs = also_pairs(args.queries)
        for a, b in pairs:
            sa, sb = by_path.get(a), by_path.get(b)
            same = sa is not None and sb is not None and (sa == sb or family.get(sa, sa) == family.get(sb, sb))
            joined += same
            print(f"  {'joined ' if same else 'APART  '} {a}  ~  {b}")
        print(f"{joined} of {len(pairs)} pairs joined")
    if args.results and args.queries:
        fam_at_5(args.results, args.queries, {rel: family.get(sha, sha) for rel, sha in by_path.items()})
    if args.sweep:
        sigs = store.signatures(shas)
        order = [s for s in shas if s in sigs]
        matrix = np.stack([sigs[s].array() for s in order])
        size = np.array([sigs[s].size for s in order], dtype=np.float64)
        started = time.perf_counter()
        pairs_j: list[tuple[int, int, float, float]] = []
        for i in range(len(order)):
            same = (matrix[i + 1 :] == matrix[i]).mean(axis=1)
            for off in np.nonzero(same >= 0.2)[0]:
                j = i + 1 + int(off)
                jac = float(same[off])
                small = min(size[i], size[j])
                cont = min(1.0, jac * (size[i] + size[j]) / ((1 + jac) * small)) if small else 0.0
                shared = jac * (size[i] + size[j]) / (1 + jac)
                if small >= FamilySettings().min_shared and shared >= FamilySettings().min_shared:
                    pairs_j.append((i, j, jac, cont))
        print(f"\nsweep over {len(order)} signatures ({time.perf_counter() - started:.1f} s of pairwise estimates)")
        print("threshold  min_jaccard  families  contents  cross-folder  also-joined")
        known = [(by_path.get(a), by_path.get(b)) for a, b in (also_pairs(args.queries) if args.queries else [])]
        index_of = {s: i for i, s in enumerate(order)}
        for threshold in (0.5, 0.6, 0.7, 0.8, 0.9):
            for min_j in (0.2, 0.3, 0.4, 0.5):
                edges = [(i, j) for i, j, jac, cont in pairs_j if jac >= min_j and cont >= threshold]
                comp = components(len(order), edges)
                count: dict[int, list[int]] = {}
                for i, c in enumerate(comp):
                    count.setdefault(c, []).append(i)
                fams = [m for m in count.values() if len(m) > 1]
                crossing = sum(1 for m in fams if len({repo(paths[order[i]][0]) for i in m}) > 1)
                ok = sum(1 for a, b in known if a and b and (a == b or comp[index_of[a]] == comp[index_of[b]]))
                print(f"{threshold:9.1f}  {min_j:11.1f}  {len(fams):8d}  {sum(len(m) for m in fams):8d}  "
                      f"{crossing:12d}  {ok}/{len(known)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
