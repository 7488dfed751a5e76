"""A row label printed as if it were the answer: `df['temp_min'].idxmin()` is the label of
the row (on a table read from a file: its row number), not the day it names.

The 1.5B default model printed `seattle_weather["temp_min"].idxmin()` (706), then answered
a date no output showed; refused, it ran the same cell again (bench/everyday.py,
seattle-coldest-day). `label_note(code, output, earlier)` reads the cell's syntax tree:
an `idxmin`/`idxmax`/`argmin`/`argmax` taken straight off a column of a table (`t['c']`,
`t.c`, `t[mask]['c']`), whose result is not used to index anything in the cell, and an
output ending in a bare whole number. Not when the run set an index of its own
(`set_index`, `index_col`: the label is then a real value) or the column was aggregated
first (`groupby(...)`, `value_counts()`: the label is the group). The note (rule
RowLabel) says what the number is and how to read the row it labels, and offers the cell
recast to print that row when the recast ran on a fork (`row_recasts`): the model
answered a date no output showed after the note alone.
"""

from __future__ import annotations

import ast
import re

from rlm.agent.rewrites import Rewrite, Splice

NOTE = ("\n[{value} is {what} of a row of `{table}`, not a value of its columns: "
        "`.{fn}()` gives where the row is. Read that row with `{table}.{loc}[{value}]` "
        "(one column: `{table}.{loc}[{value}, 'column']`), then answer from its values.]")
_LAST_WHOLE = re.compile(r"(?:^|\n)\s*(-?\d+)\s*$")
_OWN_INDEX = re.compile(r"\bset_index\b|\bindex_col\b")
FUNCTIONS = {"idxmin": ("the label", "loc"), "idxmax": ("the label", "loc"),
             "argmin": ("the position", "iloc"), "argmax": ("the position", "iloc")}


def table_of(column: ast.expr) -> str | None:
    """`t` for a column taken straight off a table: `t['c']`, `t.c`, `t[mask]['c']`."""
    if isinstance(column, ast.Subscript) and isinstance(column.slice, ast.Constant) \
            and isinstance(column.slice.value, str):
        base = column.value
    elif isinstance(column, ast.Attribute):
        base = column.value
    else:
        return None
    while isinstance(base, ast.Subscript) and not (
            isinstance(base.slice, ast.Constant) and isinstance(base.slice.value, str)):
        base = base.value  # a row filter: `t[t['x'] > 0]`
    return base.id if isinstance(base, ast.Name) else None


def _in_index(tree: ast.AST) -> set[int]:
    """The ids of nodes inside some subscript's index (`t.loc[t.c.idxmin()]`)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            inside.update(id(n) for n in ast.walk(node.slice))
    return inside


def _found(code: str, output: str, earlier: list[str]
           ) -> tuple[ast.Call, str, str, str] | None:
    """(the call, its function, its table, the printed label) for a cell that printed a
    row label as its result."""
    found = _LAST_WHOLE.search(output or "")
    if found is None or any(_OWN_INDEX.search(c) for c in [*earlier, code]):
        return None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    inside = _in_index(tree)
    named: dict[str, ast.Call] = {}  # names the label is bound to
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    named[t.id] = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in FUNCTIONS and id(node) not in inside \
                and (table := table_of(node.func.value)) is not None:
            calls.append((node, node.func.attr, table))
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) in inside}
    for node, fn, table in calls:
        if any(v is node and k in used for k, v in named.items()):
            continue  # the label indexes something in this cell: its output is the row's
        return node, fn, table, found.group(1)
    return None


def label_note(code: str, output: str, earlier: list[str]) -> str:
    """The note for a cell that printed a row label as its result, or ""."""
    hit = _found(code, output, earlier)
    if hit is None:
        return ""
    _, fn, table, value = hit
    what, loc = FUNCTIONS[fn]
    return NOTE.format(value=value, what=what, table=table, fn=fn, loc=loc)


def row_recasts(code: str, output: str, earlier: list[str]) -> list[Rewrite]:
    """The cell with the label it printed turned into the row it labels
    (`t.loc[t['c'].idxmin()]`), to try on a fork (rlm.agent.repair.tried)."""
    hit = _found(code, output, earlier)
    if hit is None or not hit[2].isidentifier():
        return []
    node, fn, table, _ = hit
    sp = Splice(code)
    loc = FUNCTIONS[fn][1]
    recast = sp.apply({sp.span(node): f"{table}.{loc}[{sp.text(node)}]"})
    return [Rewrite(recast, f"`{table}.{loc}[...]` reads the row `.{fn}()` points at")] \
        if recast else []
