"""Reading values out of printed text: numbers, their units, the label before them, timings, LaTeX rows.

No library reads labelled values out of free-form printed output, so this is done here, by notation, never by
wording: a value is a run of numbers (with `±`, `, ` or a complex part inside it); its label is the text since the
previous value; a number that sits between words (`Well 2 mean porosity`) is part of the label; `=`, `:`, `is`,
brackets, pipes, columns aligned under a line of names and LaTeX `&=` rows say what is what. These rules hold across
archives and languages. Structured reprs (dicts, Series, constructor calls) and tables printed as text are
`reprs.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "NOISE",
    "NUMBER",
    "OBJECT_REPR",
    "latex_row",
    "latex_text",
    "line_facts",
    "timing_reports",
    "to_number",
    "value_runs",
]


# --- numbers in printed text --------------------------------------------------------------------------------

_REAL = r"(?:\d(?:[\d_]|,(?=\d))*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# A number as printed: sign, thousands separators, exponent, a complex part (`1.12+0.579j`), a fraction
# (`2/5`), a percent sign. Not a digit glued to a name (`P0`, `m11`, `U-235`, `x_2`, `f1`).
NUMBER = re.compile(
    rf"(?<![\w.])(?<![A-Za-z]-)[-+−]?{_REAL}(?:[-+]{_REAL}j|j)?(?:/\d+(?![\d.]))?%?(?![\w.]*[A-Za-z_(])"
)
# A number with a unit symbol glued to it (`20ms`, `5kg`, `3.2GHz`, `12.12s`): an SI prefix and a base symbol, or a
# unit written without one. NUMBER refuses a number followed by letters (`3D`, `2nd`, `v2`); these symbols are
# units, read only where the line says a value follows (`latency: 20ms`, `x=1.036m`), not in a repr's sizes
# (`float64 216B`) or a progress bar (`25s 3ms/step`). A four-digit number before `s` is a decade (`the 1990s`).
_GLUED_UNIT = (r"(?:[kMGTmµμunpc]?(?:m|g|s|Hz|W|Wh|V|A|J|N|Nm|Pa|eV|Ω|L|l|t)|min|h|rpm|K|mol|bar|mbar|°[CF]|ft|in|"
               r"lb|psi|mph|kph|kts|kWh|MWh|GWh)")
# … or two such symbols joined by a dot or a middle dot, a product (`312.56N.m`, `2.1kN·m`)
_GLUED = re.compile(
    rf"(?<![\w.])(?<![A-Za-z]-)[-+−]?{_REAL}(?={_GLUED_UNIT}(?:[.·]{_GLUED_UNIT})?(?![\w.]))"
    r"(?<!(?<![\d.])\d{4}(?=s\b))"
)
# The marks of a ± spread and of a range (`0.200 +/- 0.018`, `3 to 5`): shared by what joins the numbers of one
# printed value (`_JOIN`) and what reads such a value as one statistic (`_TWO_NUMBERS`).
_SPREAD_MARK = r"\+/-|±|\+-"
_RANGE_MARK = r"to|-|–|—"
# What may sit between the numbers of one value: a list separator, a ± spread, a range dash.
_JOIN = re.compile(rf"\s*(?:,\s*|\s*(?:{_SPREAD_MARK})\s*|\s+(?:{_RANGE_MARK})\s+|\s+)\s*$")
# … and a spread printed without spaces (`0.170+/-0.002`, the `uncertainties` package's form), whose minus the
# second number took as its sign: what is left between them is `+/` or `+`.
_SIGNED_SPREAD = re.compile(r"\+/?")
_CONNECTOR_END = re.compile(r"(?:[=:≈~]|\b(?:is|are|was|were|of|equals|ist|sind|beträgt|von))\s*$", re.I)
# A unit: a bracketed one, a symbol, or words joined by operators (`foot ** 3 / hour`), by hyphens (`ft-lbf`,
# `RB/D-psi`) or over a bracketed denominator (`RB/(D-psi)`, `BTU/(lb °F)`), as engineering units are written.
_UNIT_WORD = r"(?:[^\W\d_]|°)[\w°²³]*"
_UNIT = re.compile(
    r"\s*(\[[^\[\]\n]{1,20}\]|\([^()\n]{1,20}\)|°[CFK]\b|[%°‰]|(?:(?:[^\W\d_]|[°$€£])[\w°²³µ$€]*"
    rf"(?:-{_UNIT_WORD}|\s*(?:\*\*|/|\*|·|\^)\s*(?:{_UNIT_WORD}|\d+)|/\([^()\n]{{1,16}}\))*))"
)
# Words after a number that continue a sentence rather than name a unit.
_NOT_UNIT = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in", "is", "it", "of", "on", "or",
    "the", "to", "was", "were", "with", "which", "that", "than", "then", "und", "der", "die", "das", "ist", "mit",
    "von", "zu",
))
OBJECT_REPR = re.compile(r"^<[\w.]+(?: [\w.]+)*(?: object)?(?: at 0x[0-9a-fA-F]+)?>$|^<[^<>]* at 0x[0-9a-fA-F]+>$")
NOISE = re.compile(
    r"^\s*(?:\[(?:…|\.\.\.)[^\]]*\]|\[(?:figure|widget|html|plotly)[^\]]*\]|<Figure size|\[?<matplotlib|Text\(|"
    r"dtype\(|(?:Collecting|Downloading|Requirement already|Installing|Successfully|Using cached)\b|.*\d+%\|)"
)


def to_number(text: str) -> float | None:
    """The float of a printed number (`1,284.6`, `−3`, `12%` → 12.0); None for anything else."""
    cleaned = text.strip().replace(",", "").replace("_", "").replace("−", "-").rstrip("%")
    try:
        return float(cleaned)
    except ValueError:
        return None


# A value of two numbers that is one statistic: a spread (`0.170+/-0.002`, `0.200 +/- 0.018`) or a range (`0.182,
# 0.218`, `3 to 5`), not a bracketed list or an array
_TWO_NUMBERS = re.compile(
    rf"\s*([-+−]?{_REAL})\s*(?:{_SPREAD_MARK}|,|\s(?:{_RANGE_MARK}|and)\s)\s*[-+−]?{_REAL}\s*%?"
)
# `between 16.093 and 16.107`: a range whose numbers `and` joins, only after `between` (else `and` joins two values)
_BETWEEN = re.compile(r"\bbetween\s*$", re.I)
_AND = re.compile(r"\s+and\s+")


def leading_number(value: str) -> float | None:
    """The number a printed value leads with when it is one number, a spread or a range (`0.170+/-0.002` → 0.17,
    `0.182, 0.218` → 0.182); None for anything else (a list in brackets, an array, a repr, a word)."""
    number = to_number(value)
    if number is not None:
        return number
    two = _TWO_NUMBERS.fullmatch(value)
    return to_number(two.group(1)) if two else None


@dataclass
class _Run:
    start: int
    end: int
    unit_end: int
    unit: str


# A scale word is half a unit: `848.57 million STB`, `1.5 billion scf` (the unit is the two words); so is a power
# written as a word: `46.7 cubic meters`, `120 square feet`.
_SCALE_WORDS = frozenset(("thousand", "million", "billion", "trillion", "square", "cubic"))


# A dot between unit symbols is a product (`mPa.s`, `kN.m`, `W/m2.K`, `kN.m^2`); a file name's extension
# (`figure.png`) or an abbreviation (`s.t.`) is not: the symbols on both sides of the dot have at most three letters.
_DOT_PRODUCT = re.compile(r"\.([^\W\d_][\w°²³]{0,2}(?:\^-?\d+)?)(?![\w.])")
# A unit's name as a units library writes it, lower-case words joined by underscores (pint's
# `pound_force_per_square_inch`): longer than a symbol may be. A name in capitals (`IOOS_Raw_Water_Level`) is no unit.
_UNIT_NAME = re.compile(r"[a-z]+(?:_[a-z]+)+")
# A negative power written with a hyphen after a unit symbol of at most three letters (`9.7e+09 cm-3`, `0.12 s-1`):
# one digit, not the start of a range (`5 m-10 m`) or of a decimal.
_HYPHEN_POWER = re.compile(r"-\d(?![\d.,])")


def _sentence_word(word: str, spaced: str, stated: bool) -> bool:
    """A word after a number that continues a sentence (`_NOT_UNIT`) rather than naming its unit. A capital letter
    alone is the one unit symbol the list holds in lower case (`is 0.808 A.` is amperes): it is read as the unit when
    the number is stated (after `=`, `:`, `is`, …) and one space at most sets it apart; an index and a letter in a
    column (`1    A`) or a counter and a letter (`1 A`) are not a quantity."""
    if word.lower() not in _NOT_UNIT:
        return False
    return not (len(word) == 1 and word.isupper() and stated and spaced in ("", " "))


def _stated(line: str, start: int) -> bool:
    """Whether the number at `start` follows a connector (`=`, `:`, `is`, …): a value being given, not a count or an
    index that happens to stand before a word."""
    return _CONNECTOR_END.search(line, 0, start) is not None


def _unit_after(line: str, end: int, stated: bool = False) -> tuple[str, int]:
    """The unit written after the number that ends at `end`, and where it ends; `stated`: the number follows a
    connector (`=`, `:`, `is`, …), so it is a value being given."""
    match = _UNIT.match(line, end)
    if not match:
        return "", end
    unit = match.group(1).strip()
    if not unit or _sentence_word(unit, line[end : match.start(1)], stated) \
            or len(unit) > (40 if _UNIT_NAME.fullmatch(unit) else 24):
        return "", end
    unit_end = match.end()
    while (dot := _DOT_PRODUCT.match(line, unit_end)) and len(re.split(r"[/*·^\s-]+", unit)[-1]) <= 3:
        unit, unit_end = f"{unit}.{dot.group(1)}", dot.end()
    power = _HYPHEN_POWER.match(line, unit_end)
    if power and len(re.split(r"[/*·^.\s-]+", unit)[-1]) <= 3:  # `cm-3`, `s-1`: a power written with a hyphen
        unit, unit_end = unit + power.group(0), power.end()
    if unit.lower() in _SCALE_WORDS:  # `848.57 million STB`: the scale and the unit after it are one unit
        after = _UNIT.match(line, unit_end)
        word = after.group(1).strip() if after else ""
        if after and word and word.lower() not in _NOT_UNIT and not word[0].isdigit() and len(unit) + len(word) < 24:
            unit, unit_end = f"{unit} {word}", after.end()
    rest = line[unit_end:].lstrip()
    if rest[:1] in ("=", ":") or unit[0].isdigit():
        return "", end  # the next label ("… 5 Kv = 240"), not this value's unit
    if line.startswith(("'s ", "’s "), unit_end):
        return "", end  # whose the next label is (`0.912 valid_0's binary_logloss: 0.30`), not a unit
    return unit, unit_end


# A date or a timestamp (`2012-12-31`, `2019-11-01 04:00:00`) names a row of a time series; its digits are no value.
_DATE = re.compile(r"(?<![\w.])\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?![\w.])")


def value_runs(line: str) -> list[_Run]:
    """Spans of values in a printed line, each with the unit written after it."""
    dates = [m.span() for m in _DATE.finditer(line)] if "-" in line else []
    found = list(NUMBER.finditer(line))
    if any(c.isdigit() for c in line):
        taken = {m.start() for m in found}
        glued = (m for m in _GLUED.finditer(line)
                 if m.start() not in taken and _stated(line, m.start()))  # `latency: 20ms`
        found = sorted([*found, *glued], key=lambda m: m.start())
    numbers = [m for m in found if not any(a <= m.start() < b for a, b in dates)]
    runs: list[_Run] = []
    for m in numbers:
        if runs and m.start() < runs[-1].unit_end:
            continue  # inside the unit written after the previous value (`foot ** 3 / hour`)
        gap = line[runs[-1].end : m.start()] if runs else ""
        spread = _SIGNED_SPREAD.fullmatch(gap) is not None and line[m.start()] in "-−"
        between = _AND.fullmatch(gap) is not None and _BETWEEN.search(line, 0, runs[-1].start) is not None
        if runs and (_JOIN.fullmatch(gap or " ") or spread or between) and runs[-1].unit_end == runs[-1].end:
            runs[-1].end = m.end()  # `0.182, 0.218`, `0.200 +/- 0.018`, `between 3 and 5`
            runs[-1].unit, runs[-1].unit_end = _unit_after(line, m.end(), _stated(line, runs[-1].start))
            continue
        run = _Run(m.start(), m.end(), m.end(), "")
        run.unit, run.unit_end = _unit_after(line, run.end, _stated(line, m.start()))
        runs.append(run)
    # brackets that hold nothing but the value belong to it: `(0.0, 64.0)`, `[0.95]`
    for run in runs:
        before, after = line[: run.start].rstrip(), line[run.end :].lstrip()
        closing = {"(": ")", "[": "]", "{": "}"}.get(before[-1:]) if before else None
        if closing and after[:1] == closing:
            run.start = len(before) - 1
            run.end = run.unit_end = line.index(after[0], run.end) + 1
            run.unit = ""
    return runs


# What a quantity is of, after its unit, to the end of the clause: `918.05 scf of gas.`, `21.88 roods of wheat`.
_OF_WHAT = re.compile(r"\s+of\s+[^\W\d_][\w-]*(?:\s+[^\W\d_][\w-]*){0,2}(?=\s*(?:[,.;:)\]}]|$))")


def _inside_label(line: str, run: _Run, previous_end: int) -> bool:
    """A number between words names something (`Well 2 mean porosity is …`, `with 64 panels the …`); a number
    after `=`, `:` or `is`, or followed by a unit and the end of a clause, is a value."""
    before = line[previous_end : run.start]
    if not before.strip() or _CONNECTOR_END.search(before) or before.rstrip()[-1] in "([{,;$€£":
        return False
    after = line[run.end :]
    if re.match(r"\s*(?:°[CFK]|[%°‰])?\s*(?:[=:]|\b(?:is|are|was|were|ist)\b)\s*[-+−]?[\d.]", after):
        return True  # `Well 2 is 0.200`, `at -10°C = 17.48`: the number names what the next value is of
    word = re.match(r"\s+([A-Za-zÀ-ÿ][\w'-]*)([^\s,;]*)", after)  # `1.2 s, sys`: the comma ends the clause
    if not word or word.group(1).lower() in _NOT_UNIT or word.group(2)[:1] in ("/", "^", "*", "²", "³"):
        return False
    rest = after[word.end() :]
    # `4.02 minutes.`, `84033 dimensionless dollars/year`, `21.88 roods of wheat.`: a unit, then the clause ends
    return not (re.match(r"\s*(?:[,.;:)\]}]|$)", rest) or re.match(r"\s*\S*[/^*²³]", rest)
                or _OF_WHAT.match(rest))


def _clean_label(text: str) -> str:
    text = re.sub(r"^[\s,;:.)\]}|-]+", "", text)
    text = re.sub(r"^(?:and|with|und|mit)\s+(?=\S)", "", text)
    text = re.sub(r"\s*[$€£]$", "", text.strip())
    text = re.sub(r"\s*(?:[=:≈~]|\b(?:is|are|was|were|equals|ist|sind|beträgt))\s*$", "", text, flags=re.I)
    words = text.split()
    return " ".join(words[-12:]).strip(" ,;:")


_LITERALS = {"none", "true", "false", "nan", "inf", "null"}


def _names_something(text: str) -> bool:
    """Whether `text` holds a word (two letters or more) that is not a printed literal (`None`, `nan`)."""
    return any(w.lower() not in _LITERALS for w in re.findall(r"[^\W\d_]{2,}", text))


# A segment that goes on about the line's subject: "…, with a range of 0.182, 0.218", "… and a minimum of 90".
_CONTINUES = re.compile(r"^[\s,;]*(?:with|and|or|at|for|to|from|giving|so|i\.e\.|which|of|in|after|but)\b", re.I)


def line_facts(line: str) -> list[tuple[str, str, str, str]]:
    """(label, value, unit, shown) for every value in one printed line, in order.

    `Kp = 5.97 tauI = 2.48` → ("Kp", "5.97", "", "Kp = 5.97"), ("tauI", "2.48", "", "tauI = 2.48");
    `The interval for Well 2 is 0.200 +/- 0.018, with a range of 0.182, 0.218` → the label keeps `Well 2`, and
    the range, a segment that goes on about the line's subject, is named and shown with it:
    ("The interval for Well 2 … a range of", "0.182, 0.218", "", "The interval for Well 2 … with a range of …")."""
    runs = value_runs(line)
    found: list[tuple[str, str, str, str]] = []
    label_from = 0
    subject = ""  # the line's first label
    for run in runs:
        if _inside_label(line, run, label_from):
            continue
        text = line[label_from : run.start]
        label = _clean_label(text)
        value = line[run.start : run.end].strip()
        start = run.start - len(text.lstrip(" ,;|.")) if label else run.start
        of_what = _OF_WHAT.match(line, run.unit_end) if run.unit else None
        shown = line[max(start, label_from) : of_what.end() if of_what else run.unit_end].strip(" ,;|")
        if found and subject and _CONTINUES.match(text):
            label, shown = f"{subject} … {label}", f"{subject} … {shown}"
        elif found and not label and _names_something(line[: run.start]):
            # `SOR (omega=1.9521): 1110 iterations`: named by all the line says before it (not by a row of a
            # printed table, `2 :  None :  80.0 :`, whose words are values)
            label = _clean_label(line[: run.start])
            shown = line[: run.unit_end].strip(" ,;|")
        found.append((label, value, run.unit, shown))
        subject = subject or label
        label_from = of_what.end() if of_what else run.unit_end
    return found


# --- IPython's timing reports --------------------------------------------------------------------------------

_DURATION = r"(?:[\d.]+\s?(?:h|min)\s+)?[\d.]+\s?(?:ns|µs|μs|us|ms|s|min|h)"  # `1min 3s` over a minute
_DURATION_PARTS = re.compile(r"([\d.]+)\s?(\S+)")
# `%timeit` since IPython 6 (`34.5 ms ± 59.4 µs per loop (mean ± std. dev. of 7 runs, 10 loops each)`, which
# IPython may wrap, with `+-` where the terminal has no `±`) and before it (`1000 loops, best of 3: 4.6 ms per
# loop`). Read as words and numbers, one report is four values named by fragments (`± 0 ns per loop (mean ± std.
# dev. of`); it is one duration.
_TIMEIT = re.compile(
    rf"(?P<new>(?P<mean>{_DURATION})\s*(?:±|\+-)\s*{_DURATION}\s+per\s+loop\s*\(mean\s*(?:±|\+-)\s*std\.\s*dev\.\s*of\s*"
    rf"\d+\s+runs?,\s*[\d,]+\s+loops?\s+each\))"
    rf"|(?P<old>[\d,]+\s+loops?,\s*best\s+of\s+\d+:\s*(?P<best>{_DURATION})\s+per\s+loop)"
)


@dataclass
class TimingReport:
    """One `%timeit` report in printed text: its duration (`34.5`, `ms`), the report as printed on one line, and
    where it sits in the text."""

    value: str
    unit: str
    shown: str
    start: int
    end: int


def timing_reports(text: str) -> list[TimingReport]:
    """The `%timeit` reports in `text`, in order (a report IPython wrapped over two lines is one)."""
    found = []
    for m in _TIMEIT.finditer(text):
        duration = m.group("mean") or m.group("best")
        parts = _DURATION_PARTS.fullmatch(duration)
        value, unit = (parts.group(1), parts.group(2)) if parts else (duration, "")  # `1min 3s`: as printed
        found.append(TimingReport(value, unit, " ".join(m.group().split()), m.start(), m.end()))
    return found


# --- LaTeX (sympy results, handcalcs) -----------------------------------------------------------------------

_LATEX_WRAPPERS = re.compile(r"\\(?:displaystyle|left|right|quad|qquad|textstyle|mathrm|textrm|text|mathit|"
                             r"operatorname|boldsymbol|mathbf)\b\s*")


def latex_text(latex: str) -> str:
    """LaTeX as the text a reader sees: `\\frac{a}{b}` → `a/b`, `x_{11}` → `x_11`, spacing and `$` gone.
    Rows of `aligned` blocks become lines; a row continued with `\\\\&=` stays one line."""
    text = latex.strip().strip("$")
    text = re.sub(r"\\\\\s*(?=&)", " ", text)  # a continued row (`\\&= 0.607`)
    text = re.sub(r"\\\\(?:\[[^\]]*\])?", "\n", text)
    text = re.sub(r"\\\[|\\\]|\\begin\{\w+\*?\}|\\end\{\w+\*?\}", " ", text)
    text = _LATEX_WRAPPERS.sub("", text)
    for _ in range(4):  # inside out: `k_{y_{y}}`, `\frac{ a }{ i_{y} }`
        text = re.sub(r"_\{([^{}]*)\}", lambda m: "_" + m.group(1).strip(), text)
        text = re.sub(r"\^\{([^{}]*)\}", lambda m: "^" + m.group(1).strip(), text)
        text = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"(\1)/(\2)", text)
        text = re.sub(r"\\sqrt\s*\{([^{}]*)\}", r"sqrt(\1)", text)
        text = re.sub(r"(?<![\\_^])\{([^{}]*)\}", r"\1", text)  # grouping braces (`\textrm{(m)}`)
    text = re.sub(r"\\(?:cdot|times)", "·", text)
    text = re.sub(r"\\[,;:! ]|~", " ", text)
    text = text.replace("\\{", "{").replace("\\}", "}").replace("&", "")
    text = re.sub(r"\\([A-Za-z]+)", r"\1", text)  # \lambda → lambda, \pi → pi
    text = re.sub(r"\(\s*([\w.]+)\s*\)/\(\s*([\w.]+)\s*\)", r"\1/\2", text)
    return "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def latex_row(row: str) -> tuple[str, str, str, str] | None:
    """A handcalcs row `lambda_y = (1 · 3)/(0.115) = 25.981 (Schlankheitsgrad)`: the symbol, the last value."""
    if "=" not in row:
        return None
    label = row.split("=", 1)[0].strip()
    last = row.rsplit("=", 1)[1].strip()
    runs = value_runs(last)
    if not label or not runs or runs[0].start > 1:
        return None
    run = runs[0]
    value = last[run.start : run.end]
    unit = run.unit.strip("()[] ") if run.unit else ""
    shown = f"{label} = {value}" + (f" {run.unit}" if run.unit else "")
    if re.fullmatch(r"[A-Za-zÀ-ÿ]{6,}", unit):  # handcalcs puts a comment where a unit goes: `(Beiwert)`
        label, unit = f"{label} ({unit})", ""
    return label, value, unit, shown
