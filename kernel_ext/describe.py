"""Short descriptions of kernel values for the model: type, size, and a preview.

The model reads data through code, but it needs to know what exists: `--context` files
loaded into variables, and in `%%rlm` the user's own DataFrames. Called by the host through
user_expressions (a separate kernel) or directly (in-process); never prints.

One describer serves every listing: `summary(value)` is the one line per name that the
namespace listing (`<ipython_state>` after a compaction, `rlm state`) and the snapshot
manifest carry — the facts needed to reuse a value without a cell to inspect it: shape and
column dtypes of DataFrames and arrays, length and element types of containers, the
signature of functions and classes, the class of instances. `order_names` puts the largest
and most recently used names first; `listing_lines` fits them in a token budget and counts
what does not fit ("... and 41 more names"). `describe_value` (with a preview) serves
`--context` files and `%%rlm`'s notebook variables.
"""

from __future__ import annotations

import inspect
import json
import math
from typing import Any

from kernel_ext.columns import column_lines, levels_brief, parse_levels
from kernel_ext.line_fields import field_lines

PREVIEW_CHARS = 400
MAX_NAMES = 60
SEARCH_HINT_CHARS = 4000  # a text longer than this is searched, not printed
LONG_TEXT_PREVIEW = 160  # measured: with 400 the 1.5B model retypes the preview as a literal


def describe_value(name: str, v: Any, n: int = PREVIEW_CHARS) -> dict[str, str]:
    """A DataFrame (or Series) also gets `columns`: one line per column with its dtype,
    its values when few, the range of numbers and dates and whether values are missing
    (kernel_ext.columns); its `preview` is then its first rows. A text whose lines have
    few-valued words at a position (a log's level) gets `fields`, one line per such
    position (kernel_ext.line_fields).

    A long text also gets a `hint`: how to search it. Measured on the 1.5B offline model
    (bench/needle.py): with that line next to the task it searches with `find` and prints a
    window; without it, it guesses the needle's wording in a regex that matches nothing."""
    hint = columns = fields = ""
    kind = type(v).__module__ + "." + type(v).__qualname__
    kind = kind.removeprefix("builtins.")
    try:
        if hasattr(v, "shape") and hasattr(v, "head") and hasattr(v, "columns"):
            size = f"{v.shape[0]:,} rows x {v.shape[1]} columns"
            columns = "\n".join(column_lines(v))
            prev = v.head(3).to_string()[:n]
        elif hasattr(v, "shape") and hasattr(v, "value_counts") and hasattr(v, "to_frame"):
            size = f"{v.shape[0]:,} values, dtype {v.dtype}"  # a pandas Series: one column
            columns = "\n".join(column_lines(v.to_frame()))
            prev = v.head(3).to_string()[:n]
        elif hasattr(v, "shape") and hasattr(v, "dtype"):
            size = f"shape {tuple(v.shape)}, dtype {v.dtype}"
            prev = repr(v)[:n]
        elif isinstance(v, (str, bytes)):
            size = f"{len(v):,} {'characters' if isinstance(v, str) else 'bytes'}"
            if isinstance(v, str):
                fields = "\n".join(field_lines(v))
            long = len(v) > SEARCH_HINT_CHARS
            prev = repr(v[:min(n, LONG_TEXT_PREVIEW) if long else n])
            if long and isinstance(v, str):
                # no example words here: the 1.5B model copied `find('some words')` literally;
                # the host adds an example with words from the actual question
                hint = (f"search it: {name} is too long to print; find words from the question "
                        f"in it and print about 300 characters around each match")
        else:
            try:
                size = f"{len(v):,} items"
            except TypeError:
                size = ""
            prev = repr(v)[:n]
    except Exception as e:  # noqa: BLE001 - a value whose repr fails is still listed
        size, prev = "", f"<preview failed: {type(e).__name__}>"
    out = {"name": name, "type": kind, "size": size, "preview": prev}
    if columns:
        out["columns"] = columns
    if fields:
        out["fields"] = fields
    if hint:
        out["hint"] = hint
    return out


def describe_json(names: list[str] | None = None, n: int = PREVIEW_CHARS, ip: Any = None) -> str:
    """JSON list of descriptions; names=None: the user's data values (no modules/functions).
    A name of `contract.ALIASES` bound to its module is described by `alias_item`."""
    from kernel_ext import namespace
    from kernel_ext.aliases import defined
    from kernel_ext.contract import ALIASES

    if ip is None:
        from IPython import get_ipython

        ip = get_ipython()
    values = namespace.user_values(ip)
    if names is None:
        names = [k for k, v in values.items()
                 if not callable(v) and type(v).__name__ != "module"][:MAX_NAMES]
    aliases = defined(ip) if any(k in ALIASES for k in names) else {}
    return json.dumps([describe_value(k, values[k], n) if k in values else alias_item(k, aliases[k])
                       for k in names if k in values or k in aliases])


def alias_item(name: str, module: str) -> dict[str, str]:
    """A name the kernel defined before the first cell (kernel_ext.aliases), asked for by
    name: `alias` holds its module."""
    return {"name": name, "type": "module", "size": "", "preview": "", "alias": module}


SUMMARY_CHARS = 240  # one name's line, at most (a DataFrame's: before its levels)
# A DataFrame's line ends with the values of its few-valued text columns, whole ones only,
# in up to columns.BRIEF_CHARS more: after a compaction the model still filters with the
# exact spelling ('Adelie', not 'adelie') without a cell to look. `|` between the values and
# `, ` between the columns, as the dtypes are listed: one line, no new syntax to learn.
LEVELS_MARK = "; values: "
MAX_COLUMNS = 12
_SAMPLE = 100


def _type_name(v: Any) -> str:
    t = type(v)
    mod = t.__module__
    if mod in ("builtins", "__main__"):
        return t.__qualname__
    return f"{mod.split('.')[0]}.{t.__qualname__}"


def _elem_types(items: Any) -> str:
    names: list[str] = []
    for x in items:
        n = type(x).__name__
        if n not in names:
            names.append(n)
        if len(names) > 3:
            return "mixed"
    return "|".join(names)


def _signature(fn: Any) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _frame_summary(v: Any) -> str:
    rows, ncols = v.shape
    cols = [f"{c} {t}" for c, t in list(v.dtypes.astype(str).items())[:MAX_COLUMNS]]
    more = f", +{ncols - MAX_COLUMNS} more" if ncols > MAX_COLUMNS else ""
    index = type(v.index).__name__
    idx = "" if index == "RangeIndex" else f"; index {index}" + (
        f" {list(v.index.names)}" if getattr(v.index, "nlevels", 1) > 1 else "")
    line = f"DataFrame {rows:,} rows x {ncols} cols: {', '.join(cols)}{more}{idx}"[:SUMMARY_CHARS]
    brief = levels_brief(v)
    return line + (f"{LEVELS_MARK}{brief}" if brief else "")


def _is_frame(v: Any) -> bool:
    t = type(v)
    return t.__name__ == "DataFrame" and t.__module__.startswith("pandas")


def frame_levels(line: str) -> dict[str, list[str]]:
    """The values a DataFrame's summary line lists for its few-valued text columns,
    column -> values as written there (`'Adelie'`); {} when it lists none."""
    if not line.startswith("DataFrame ") or LEVELS_MARK not in line:
        return {}
    return parse_levels(line.rpartition(LEVELS_MARK)[2])


def summary(v: Any) -> str:
    """One line: what `v` is and what is needed to reuse it. Never raises. A listing on a
    subshell runs while the cell may resize `v` ("changed size during iteration"): try
    again, twice."""
    error: Exception | None = None
    for _ in range(3):
        try:
            line = _summary(v)
            return line if _is_frame(v) else line[:SUMMARY_CHARS]
        except RuntimeError as exc:  # resized while read: read it again
            error = exc
        except Exception as exc:  # noqa: BLE001 - arbitrary user objects
            error = exc
            break
    return f"{_type_name(v)} (not described: {type(error).__name__})"


def _summary(v: Any) -> str:
    t = type(v)
    mod = t.__module__
    if mod.startswith("pandas"):
        if t.__name__ == "DataFrame":
            return _frame_summary(v)
        if t.__name__ == "Series":
            return f"Series {len(v):,} {v.dtype}" + (f" name={v.name!r}" if v.name is not None else "")
    if mod.startswith("numpy") and hasattr(v, "shape") and hasattr(v, "dtype"):
        dt = v.dtype
        fields = f" fields {', '.join(dt.names)}" if getattr(dt, "names", None) else ""
        base = getattr(v, "base", None)
        view = " (view)" if base is not None and type(base).__module__ == "numpy" else ""
        return f"{t.__name__} shape {tuple(v.shape)} {dt}{fields}{view}"
    if isinstance(v, bool) or v is None or isinstance(v, (int, float, complex)):
        r = repr(v)
        return f"{t.__name__} = {r}" if len(r) <= 40 else t.__name__
    if isinstance(v, str):
        head = repr(v[:40]) + ("..." if len(v) > 40 else "")
        return f"str {len(v):,} chars: {head}"
    if isinstance(v, (bytes, bytearray)):
        return f"{t.__name__} {len(v):,} bytes"
    if isinstance(v, dict):
        sample = list(v.items())[:_SAMPLE]
        kt = _elem_types(k for k, _ in sample)
        vt = _elem_types(x for _, x in sample)
        keys = ", ".join(repr(k) for k, _ in sample[:6]) + (", ..." if len(v) > 6 else "")
        if not v:
            return f"{t.__name__} (empty)"
        return f"{t.__name__} of {len(v):,}: {kt} -> {vt}; keys {keys}"
    if isinstance(v, (list, tuple, set, frozenset)) or t.__name__ == "deque":
        sample = list(v)[:_SAMPLE] if isinstance(v, (list, tuple)) else [x for _, x in zip(range(_SAMPLE), v, strict=False)]
        return f"{t.__name__} of {len(v):,}" + (f" {_elem_types(sample)}" if sample else "")
    if inspect.ismodule(v):
        return f"module {v.__name__}"
    if inspect.isclass(v):
        return f"class {v.__qualname__}{_signature(v)}" + (
            "" if v.__module__ == "__main__" else f" from {v.__module__}")
    if inspect.isroutine(v) or callable(v) and t.__name__ == "partial":
        name = getattr(v, "__qualname__", None) or getattr(getattr(v, "func", None), "__qualname__", "")
        return f"{t.__name__} {name}{_signature(v)}"
    if hasattr(v, "__len__") and hasattr(v, "shape"):
        return f"{_type_name(v)} shape {tuple(v.shape)}"
    attrs = [k for k in getattr(v, "__dict__", {}) if not k.startswith("_")][:8]
    sk = " (fitted)" if mod.startswith("sklearn") and any(k.endswith("_") for k in attrs) else ""
    return f"{_type_name(v)} instance{sk}" + (f"; attributes {', '.join(attrs)}" if attrs else "")


def order_names(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Largest first (by order of magnitude), then most recently used (`last_used`: the
    cell count when the name was last touched), then by name."""
    def key(r: dict[str, Any]) -> tuple[int, int, str]:
        b = r.get("bytes") or 0
        mag = int(math.log10(b)) if isinstance(b, int) and b > 0 else 0
        return (-mag, -int(r.get("last_used") or 0), str(r.get("name")))
    return sorted(rows, key=key)


def _size(n: Any) -> str:
    if not isinstance(n, int) or n <= 0:
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return ""


def listing_line(row: dict[str, Any]) -> str:
    """`- name: summary, size` (type only when the row has no summary)."""
    size = _size(row.get("bytes"))
    text = row.get("summary") or row.get("type") or "?"
    return f"- {row['name']}: {text}" + (f", {size}" if size else "")


def listing_lines(rows: list[dict[str, Any]], budget_tokens: int = 1500) -> list[str]:
    """Lines for rows in `order_names` order within ~budget_tokens (3 chars a token:
    conservative for names and dtypes); the rest is counted in a last line."""
    out: list[str] = []
    used = 0
    ordered = order_names(rows)
    for i, row in enumerate(ordered):
        line = listing_line(row)
        cost = len(line) // 3 + 1
        if used + cost > budget_tokens and out:
            out.append(f"- ... and {len(ordered) - i} more names (print(dir()) to see all)")
            break
        out.append(line)
        used += cost
    return out
