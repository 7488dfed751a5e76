"""Where the kernel's texts hold a term, as written: after a search that found nothing, the
host shows the lines that hold the question's names (rlm.agent.cells), so the next pattern
is written from the data, not guessed. The 1.5B model searched a log for
`r'Halcyon:\\s*(\\d+\\.\\d+) EUR'` where the line says "project Halcyon: initial budget
approved at 4000000 EUR", got None, and guessed again.

Read-only and bounded: FIND_SECONDS in all, LINES lines a term, LINE_CHARS a line.
"""

from __future__ import annotations

import re
import time
from typing import Any

FIND_SECONDS = 1.0
LINES = 3
LINE_CHARS = 240
MIN_CHARS = 200  # a shorter string is a value, not a text to search
MAX_COUNT = 1000  # matches counted a term, at most


def where_text(terms: list[str], values: dict[str, Any]) -> list[dict[str, Any]]:
    """For each user text in `values` (name -> value: a str of MIN_CHARS or more) and each
    term it holds (any case): name, term, count (up to MAX_COUNT) and its first lines."""
    start = time.monotonic()
    hits: list[dict[str, Any]] = []
    for name, value in values.items():
        if not isinstance(value, str) or name.startswith("_") or len(value) < MIN_CHARS:
            continue
        for term in terms:
            if time.monotonic() - start > FIND_SECONDS:
                return hits
            if not str(term).strip():
                continue
            found = _lines(value, str(term).strip(), start)
            if found is not None:
                hits.append({"name": name, "term": term, **found})
    return hits


def _lines(text: str, term: str, start: float) -> dict[str, Any] | None:
    lines: list[str] = []
    count = 0
    for m in re.finditer(re.escape(term), text, re.IGNORECASE):
        count += 1
        if len(lines) < LINES:
            a = text.rfind("\n", 0, m.start()) + 1
            b = text.find("\n", m.end())
            line = text[a:len(text) if b == -1 else b].strip()
            if line not in lines:
                lines.append(line[:LINE_CHARS])
        if count >= MAX_COUNT or time.monotonic() - start > FIND_SECONDS:
            break
    return {"count": count, "lines": lines} if count else None


def where_text_json(terms: list[str], ip: Any = None) -> str:
    """`where_text` over the user's names in the kernel, as JSON (the host's call)."""
    import json

    from kernel_ext.namespace import user_values

    if ip is None:
        from IPython import get_ipython

        ip = get_ipython()
    return json.dumps(where_text([str(t) for t in terms], user_values(ip)))
