"""Notebook families: copies, versions and checkpoints of one notebook, found at index time.

A share drive holds the same notebook many times: copied into the next project, saved as `_v2` or `_final`,
exported as an exercise and its solution, kept in `.ipynb_checkpoints`. Byte-identical files are already one
content with several paths; a *family* groups the contents that are largely the same, so search shows one entry
per family with its other versions listed (`search.families`).

How two contents are found to be versions, in time linear in the archive:

* Shingles are the distinct lines of a notebook's sources and of its indexed (filtered) outputs, whitespace
  collapsed; lines without a letter or digit do not count. A changed parameter changes one line; a re-run that
  changed a table changes its rows.
* Each content gets a MinHash signature of its shingles (datasketch's `affine32` MinHash, `num_perm` permutations,
  computed with numpy) in the worker that chunks it, and an LSH index over bands of the signature (`b` bands of
  `r` rows, chosen as datasketch's LSH chooses them for `min_jaccard`) lives in the manifest (`family_bands`),
  so the candidates of a new notebook are a lookup of its own buckets, never a pass over the archive (a first
  run reads the buckets once, in order).
* A candidate pair is an edge when the estimated Jaccard similarity J is at least `min_jaccard` and the estimated
  share of the smaller notebook's lines found in the larger (J·(|A|+|B|) / ((1+J)·min(|A|,|B|))) is at least
  `threshold`, and they have at least `min_shared` lines in common: a `_v2` with one changed cell, a copy with its
  outputs re-run and an executed export of a source notebook all pass; two lessons built from the same template
  mostly do not, nor two near-empty pages that share a header and a licence (measured in bench/README.md).
* A checkpoint (`D/.ipynb_checkpoints/N-checkpoint.ipynb`) is always an edge to the notebook it saves
  (`D/N.ipynb`), whatever their similarity: it is a version of that notebook by where it lives.
* A family is a connected component of edges; its id is the smallest content hash in it (so the same archive
  gives the same families whatever order it was indexed in).

Incremental: a content whose signature is new (new, changed or re-indexed notebook) is *pending* until the
family step of the run places it: its candidates' families are merged with it. A content that is gone (its last
file deleted or changed) leaves its family, and only that family's remaining members are re-split. Nothing else
is recomputed; a killed run leaves the pending marks, and the next run finishes the work.
"""

from __future__ import annotations

import hashlib
import re
import time
import zlib
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nbrecall.config import FamilySettings
from nbrecall.notebook.checkpoints import checkpoint_path, is_checkpoint, saved_path
from nbrecall.records import Signature

if TYPE_CHECKING:
    from nbrecall.records import CellRecord

SHINGLES_VERSION = "lines-1 crc32"  # what a shingle is and how it is hashed; a change re-signs every content
SCHEME = "affine32"  # datasketch's permutation scheme (uint32 hash values); lines hashed with CRC-32, each mixed
# with a MurmurHash3 finaliser before permuting, as datasketch does (SHA-1, its default, cost 4x as much per line)
MAX_MATES = 400  # candidates looked at per content: a bucket shared by thousands (one template) stays bounded

_WORDLIKE = re.compile(r"\w")


def shingles(cells: Iterable[CellRecord]) -> set[str]:
    """The distinct lines of the sources and indexed outputs of `cells`, whitespace collapsed."""
    found: set[str] = set()
    for cell in cells:
        for text in (cell.source, cell.outputs):
            found.update(" ".join(line.split()) for line in text.splitlines())
    return {line for line in found if _WORDLIKE.search(line)}


def _permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """The affine permutations h -> a·h + b (mod 2^32, `a` odd) of datasketch's `affine32` scheme, seed 1."""
    cached = _PERMUTATIONS.get(num_perm)
    if cached is None:
        gen = np.random.RandomState(1)
        a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
        b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
        cached = _PERMUTATIONS[num_perm] = (a, b)
    return cached


_PERMUTATIONS: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # constants derived from `num_perm`, made once
_MIX = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35), np.uint32(16))  # MurmurHash3 fmix32
_LINES_AT_ONCE = 4096  # lines permuted at once: a notebook of 100k lines needs 2 MiB, not 50 MiB


def signature(cells: Iterable[CellRecord], num_perm: int = 128) -> Signature:
    """The MinHash signature of a content's cells (`shingles`).

    The values are datasketch's (`MinHash(num_perm, seed=1, scheme="affine32", hashfunc=zlib.crc32)`, checked in
    the tests), computed here with numpy: importing datasketch imports its LSH modules and with them scipy, 46 MiB
    more in every worker process, for what is ten lines of arithmetic."""
    lines = sorted(shingles(cells))
    a, b = _permutations(num_perm)
    values = np.full(num_perm, np.iinfo(np.uint32).max, dtype=np.uint32)
    s1, m1, s2, m2, s3 = _MIX
    for start in range(0, len(lines), _LINES_AT_ONCE):
        part = lines[start : start + _LINES_AT_ONCE]
        h = np.array([zlib.crc32(line.encode("utf-8", "surrogatepass")) for line in part], dtype=np.uint32)
        h = h ^ (h >> s1)
        h = h * m1
        h = h ^ (h >> s2)
        h = h * m2
        h = (h ^ (h >> s3)).reshape(-1, 1)
        np.minimum(values, (h * a + b).min(axis=0), out=values)
    return Signature(len(lines), values.tobytes())


@dataclass(frozen=True)
class Banding:
    """How signatures are cut into LSH bands: `b` bands of `r` values, chosen as datasketch's `MinHashLSH` chooses
    them for `min_jaccard` (checked in the tests): the (b, r) with b·r <= `num_perm` that minimise the mean of the
    false-positive and false-negative probability areas. Chosen once per run, in the main process."""

    num_perm: int
    b: int
    r: int

    @classmethod
    def for_settings(cls, settings: FamilySettings) -> Banding:
        b, r = optimal_bands(settings.min_jaccard, settings.num_perm)
        return cls(settings.num_perm, b, r)

    def keys(self, sig: Signature) -> list[tuple[int, int]]:
        """(band, key) pairs: two signatures that agree on all `r` values of a band share that band's key."""
        values = sig.array()
        if sig.size == 0 or len(values) != self.num_perm:
            return []
        return [(band, self.key(values, band)) for band in range(self.b)]

    def key(self, values: np.ndarray, band: int) -> int:
        """The bucket of a signature's values in one band."""
        piece = values[band * self.r : (band + 1) * self.r].tobytes()
        return int.from_bytes(hashlib.blake2b(piece, digest_size=8).digest(), "big", signed=True)


def optimal_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """The (bands, rows) that minimise ½·P(false positive) + ½·P(false negative) for Jaccard `threshold`.

    P(a pair of similarity s shares a bucket) = 1 − (1 − s^r)^b, a polynomial of degree b·r <= `num_perm` in s;
    its areas below and above the threshold are integrated exactly by Gauss–Legendre quadrature of
    `num_perm`/2 + 1 nodes, for every (b, r) at once (the first minimum in (b, r) order wins, as in datasketch)."""
    nodes, weights = np.polynomial.legendre.leggauss(num_perm // 2 + 1)
    pairs = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]
    bands = np.array([p[0] for p in pairs], dtype=np.float64)[:, None]
    rows = np.array([p[1] for p in pairs], dtype=np.float64)[:, None]

    def area(low: float, high: float, missed: bool) -> np.ndarray:
        s = (high - low) / 2 * nodes + (high + low) / 2
        hit = 1.0 - (1.0 - s[None, :] ** rows) ** bands
        return ((1.0 - hit if missed else hit) @ weights) * (high - low) / 2

    error = 0.5 * area(0.0, threshold, missed=False) + 0.5 * area(threshold, 1.0, missed=True)
    return pairs[int(np.argmin(error))]


def state_key(settings: FamilySettings, banding: Banding) -> str:
    """What the stored families depend on besides the contents; a change re-places every content."""
    return (f"{SHINGLES_VERSION} {SCHEME} perm {banding.num_perm} bands {banding.b}x{banding.r} "
            f"threshold {settings.threshold} min_jaccard {settings.min_jaccard} min_shared {settings.min_shared}")


def similarity(a: Signature, b: Signature) -> tuple[float, float]:
    """(estimated Jaccard similarity, estimated share of the smaller set's lines in the larger)."""
    x, y = a.array(), b.array()
    if a.size == 0 or b.size == 0 or len(x) != len(y):
        return 0.0, 0.0
    jaccard = float(np.count_nonzero(x == y)) / len(x)
    containment = jaccard * (a.size + b.size) / ((1.0 + jaccard) * min(a.size, b.size))
    return jaccard, min(1.0, containment)


def are_versions(a: Signature, b: Signature, settings: FamilySettings) -> bool:
    if min(a.size, b.size) < settings.min_shared:
        return False
    jaccard, containment = similarity(a, b)
    shared = jaccard * (a.size + b.size) / (1.0 + jaccard)
    return jaccard >= settings.min_jaccard and containment >= settings.threshold and shared >= settings.min_shared


@dataclass
class FamilyReport:
    """What one family step did (the run's summary and benchmarks)."""

    placed: int = 0  # contents (new or changed) placed in a family
    left: int = 0  # contents that left their family (gone)
    resplit: int = 0  # families re-split after a member left
    rebuilt: bool = False  # the settings changed: every content was placed again
    seconds: float = 0.0
    families: int = 0  # families of two or more after the step
    in_families: int = 0  # contents in them


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent.setdefault(x, x)
        while parent != x:
            grand = self.parent.setdefault(parent, parent)
            self.parent[x] = grand
            x, parent = parent, grand
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass
class _Graph:
    """The nodes one step places: contents, and whole unaffected families (`F:<id>`) they join."""

    uf: _UnionFind = field(default_factory=_UnionFind)
    family_of: dict[str, str] = field(default_factory=dict)  # member of an unaffected family → its id
    free: set[str] = field(default_factory=set)  # contents being placed (pending or re-split)

    def node(self, sha: str) -> str | None:
        if sha in self.free:
            return sha
        family = self.family_of.get(sha)
        return f"F:{family}" if family is not None else None

    def edge(self, a: str, b: str) -> None:
        na, nb = self.node(a), self.node(b)
        if na is not None and nb is not None:
            self.uf.union(na, nb)


def update_families(manifest: Any, settings: FamilySettings, banding: Banding | None = None) -> FamilyReport:
    """Place pending contents in families and re-split the families of contents that are gone (module doc).
    `banding`: the run's (`Banding.for_settings`), when the caller has it already."""
    from nbrecall.index.family_store import family_store

    started = time.perf_counter()
    report = FamilyReport()
    store = family_store(manifest)
    if store is None:
        return report
    with store.step_lock():
        _update(manifest, store, settings, banding or Banding.for_settings(settings), report)
    report.seconds = time.perf_counter() - started
    return report


def _update(manifest: Any, store: Any, settings: FamilySettings, banding: Banding, report: FamilyReport) -> None:
    key = state_key(settings, banding)
    if store.state() != key:  # other settings (or a first run over an index made before families)
        report.rebuilt = True
        with manifest.transaction():
            store.rebuild_bands(banding)
            store.set_state(key)
    unbanded = store.unbanded()
    if unbanded:  # the run's new signatures into the LSH index, band by band, each sorted by bucket
        arrays = {sha: sig.array() for sha, sig in unbanded.items()
                  if sig.size and len(sig.array()) == banding.num_perm}
        with manifest.transaction():
            for band in range(banding.b):
                store.add_bands(sorted((band, banding.key(values, band), sha) for sha, values in arrays.items()), [])
            store.add_bands([], sorted(unbanded))
    gone = store.gone()
    pending = store.pending()
    if gone or pending:
        _step(manifest, store, settings, banding, gone, pending, report)
    report.families, report.in_families = store.counts()


def _candidates(store: Any, banding: Banding, free: set[str], sigs: dict[str, Signature]) -> CandidatePairs:
    """The LSH candidates of each content in `free`: contents sharing a bucket with it. A large share of the
    archive (a first run) reads the buckets whole, in order; a few contents read only their own buckets."""
    if len(free) * 4 >= store.count_signatures():
        return candidate_pairs(store.all_bucket_rows(), free, MAX_MATES)
    keys = [key for sha in free if sha in sigs for key in banding.keys(sigs[sha])]
    return candidate_pairs(store.bucket_rows(keys), free, MAX_MATES)


@dataclass
class CandidatePairs:
    """Candidate pairs as integer arrays: `names[src[i]]` has `names[dst[i]]` among its mates.

    `names` is sorted, so an id orders like its content hash; the pairs are sorted by (src, dst), each content
    has at most `limit` mates (the first by hash) and only contents being placed have any. Held as int32
    arrays (8 bytes a pair), not Python strings in sets: a first run over 40k notebooks has millions of pairs."""

    names: list[str]
    src: np.ndarray
    dst: np.ndarray


_MERGE_EVERY = 1 << 23  # pairs gathered before they are merged into those kept so far (64 MiB)


def candidate_pairs(rows: Iterable[Any], wanted: set[str], limit: int) -> CandidatePairs:
    """`CandidatePairs` from (band, key, sha) rows in bucket order (by band, key, then sha).

    A bucket of thousands (one template) stays bounded: each of its members joins its first `limit` members, and
    those see the next `limit`, so that pairs are found from either side."""
    ids: dict[str, int] = {}
    names: list[str] = []
    is_wanted = bytearray()
    found = np.empty(0, dtype=np.int64)  # src << 32 | dst in the order ids were given: each src's best `limit`
    gathered = array("q")
    bucket: list[int] = []
    last: tuple[int, int] | None = None

    def merge() -> None:
        """Into `found`: distinct, a content's own id dropped, and only each content's first `limit` mates by hash
        (the ids' order by hash does not change as more arrive, so a mate cut now would be cut at the end too)."""
        nonlocal found
        if not gathered:
            return
        pairs = np.unique(np.concatenate([found, np.frombuffer(gathered, dtype=np.int64)]))
        del gathered[:]
        src, dst = pairs >> 32, pairs & 0xFFFFFFFF
        rank = np.empty(len(names), dtype=np.int64)
        rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names), dtype=np.int64)
        keep = src != dst
        pairs, src, dst = pairs[keep], src[keep], rank[dst[keep]]
        order = np.argsort((src << 32) | dst, kind="stable")
        pairs, src = pairs[order], src[order]
        if len(src):
            starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
            position = np.arange(len(src)) - np.repeat(starts, np.diff(np.r_[starts, len(src)]))
            pairs = pairs[position < limit]
        found = np.sort(pairs)

    def flush() -> None:
        if len(bucket) > 1:
            head = bucket[:limit]
            rest = bucket[limit : 2 * limit]
            members = np.array([m for m in bucket if is_wanted[m]], dtype=np.int64)
            gathered.frombytes(((members[:, None] << 32) | np.array(head, dtype=np.int64)).tobytes())
            if rest:
                members = np.array([m for m in head if is_wanted[m]], dtype=np.int64)
                gathered.frombytes(((members[:, None] << 32) | np.array(rest, dtype=np.int64)).tobytes())
            if len(gathered) >= _MERGE_EVERY:
                merge()
        bucket.clear()

    for band, key, sha in rows:
        if (band, key) != last:
            flush()
            last = (band, key)
        at = ids.get(sha)
        if at is None:
            at = ids[sha] = len(names)
            names.append(sha)
            is_wanted.append(sha in wanted)
        bucket.append(at)
    flush()
    merge()
    # ids in hash order, pairs sorted by (src, dst)
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names), dtype=np.int64)
    pairs = np.sort((rank[found >> 32] << 32) | rank[found & 0xFFFFFFFF])
    del found
    src, dst = (pairs >> 32).astype(np.int32), (pairs & 0xFFFFFFFF).astype(np.int32)
    return CandidatePairs([names[i] for i in order], src, dst)


def _step(manifest: Any, store: Any, settings: FamilySettings, banding: Banding, gone: list[str], pending: list[str],
          report: FamilyReport) -> None:
    gone_set, pending_set = set(gone), set(pending)
    old = store.families_of(gone_set | pending_set)
    affected = {family for family in old.values()}
    members = store.members(affected)
    resplit = {sha for fam in affected for sha in members.get(fam, [])} - gone_set - pending_set
    graph = _Graph(free=pending_set | resplit)
    # Edges: candidates from the LSH buckets of every content being placed, verified on their signatures, and
    # checkpoint ↔ saved notebook by path.
    sigs = store.signatures(graph.free | gone_set)
    cands = _candidates(store, banding, graph.free, sigs)
    saved = _checkpoint_pairs(manifest, store, graph.free, gone_set)
    mated = {cands.names[i] for i in np.unique(cands.dst)}
    others = (mated | {b for _a, b in saved}) - graph.free - gone_set
    graph.family_of = {sha: fam for sha, fam in store.families_of(others).items() if fam not in affected}
    sigs.update(store.signatures(others - set(sigs)))
    for sha in sorted(graph.free):
        graph.uf.find(sha)
    for a, b in _verified_pairs(cands, sigs, graph, gone_set, settings):
        graph.edge(a, b)
    for a, b in saved:
        graph.edge(a, b)
    # Components → families: an unaffected family node brings its members along (relabelled when merged).
    components: dict[str, list[str]] = {}
    for node in list(graph.uf.parent):
        components.setdefault(graph.uf.find(node), []).append(node)
    joined_members = store.members({n[2:] for n in graph.uf.parent if n.startswith("F:")})
    assign: dict[str, str] = {}
    for nodes in components.values():
        shas: list[str] = []
        for node in nodes:
            shas.extend(joined_members.get(node[2:], []) if node.startswith("F:") else [node])
        family = min(shas)
        for sha in shas:
            assign[sha] = family
    current = store.families_of(set(assign) - graph.free)
    changed = {sha: fam for sha, fam in assign.items() if sha in graph.free or current.get(sha) != fam}
    with manifest.transaction():
        store.delete_bands(sorted((band, key, sha) for sha in gone_set if sha in sigs
                                      for band, key in banding.keys(sigs[sha])))
        store.write(changed, delete=sorted(gone_set), done=sorted(pending_set))
    report.placed, report.left = len(pending_set), len(gone_set)
    report.resplit = len({old[sha] for sha in gone_set if sha in old})


_VERIFY_CHUNK = 1 << 16  # pairs compared at once (two gathered matrices of 64k x num_perm uint32: 64 MiB at 128)


def _verified_pairs(cands: CandidatePairs, sigs: dict[str, Signature], graph: _Graph, gone: set[str],
                    settings: FamilySettings) -> list[tuple[str, str]]:
    """The candidate pairs that are versions (`are_versions`, vectorised): each unordered pair once, between
    contents that have a signature of `num_perm` values, are not gone and are placed or in an unaffected family."""
    names = cands.names
    usable = np.zeros(len(names), dtype=bool)
    matrix = np.zeros((len(names), settings.num_perm), dtype=np.uint32)
    sizes = np.zeros(len(names), dtype=np.float64)
    for i, sha in enumerate(names):
        sig = sigs.get(sha)
        if sig is None or sha in gone or graph.node(sha) is None:
            continue
        values = sig.array()
        if len(values) != settings.num_perm:
            continue
        usable[i], matrix[i], sizes[i] = True, values, sig.size
    # a pair is looked at once, whichever side listed it (the verdict is symmetric)
    low, high = np.minimum(cands.src, cands.dst).astype(np.int64), np.maximum(cands.src, cands.dst).astype(np.int64)
    both = usable[low] & usable[high]
    pairs = np.unique((low[both] << 32) | high[both])
    del low, high, both
    edges: list[tuple[str, str]] = []
    for start in range(0, len(pairs), _VERIFY_CHUNK):
        part = pairs[start : start + _VERIFY_CHUNK]
        a, b = part >> 32, part & 0xFFFFFFFF
        jaccard = (matrix[a] == matrix[b]).mean(axis=1)
        smaller = np.minimum(sizes[a], sizes[b])
        shared = jaccard * (sizes[a] + sizes[b]) / (1.0 + jaccard)
        containment = np.minimum(1.0, shared / np.maximum(smaller, 1.0))
        keep = ((smaller >= settings.min_shared) & (jaccard >= settings.min_jaccard)
                & (containment >= settings.threshold) & (shared >= settings.min_shared))
        edges.extend((names[x], names[y]) for x, y in zip(a[keep].tolist(), b[keep].tolist(), strict=True))
    return edges


def _checkpoint_pairs(manifest: Any, store: Any, free: set[str], gone: set[str]) -> list[tuple[str, str]]:
    """A checkpoint and the notebook it saves are versions by where they live (same root, same folder)."""
    if not store.has_checkpoints():
        return []
    pairs = []
    for sha in sorted(free):
        for root, rel in manifest.paths_of(sha):
            other = saved_path(rel) if is_checkpoint(rel) else checkpoint_path(rel)
            found = store.sha_at(root, other)
            if found and found != sha and found not in gone:
                pairs.append((sha, found))
    return pairs


class FamilyWriter:
    """The indexer's side: signatures saved with each batch, families updated once per run (`update`)."""

    def __init__(self, manifest: Any, settings: FamilySettings) -> None:
        from nbrecall.index.family_store import PgFamilies, SqliteFamilies

        self.manifest = manifest
        self.settings = settings
        self.store = PgFamilies(manifest) if manifest.shared else SqliteFamilies(manifest)
        self.store.ensure()
        self.banding = Banding.for_settings(settings)
        made = f"{SHINGLES_VERSION} {SCHEME} perm {settings.num_perm}"
        if self.store.state("signatures") != made:  # signatures of another kind: all made again (`update`)
            with manifest.transaction():
                self.store.forget_signatures()
                self.store.set_state(made, "signatures")

    def save(self, items: list[tuple[str, Signature]]) -> None:
        """In a batch's manifest transaction: the signatures of the contents it indexed."""
        self.store.save_signatures(items, self.banding)

    def update(self) -> FamilyReport:
        """After the run's batches: sign contents indexed before families existed, then place what is pending."""
        started = time.perf_counter()
        unsigned = self.unsigned()
        for start in range(0, len(unsigned), 256):
            part = unsigned[start : start + 256]
            items = [(sha, signature(self.manifest.cells(sha), self.settings.num_perm)) for sha in part]
            with self.manifest.transaction():
                self.save(items)
        report = update_families(self.manifest, self.settings, self.banding)
        report.seconds = time.perf_counter() - started
        return report

    def unsigned(self) -> list[str]:
        """Indexed contents without a signature (an index made before families): signed from their cells."""
        return self.store.unsigned()
