"""Text terms (architecture §8): what a "term" is for the stores' keyword index, retrieval and the answerer. One
module, the lowest layer every user imports from (`index`: the stores, `search`, `answer`, the CLI and the viewer).

- `STOP_WORDS`, `stem`: what LanceDB's keyword index drops and how it stems (NLTK's English stop words, Snowball
  English), and `keyword_stems`, the stems it holds for a text (split at every character that is not a letter
  or digit). The PostgreSQL store mirrors that tokenizer in SQL (`index/pg_schema.py`, migrations 2 and 3) with
  its own frozen copy of the stop words, because they are part of a migration's SQL text: a change here must not
  rewrite a migration already run. `tests/test_keyword_terms.py` checks the two lists hold the same words.
- `words`, `terms`, `term_set`, `question_terms`, `match`, `Weights`: the answerer's terms (identifiers split,
  stems, stop words and words of asking dropped, abbreviations matched, rarity weights), so that the answerer,
  the snippet and the anchor choice agree.
- `query_terms`, `RANKING_WORD`, `RANKING_STOP_WORDS`: retrieval's own, older vocabulary (below).
- `extra_terms`, `keyword_text`, `keyword_query`: terms the keyword tokenizer cannot see (symbols, CJK words),
  added in Python the same for both stores (below).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

import snowballstemmer


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# NLTK's English stop words, as LanceDB's keyword index drops them (forms with an apostrophe left out: no token
# has one). Found word by word against lancedb 0.40.
STOP_WORDS: frozenset[str] = _word_set(
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her "
    "hers herself it its itself they them their theirs themselves what which who whom this that these "
    "those am is are was were be been being have has had having do does did doing a an the and but if or "
    "because as until while of at by for with about against between into through during before after "
    "above below to from up down in out on off over under again further then once here there when where "
    "why how all any both each few more most other some such no nor not only own same so than too very s "
    "t can will just don should now d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma "
    "mightn mustn needn shan shouldn wasn weren won wouldn "
)
# The language of asking, not of the thing asked about: "what *value* did we *use* for …", "*show* me the *cell*".
ASKING_WORDS: frozenset[str] = _word_set(
    "value values result results number notebook notebooks cell cells calculation calculated compute "
    "computed use used using get got find found show give tell obtain obtained please "
)

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+(?:\.\d+)?|[^\W\d_]+", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("english")


@lru_cache(maxsize=100_000)
def stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


def words(text: str) -> list[str]:
    """Lower-cased words in order; `total_ballast` and `totalBallast` give `total`, `ballast` (and the whole
    identifier, which a question may name as it is: `R_tot`, `tauI`). A hyphenated name with a one-letter part
    (`S-learner`, `k-means`, `t-test`, `X-ray`) is also kept whole: alone, that letter is no term (a digit is one:
    `1e-8` stays as it was), and it is what tells `S-learner` from `T-learner`."""
    out: list[str] = []
    for compound in re.findall(r"[^\W_]+(?:[-_][^\W_]+)*", text, re.UNICODE):
        segments = compound.split("-")
        if len(segments) > 1 and any(len(segment) == 1 and segment.isalpha() for segment in segments):
            out.append(compound.lower())
        for token in segments:
            parts = [p for piece in token.split("_") for p in _CAMEL.findall(piece)]
            if len(parts) > 1:
                out.append(token.lower())
            out.extend(p.lower() for p in parts)
    return out


def terms(text: str, *, drop: frozenset[str] = STOP_WORDS) -> list[str]:
    """The stems of the content words of `text` (stop words left out; numbers kept as written)."""
    return [stem(w) if not w[0].isdigit() else w for w in words(text) if w not in drop and len(w) > 1 or w.isdigit()]


def term_set(text: str) -> set[str]:
    return set(terms(text))


def question_terms(text: str) -> list[str]:
    """The content terms of a question: no stop words and no words of asking ("what value did we use")."""
    return terms(text, drop=STOP_WORDS | ASKING_WORDS)


@lru_cache(maxsize=200_000)
def _near(term: str, word: str) -> float:
    """1 for the same stem; 0.7 when one is an abbreviation of the other (`tot` ~ `total`, 3+ letters)."""
    if term == word:
        return 1.0
    if term[0].isdigit() or word[0].isdigit():
        return 0.0
    short, long_ = (term, word) if len(term) <= len(word) else (word, term)
    return 0.7 if len(short) >= 3 and long_.startswith(short) else 0.0


def match(term: str, vocabulary: set[str]) -> float:
    """How well `term` is found among `vocabulary`'s stems (1, 0.7 or 0)."""
    if term in vocabulary:
        return 1.0
    return max((_near(term, w) for w in vocabulary), default=0.0)


class Weights:
    """Question terms weighted by rarity among candidate documents: a term every candidate has tells them apart
    least (`0.5 + ln((n + 1) / (df + 0.5))`, a smoothed inverse document frequency)."""

    def __init__(self, query: Iterable[str], documents: list[set[str]], position: float = 0.0) -> None:
        """`position` > 0 also weighs earlier terms more (`1 / (1 + position · i)` for the i-th): a question names
        what it asks about first ("net objective for the schedule after unit assignment costs")."""
        self.terms = list(dict.fromkeys(query))
        n = len(documents)
        self.weight: dict[str, float] = {}
        for i, term in enumerate(self.terms):
            df = sum(1 for doc in documents if match(term, doc) >= 0.7)
            self.weight[term] = (0.5 + math.log((n + 1) / (df + 0.5))) / (1.0 + position * i)
        self.total = sum(self.weight.values()) or 1.0

    def recall(self, vocabulary: set[str]) -> float:
        """Weighted share of the question's terms found in `vocabulary` (0..1)."""
        return sum(w * match(t, vocabulary) for t, w in self.weight.items()) / self.total

    def found(self, vocabulary: set[str]) -> set[str]:
        return {t for t in self.terms if match(t, vocabulary) >= 0.7}

    def precision(self, vocabulary: set[str]) -> float:
        """Share of `vocabulary` (a label's terms) that the question names (0..1; 1 for an empty label)."""
        if not vocabulary:
            return 0.0
        hit = sum(1 for word in vocabulary if max((_near(t, word) for t in self.terms), default=0.0) >= 0.7)
        return hit / len(vocabulary)


# --- ranking words ---------------------------------------------------------------------------------------------
# Retrieval's own, older vocabulary (`search.retrieve`: query terms for anchor cells and snippets, phrase overlap,
# the terms the CLI and the viewer highlight): unstemmed lower-case words and numbers, a short stop list with some
# words of asking. Kept apart from `terms` above because retrieval's figures on both development sets were tuned
# with it: unifying the two changes ranking, so it needs its own measured change.
RANKING_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:[.,]\d+)*")
RANKING_STOP_WORDS: frozenset[str] = _word_set(
    "a an and are as at be by did do does for from how i in is it of on or our the this to was we were what where "
    "which who why with you your show me plot value used use get got find calculation "
)


def query_terms(text: str) -> set[str]:
    """Lower-cased content words of a query (identifiers split on underscores too)."""
    terms: set[str] = set()
    for word in RANKING_WORD.findall(text.lower()):
        for part in {word, *word.split("_")}:
            if len(part) >= 2 and part not in RANKING_STOP_WORDS:
                terms.add(part)
    return terms


# --- the keyword index's stems ----------------------------------------------------------------------------------

TOKEN_PATTERN = r"[^\W_]+"  # as the keyword index splits text: at every character not a letter or digit
_TOKEN = re.compile(TOKEN_PATTERN)
# What the CLI, the HTTP API and the MCP tools say of a question without a token (`has_terms`)
NO_TERMS = "the question has no words or numbers to look for"


def has_terms(text: str) -> bool:
    """Whether `text` holds a token of the keyword index (a letter or a digit, in any script). A question of
    punctuation or symbols alone (`???`, `*`, an emoji) gives keyword search nothing and vector search only
    arbitrary neighbours: it is refused like an empty one (the CLI, the HTTP API and the MCP tools)."""
    return _TOKEN.search(text) is not None


def keyword_stems(text: str) -> set[str]:
    """The stems the keyword index holds for `text` (lower case, stop words dropped, Snowball English)."""
    return {stem(word) for word in _TOKEN.findall(text.lower()) if word not in STOP_WORDS}


# --- keyword terms for what the full-text tokenizer cannot see: non-ASCII symbols and CJK words -------------
#
# Both stores tokenize as LanceDB's index does (split at every character that is not a letter or digit, lower
# case, ASCII folding, English stemming). That drops symbols (`☃`, `°`, `€`, `→`: not letters) and keeps a run
# of Chinese or Japanese characters, written without spaces, as one token that no shorter query word matches.
# So before a text is stored, and before a query is searched, both are given terms the tokenizer keeps, in
# Python, the same for LanceDB and PostgreSQL (their BM25 scores stay equal):
#
# - every non-ASCII symbol (Unicode categories Sm, Sc, Sk, So) the term `u` + its code point (`☃` → `u2603`);
# - every run of CJK characters its overlapping pairs (`数据分析` → `数据 据分 分析`; one character stays
#   itself), as search engines without a dictionary index CJK (Lucene's CJK bigrams).
#
# A stored chunk keeps its text; the terms go on a line at the end of its header (the part before the first blank
# line, which snippets skip), counted as often as the text has them. A query has its symbols and CJK runs
# replaced by their terms. Accented words need nothing: both stores fold them, so `température` finds
# `température` and so does `temperature`. (Not every one: LanceDB stems before it folds and PostgreSQL after, so
# `resume` does not find `résumé` in LanceDB; a folded term for such words would score differently in the two
# stores, whose bodies already tokenize `résumé` apart, so none is added.)

# Han (with extensions and compatibility forms), Hiragana, Katakana (with half-width forms), Hangul.
_CJK_RUN = re.compile(
    "[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af\U00020000-\U0003134f]+"
)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_TERMS_MAX_CHARS = 20_000  # a chunk of CJK text: its pairs, to this length


def _symbol_term(ch: str) -> str | None:
    if ord(ch) < 128 or not unicodedata.category(ch).startswith("S"):
        return None
    return f"u{ord(ch):04x}"


def _cjk_terms(run: str) -> list[str]:
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def extra_terms(text: str) -> list[str]:
    """The terms of `text`'s symbols and CJK runs, in order and with repeats (empty for ASCII text)."""
    if not text or not _NON_ASCII.search(text):
        return []
    terms: list[str] = []
    last = 0
    for match in _CJK_RUN.finditer(text):
        terms.extend(t for t in map(_symbol_term, text[last : match.start()]) if t)
        terms.extend(_cjk_terms(match.group(0)))
        last = match.end()
    terms.extend(t for t in map(_symbol_term, text[last:]) if t)
    return terms


def keyword_text(text: str) -> str:
    """A chunk's text as the stores index it: its terms (if any) on a line at the end of the header."""
    terms = extra_terms(text)
    if not terms:
        return text
    line = " ".join(terms)
    if len(line) > _TERMS_MAX_CHARS:
        line = line[: line.rfind(" ", 0, _TERMS_MAX_CHARS)]
    head, sep, body = text.partition("\n\n")
    if not sep:  # no header: the terms become one (snippets skip it)
        return f"{line}\n\n{text}"
    return f"{head}\n{line}\n\n{body}"


def keyword_query(query: str) -> str:
    """A query as the stores search it: symbols and CJK runs replaced by their terms."""
    if not query or not _NON_ASCII.search(query):
        return query
    out: list[str] = []
    last = 0
    for match in _CJK_RUN.finditer(query):
        out.append(_replace_symbols(query[last : match.start()]))
        out.append(" " + " ".join(_cjk_terms(match.group(0))) + " ")
        last = match.end()
    out.append(_replace_symbols(query[last:]))
    return "".join(out)


def _replace_symbols(text: str) -> str:
    if not _NON_ASCII.search(text):
        return text
    return "".join(f" {term} " if (term := _symbol_term(ch)) else ch for ch in text)
