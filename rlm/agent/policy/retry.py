"""What a resample of a repeated failing cell is drawn from: the context without that cell.

The 1.5B model copies a cell it sees: sent back the cell that just failed, it was sampled
again at temperature 1.0 with seeds of its own and came back byte for byte the same
(long-run flights: one 17-line cell nine times; task suite farapart: one regex four times,
with the lines it should have matched shown under it). What it copies is the failed cell in
its context. The resample is drawn from the branch with every exchange of that cell left
out (the reply that sent it and the results that followed it), and one note in their place
that says what failed and what the host said about it (the error line on, its notes: a
column that exists, the lines a search missed), without the code to copy. Drawn again at
1.0 from six long-run sessions at their first failed cell (stop 69, run against the task's
data): with the cell in context 2 of 18 draws were that cell again, 12 others failed and
none ran; with this note in its place none of 15 was that cell and 3 ran (none right yet:
what the 1.5B model computes is still the limit).

Only the call sees this view; the log keeps every exchange as it happened, and the next
turn's context is the whole branch again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlm.agent.codeparse import code_tool_calls
from rlm.agent.notices import failing_line
from rlm.session.entries import Entry, MessageEntry

NOTE = ("A cell you sent failed{where}:\n{error}\nDo not send that cell again: write a "
        "different one from what the error and the notes say.")
_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Iteration|Interrupt|Exit)\b.*$",
                         re.M)
NOTE_CHARS = 3000  # of the failed cell's result the note keeps


def _first_code(e: Entry) -> str | None:
    if not (isinstance(e, MessageEntry) and e.role == "assistant"):
        return None
    calls = code_tool_calls(str(e.message.get("content") or ""))
    return str(calls[0].arguments.get("code", "")).strip() if calls else ""


def without_cell(branch: Sequence[Entry], code: str) -> list[Entry] | None:
    """`branch` with each exchange whose first cell is `code` left out, and a note of its
    newest failure last; None when the branch holds no such exchange."""
    want = code.strip()
    kept: list[Entry] = []
    result: str | None = None
    dropping = False
    for e in branch:
        first = _first_code(e)
        if first is not None:
            dropping = first == want
        if dropping and (first is not None
                         or (isinstance(e, MessageEntry) and e.role == "tool")):
            if isinstance(e, MessageEntry) and e.role == "tool":
                result = str(e.message.get("content") or "")
            continue
        kept.append(e)
    if result is None:
        return None
    return [*kept, MessageEntry(message={"role": "user", "content": note(result)},
                                origin="nudge")]


def note(result: str) -> str:
    """What failed, from a cell's result: the failing line, then the error line and all
    after it (the host's notes), bounded."""
    line = failing_line(result).strip()
    errors = list(_ERROR_LINE.finditer(result))
    tail = result[errors[-1].start():] if errors else result[-NOTE_CHARS:]
    tail = "\n".join(ln for ln in tail.splitlines() if "frame(s) hidden" not in ln).strip()
    where = f" at `{line}`" if line else ""
    return NOTE.format(where=where, error=tail[:NOTE_CHARS])
