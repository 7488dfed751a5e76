"""What a cell's output does not show: a result pandas printed in part, or no result at all.

Two ways a small model answers wrong from output that looks fine (measured on the everyday
suite, bench/everyday.py, with the 1.5B default):
- it prints a 365-row Series, pandas shows ten rows and `...`, and the model answers with
  one of the ten ("the highest temp_max in 2015": 10.6, a value from the first rows; the
  truth, 35.0, was among the rows left out);
- a filter selects no rows (`date.str.startswith('2009')` over dates written `Jan 1
  2009`), the mean of nothing prints `nan`, and the model answers "0.00".

`partial_note(output)` reads the output's shape, not the code: pandas' own marks of an
elided display (a `...` row with its `Length: N` or `[N rows x M columns]` trailer, numpy's
`...` inside an array) and a result that is nothing (`nan`, `Empty DataFrame`, an empty
Series or list). It returns the note appended to the cell's result (rlm.agent.policy.rules
`PartialResult`), or None.
"""

from __future__ import annotations

import re

# pandas: a Series' elided rows are a line of `...`; a DataFrame's a line of `..` cells;
# each display ends with how long it is (`Length: 365` / `[365 rows x 6 columns]`)
_ELIDED_ROW = re.compile(r"^\s*(?:\.\.\.|\.\.(?:\s+\.\.\.?)+)\s*$", re.M)
_LENGTH = re.compile(r"(?:\bLength: (\d[\d,]*\d|\d)|^\[(\d[\d,]*\d|\d) rows x \d+ columns\])",
                     re.M)
# numpy: `[ 1  2  3 ... 98 99]` (a summarised array)
_ARRAY_ELIDED = re.compile(r"\[[^\[\]\n]*\d,?\s+\.\.\.,?\s+[^\[\]\n]*\d[^\[\]\n]*\]")
# a result that is nothing: the whole output, or its last line
# (alone, or after a label: `average: nan`), or pandas' display of an empty table
_NOTHING = re.compile(r"^(?:.{0,80}[:=]\s*)?(nan|NaN|<NA>|NaT|\[\]|Series\(\[\], .*\))$")
_EMPTY_TABLE = re.compile(r"^Empty (?:DataFrame|Series)\b", re.M)
PARTIAL = ("\n[Only part of this result was printed ({what}; `...` marks what was left "
           "out). Do not read the answer off the rows you see: compute exactly the value the "
           "question asks for (a max, a sum, a count, one filtered row) and print that.]")
NOTHING = ("\n[This result is empty ({what}): the condition selected no rows, or the column "
           "holds no numbers there. Do not answer from it. Print a few values of the columns "
           "you filtered on (`df['col'].head()`) to see how they are written, then fix the "
           "condition.]")


def partial_note(output: str) -> str | None:
    """The note for an output that shows a result in part or shows none (None: neither)."""
    text = output.strip()
    if not text:
        return None
    last = text.splitlines()[-1].strip()
    if _EMPTY_TABLE.search(text):
        return NOTHING.format(what="no rows")
    m = _NOTHING.match(last)
    if m:
        return NOTHING.format(what=m.group(1)[:40])
    if _ELIDED_ROW.search(text):
        m = _LENGTH.search(text)
        if m:
            return PARTIAL.format(what=f"{m.group(1) or m.group(2)} rows")
    if _ARRAY_ELIDED.search(text):
        return PARTIAL.format(what="a long array")
    return None
