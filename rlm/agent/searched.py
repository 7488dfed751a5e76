"""A search of a text that found nothing, and the lines that hold what the question names
(the note rlm.agent.cells appends; the lines come from the kernel: kernel_ext.texts).

The 1.5B model guesses how a log writes a fact before looking: `re.search(r'Halcyon:\\s*
(\\d+\\.\\d+) EUR', project).group(1)` where the line says "project Halcyon: initial budget
approved at 4000000 EUR"; None, an AttributeError, the same guess again, then "the budget
is not found". Told only "look at the data", it printed the text's first 400 characters.
What it needs is the lines that hold the names the question gives, as the text writes
them: the next pattern is then written from the data.

A search found nothing when a cell that searches (`find`, `re.search`, `findall`,
`.str.contains`, `next(...)`, `index`) failed the way a missed match fails (`None.group`,
StopIteration, an empty list indexed), or printed that nothing matched ("not found",
"None", "[]", "-1", an empty result). The names are the question's
(rlm.agent.context_files.question_names).
"""

from __future__ import annotations

import re
from typing import Any

from rlm.agent.policy.partial import is_empty

_SEARCHES = re.compile(r"\.(?:find|rfind|index|search|findall|finditer|match|fullmatch|"
                       r"contains|startswith|endswith)\s*\(|\bnext\s*\(|\bre\.\w+\s*\(|\bin\s+\w")
_MISSED = re.compile(r"'NoneType' object has no attribute '(?:group|groups|groupdict|start|end|"
                     r"span)'|^StopIteration\b|^IndexError: (?:list|string) index out of range",
                     re.M)
_NOTHING = re.compile(r"^\s*(?:none|\[\]|-1|\(\)|set\(\)|\{\}|false)\s*$|\bnot (?:be )?found\b|"
                      r"\bno (?:\w+ ){0,3}(?:found|match(?:es|ed)?)\b|\bnothing (?:was )?found\b|"
                      r"\bdoes not (?:exist|appear)\b", re.I)
SHOWN = 2  # terms shown in the note


def missed(code: str, ok: bool, shaped: str) -> bool:
    """Whether the cell `code` searched and found nothing (its result: `ok`, `shaped`)."""
    if not _SEARCHES.search(code):
        return False
    if not ok:
        return bool(_MISSED.search(shaped))
    return bool(_NOTHING.search(shaped)) or is_empty(shaped)


def note(hits: list[dict[str, Any]]) -> str:
    """The lines each text holds a name on (kernel_ext.texts.where_text): names before
    codes in capitals, the rarest first, a name whose lines are shown already left out;
    "" when no text holds any."""
    if not hits:
        return ""
    # a code or unit in capitals ("EUR") says less than a name; then the rarest first
    ranked = sorted(hits, key=lambda h: (str(h["term"]).isupper(), int(h.get("count", 0))))
    parts: list[str] = []
    shown: set[str] = set()
    for h in ranked:
        if len(parts) == SHOWN or set(h.get("lines", [])) <= shown:
            continue  # its lines are shown already
        shown.update(h.get("lines", []))
        count = int(h.get("count", 0))
        lines = "\n".join(f"    {ln}" for ln in h.get("lines", []))
        more = f" ({count} lines; the first {len(h['lines'])})" if count > len(h["lines"]) \
            else f" ({count} line{'s' if count != 1 else ''})"
        parts.append(f"`{h['name']}` holds {h['term']!r}{more}:\n{lines}")
    return ("\n[Your search found nothing, but " + "\n".join(parts) + "\nWrite the search "
            "from how these lines are written, and print the lines you use.]")
