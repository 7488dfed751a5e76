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

import ast
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


def is_empty(output: str) -> bool:
    """Whether an output shows an empty result (no rows, nan, an empty Series)."""
    note = partial_note(output)
    return note is not None and note.startswith(NOTHING.split("{")[0])


# how a filter compares a column with a literal: the op a condition used, by its name here
_STR_OPS = {"startswith": "starts", "contains": "contains", "endswith": "ends",
            "match": "starts", "fullmatch": "equal"}


def filters_of(code: str) -> list[tuple[str, str, str, str]]:
    """(table, column, literal, op) for each condition of `code` comparing a table's
    column with a text literal: `t['c'] == 'x'`, `t.c != 'x'`, `t['c'].str.startswith('x')`,
    `.str.contains`, `t['c'].isin(['x', ...])`; op: "equal", "starts", "contains", "ends"."""
    from rlm.agent.rewrites import table_of

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    out: list[tuple[str, str, str, str]] = []

    def column(node: ast.expr) -> tuple[str, str] | None:
        table = table_of(node)
        if table is None:
            return None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            return table, str(node.slice.value)
        return (table, node.attr) if isinstance(node, ast.Attribute) else None

    def text(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 \
                and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            for a, b in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
                col, lit = column(a), text(b)
                if col and lit is not None:
                    out.append((*col, lit, "equal"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            if f.attr in _STR_OPS and isinstance(f.value, ast.Attribute) \
                    and f.value.attr == "str" and (col := column(f.value.value)) \
                    and (lit := text(node.args[0])) is not None:
                out.append((*col, lit, _STR_OPS[f.attr]))
            elif f.attr == "isin" and (col := column(f.value)) \
                    and isinstance(node.args[0], (ast.List, ast.Tuple, ast.Set)):
                out += [(*col, lit, "equal") for e in node.args[0].elts
                        if (lit := text(e)) is not None]
    return list(dict.fromkeys(out))


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
