"""The question's conditions that no cell used: a dropped filter, found by the data.

A small model drops a condition the question states: "the total population of Africa in
2007" summed Africa over every year (bench/everyday.py: 6,187,585,961 for 929,539,692),
"the month of 2014 with the most rain" grouped all four years. Its answer is then computed
from the data and shown by an output, so nothing else catches it.

The conditions are found by what the data holds, not by a list of phrasings:
- a value of the input that the question names: the input description (the
  `context_vars` entries, kernel_ext.columns) quotes every value of a few-valued column
  (`continent (str): 5 values: 'Africa', ...`, `year (int64): ...; 12 values: 1952, ...`),
  and every few-valued word position of a text's lines (`split()[1] (line word): 4
  values: '[INFO]', '[ERROR]', ...`, kernel_ext.line_fields), whose words are found by
  their letters (`'[ERROR]'` by "ERROR"); a question naming one of them (any case) states
  a condition;
- a number of three or more digits in the question (a year, a threshold) that tells rows
  apart by what the description says: a listed level of a column with more than one
  value, inside the range of a number column, or a year inside the range of a date column
  that spans several years; never the one year a date column spans, nor the one value
  of a column ("in 2025" over data that is all of 2025 states no condition).
Words inside a quoted example of the answer's format ("one line per service like
'billing: 42'") are the example's, not conditions.
A condition is used when a literal of some successful cell's code of this run spells it
(any case, as a whole word; for a number, as a number): a string or a number, not a
comment or a name (`# count the error lines` filters nothing); values of one column named
together are used by a literal that names the column (one result each: a group over it).
`dropped(question, descriptions, codes)` returns the conditions none used, in the
question's order.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

# a quoted value in a column line (`'Africa', 'Asia'`), or the integer levels listed after
# "N values:" (`12 values: 1952, 1957, ...`)
_QUOTED = re.compile(r"'((?:[^'\\\n]|\\.){1,40})'(?=,|;|$)", re.M)
_INT_LEVELS = re.compile(r"\d+ values(?: in the sample)?: (-?\d+(?:, -?\d+)*)(?![\d.])")
_INT_LEVEL = re.compile(r"-?\d+")
_NUMBER = re.compile(r"(?<![\w.])(\d{3,}(?:\.\d+)?)(?![\w.]\w)")
# a column's range: `1952 .. 2007`, `32.2 .. 59.6`, `2013-01-01 .. 2013-12-31`, `'Jan 1 2000' .. 'Mar 1 2010'`
_RANGE = re.compile(r"\): (?:dates as text, )?('[^'\n]{1,40}'|\S+) \.\. ('[^'\n]{1,40}'|\S+?)(?=[;,]|\s|$)",
                    re.M)
_YEAR = re.compile(r"(?<!\d)([12]\d{3})(?!\d)")
_FILE = re.compile(r"\S+\.[A-Za-z][A-Za-z0-9]{0,9}\b")


# a format the question shows by example ("one line per service like 'billing: 42'"):
# its words are the example's, not a condition
_EXAMPLE = re.compile(r"\b(?:like|e\.g\.|for example|for instance|such as)[,:]?\s*"
                      r"(?:'[^'\n]*'|\"[^\"\n]*\"|“[^”\n]*”|‘[^’\n]*’|`[^`\n]*`)", re.I)
LINE_WORD = "line word"  # the dtype of a text's line position (kernel_ext.line_fields.KIND)
_DECOR = "[](){}<>:;,.=|\"'"  # what a line word may be wrapped in: `[ERROR]`, `billing:`
_TABLE = re.compile(r"^- ([A-Za-z_]\w*): ")
_COLUMN = re.compile(r"^  (\S(?:[^\n]*?\S)?) \(([^()\n]*)\): (.*)$")


def _column_lines(descriptions: Iterable[str]) -> Iterator[tuple[str, str, str, str]]:
    """(table, column, its dtype, the column's facts) for every column line of the
    descriptions (a text's line positions too: kernel_ext.line_fields)."""
    for text in descriptions:
        table = ""
        for line in text.splitlines():
            if m := _TABLE.match(line):
                table = m.group(1)
            elif m := _COLUMN.match(line):  # table "": a column line outside a table
                yield table, m.group(1), m.group(2), "): " + m.group(3)


def where_values(descriptions: Iterable[str]) -> dict[str, tuple[str, str, str]]:
    """Each value the input descriptions list, lower-cased -> (table, column, the value
    as a literal: `'Africa'`, `2007`). A text's line word is also found by its word
    (`'[ERROR]'` by "error"), and its column is LINE_WORD."""
    out: dict[str, tuple[str, str, str]] = {}
    for table, column, dtype, facts in _column_lines(descriptions):
        for m in _QUOTED.finditer(facts):
            if dtype == LINE_WORD:
                word = m.group(1).strip(_DECOR)
                if word:
                    out.setdefault(word.lower(), (table, LINE_WORD, f"'{m.group(1)}'"))
                continue
            out.setdefault(m.group(1).lower(), (table, column, f"'{m.group(1)}'"))
        for block in _INT_LEVELS.finditer(facts):
            levels = _INT_LEVEL.findall(block.group(1))
            if len(levels) > 1:
                for v in levels:
                    out.setdefault(v, (table, column, v))
    return out


def values_of(descriptions: Iterable[str]) -> set[str]:
    """The values the input descriptions list, lower-cased."""
    return set(where_values(descriptions))


def _ranges(descriptions: Iterable[str]) -> list[tuple[float, float, str, str]]:
    """The spans rows differ over, with their table and column: number ranges, and the
    years of date ranges (a span of one value is kept too: what every row holds,
    `_tells_rows_apart` rules it out)."""
    out = []
    for table, column, _dtype, facts in _column_lines(descriptions):
        for m in _RANGE.finditer(facts):
            lo, hi = m.group(1).strip("'"), m.group(2).strip("'")
            try:
                out.append((float(lo), float(hi), table, column))
                continue
            except ValueError:
                pass
            ylo, yhi = _YEAR.search(lo), _YEAR.search(hi)
            if ylo and yhi:
                out.append((float(ylo.group(1)), float(yhi.group(1)), table, column))
    return out


def _tells_rows_apart(number: str, values: set[str] | dict[str, Any],
                      ranges: list[tuple[float, float, str, str]]) -> bool:
    n = float(number)
    if any(lo == hi == n for lo, hi, _, _ in ranges):
        return False  # every row holds it
    return number in values or any(lo <= n <= hi for lo, hi, _, _ in ranges if lo < hi)


def how_to_use(term: str, descriptions: Iterable[str]) -> str:
    """Where the data holds `term`, as code to filter with (`gapminder[gapminder['year'] ==
    2007]`), or the column whose range holds it; "" when the description does not say."""
    descriptions = list(descriptions)
    hit = where_values(descriptions).get(term.lower())
    if hit:
        table, column, literal = hit
        if column == LINE_WORD:
            return (f"[line for line in {table}.splitlines() if {literal} in line.split()]"
                    if table else "")
        return f"{table}[{table}[{column!r}] == {literal}]" if table else ""
    try:
        n = float(term)
    except ValueError:
        return ""
    for lo, hi, table, column in _ranges(descriptions):
        if lo < hi and lo <= n <= hi and table:
            return f"{term} is within the range of {table}[{column!r}]"
    return ""


def conditions(question: str, descriptions: Iterable[str]) -> list[str]:
    """The values and numbers `question` states, in its order (file names left out)."""
    descriptions = list(descriptions)
    text = _FILE.sub(" ", _EXAMPLE.sub(" ", question))
    low = text.lower()
    found: list[tuple[int, str]] = []
    values, ranges = where_values(descriptions), _ranges(descriptions)
    for value in values:
        if len(value) < 2 or not re.search(r"\w", value):
            continue
        m = re.search(rf"(?<!\w){re.escape(value)}(?!\w)", low)
        if m:
            found.append((m.start(), text[m.start():m.end()]))
    for m in _NUMBER.finditer(text):
        if _tells_rows_apart(m.group(1), values, ranges):
            found.append((m.start(), m.group(1)))
    seen: set[str] = set()
    out = []
    for _, term in sorted(found):
        if term.lower() not in seen:
            seen.add(term.lower())
            out.append(term)
    return out


@lru_cache(maxsize=512)
def literals(code: str) -> str:
    """The string and number literals of `code`, one per line: where a cell states a
    value to filter with. Comments and names are not (the logs run's `# ... their error
    counts` and `error_counts` applied no ERROR filter). A cell that does not tokenize is
    read whole, less what follows a `#`."""
    out: list[str] = []
    try:  # as the kernel ran it: `!grep ERROR app.log` is a call with that string
        from rlm.agent.policy.dataflow import _transformer

        code = _transformer().transform_cell(code)
    except Exception:  # noqa: BLE001 - a cell IPython cannot transform is read as it is
        pass
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in _LITERAL_TOKENS:
                out.append(tok.string)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return "\n".join(line.partition("#")[0] for line in code.splitlines())
    return "\n".join(out)


_LITERAL_TOKENS = {tokenize.STRING, tokenize.NUMBER,
                   getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def used(term: str, codes: Iterable[str]) -> bool:
    """Whether some code's literals spell `term` (any case, as a whole word; a number as a
    number)."""
    if re.fullmatch(r"\d+(?:\.\d+)?", term):
        pattern = rf"(?<![\w.]){re.escape(term)}(?![\w]|\.\d)"
        return any(re.search(pattern, literals(c)) for c in codes)
    pattern = rf"(?<!\w){re.escape(term.lower())}(?!\w)"
    return any(re.search(pattern, literals(c).lower()) for c in codes)


def dropped(question: str, descriptions: Iterable[str], codes: Iterable[str]) -> list[str]:
    """The conditions of `question` no code spells. Values of one column named together
    ("the worst month for each of EWR, JFK and LGA") ask for one result each: a code that
    names their column (`groupby('origin')`) covers them all without spelling one (the
    long-run flights goal's file, written from a group over every origin, was refused for
    never using 'EWR'). A value named alone is a filter still (`groupby('continent')` is
    not "Africa")."""
    descriptions, codes = list(descriptions), list(codes)
    terms = conditions(question, descriptions)
    where = where_values(descriptions)
    columns: dict[tuple[str, str], int] = {}
    for t in terms:
        if (at := where.get(t.lower())) and at[1] != LINE_WORD:
            columns[at[:2]] = columns.get(at[:2], 0) + 1

    def grouped(term: str) -> bool:
        at = where.get(term.lower())
        return at is not None and columns.get(at[:2], 0) > 1 and used(at[1], codes)

    return [t for t in terms if not used(t, codes) and not grouped(t)]
