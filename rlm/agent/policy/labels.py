"""A row label printed as if it were the answer: `df['temp_min'].idxmin()` is the label of
the row (on a table read from a file: its row number), not the day it names.

The 1.5B default model printed `seattle_weather["temp_min"].idxmin()` (706), then answered
a date no output showed; refused, it ran the same cell again (bench/everyday.py,
seattle-coldest-day). And per group: `average_delay.groupby('origin')['dep_delay'].
idxmax()` printed 5, 15 and 25 under `dep_delay` for "the month with the worst average
delay" (the long-run suite's flights, asked one step at a time). `label_note(code, output,
earlier)` reads the cell's syntax tree for a label call whose result no subscript reads
(rlm.agent.rewrites.label_calls): an `idxmin`/`idxmax`/`argmin`/`argmax` taken straight
off a column of a table (`t['c']`, `t.c`, `t[mask]['c']`) with an output ending in a bare
whole number, not where the run set an index of its own (`set_index`, `index_col`) or
the column was aggregated first (`value_counts()`: the label is the group); or an
`idxmin`/`idxmax` of a table grouped (`t.groupby(k)['c']`) with any output, whose labels
are checked in the data: the note is given only when the recast ran on a fork with the
check that `t`'s labels are row numbers (rlm.agent.rewrites.ROW_NUMBERS). The note (rule
RowLabel) says what the result is and how to read the rows it labels, and offers the
cell recast to print those rows when the recast ran (`row_label`): the model answered a
date no output showed after the note alone.
"""

from __future__ import annotations

import ast
import os
import re

from rlm.agent.rewrites import (
    LABEL_CALLS,
    LabelCall,
    Rewrite,
    Splice,
    label_calls,
    row_label_rewrites,
)

NOTE = ("\n[{value} is {what} of a row of `{table}`, not a value of its columns: "
        "`.{fn}()` gives where the row is. Read that row with `{table}.{loc}[{value}]` "
        "(one column: `{table}.{loc}[{value}, 'column']`), then answer from its values.]")
GROUPED = ("\n[`.{fn}()` of each group gives the label of a row of `{table}`, not a value "
           "of its columns, and `{table}`'s labels are row numbers: what it printed are "
           "row numbers. Read those rows with `{table}.loc[...]` around it, then answer "
           "from their values.]")
# a cell that printed nothing and wrote a file from the labels (the long-run flights
# task: `for o, m in worst.items(): f.write(f'{o}: month {m}')`, report.md holding row
# numbers): the file is its output
WROTE = ("\n[`.{fn}()` of each group gives the label of a row of `{table}`, not a value of "
         "its columns, and `{table}`'s labels are row numbers: what this cell wrote to "
         "{files} from it are row numbers. Read those rows with `{table}.loc[...]` around it "
         "and print them, then write {files} again from their values.]")
_LAST_WHOLE = re.compile(r"(?:^|\n)\s*(-?\d+)\s*$")
_OWN_INDEX = re.compile(r"\bset_index\b|\bindex_col\b")
WHAT = {"loc": "the label", "iloc": "the position"}


def _found(code: str, output: str, earlier: list[str], wrote: tuple[str, ...] = ()
           ) -> tuple[LabelCall, str] | None:
    """(the label call, the printed label: "" for a group's) for a cell that printed a
    row label as its result (a group's: or wrote files, `wrote`, printing nothing)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    whole = _LAST_WHOLE.search(output or "")
    own = any(_OWN_INDEX.search(c) for c in [*earlier, code])
    for call in label_calls(tree):
        if call.grouped and ((output or "").strip() or wrote):
            return call, ""
        if not call.grouped and whole is not None and not own:
            return call, whole.group(1)
    return None


def label_note(code: str, output: str, earlier: list[str]) -> str:
    """The note for a cell that printed a row label as its result, or "". A group's
    labels are row numbers only where the data says so: the caller gives that note only
    with the recast that checked it (`row_label`)."""
    hit = _found(code, output, earlier)
    return "" if hit is None else _note(*hit)


def _note(call: LabelCall, value: str) -> str:
    loc = LABEL_CALLS[call.fn]
    if call.grouped:
        return GROUPED.format(fn=call.fn, table=call.table)
    return NOTE.format(value=value, what=WHAT[loc], table=call.table, fn=call.fn, loc=loc)


def row_label(code: str, output: str, earlier: list[str], wrote: tuple[str, ...] = ()
              ) -> tuple[str, list[Rewrite], bool] | None:
    """For a cell that printed a row label as its result: the note, the recasts to try on
    a fork, and whether the note stands only with a recast that ran (a group's labels);
    None for another cell. The cell is read once. A cell that printed nothing and wrote
    files (`wrote`) is checked by the rows alone, printed: its whole recast would write
    the files again from a trial."""
    silent = not (output or "").strip()
    hit = _found(code, output, earlier, wrote if silent else ())
    if hit is None:
        return None
    call = hit[0]
    if silent:
        names = ", ".join(os.path.basename(f) for f in wrote)
        return (WROTE.format(fn=call.fn, table=call.table, files=names),
                _recasts(code, call)[-1:], True)
    return _note(*hit), _recasts(code, call), call.grouped


def _recasts(code: str, call: LabelCall) -> list[Rewrite]:
    whole = row_label_rewrites(code, ast.parse(code), only=call)
    if not whole or not call.grouped:
        return whole
    # the rows alone, where the rest of the cell breaks on them (`w.columns = [two names]`)
    rows = f"{call.table}.{LABEL_CALLS[call.fn]}[{Splice(code).text(call.node)}]"
    return [*whole, Rewrite(f"print({rows})", whole[0].change, whole[0].guard)]
