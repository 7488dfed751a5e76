"""What each column of a table holds, before the first cell: its distinct values when there
are few, how many and three examples when there are many, the range of numbers and dates,
and whether values are missing.

A small model drops a filter, writes `'adelie'` for `'Adelie'` or counts the wrong thing
when it does not know which values exist; one line per column tells it. Two renderings of
the same facts: `column_lines` for the input description (`describe_value`, the prompt
before the first cell), `levels_brief` for the one-line summary (`<ipython_state>`, `rlm
state`, the notes after an error), and `parse_levels` reads the latter back.

Bounded cost: each class of column (few-valued text, many-valued text, numbers) is read in
full up to its budget of values per table (`FEW_CELLS`, ...); beyond that each column is
read on a fixed sample of rows (the same rows on every run), and the text
says so. Bounded size: at most
`MAX_COLUMNS` columns are described and `BLOCK_CHARS` characters in all; the rest are
counted. Never raises: a column that cannot be described (unhashable cells, a failing
`__eq__`) says what its values are instead.

Values are written as Python literals (`'Adelie'`): the exact spelling, case and spaces,
as a fact to filter with, and short (`LEVEL_CHARS`); a cut value ends with `...` outside
its quotes so it never reads as a complete literal.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

MAX_LEVELS = 15  # a text column with at most this many distinct values is listed in full
EXAMPLES = 3  # values shown of a column with more
LEVEL_CHARS = 40  # one value, at most
LINE_CHARS = 320  # one column's line, at most
MAX_COLUMNS = 40  # columns described one per line; the rest are named and counted
BLOCK_CHARS = 2400  # every column line of one table, at most
LEFT_OUT_CHARS = 300  # of which the last line, naming and counting the columns left out
# values read per table, by class (measured on 2 cores, pandas 3: counting a few-valued
# text column ~0.2 us a value, a many-valued one ~1.1 us, min/max/missing of numbers
# ~0.006 us); past its class's budget each column is read on a sample of rows
FEW_CELLS = 500_000
MANY_CELLS = 100_000
NUMBER_CELLS = 30_000_000
MIN_SAMPLE = 5_000  # rows of a sampled column, at least
PROBE_ROWS = 2_000  # rows that class a text column as few- or many-valued
BRIEF_ROWS = 10_000  # rows read for the one-line summary's levels
BRIEF_LEVELS = 6  # a column with at most this many values gets them in the summary
BRIEF_CHARS = 160  # the summary's levels, at most

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?$")
# `2009/01/07`, `7 Jan 2009`, `01.07.09`; and `Jan 7 2009`, `January 7, 2009`
_DATEISH = re.compile(r"\d{1,4}[-/. ]\w{1,9}[-/. ,]+\d{1,4}|[A-Za-z]{3,9}\.? \d{1,2},? \d{4}")


def _kind(dtype: Any) -> str:
    """'number', 'bool', 'datetime', 'timedelta', 'category' or 'text' ('object' and
    the string dtypes: anything else is described like text)."""
    name = str(dtype)
    if name == "bool" or name == "boolean":
        return "bool"
    if name.startswith(("datetime64", "<M8")) or "datetime" in name:
        return "datetime"
    if name.startswith(("timedelta64", "<m8")):
        return "timedelta"
    if name == "category":
        return "category"
    if name.startswith(("int", "uint", "float", "Int", "UInt", "Float", "complex")):
        return "number"
    return "text"


def _rows(n: int, size: int) -> Any:
    """`size` row positions of `n`, sorted, the same on every run (a seeded draw: an even
    stride would miss values that repeat with the stride's period)."""
    import numpy as np

    idx = np.sort(np.random.default_rng(0).integers(0, n, size))
    return idx[np.r_[True, idx[1:] != idx[:-1]]]  # np.unique hashes: 50x slower here


def _literal(x: Any) -> str:
    if isinstance(x, float):
        return _number(x)
    text = repr(x.item() if hasattr(x, "item") and type(x).__module__ == "numpy" else x)
    if len(text) <= LEVEL_CHARS:
        return text
    if isinstance(x, str):
        return repr(x[:LEVEL_CHARS - 6]) + "..."
    return text[:LEVEL_CHARS - 3] + "..."


def _number(x: Any) -> str:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)[:LEVEL_CHARS]
    if math.isfinite(f) and f == int(f) and abs(f) < 1e15:
        return str(int(f))
    text = f"{f:.6g}"
    return text if "e" not in text else repr(f)


def _levels(counts: Any, limit: int) -> list[str]:
    """The values as literals, most frequent first, without their counts: the 1.5B model
    copied a figure of the description into its code as a value (`dep_time == 8255` from
    "8,255 missing"; bench/everyday.py), so the description states values, not figures."""
    return [_literal(value) for value in counts.index[:limit]]


def _join(head: str, parts: list[str], more: int) -> str:
    """`head` + parts joined with ", ", cut at LINE_CHARS between parts (counted)."""
    line = head
    for i, p in enumerate(parts):
        rest = len(parts) - i + more
        tail = f", +{rest} more" if rest else ""
        if len(line) + len(p) + 2 + len(tail) > LINE_CHARS and i:
            return line + f", +{rest} more"
        line += (", " if i else "") + p
    return line + (f", +{more} more" if more else "")


def _dates_as_text(values: Any) -> str | None:
    """`'2020-01-01' .. '2020-12-31'` when the text values (non-null) look like dates:
    ISO dates by their text order (which is their time order, no parsing); other date
    spellings by parsing (at most the sample's rows), None when some do not parse."""
    probe = [v for v in values.iloc[:20].tolist() if isinstance(v, str)]
    if not probe or len(probe) < min(len(values), 20):
        return None
    if all(_ISO_DATE.match(v) for v in probe):
        try:
            return f"dates as text, {values.min()!r} .. {values.max()!r}"
        except TypeError:  # text and other values mixed
            return None
    if not all(_DATEISH.search(v) for v in probe):
        return None
    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            pd.to_datetime(pd.Series(probe))
            parsed = pd.to_datetime(values, errors="coerce")
        except (ValueError, TypeError, OverflowError):
            return None
    ok = parsed.dropna()
    if len(ok) < 0.9 * len(values):
        return None
    first = values[parsed == ok.min()].iloc[0]
    last = values[parsed == ok.max()].iloc[0]
    return f"dates as text, {first!r} .. {last!r}"


def _text_fact(col: Any, exact: bool) -> str:
    """Levels, or distinct count and examples, of a text/category/bool column (`col`
    already sampled when not `exact`; nulls dropped by the caller)."""
    try:
        counts = col.value_counts(dropna=True, sort=True)
    except TypeError:  # unhashable cells: lists, dicts, sets
        kinds = sorted({type(v).__name__ for v in col.iloc[:200].tolist()})
        return f"{'/'.join(kinds[:4])} values (not hashable), e.g. {_literal(col.iloc[0])}"
    counts = counts[counts > 0]  # a category's unused levels
    n = len(counts)
    if n <= MAX_LEVELS:
        where = "" if exact else " in the sample"
        return _join(f"{n} value{'s' * (n != 1)}{where}: ", _levels(counts, n), 0)
    dates = _dates_as_text(col) if str(col.dtype) != "category" else None
    many = f"{n:,} distinct" if exact else f"{n:,}+ distinct in the sample"
    if dates:
        return f"{dates}, {many}"
    if counts.iloc[0] > 1:
        return _join(f"{many}, most frequent: ", _levels(counts, EXAMPLES), 0)
    return _join(f"{many}, e.g. ", [_literal(v) for v in col.iloc[:EXAMPLES].tolist()], 0)


def _range_fact(col: Any, kind: str, exact: bool) -> str:
    lo, hi = col.min(), col.max()
    where = "" if exact else " in the sample"
    if kind == "number":
        return f"{_number(lo)} .. {_number(hi)}{where}"
    if kind == "datetime" and all(x == x.normalize() for x in (lo, hi)):
        lo, hi = lo.date(), hi.date()  # days: no 00:00:00 to read past
    return f"{lo} .. {hi}{where}"


def _few_integers(col: Any, exact: bool) -> str:
    """`, 3 values: 2007 (120), ...` for an integer column with few values (a year, a
    rating, a code); "" otherwise. A probe of its first rows rules out an id column
    before all of it is counted."""
    if not str(col.dtype).lower().startswith(("int", "uint")) or col.iloc[:2000].nunique() > MAX_LEVELS:
        return ""
    counts = col.value_counts(sort=True)
    if len(counts) > MAX_LEVELS:
        return ""
    where = "" if exact else " in the sample"
    return _join(f"; {len(counts)} values{where}: ", _levels(counts, len(counts)), 0)


def _column_fact(col: Any, kind: str, exact: bool) -> str:
    """One column's facts after its dtype: never raises."""
    try:
        missing = int(col.isna().sum())
        if missing == len(col):
            return "all missing (NaN)" if exact else "all missing (NaN) in the sample"
        present = col.dropna() if missing else col
        if kind in ("number", "datetime", "timedelta"):
            fact = _range_fact(present, kind, exact) + _few_integers(present, exact)
        else:
            fact = _text_fact(present, exact)
        if missing:
            fact += "; some values missing (NaN)"
        return fact
    except Exception as exc:  # noqa: BLE001 - arbitrary cells: mixed types, failing __eq__
        return f"(not described: {type(exc).__name__})"


def column_lines(frame: Any) -> list[str]:
    """One line per column (`  species (str): 3 values: 'Adelie', 'Gentoo', ...`), at most
    MAX_COLUMNS lines and BLOCK_CHARS characters; a line first when some columns were
    read on a sample; a last line naming (then counting) the columns left out."""
    try:
        return _column_lines(frame)
    except Exception as exc:  # noqa: BLE001 - a frame-like object that is not pandas'
        return [f"  (columns not described: {type(exc).__name__})"]


def _budgets(frame: Any, kinds: list[str]) -> list[int]:
    """Rows to read of each column: all of them while the table's budget for its class
    allows, else an equal share of it (at least MIN_SAMPLE). Text is classed by a probe of
    PROBE_ROWS rows: few values (cheap to count) or many (hashing every value: ~5x dearer)."""
    rows = frame.shape[0]
    probe = _rows(rows, PROBE_ROWS) if rows > PROBE_ROWS else None
    classes = []
    for i, kind in enumerate(kinds):
        if kind == "category":  # counted in full: a bincount of its codes
            classes.append("all")
        elif kind in ("text", "bool"):
            col = frame.iloc[:, i]
            try:
                n = (col if probe is None else col.iloc[probe]).nunique()
            except Exception:  # noqa: BLE001 - unhashable cells: the column says so later
                n = PROBE_ROWS
            classes.append("few" if n <= MAX_LEVELS else "many")
        else:
            classes.append("number")
    cells = {"few": FEW_CELLS, "many": MANY_CELLS, "number": NUMBER_CELLS}
    share = {c: cells[c] // max(1, classes.count(c)) for c in cells}
    return [rows if c == "all" else min(rows, max(MIN_SAMPLE, share[c])) for c in classes]


def _column_lines(frame: Any) -> list[str]:
    rows, ncols = frame.shape
    dtypes = list(frame.dtypes.astype(str).items())
    shown = dtypes[:MAX_COLUMNS]
    kinds = [_kind(t) for _, t in shown]
    sizes = _budgets(frame, kinds)
    out: list[str] = []
    if min(sizes, default=rows) < rows:
        out.append(f"  (too many rows to read all: facts marked ~ or 'in the sample' come from "
                   f"{min(sizes):,}+ sampled rows of {rows:,}; rarer values may be missing)")
    used = sum(len(x) for x in out)
    samples: dict[int, Any] = {}  # one draw per size: columns of a class share their rows
    for i, ((name, dtype), kind, size) in enumerate(zip(shown, kinds, sizes, strict=True)):
        col = frame.iloc[:, i]
        if size < rows:
            if size not in samples:
                samples[size] = _rows(rows, size)
            col = col.iloc[samples[size]]
        line = f"  {name} ({dtype}): {_column_fact(col, kind, size >= rows)}"[:LINE_CHARS + 40]
        if used + len(line) > BLOCK_CHARS - (LEFT_OUT_CHARS if i + 1 < ncols else 0):
            return out + [_left_out(dtypes[i:], LEFT_OUT_CHARS)]
        out.append(line)
        used += len(line) + 1
    if ncols > len(shown):
        out.append(_left_out(dtypes[len(shown):], LEFT_OUT_CHARS))
    return out


def _left_out(rest: list[tuple[Any, str]], chars: int) -> str:
    """`  ... and 260 more columns: a (int64), b (str), +251 more (print(...))`."""
    tail = " more (print(df.dtypes) to see them)"
    line = f"  ... and {len(rest)} more columns: "
    for i, (c, t) in enumerate(rest):
        part = f"{c} ({t}), "
        if len(line) + len(part) + len(tail) + 8 > chars:
            return line + f"+{len(rest) - i}{tail}"
        line += part
    return line.rstrip(", ")


# ---------------------------------------------------------------- the one-line summary
def levels_brief(frame: Any, budget: int = BRIEF_CHARS) -> str:
    """`species 'Adelie'|'Gentoo'|'Chinstrap', sex 'female'|'male'`: the text columns with
    at most BRIEF_LEVELS values (read on at most BRIEF_ROWS rows), whole entries only,
    within `budget` characters; "" when none fits. Cheap: a snapshot computes it for every
    DataFrame a cell changed."""
    try:
        rows = frame.shape[0]
        take = _rows(rows, BRIEF_ROWS) if rows > BRIEF_ROWS else None
        parts: list[str] = []
        used = 0
        for i, (name, dtype) in enumerate(list(frame.dtypes.astype(str).items())[:MAX_COLUMNS]):
            if _kind(dtype) not in ("text", "category", "bool"):
                continue
            col = frame.iloc[:, i]
            if take is not None:
                col = col.iloc[take]
            try:
                if col.iloc[:PROBE_ROWS].nunique() > BRIEF_LEVELS:
                    continue  # an id or free text: not counted
                counts = col.value_counts(dropna=True)  # most frequent first
            except Exception:  # noqa: BLE001 - unhashable cells: this column has none
                continue
            counts = counts[counts > 0]
            if not 0 < len(counts) <= BRIEF_LEVELS:
                continue
            lits = [_literal(v) for v in counts.index]
            if any(lit.endswith("...") or any(c in lit for c in "|,;") for lit in lits):
                continue  # a cut or ambiguous value is no fact to filter with
            part = f"{name} {'|'.join(lits)}"
            if used + len(part) + 2 > budget:
                continue
            parts.append(part)
            used += len(part) + 2
        return ", ".join(parts)
    except Exception:  # noqa: BLE001 - the summary line stands without its levels
        return ""


_BRIEF_PART = re.compile(r"(?:^|, )(\S(?:[^,|]*?\S)?) ((?:'[^']*'|\"[^\"]*\"|[^,|' ]+)"
                         r"(?:\|(?:'[^']*'|\"[^\"]*\"|[^,|' ]+))*)(?=, |$)")


def parse_levels(brief: str) -> dict[str, list[str]]:
    """`levels_brief`'s text read back: column -> its values as written (`'Adelie'`)."""
    return {m.group(1): m.group(2).split("|") for m in _BRIEF_PART.finditer(brief)}


# -- where a value is: after `KeyError: 'F9'` from `airlines.loc['F9', 'name']` -------------
FIND_CELLS = 2_000_000  # values of one column read, at most (the first rows)
FIND_SECONDS = 1.0  # the whole search, at most: a slow column ends it
FIND_HITS = 3


def where_value(key: str, values: dict[str, Any]) -> list[dict[str, str]]:
    """The text columns of the DataFrames in `values` (name -> value) that hold `key`:
    exactly, else the same but for case and spaces around. Each hit: table, column and
    the value as a literal. Bounded: FIND_CELLS values a column, FIND_SECONDS in all."""
    import time

    import pandas as pd

    want = str(key).strip().casefold()
    start = time.monotonic()
    hits: list[dict[str, str]] = []
    for table, frame in values.items():
        if not isinstance(frame, pd.DataFrame) or table.startswith("_"):
            continue
        for col in frame.columns:
            if time.monotonic() - start > FIND_SECONDS or len(hits) >= FIND_HITS:
                return hits
            found = _found_in(frame[col], key, want) if _kind(frame[col].dtype) in (
                "text", "category") and isinstance(col, str) else None
            if found is not None:
                hits.append({"table": table, "column": col, "value": _literal(found)})
    return hits


def _found_in(col: Any, key: str, want: str) -> Any:
    """The value of `col` equal to `key` (else equal but for case and spaces), or None."""
    try:
        head = col.iloc[:FIND_CELLS]
        if bool((head == key).any()):
            return key
        text = head[head.map(lambda v: isinstance(v, str))]
        same = text[text.str.strip().str.casefold() == want]
        return same.iloc[0] if len(same) else None
    except Exception:  # noqa: BLE001 - a column whose values cannot be compared: not here
        return None


def where_value_json(key: str, ip: Any = None) -> str:
    """`where_value` over the user's names in the kernel, as JSON (the host's call)."""
    import json

    from kernel_ext.namespace import user_values

    if ip is None:
        from IPython import get_ipython

        ip = get_ipython()
    return json.dumps(where_value(key, user_values(ip)))


# -- how a filtered column is written: after a filter that selected nothing -----------------
WRITTEN_EXAMPLES = 3


def how_written(table: str, column: str, literal: str, values: dict[str, Any]
                ) -> dict[str, Any] | None:
    """How the text column `table[column]` writes its values, against the literal a filter
    compared it with: a few of its values, how many equal / start with the literal, up to
    WRITTEN_EXAMPLES values containing it (any case), and whether they are dates as text.
    None when `table` is no DataFrame with that text column. Bounded: FIND_CELLS values."""
    import pandas as pd

    frame = values.get(table)
    if not isinstance(frame, pd.DataFrame) or column not in frame.columns:
        return None
    col = frame[column]
    if isinstance(col, pd.DataFrame) or _kind(col.dtype) not in ("text", "category"):
        return None
    try:
        head = col.iloc[:FIND_CELLS].dropna()
        text = head[head.map(lambda v: isinstance(v, str))]
        want = literal.casefold()
        containing = text[text.str.casefold().str.contains(want, regex=False)]
        return {
            "table": table, "column": column, "literal": literal,
            "examples": [_literal(v) for v in text.drop_duplicates().iloc[:WRITTEN_EXAMPLES]],
            "equal": int((text == literal).sum()),
            "starts": int(text.str.startswith(literal).sum()),
            "containing": [_literal(v) for v in
                           containing.drop_duplicates().iloc[:WRITTEN_EXAMPLES]],
            "n_containing": int(len(containing)),
            "dates": _dates_as_text(text) is not None,
        }
    except Exception:  # noqa: BLE001 - values that cannot be compared: nothing to say
        return None


def how_written_json(filters: list[list[str]], ip: Any = None) -> str:
    """`how_written` for each (table, column, literal) over the kernel's names, as JSON."""
    import json

    from kernel_ext.namespace import user_values

    if ip is None:
        from IPython import get_ipython

        ip = get_ipython()
    values = user_values(ip)
    found = [how_written(str(t), str(c), str(v), values) for t, c, v in filters[:4]]
    return json.dumps([f for f in found if f is not None])
