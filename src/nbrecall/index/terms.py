"""Keyword terms for what the full-text tokenizer cannot see: non-ASCII symbols and CJK words.

Both stores tokenize as LanceDB's index does (split at every character that is not a letter or digit, lower
case, ASCII folding, English stemming). That drops symbols (`☃`, `°`, `€`, `→`: not letters) and keeps a run
of Chinese or Japanese characters, written without spaces, as one token that no shorter query word matches.
So before a text is stored, and before a query is searched, both are given terms the tokenizer keeps, in
Python, the same for LanceDB and PostgreSQL (their BM25 scores stay equal):

- every non-ASCII symbol (Unicode categories Sm, Sc, Sk, So) the term `u` + its code point (`☃` → `u2603`);
- every run of CJK characters its overlapping pairs (`数据分析` → `数据 据分 分析`; one character stays
  itself), as search engines without a dictionary index CJK (Lucene's CJK bigrams).

A stored chunk keeps its text; the terms go on a line at the end of its header (the part before the first blank
line, which snippets skip), counted as often as the text has them. A query has its symbols and CJK runs
replaced by their terms. Accented words need nothing: both stores fold them, so `température` finds
`température` and so does `temperature`. (Not every one: LanceDB stems before it folds and PostgreSQL after, so
`resume` does not find `résumé` in LanceDB; a folded term for such words would score differently in the two
stores, whose bodies already tokenize `résumé` apart, so none is added.)
"""

from __future__ import annotations

import re
import unicodedata

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
