"""Reading a question: what kind of answer it wants, its content terms, and what kind of value it asks for.

Only the grammar of asking is read here (English interrogatives: "where …", "what does … mean", "how many …"),
never the subject matter: which cell or value answers is decided by the evidence (`evidence.py`), from signals
that carry across archives. A question without an interrogative ("final RMSE of the tuned model") is `general`,
and the evidence decides between a value, a sentence and a cell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nbrecall.index.terms import question_terms
from nbrecall.notebook.printed import to_number

_WHERE = re.compile(
    r"^\s*(?:where\b|wo\b|in\s+which\s+(?:notebook|cell|file)|which\s+(?:notebook|cell|file)s?\b|"
    r"what\s+notebook\b|show\s+me\s+(?:where|the\s+(?:code|cell|notebook))\b|"
    r"how\s+(?:did|do|does|can)\s+(?:we|they|you|i)\s+(?:compute|calculate|derive|estimate|implement|model)\b)",
    re.I,
)
_TERM = re.compile(
    r"\bwhat\s+(?:does|do|did)\b.+\b(?:mean|stand\s+for|refer\s+to)\b|\bmeaning\s+of\b|\bdefinition\s+of\b|"
    r"^\s*define\b|\bwhat\s+is\s+meant\s+by\b|\bstands?\s+for\b|^\s*was\s+(?:bedeutet|ist|sind)\b|"
    r"^\s*(?:what|who)\s+(?:is|are)\s+(?:an?\s+)?\w+\s*\??\s*$",
    re.I,
)
# The auxiliary verbs a question's verb phrase opens with (`_VALUE`).
_AUX = r"(?:did|does|do|was|were|is|are|has|have|had)"
# The modal verbs: "how far can it sail", "how long would the tank last" ask for a degree as the auxiliaries do.
_MODAL = r"(?:can|could|will|would|shall|should|may|might|must)"
# Where a clause opens: the question's start, or after `:`, `;`, `,` or a spaced dash ("Refinery LP — how many …").
_CLAUSE = r"(?:^|[:;,]|\s[-–—]+)\s*"
_VALUE = re.compile(
    rf"{_CLAUSE}(?:how\s+(?:many|much)|what\s+(?:value|number|amount)s?\b|what\s+(?:was|were|is|are)\s+the\b|"
    r"what's\s+the\b|which\s+value\b|wie\s+(?:viel|viele|groß|hoch)\b)|"
    r"\b(?:did|do|does)\s+(?:we|they|you|i|it)\s+(?:use|get|find|obtain|measure|assume|take|reach|choose|pick|set|"
    r"estimate|give)\b|"
    # "what MAPE did the ARIMA model get", "how big is the threshold": a wh-word, the noun or the degree asked about,
    # then the verb ("which table has …" asks for a thing to find, not a value; "what does … mean" is read first).
    # Each form opens the question or a clause after what it is about ("Exam scores: what p-value did the z-test
    # give?", "For the widget sales series, what MAE did …", "In a 5 g sample, how many atoms …")
    rf"{_CLAUSE}what\s+(?!{_AUX}\b)[\w'-]+(?:\s+[\w'(),.-]+){{0,5}}?\s+{_AUX}\b|"
    rf"{_CLAUSE}how\s+(?!(?:many|much|to|come|{_AUX}|{_MODAL})\b)[\w-]+\s+(?:{_AUX}|{_MODAL})\b",
    re.I,
)
# A Python exception or warning class, as a traceback names it (`TypeError`, `KeyError`, `RuntimeWarning`): a question
# that quotes one is an error pasted in, asking where it was raised.
_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception|Warning)\b")
_COUNT = re.compile(r"\bhow\s+many\b|\bnumber\s+of\b|\bwie\s+viele\b", re.I)
_SHARE = re.compile(r"%|\b(?:percent(?:age)?|share|fraction|proportion|ratio|prozent|anteil)\b", re.I)
# Superlatives ask for the extreme of a series ("on which weekday were the most cyclists counted").
_MAX = re.compile(r"\b(?:most|max(?:imum)?|highest|largest|biggest|greatest|longest|peak|top)\b", re.I)
# `min` after a number or a slash is minutes, a unit ("10 min", "300 L/min"), not a superlative.
_MIN = re.compile(r"\b(?:least|fewest|minimum|lowest|smallest|shortest)\b|(?<![/\d])(?<!\d )\bmin\b", re.I)
# What the question rules out: "the Hollingshead correlation rather than ISO", "…, not the lognormal fit",
# "(no LoRA)". A value whose name or place says the ruled-out thing is the look-alike the question warns about.
_EXCLUDED = re.compile(
    r"(?:\b(?:rather\s+than|instead\s+of|other\s+than)|(?:[,(]|\bbut)\s*not|\b(?:no|without|excluding|except))\s+"
    r"(?:the\s+|a\s+|an\s+|any\s+)?(?P<what>[^\W\d_][\w'-]*(?:\s+[^\W\d_][\w'-]*){0,2}?)"
    r"(?=\s*(?:[),;:.?!]|$|\b(?:and|but|or|for|in|on|at|with|from|by)\b))",
    re.I,
)
# Where the thing asked about ends and what qualifies it begins: a preposition, a conjunction, an auxiliary verb
# ("net objective | for the schedule after unit assignment costs", "what psi drop | do we get if …").
_SUBJECT_END = re.compile(
    r"\b(?:of|for|in|into|on|at|by|with|without|from|to|during|after|before|between|under|over|using|via|when|"
    r"while|if|once|than|that|which|where|as|do|does|did|is|are|was|were|can|could|would|will|has|have|had|we|"
    r"von|für|bei|mit|nach|der|die|das|des|um|im|am)\b|[,;:?(]",
    re.I,
)
_ASKING_OPENERS = re.compile(
    r"^\s*(?:what(?:'s|\s+(?:is|are|was|were))?|which|how\s+(?:many|much)|wie\s+(?:viel|viele)|welche[rsn]?|"
    r"(?:the|a|an)\b)\s*",
    re.I,
)
_INTERROGATIVE = re.compile(r"\b(?:what|which|how\s+(?:many|much)|wie\s+(?:viel|viele)|welche[rsn]?)\b", re.I)
# A question asked as one (an interrogative or an auxiliary verb opening it or a clause) rather than typed as
# keywords ("final RMSE of the tuned model"): only the grammar of asking, never the subject matter. A question mark
# after keywords ("Hitters ridge regression: test MSE?") does not make them a question: the words are still keywords.
_ASKED = re.compile(
    rf"{_CLAUSE}(?:(?:in|on|at|for|from|to|by|with|of)\s+)?(?:what|which|who|whom|whose|why|when|where|how|"
    r"is|are|was|were|do|does|did|can|could|should|would|will|has|have|wie|wo|welche[rsnm]?|warum|wann|ist|sind)\b",
    re.I,
)
# A question that is one number as a report prints it (`3803`, `1,284.6`, `0.702`, `12.5 %`, `3803 m3`): a figure
# pasted to find the cells that show it. The shape of a number only: digits with thousands groups, a decimal part,
# an exponent, then at most a percent sign or one short unit-like token.
_NUMBER_ALONE = re.compile(
    r"^(?P<number>[-+−]?(?:\d{1,3}(?:[,.' ]\d{3})+|\d+)(?:[.,]\d+)?(?:[eE][-+]?\d+)?)"
    r"(?P<percent>\s*%)?(?:\s*[^\W\d_][\w/^*·.²³-]{0,7})?$"
)
# A number read with `.` or with `,` as its decimal point, the other marks (and `'`, a space) grouping thousands.
_READING = {
    ".": re.compile(r"[-+]?(?:\d{1,3}(?:[,' ]\d{3})+|\d+)(?:\.\d+)?"),
    ",": re.compile(r"[-+]?(?:\d{1,3}(?:[.' ]\d{3})+|\d+)(?:,\d+)?"),
}
_NUMBERS = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)?(?![\w.]*[A-Za-z])(?P<percent>\s*%)?")
# Number words and ordinals name numbers a notebook prints as digits ("the second well" → `Well 2`).
_NUMBER_WORDS = {w: str(i) for i, group in enumerate([
    (), ("one", "first"), ("two", "second"), ("three", "third"), ("four", "fourth"), ("five", "fifth"),
    ("six", "sixth"), ("seven", "seventh"), ("eight", "eighth"), ("nine", "ninth"), ("ten", "tenth")])
    for w in group}


def extreme_named(text: str) -> str | None:
    """"max" or "min" when `text` names an extreme (a superlative: "peak", "lowest"), else None. Read in a question
    (it asks for the extreme of a series) and in a value's label (`Maximum value in the domain` is one)."""
    return "max" if _MAX.search(text) else "min" if _MIN.search(text) else None


@dataclass
class Question:
    """A question as the answerer reads it."""

    text: str
    kind: str  # "value" | "where" | "term" | "general"
    terms: list[str] = field(default_factory=list)  # content stems, in order
    asks: str | None = None  # "count" | "share" | None: the kind of value the wording names
    extreme: str | None = None  # "max" | "min": a superlative asks for the extreme of a series
    numbers: set[float] = field(default_factory=set)  # numbers the question gives (its inputs, never its answer)
    excluded: list[str] = field(default_factory=list)  # terms the question rules out ("rather than ISO")
    mentions: list[set[float]] = field(default_factory=list)  # each number mentioned, as it may be printed
    subject: list[str] = field(default_factory=list)  # terms of what is asked about (the first noun phrase)
    asked: bool = False  # put as a question (an interrogative or auxiliary opening a clause), not typed as keywords
    error: bool = False  # quotes an exception or warning class (`TypeError: …`): an error pasted in
    # The question is one number alone (`number_alone`): each way it may be read, with the decimals it was typed to
    lookup: list[tuple[float, int]] = field(default_factory=list)


def number_alone(text: str) -> list[tuple[float, int]]:
    """The readings of a question that is one number alone (empty for any other question), each with the decimals
    it was typed to: `1,284.6` is 1284.6 (1 decimal); `0,702` is 0.702 (3) or 702 (0), since a comma separates
    decimals in some locales and thousands in others; a percentage is also its fraction (`12.5 %`: 12.5 and
    0.125)."""
    found = _NUMBER_ALONE.match(" ".join(text.split()).rstrip("?"))
    if found is None:
        return []
    written = found.group("number").replace("−", "-")
    cut = re.search(r"[eE][-+]?\d+$", written)
    number, exponent = (written[:cut.start()], cut.group()) if cut else (written, "")
    readings: list[tuple[float, int]] = []
    for point, group in ((".", ",' "), (",", ".' ")):
        reading = _READING[point].fullmatch(number)
        if reading is None:
            continue
        whole, _, part = number.partition(point) if point in number else (number, "", "")
        digits = "".join(c for c in whole if c not in group)
        value = float(f"{digits}.{part or 0}{exponent}")
        decimals = max(0, len(part) - int(exponent[1:] or 0))  # `4.5e-3` is typed to 4 decimals
        readings.append((value, decimals))
        if found.group("percent"):
            readings.append((value / 100, decimals + 2))
    return list(dict.fromkeys(readings))


# A setting, then the ask after a clause separator, ending in a question mark ("Short bilby run on GW150914 with
# the default priors: median chirp mass?"): the last clause names what is asked for.
_SETTING_THEN_ASK = re.compile(r"[:;]\s+(?P<ask>[^:;]*?)\s*\?\s*$")


def _ask_after_setting(text: str) -> str:
    """The clause a question without an interrogative asks with: after its last `:` or `;` when a question mark
    ends it and it holds a term, else the whole text (keywords typed in one run name the thing asked first)."""
    found = _SETTING_THEN_ASK.search(text)
    return found.group("ask") if found and question_terms(found.group("ask")) else text


def read_question(text: str) -> Question:
    """The kind of answer `text` asks for, its terms and what kind of value it names."""
    text = " ".join(text.split())
    if _TERM.search(text):
        kind = "term"
    elif _WHERE.search(text):
        kind = "where"
    elif _VALUE.search(text):
        kind = "value"
    else:
        kind = "general"
    asks = "count" if _COUNT.search(text) else "share" if _SHARE.search(text) else None
    extreme = extreme_named(text)
    mentions: list[set[float]] = []
    for m in _NUMBERS.finditer(text):
        n = to_number(m.group().replace(",", ".").rstrip("% "))
        if n is not None:
            mentions.append({n, n / 100} if m.group("percent") else {n})  # "70%" is also written 0.7
    numbers = set().union(*mentions) if mentions else set()
    excluded = [t for m in _EXCLUDED.finditer(text) for t in question_terms(m.group("what"))]
    kept = _EXCLUDED.sub(" ", text)
    spelled = re.sub(r"\b[A-Za-z]+\b", lambda m: f"{m.group()} {_NUMBER_WORDS[m.group().lower()]}"
                     if m.group().lower() in _NUMBER_WORDS else m.group(), kept)
    found = [t for t in question_terms(spelled) if t not in excluded] or question_terms(text)
    asking = _INTERROGATIVE.search(spelled)  # "Fuel oil in 2 inch pipe: what psi drop do we get …"
    opening = spelled[asking.start():] if asking else _ask_after_setting(spelled)
    for _ in range(2):  # "what was the …"
        opening = _ASKING_OPENERS.sub("", opening, count=1)
    head = _SUBJECT_END.split(opening, maxsplit=1)[0]
    subject = [t for t in question_terms(head) if t in found]
    return Question(text, kind, list(dict.fromkeys(found)), asks, extreme, numbers, excluded, mentions, subject,
                    bool(_ASKED.search(text)), bool(_EXCEPTION.search(text)), number_alone(text))
