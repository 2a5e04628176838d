"""The default answer, with no LLM (DESIGN §7): the value, sentence or table row that best answers, with its cell.

Nothing is generated. A value answer is an output line (or a table row, or a printed scalar with the variable or
expression it belongs to) copied from a cell; a "where" answer names the notebook, the section and the cell; a term
answer is the defining sentence copied from a markdown cell. Every answer cites `[notebook › Cell n]`.

Scoring is plain term overlap between the question and a line (plus its label), its cell's source, the markdown
and heading above it, weighted by how rare each term is among the candidate cells, and by the notebook's retrieval
rank. Terms match exactly, by prefix (`tot` ~ `total`) or by a long common stem (`accurate` ~ `accuracy`).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

from nbrecall.answer.types import Answer, Citation
from nbrecall.ingest.manifest import CellRecord, Manifest
from nbrecall.search.retrieve import NotebookResult, SearchResult

# --- question kinds --------------------------------------------------------------------------------------------

_TERM_STRONG = re.compile(
    r"\b(?:what\s+(?:does|do|did)\b.+\b(?:mean|stand\s+for|refer\s+to)\b|meaning\s+of|definition\s+of|define[sd]?\b"
    r"|what\s+is\s+meant\s+by|stands?\s+for)",
    re.I,
)
_WHERE = re.compile(
    r"(?:^|\b)(?:where(?:'s|\s+(?:is|are|was|were|do|did|does|can|have|has))?\b|in\s+which\s+notebook|"
    r"which\s+(?:notebook|cell|file)|what\s+notebook|calculation\s+of|computation\s+of|"
    r"how\s+did\s+(?:we|they|you|i)\s+(?:compute|calculate|derive|estimate|model|implement|do|get|build|make))",
    re.I,
)
_VALUE = re.compile(
    r"\b(?:what\s+(?:value|values|number|result|results|total|size|share|fraction|percentage|percent|ratio|"
    r"score|level|amount)|how\s+(?:many|much|accurate|big|large|long|high|heavy|deep|fast|often|far|wide|tall|"
    r"low|small|well)|what\s+(?:was|were)|what's\s+the|value\s+of|results?\b|totals?\b|accuracy|score|rmse|mse|"
    r"mae|f1|r2|auc|precision|recall|coefficient|count(?:ed)?\b|maximum|minimum|average|mean\s+of|peak|"
    r"largest|smallest|longest|shortest|highest|lowest|most|least|fewest|biggest)|^\s*(?:which|on\s+which|in\s+which)\b|"
    r"\b(?:did|do)\s+(?:we|they|you)\s+(?:use|get|find|obtain|measure|assume|take|reach|choose|pick|set)\b",
    re.I,
)
_FIGURE_WORDS = re.compile(
    r"\b(?:plot|plots|plotted|figure|chart|graph|curve|curves|diagram|drawing|histogram|heatmap|map|image|picture|"
    r"visuali[sz]ation|show)\b",
    re.I,
)
_EXPLAIN = re.compile(r"^\s*(?:how\s+(?:is|are|does|do|did|can|should|was|were)\b|why\b)", re.I)
_TERM_WEAK = re.compile(r"^\s*(?:what|who)(?:'s|\s+(?:is|are)\b)|^\s*explain\b", re.I)


def classify(question: str) -> str:
    """`value`, `where`, `term` or `general`, from the wording of the question."""
    if _TERM_STRONG.search(question):
        return "term"
    if _WHERE.search(question):
        return "where"
    if _VALUE.search(question):
        return "value"
    if _TERM_WEAK.search(question):
        return "term"
    return "general"


# --- words and matching ----------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?|[A-Za-z][a-z0-9]*|[A-Z]+(?![a-z])")
_STOP = frozenset(
    [
        "a", "an", "and", "are", "as", "at", "be", "been", "by", "can", "could", "did", "do", "does", "for", "from",
        "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "our", "over",
        "per", "so", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
        "to", "up", "us", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why",
        "will", "with", "would", "you", "your", "me", "my", "show", "tell", "give", "find", "get", "got", "gets",
        "use", "used", "using", "value", "values", "result", "results", "notebook", "notebooks", "cell", "cells",
        "did", "does", "done", "once", "first", "also", "about", "after", "before", "between", "during", "under",
        "within", "without", "all", "any", "each", "other", "some", "such", "only", "same", "s", "t"
    ]
)
_SUPERLATIVE_MAX = {
    "longest": ("length", "long"),
    "largest": ("large", "size"),
    "biggest": ("big", "size"),
    "highest": ("high",),
    "most": (),
    "maximum": (),
    "max": (),
    "greatest": (),
    "top": (),
    "peak": (),
    "widest": ("width", "wide"),
    "heaviest": ("weight", "heavy"),
    "deepest": ("depth", "deep"),
    "fastest": ("speed", "fast"),
    "tallest": ("height", "tall"),
    "best": ("best",),
}
_SUPERLATIVE_MIN = {
    "shortest": ("length", "short"),
    "smallest": ("small", "size"),
    "lowest": ("low",),
    "least": (),
    "fewest": (),
    "minimum": (),
    "min": (),
    "narrowest": ("width",),
    "lightest": ("weight",),
    "shallowest": ("depth",),
    "slowest": ("speed",),
    "worst": ("worst",),
}
_SYNONYMS = {
    "average": ("mean", "avg"),
    "mean": ("average", "avg"),
    "number": ("count", "num"),
    "count": ("number", "num"),
    "percentage": ("percent", "pct"),
    "percent": ("percentage", "pct"),
    "iterations": ("iteration", "iter", "ites"),
    "accurate": ("accuracy", "acc", "score"),
    "accuracy": ("acc", "score"),
    "share": ("fraction", "ratio", "mean"),
    "total": ("sum", "tot"),
}


def words(text: str) -> set[str]:
    """Lower-cased word set of `text`: identifiers split on `_` and camelCase, numbers kept whole."""
    return {w.lower() for w in _TOKEN.findall(text)}


def _camel_and_whole(text: str) -> set[str]:
    found = words(text)
    found.update(w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9]+", text))
    return found


@lru_cache(maxsize=200_000)
def _match_word(term: str, word: str) -> float:
    if term == word:
        return 1.0
    if term[0].isdigit() or word[0].isdigit():
        return 0.0
    short, long_ = (term, word) if len(term) <= len(word) else (word, term)
    if len(short) >= 3 and long_.startswith(short):
        return 0.8
    if len(short) >= 5:
        common = 0
        for a, b in zip(term, word, strict=False):
            if a != b:
                break
            common += 1
        if common >= 5:
            return 0.7
    return 0.0


def match(term: str, vocab: set[str], table: dict[str, dict[str, float]] | None = None) -> float:
    """How well `term` is found in `vocab`: 1 exact, 0.8 prefix, 0.7 common stem, else 0.

    `table` (term → {word: strength} over every word of the candidates) turns the scan into a set intersection.
    """
    if term in vocab:
        return 1.0
    if table is not None and term in table:
        near = table[term]
        return max((near[w] for w in vocab & near.keys()), default=0.0)
    best = 0.0
    for word in vocab:
        score = _match_word(term, word)
        if score > best:
            best = score
            if best >= 0.8:
                break
    return best


_PROPORTION = re.compile(
    r"\b(?:share|fraction|ratio|proportion|percentage|percent|rate|accuracy|accurate|probability|precision|recall|"
    r"f1|auc|r2|correlation)\b",
    re.I,
)
_COUNT = re.compile(r"\bhow\s+many\b|\bnumber\s+of\b|\bcount\b", re.I)
_FRACTION_VALUE = re.compile(r"(?<![\d.])(?:0?\.\d+|1\.0+)(?![\d.])|\d%|\d\s*percent")
_INTEGER_VALUE = re.compile(r"(?<![\d.,])\d[\d,]*(?![\d.,]*\d)(?!\.\d)")


@dataclass
class Query:
    """The content terms of a question with their weights, and what kind of extreme it asks for."""

    text: str
    kind: str
    weights: dict[str, float]
    extreme: str | None = None  # "max" | "min"
    expects: str | None = None  # "fraction" (a share, an accuracy) | "count" (how many)
    table: dict[str, dict[str, float]] | None = None  # inexact matches of each term among the candidates' words

    @classmethod
    def parse(cls, question: str, kind: str | None = None) -> Query:
        base = [w for w in words(question) | _camel_and_whole(question) if w not in _STOP and len(w) >= 2]
        weights = {w: 1.0 for w in base}
        extreme = None
        for w in list(base):
            if w in _SUPERLATIVE_MAX or w in _SUPERLATIVE_MIN:
                maximum = w in _SUPERLATIVE_MAX
                extreme = extreme or ("max" if maximum else "min")
                for e in ("max", "maximum") if maximum else ("min", "minimum"):
                    weights.setdefault(e, 1.0)  # a line that says "maximum …" answers "the longest …"
                for e in _SUPERLATIVE_MAX.get(w) or _SUPERLATIVE_MIN.get(w) or ():
                    weights.setdefault(e, 0.6)
            for e in _SYNONYMS.get(w, ()):
                weights.setdefault(e, 0.5)
        expects = "fraction" if _PROPORTION.search(question) else "count" if _COUNT.search(question) else None
        return cls(question, kind or classify(question), weights, extreme, expects)

    def index(self, documents: list[set[str]]) -> None:
        """Find once, among all the words of the candidates, those each term matches inexactly."""
        universe = set().union(*documents) if documents else set()
        self.table = {}
        for term in self.weights:
            near: dict[str, float] = {}
            for word in universe:
                strength = _match_word(term, word)
                if strength and word != term:
                    near[word] = strength
            self.table[term] = near

    def match(self, term: str, vocab: set[str]) -> float:
        return match(term, vocab, self.table)

    def reweight(self, documents: list[set[str]]) -> None:
        """Scale each term by its rarity among the candidate cells (terms found everywhere weigh least)."""
        n = len(documents)
        if not n:
            return
        for term in list(self.weights):
            df = sum(1 for doc in documents if self.match(term, doc) >= 0.7)
            self.weights[term] *= 0.5 + math.log((n + 1) / (df + 0.5))

    def overlap(self, vocab: set[str], skip: dict[str, float] | None = None) -> tuple[float, dict[str, float]]:
        """Weighted share of the question found in `vocab` (terms already in `skip` count only what they add)."""
        total = 0.0
        found: dict[str, float] = {}
        for term, weight in self.weights.items():
            m = self.match(term, vocab)
            if skip:
                m = max(0.0, m - skip.get(term, 0.0))
            if m:
                found[term] = m
                total += weight * m
        return total, found


# --- candidate cells -------------------------------------------------------------------------------------------


@dataclass
class Candidate:
    """A cell worth looking into, with what surrounds it."""

    nb: NotebookResult
    rank: int
    prior: float
    cell: CellRecord
    heading: str
    above: str  # the markdown just above (up to two cells back)
    hit_rank: int | None  # position among the notebook's matching cells, if it is one
    vocab: set[str] = field(default_factory=set)
    source_vocab: set[str] = field(default_factory=set)
    around_vocab: set[str] = field(default_factory=set)

    def citation(self) -> Citation:
        return Citation(self.nb.notebook, self.cell.idx, self.cell.cell_id, self.nb.nb_sha)


def _headings(cells: list[CellRecord]) -> dict[int, str]:
    """For every cell, the heading path above it (`Title › Section`), from markdown `#` lines."""
    stack: list[tuple[int, str]] = []
    result: dict[int, str] = {}
    for cell in cells:
        result[cell.idx] = " › ".join(text for _, text in stack)
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                m = re.match(r"^(#{1,6})\s+(.+?)\s*#*\s*$", line)
                if m:
                    level = len(m.group(1))
                    stack = [(lv, t) for lv, t in stack if lv < level] + [(level, m.group(2).strip())]
            result[cell.idx] = " › ".join(text for _, text in stack)
    return result


def _markdown_above(cells: dict[int, CellRecord], idx: int) -> str:
    parts = []
    for i in (idx - 1, idx - 2):
        cell = cells.get(i)
        if cell is None:
            break
        if cell.cell_type == "markdown":
            parts.append(cell.source)
        elif cell.source.strip():
            break
    return "\n".join(reversed(parts))


def candidates(
    result: SearchResult, manifest: Manifest, max_notebooks: int = 3, after: int = 2, whole: int = 1
) -> list[Candidate]:
    """Neighbourhood cells and matching cells (with the cells just after them) of the top notebooks; every cell
    of the first `whole` notebooks (the matching ones are preferred by the scoring)."""
    picked: list[Candidate] = []
    top = result.notebooks[0].score if result.notebooks else 1.0
    for rank, nb in enumerate(result.notebooks[:max_notebooks]):
        records = manifest.cells(nb.nb_sha)
        cells = {c.idx: c for c in records}
        headings = _headings(records)
        hit_rank: dict[int, int] = {}
        for position, hit in enumerate(nb.hits):
            for i in [hit.cell, *hit.cells, *range(hit.cell + 1, hit.cell + after + 1)]:
                hit_rank.setdefault(i, position if i == hit.cell else position + 1)
        wanted = set(hit_rank) | {c.idx for c in nb.neighbourhood}
        if rank < whole:
            wanted |= set(cells)
        relative = nb.score / top if top > 0 else 1.0
        prior = (0.55 + 0.45 * max(0.0, min(1.0, relative))) * (1.0 - 0.08 * rank)
        for i in sorted(wanted):
            cell = cells.get(i)
            if cell is None:
                continue
            above = _markdown_above(cells, i)
            cand = Candidate(nb, rank, prior, cell, headings.get(i, ""), above, hit_rank.get(i))
            cand.source_vocab = _camel_and_whole(cell.source)
            cand.around_vocab = _camel_and_whole(f"{cand.heading}\n{above}")
            cand.vocab = cand.source_vocab | cand.around_vocab | _camel_and_whole(cell.outputs)
            picked.append(cand)
    return picked


# --- output lines, labels and tables ---------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_ONLY_NUMBER = re.compile(r"^\s*[\[(]*\s*'?[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?'?\s*[\])]*\s*$")
_FIGURE = re.compile(r"^\s*\[figure: [^\]]*\]\s*(?P<caption>.*)$")
_NOISE = re.compile(
    r"^\s*(?:shape: \d+ rows? × \d+ columns?|\d+ rows? × \d+ columns?;|\[(?:widget|html output|… )|"
    r"(?:Collecting|Downloading|Requirement already satisfied|Installing collected packages|Successfully installed|"
    r"Building wheels?|Using cached|Obtaining|Preparing metadata|Attempting uninstall|Found existing installation|"
    r"Uninstalling|Successfully uninstalled)\b|.*\d+%\|[█▉▊▋▌▍▎▏ #]*\||"
    r"\[\w+/[\w.+-]+ output\]|<Figure size|<[\w.]+(?: [\w.]+)* (?:object|at 0x[0-9a-fA-F]+)>|"
    r"<matplotlib\.|\[<matplotlib\.|Text\(-?\d[^,]*, -?\d[^,]*, '.*'\)$|\[empty output\]|Out\[\d+\]:\s*$)"
)
_TABLE_SEP = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+\s*$")


@dataclass
class Evidence:
    """A piece of a cell that may answer: an output line, a table row or an assignment in the source."""

    cand: Candidate
    display: str  # what the answer shows (copied from the cell)
    match_text: str  # what is matched against the question (the display plus its label)
    position: int
    has_number: bool
    origin: str  # "line" | "row" | "assign" | "sentence"
    extreme: bool = False  # the max/min row of the column the question asks about
    score: float = 0.0
    siblings: int = 1  # pieces of the same kind from the same cell


def _printed_labels(source: str) -> list[str]:
    """What each print call / the closing expression of a cell shows, in order (for bare printed scalars)."""
    code = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )
    labels: list[str] = []
    try:
        tree = ast.parse(code)
    except SyntaxError:
        for m in re.finditer(r"^\s*print\s*\(?\s*(.+?)\s*\)?\s*$", code, re.M):  # Python 2 print statements
            labels.append(m.group(1))
        return labels
    body = tree.body
    for i, stmt in enumerate(body):
        if not isinstance(stmt, ast.Expr):
            continue
        value = stmt.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "print":
            args = [a for a in value.args if not isinstance(a, ast.Constant)]
            labels.append(ast.unparse(args[0]) if args else "")
        elif i == len(body) - 1 and not isinstance(value, ast.Constant):
            labels.append(ast.unparse(value))
    return labels


def _clip(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _as_float(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _table_evidence(cand: Candidate, rows: list[str], start: int, query: Query) -> list[Evidence]:
    """Rows of one markdown table; the row that is the max/min of the asked-about column is marked."""
    header = _split_row(rows[0])
    body = [_split_row(r) for r in rows[1:] if not _TABLE_SEP.match(r)]
    body = [r for r in body if len(r) == len(header)]
    if not body:
        return []
    numeric = [
        j for j in range(1, len(header)) if all(_as_float(r[j]) is not None for r in body if r[j] not in ("", "NaN"))
    ]
    target: int | None = None
    best = 0.0
    for j in numeric:
        score, _ = query.overlap(_camel_and_whole(header[j]))
        if score > best:
            target, best = j, score
    if target is None and len(numeric) == 1:
        target = numeric[0]
    extreme_row = None
    if query.extreme and target is not None:
        values = [(_as_float(r[target]), k) for k, r in enumerate(body) if _as_float(r[target]) is not None]
        if values:
            best_value = max(v for v, _ in values) if query.extreme == "max" else min(v for v, _ in values)
            extreme_row = next(k for v, k in values if v == best_value)
    out = []
    index_name = header[0]
    text_column = next(
        (j for j in range(1, len(header)) if j not in numeric and any(r[j] for r in body)), None
    )
    for k, row in enumerate(body):
        label = row[0]
        if text_column is not None and (not label or _as_float(label) is not None):
            label = row[text_column]  # a row number says nothing: name the row by its first text column
        if target is not None:
            display = f"{label} — {header[target]}: {row[target]}"
        else:
            pairs = [f"{h}: {v}" for h, v in zip(header[1:], row[1:], strict=False)][:8]
            display = f"{label} — " + ", ".join(pairs) if label else ", ".join(pairs)
        # the row's own label and the column names; its other values describe the table, not this row
        match_text = " ".join([index_name, label, *header[1:]])
        out.append(
            Evidence(cand, display, match_text, start + k, True, "row", extreme=k == extreme_row)
        )
    return out


def output_evidence(cand: Candidate, query: Query) -> list[Evidence]:
    """Lines and table rows of a cell's outputs, each with the label a bare number belongs to."""
    lines = cand.cell.outputs.splitlines()
    content = [ln for ln in lines if ln.strip() and not _NOISE.match(ln) and not ln.lstrip().startswith("|")]
    labels = _printed_labels(cand.cell.source) if cand.cell.cell_type == "code" else []
    evidence: list[Evidence] = []
    i = 0
    previous_text = ""
    seen_content = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("|"):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            if j - i >= 3:
                evidence.extend(_table_evidence(cand, lines[i:j], i, query))
            i = j
            continue
        i += 1
        if not line.strip() or _NOISE.match(line):
            continue
        seen_content += 1
        figure = _FIGURE.match(line)
        if figure:
            caption = figure.group("caption").strip()
            drawn_by = _code_line(cand.cell)
            display = f"Figure: {_clip(caption)}" if caption else f"Figure drawn by `{drawn_by}`"
            evidence.append(Evidence(cand, display, caption, i - 1, False, "figure"))
            continue
        has_number = bool(_NUMBER.search(line))
        stripped = line.strip()
        label = ""
        if _ONLY_NUMBER.match(stripped) or (stripped.startswith(("[", "{", "(")) and has_number):
            if previous_text and len(previous_text) <= 80:
                label = previous_text.rstrip(":")
            elif len(labels) == len(content):
                label = labels[seen_content - 1]
            elif labels and seen_content == len(content):
                label = labels[-1]
        display = f"{label}: {_clip(stripped)}" if label else _clip(stripped)
        evidence.append(Evidence(cand, display, f"{label} {stripped}", i - 1, has_number, "line"))
        previous_text = stripped if not has_number else ""
    for ev in evidence:
        ev.siblings = len(evidence)
    return evidence


_ASSIGN = re.compile(r"^([A-Za-z_][\w.]*)\s*=\s*[-+]?\d[\d_]*(?:\.\d+)?(?:[eE][-+]?\d+)?\s*(?:#.*)?$")


def _constant_lines(source: str) -> list[int]:
    """Line numbers (0-based) of statements `NAME = <number>` (a constant the notebook used)."""
    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:  # Python 2 and the like: lines at bracket depth 0 only (not arguments of a call)
        found, depth = [], 0
        for k, line in enumerate(source.splitlines()):
            if depth == 0 and _ASSIGN.match(line):
                found.append(k)
            depth = max(0, depth + sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}"))
        return found
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.lineno == node.end_lineno:
            value = node.value
            if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub | ast.UAdd):
                value = value.operand
            if isinstance(value, ast.Constant) and isinstance(value.value, int | float) and not isinstance(
                value.value, bool
            ):
                found.append(node.lineno - 1)
    return sorted(set(found))


def source_evidence(cand: Candidate) -> list[Evidence]:
    """`NAME = 1.025  # sea water density` lines: constants a notebook used, with their comments."""
    if cand.cell.cell_type != "code":
        return []
    lines = cand.cell.source.splitlines()
    found = [
        Evidence(cand, _clip(lines[k]), lines[k], 10_000 + k, True, "assign")
        for k in _constant_lines(cand.cell.source)
        if k < len(lines)
    ]
    for ev in found:
        ev.siblings = len(found)
    return found


# --- scoring ---------------------------------------------------------------------------------------------------


_REPR = re.compile(r"<(?:function|bound method|module|class|built-in)\b[^<>]*>|<[^<>]*\bat 0x[0-9a-fA-F]+>")


def _fragment(text: str) -> bool:
    """A piece of a multi-line repr: its brackets do not balance, or it ends with a comma."""
    if text.rstrip().endswith(","):
        return True
    depth = 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
    return depth != 0


def _score(ev: Evidence, query: Query, want_number: bool) -> float:
    cand = ev.cand
    own = _camel_and_whole(_REPR.sub(" ", ev.match_text))
    line_score, found = query.overlap(own)
    if ev.origin in ("line", "row"):
        # numbers of the question are its inputs (`at 4 degrees`, `250 labels`): an output quoting them is
        # about the same thing, but the value asked for is never in the question
        line_score -= 0.5 * sum(query.weights[t] * m for t, m in found.items() if t[0].isdigit())
    cell_score, _ = query.overlap(cand.source_vocab, skip=found)
    around_score, _ = query.overlap(cand.around_vocab, skip=found)
    cell_weight = 0.3 if ev.origin == "assign" else 0.55
    # what the cell is about is shared among its lines: one printed scalar owns it, one line of forty does not
    share = 1.0 / math.sqrt(max(1, ev.siblings))
    score = 1.0 * line_score + share * (cell_weight * cell_score + 0.35 * around_score)
    if cand.hit_rank is not None:
        score *= 1.0 + 0.15 / (1 + cand.hit_rank)
    if want_number:
        score *= 1.25 if ev.has_number else 0.7
    else:
        score *= 1.1 if ev.has_number else 0.9
    if ev.origin == "assign":
        score *= 0.8
    if ev.origin == "figure":
        if want_number:
            score *= 0.3  # a value question is answered by a number, a figure only when nothing else matches
        elif _FIGURE_WORDS.search(query.text):
            score *= 1.5
    value_text = ev.display.rsplit(": ", 1)[-1] if ev.origin == "line" else ev.display
    if query.expects == "fraction" and _FRACTION_VALUE.search(value_text):
        score *= 1.2  # the kind of number the question asks for
    elif query.expects == "count" and _INTEGER_VALUE.search(value_text):
        score *= 1.1
    if ev.extreme:
        score += 0.6 * max(query.weights.values(), default=1.0)
    if ev.origin == "line":
        if _fragment(ev.display):
            score *= 0.6
        if len(ev.display) > 250:
            score *= 0.7
        elif len(ev.display) > 120:
            score *= 0.85
        if len(re.findall(r"[A-Za-z]{2,}", ev.display)) > 12:
            score *= 0.8  # prose that happens to hold a number, not a value
    if cand.hit_rank is None and cand.cell.idx not in {c.idx for c in cand.nb.neighbourhood}:
        score *= 0.85  # a cell of the notebook that retrieval did not point at
    return score * cand.prior


def _best(evidence: list[Evidence], query: Query, want_number: bool) -> Evidence | None:
    for ev in evidence:
        ev.score = _score(ev, query, want_number)
    ranked = sorted(
        evidence, key=lambda e: (-e.score, e.cand.rank, e.cand.hit_rank if e.cand.hit_rank is not None else 99,
                                 e.cand.cell.idx, e.position)
    )
    return ranked[0] if ranked and ranked[0].score > 0 else None


# --- sentences -------------------------------------------------------------------------------------------------

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z*_`(\[\"'$\\])")
_DEFINITION = re.compile(
    r"\b(?:is|are|means|meaning|refers?\s+to|stands?\s+for|defined\s+as|denotes|describes|is\s+called)\b|"
    r"\*\*[^*]+\*\*\s*(?:[—–:-]|\()|^\s*[-*]\s*\*\*",
    re.I,
)


def sentences(markdown: str) -> list[str]:
    """Sentences and bullet items of a markdown cell (headings, images and code fences left out)."""
    out: list[str] = []
    in_fence = False
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            text = " ".join(s.strip() for s in paragraph)
            out.extend(s.strip() for s in _SENTENCE_SPLIT.split(text) if len(s.strip()) > 2)
            paragraph.clear()

    for line in markdown.splitlines():
        if line.strip().startswith(("```", "~~~")):
            in_fence = not in_fence
            flush()
            continue
        if in_fence:
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("!["):
            flush()
            continue
        if re.match(r"^(?:[-*+]|\d+[.)])\s+", stripped):
            flush()
        paragraph.append(stripped)
    flush()
    return out


def sentence_evidence(cand: Candidate) -> list[Evidence]:
    if cand.cell.cell_type != "markdown":
        return []
    return [
        Evidence(cand, _clip(s, 600), s, k, bool(_NUMBER.search(s)), "sentence")
        for k, s in enumerate(sentences(cand.cell.source))
    ]


def _score_sentence(ev: Evidence, query: Query, subject: Query) -> float:
    own = _camel_and_whole(ev.match_text)
    score, found = subject.overlap(own)
    rest, _ = query.overlap(own, skip=found)
    head, _ = subject.overlap(_camel_and_whole(ev.cand.heading), skip=found)
    score = score + 0.4 * rest + 0.3 * head
    if score <= 0:
        return 0.0
    if _DEFINITION.search(ev.match_text):
        score *= 1.3
    opening = _camel_and_whole(ev.match_text[:60])
    if any(subject.match(t, opening) for t in subject.weights):
        score *= 1.15
    if len(ev.match_text) < 25:
        score *= 0.7
    if ev.cand.hit_rank is not None:
        score *= 1.0 + 0.15 / (1 + ev.cand.hit_rank)
    return score * ev.cand.prior


_NOT_SUBJECT = frozenset(
    [
        "mean", "means", "meaning", "define", "defined", "definition", "stand", "stands", "refer", "refers",
        "explain", "term", "called", "word"
    ]
)


_ANAPHORA = re.compile(r"^(?:it|its|this|these|that|those|they|their|such|here|there)\b", re.I)


def _own_heading(cell: CellRecord) -> str:
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
    return first.lstrip("#").strip() if first.startswith("#") else ""


def best_sentence(query: Query, cands: list[Candidate]) -> tuple[Evidence | None, str]:
    """The sentence that best defines the subject of the question, with what it needs around it.

    Under a heading that names the subject (`## 6. Free surface effect`) the section's first two sentences are
    the definition. Otherwise the best sentence, with the one before it when it opens with "It/This/…", and
    the one after it when it is short.
    """
    subject = Query(
        query.text, query.kind, {t: w for t, w in query.weights.items() if t not in _NOT_SUBJECT}, table=query.table
    )
    if not subject.weights:
        subject = query
    evidence = [ev for c in cands for ev in sentence_evidence(c)]
    for ev in evidence:
        ev.score = _score_sentence(ev, query, subject)
    ranked = sorted(evidence, key=lambda e: (-e.score, e.cand.rank, e.cand.cell.idx, e.position))
    if not ranked or ranked[0].score <= 0:
        return None, ""
    best = ranked[0]
    same_cell = {e.position: e for e in evidence if e.cand is best.cand}
    heading = _own_heading(best.cand.cell)
    total = sum(subject.weights.values()) or 1.0
    if heading and subject.overlap(_camel_and_whole(heading))[0] >= 0.8 * total and 0 in same_cell:
        first = same_cell[0]
        first.score = best.score
        return first, same_cell[1].display if 1 in same_cell else ""
    if _ANAPHORA.match(best.display) and best.position - 1 in same_cell:
        before = same_cell[best.position - 1]
        before.score = best.score
        return before, best.display
    follow = ""
    if len(best.display) < 90 and best.position + 1 in same_cell:
        follow = same_cell[best.position + 1].display
    return best, follow


# --- answers ---------------------------------------------------------------------------------------------------


def _code_line(cell: CellRecord) -> str:
    """The first meaningful line of a cell (not an import, magic, comment or blank line)."""
    for line in cell.source.splitlines():
        s = line.strip()
        if s and not s.startswith(("#", "%", "!", "import ", "from ")):
            return _clip(s, 120)
    return _clip(cell.source.strip().splitlines()[0], 120) if cell.source.strip() else ""


def _meta(nb: NotebookResult) -> str:
    hit = nb.hits[0] if nb.hits else None
    bits = [str(hit.year)] if hit and hit.year else []
    if hit and hit.project:
        bits.append(hit.project)
    return f" ({', '.join(bits)})" if bits else ""


def _no_match(question: str) -> Answer:
    return Answer(
        question=question,
        text="Nothing in the indexed notebooks matches this question.",
        citations=[],
        mode="extractive",
        notice="no matching notebook",
    )


WHERE_HIT = 1.0


def _markdown_before(records: dict[int, CellRecord], idx: int) -> CellRecord | None:
    return next(
        (records[i] for i in (idx - 1, idx - 2) if i in records and records[i].cell_type == "markdown"), None
    )


def _where_cell(query: Query, cands: list[Candidate], nb: NotebookResult) -> Candidate | None:
    """The code cell of the top notebook that does what the question describes: its source, and the heading and
    markdown just above it (where people explain, in their words, what the code does)."""
    best: tuple[float, int] | None = None
    chosen = None
    for cand in cands:
        if cand.nb is not nb or cand.cell.cell_type != "code" or not cand.cell.source.strip():
            continue
        own, found = query.overlap(cand.source_vocab)
        around, _ = query.overlap(cand.around_vocab, skip=found)
        score = own + 0.8 * around
        if cand.hit_rank is not None:
            score *= 1.0 + WHERE_HIT / (1 + cand.hit_rank)  # retrieval's own pick counts for a lot
        key = (score, -cand.cell.idx)
        if best is None or key > best:
            best, chosen = key, cand
    return chosen if best is not None and best[0] > 0 else None


def where_answer(
    question: str, result: SearchResult, manifest: Manifest, cands: list[Candidate], query: Query | None = None
) -> Answer:
    """The notebook, the section and the cell (and the markdown explaining it), then other places."""
    nb = result.notebooks[0]
    hit = nb.hits[0]
    records = {c.idx: c for c in manifest.cells(nb.nb_sha)}
    cited: list[Citation] = []
    lines: list[str] = []
    picked = _where_cell(query, cands, nb) if query is not None else None
    if picked is not None:
        anchor: CellRecord | None = picked.cell
        heading = picked.heading
        explained = _markdown_before(records, anchor.idx)
    else:
        anchor = records.get(hit.cell)
        heading = hit.heading or next((c.heading for c in cands if c.nb is nb and c.cell.idx == hit.cell), "")
        if anchor is not None and anchor.cell_type == "markdown":
            following = [records[i] for i in (hit.cell + 1, hit.cell + 2) if i in records]
            code = next((c for c in following if c.cell_type == "code"), None)
            explained = anchor
            anchor = code or anchor
        else:
            explained = _markdown_before(records, hit.cell)
    main = anchor if anchor is not None else explained
    if main is None:
        return _no_match(question)
    citation = Citation(nb.notebook, main.idx, main.cell_id, nb.nb_sha)
    cited.append(citation)
    where = f"In {nb.notebook}{_meta(nb)}"
    if heading:
        where += f", section “{heading}”"
    text = f"{where}, Cell {main.idx}"
    code_line = _code_line(main) if main.cell_type == "code" else ""
    if code_line:
        text += f": `{code_line}`"
    lines.append(f"{text} {citation.label()}")
    if explained is not None and explained is not main:
        sentence = next(iter(sentences(explained.source)), "")
        c2 = Citation(nb.notebook, explained.idx, explained.cell_id, nb.nb_sha)
        cited.append(c2)
        if sentence:
            lines.append(f"Explained in Cell {explained.idx}: “{_clip(sentence, 240)}” {c2.label()}")
    others = []
    for other in result.notebooks[1:3]:
        if other.hits and other.score >= 0.6 * nb.score:
            h = other.hits[0]
            c3 = Citation(other.notebook, h.cell, h.cell_id, other.nb_sha)
            cited.append(c3)
            others.append(f"{c3.label()}" + (f" ({h.heading})" if h.heading else ""))
    if others:
        lines.append("See also: " + "; ".join(others))
    return Answer(question, "\n".join(lines), cited, "extractive")


def value_answer(
    question: str, query: Query, cands: list[Candidate], want_number: bool = True
) -> tuple[Answer | None, float]:
    evidence: list[Evidence] = []
    for cand in cands:
        evidence.extend(output_evidence(cand, query))
        evidence.extend(source_evidence(cand))
    best = _best(evidence, query, want_number)
    if not want_number and _FIGURE_WORDS.search(query.text):
        # "plot of …", "show the … fields": the answer is a figure when the notebooks hold a matching one
        figures = [ev for ev in evidence if ev.origin == "figure" and ev.score > 0]
        if figures:  # in the best-ranked notebook that has one: retrieval knows notebooks better than captions
            first = min(ev.cand.rank for ev in figures)
            best = max((ev for ev in figures if ev.cand.rank == first), key=lambda e: (e.score, -e.cand.cell.idx))
    if best is None:
        return None, 0.0
    citation = best.cand.citation()
    return Answer(question, f"{best.display} — {citation.label()}", [citation], "extractive"), best.score


def term_answer(question: str, query: Query, cands: list[Candidate]) -> tuple[Answer | None, float]:
    best, follow = best_sentence(query, cands)
    if best is None:
        return None, 0.0
    citation = best.cand.citation()
    text = best.display + (f" {follow}" if follow else "")
    return Answer(question, f"{text} — {citation.label()}", [citation], "extractive"), best.score


def extractive_answer(
    question: str, result: SearchResult, manifest: Manifest, kind: str | None = None, max_notebooks: int = 3
) -> Answer:
    """Answer `question` from the retrieved notebooks by copying the best line, row or sentence."""
    if not result.notebooks or not result.notebooks[0].hits:
        return _no_match(question)
    query = Query.parse(question, kind)
    cands = candidates(result, manifest, max_notebooks)
    query.index([c.vocab for c in cands])
    if not any(query.overlap(c.vocab)[0] > 0 for c in cands):
        return _no_match(question)  # vector search always finds neighbours; none of them shares a word
    query.reweight([c.vocab for c in cands])
    if query.kind == "where":
        return where_answer(question, result, manifest, cands, query)
    if query.kind == "value":
        found, _ = value_answer(question, query, cands)
        if found is not None:
            return found
        fallback = where_answer(question, result, manifest, cands)
        fallback.notice = "no printed value matched the question; the closest cell is shown"
        return fallback
    if query.kind == "term":
        found, _ = term_answer(question, query, cands)
        if found is not None:
            return found
        fallback = where_answer(question, result, manifest, cands)
        fallback.notice = "no defining sentence found; the closest cell is shown"
        return fallback
    # "how is X enforced / why …" asks for an explanation: a sentence. A question with no question word
    # ("default board configuration of …", "density curves of …", a pasted error) is answered by an output far
    # more often than by prose: there a sentence has to be much better
    value, value_score = value_answer(question, query, cands, want_number=False)
    term, term_score = term_answer(question, query, cands)
    ratio = 1.0 if _EXPLAIN.search(question) else 0.35
    if value is not None and value.text.startswith("Figure") and _FIGURE_WORDS.search(question):
        return value
    if value is not None and value_score >= ratio * term_score:
        return value
    if term is not None:
        return term
    return where_answer(question, result, manifest, cands)
