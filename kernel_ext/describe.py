"""Short descriptions of kernel values for the model: type, size, and a preview.

The model reads data through code, but it needs to know what exists: `--context` files
loaded into variables, and in `%%rlm` the user's own DataFrames. Called by the host through
user_expressions (a separate kernel) or directly (in-process); never prints.
"""

from __future__ import annotations

import json
from typing import Any

PREVIEW_CHARS = 400
MAX_NAMES = 60
SEARCH_HINT_CHARS = 4000  # a text longer than this is searched, not printed
LONG_TEXT_PREVIEW = 160  # measured: with 400 the 1.5B model retypes the preview as a literal


def describe_value(name: str, v: Any, n: int = PREVIEW_CHARS) -> dict[str, str]:
    """A long text also gets a `hint`: how to search it. Measured on the 1.5B offline model
    (bench/needle.py): with that line next to the task it searches with `find` and prints a
    window; without it, it guesses the needle's wording in a regex that matches nothing."""
    hint = ""
    kind = type(v).__module__ + "." + type(v).__qualname__
    kind = kind.removeprefix("builtins.")
    try:
        if hasattr(v, "shape") and hasattr(v, "head") and hasattr(v, "columns"):
            size = f"{v.shape[0]:,} rows x {v.shape[1]} columns"
            cols = ", ".join(f"{c} ({t})" for c, t in list(v.dtypes.astype(str).items())[:40])
            prev = f"columns: {cols}\n" + v.head(3).to_string()[:n]
        elif hasattr(v, "shape") and hasattr(v, "dtype"):
            size = f"shape {tuple(v.shape)}, dtype {v.dtype}"
            prev = repr(v)[:n]
        elif isinstance(v, (str, bytes)):
            size = f"{len(v):,} {'characters' if isinstance(v, str) else 'bytes'}"
            long = len(v) > SEARCH_HINT_CHARS
            prev = repr(v[:min(n, LONG_TEXT_PREVIEW) if long else n])
            if long and isinstance(v, str):
                hint = f"search it: i = {name}.find('some words'); print({name}[max(0, i-300):i+300])"
        else:
            try:
                size = f"{len(v):,} items"
            except TypeError:
                size = ""
            prev = repr(v)[:n]
    except Exception as e:  # noqa: BLE001 - a value whose repr fails is still listed
        size, prev = "", f"<preview failed: {type(e).__name__}>"
    out = {"name": name, "type": kind, "size": size, "preview": prev}
    if hint:
        out["hint"] = hint
    return out


def describe_json(names: list[str] | None = None, n: int = PREVIEW_CHARS, ip: Any = None) -> str:
    """JSON list of descriptions; names=None: the user's data values (no modules/functions)."""
    from kernel_ext import namespace

    if ip is None:
        from IPython import get_ipython

        ip = get_ipython()
    values = namespace.user_values(ip)
    if names is None:
        names = [k for k, v in values.items()
                 if not callable(v) and type(v).__name__ != "module"][:MAX_NAMES]
    return json.dumps([describe_value(k, values[k], n) for k in names if k in values])
