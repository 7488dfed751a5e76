"""A goal's table file against the tables the session computed: the same key, the same
column name, another value (issue 60).

The long-run sales run of stop 71 computed `region_totals` (region, total: East
367763.86), then wrote region_summary.csv with each region's *top product's* amount in
its `total` column (East 76747.91) and completed the goal with "region_summary.csv
written." — a claim with nothing to check, a file with the right header and a row per
region. The contradiction was in the kernel: two tables of the session give the same
region two different totals.

`question(file, skip)` is the code the host runs on a fork of the kernel (Facts.probe): it
reads the CSV file, and for every DataFrame of the namespace (not `skip`, the names the
file was ever written from: an earlier version's table is the model's own superseded
attempt; nor a private name) that shares a text column whose values are
unique in both (the key) and a number column of the same name, prints the first key
whose two values differ by more than a part in a million, as JSON, for the columns no
such table agrees with the file on (a table left from an earlier attempt contradicts a
right file; the right table agrees with it). `disagreement(...)`
says it to the model, or None when every table agrees, none shares a key and a column,
or the kernel cannot be asked. What the kernel prints is data: lengths are bounded and
nothing but the message is built from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_TEXT = 80
MAX_TABLES = 50

QUESTION = """\
import json as _json
import pandas as _pd
_f = _pd.read_csv({file!r})
_found, _agreed = [], set()
for _n, _t in list(globals().items())[:{cap}]:
    if _n.startswith('_') or _n in {skip!r} or not isinstance(_t, _pd.DataFrame):
        continue
    for _k in [c for c in _f.columns if c in _t.columns]:
        if _pd.api.types.is_numeric_dtype(_f[_k]) or not (_f[_k].is_unique and _t[_k].is_unique):
            continue
        for _c in [c for c in _f.columns if c != _k and c in _t.columns]:
            if not (_pd.api.types.is_numeric_dtype(_f[_c])
                    and _pd.api.types.is_numeric_dtype(_t[_c])):
                continue
            _m = _f[[_k, _c]].merge(_t[[_k, _c]], on=_k, suffixes=('_f', '_t'))
            _d = _m[(_m[_c + '_f'] - _m[_c + '_t']).abs()
                    > 1e-6 * _m[_c + '_t'].abs().clip(lower=1)]
            if len(_d):
                _r = _d.iloc[0]
                _found.append([_n, str(_k), str(_c), str(_r[_k]), float(_r[_c + '_f']),
                               float(_r[_c + '_t'])])
            elif len(_m):
                _agreed.add(_c)
        break
print(_json.dumps([_x for _x in _found if _x[2] not in _agreed][:3]))
"""

NOTE = ("Not complete: {file}'s {column!r} for {key} is {mine:.10g}, but `{table}`, a table your "
        "cells computed, holds {theirs:.10g} for {key} under the same column. One of them is not "
        "what the goal asks: print both, decide which is, and write {file} again from it; "
        "then finish.")


@dataclass(frozen=True)
class Disagreement:
    table: str
    key_column: str
    column: str
    key: str
    mine: float
    theirs: float


def question(file: str, skip: list[str]) -> str:
    return QUESTION.format(file=file, skip=sorted(skip), cap=MAX_TABLES * 20)


def read(printed: str | None) -> Disagreement | None:
    """The first disagreement the fork printed, or None."""
    for line in reversed((printed or "").strip().splitlines()):
        try:
            rows = json.loads(line)
        except ValueError:
            continue
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, list) and len(row) == 6 and all(
                    isinstance(x, str) for x in row[:4]) and all(
                    isinstance(x, (int, float)) for x in row[4:]):
                name, k, c, key = (str(x)[:MAX_TEXT] for x in row[:4])
                if name.isidentifier():
                    return Disagreement(name, k, c, key, float(row[4]), float(row[5]))
        return None
    return None


def note(file: str, d: Disagreement) -> str:
    return NOTE.format(file=file, column=d.column, key=d.key, mine=d.mine, theirs=d.theirs,
                       table=d.table)
