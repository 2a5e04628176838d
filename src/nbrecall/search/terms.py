"""Words as search and answers compare them: identifiers split, Snowball stems, stop words, rarity weights.

One place for what a "term" is, so the answerer, the snippet and the anchor choice agree. The stop words are
NLTK's English list, the one LanceDB's keyword index drops (the PostgreSQL store mirrors that index's tokenizer in
SQL and imports the list from here); stems are Snowball English, LanceDB's stemmer too.
"""

from __future__ import annotations

import math
import re
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

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+(?:\.\d+)?|[^\W\d_]+", re.UNICODE)
_STEMMER = snowballstemmer.stemmer("english")


@lru_cache(maxsize=100_000)
def stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


def words(text: str) -> list[str]:
    """Lower-cased words in order; `total_ballast` and `totalBallast` give `total`, `ballast` (and the whole
    identifier, which a question may name as it is: `R_tot`, `tauI`)."""
    out: list[str] = []
    for token in re.findall(r"[^\W_]+(?:_[^\W_]+)*", text, re.UNICODE):
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
