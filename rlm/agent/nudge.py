"""The small-model nudge policy: when a fenced-code model answers without code right after
a failed or silent cell, or before looking at data it was given, ask it (at most
`MAX_NUDGES` times per run) to use a cell first."""

from __future__ import annotations

import itertools

from rlm.session.entries import Entry, MessageEntry

MAX_NUDGES = 2
NUDGE_FAILED = ("Your last cell failed. Fix it with a new ```python cell (check the names and "
                "columns that exist first), or, if you already know the answer, reply with "
                "FINAL(answer).")
NUDGE_EMPTY = ("Your last cell printed nothing, so you have not seen an answer yet. Print "
               "what you found (for a search: the matching line) with a ```python cell, then "
               "answer with FINAL(answer).")
NUDGE_LOOK = ("You have not looked at the data yet. Reply with a ```python cell that reads "
              "the variables you were given (in slices, or by searching them) and prints what "
              "answers the question; answer with FINAL(answer) after you see the output.")
WHY = {NUDGE_FAILED: "after a failed cell", NUDGE_LOOK: "before looking at its data",
       NUDGE_EMPTY: "after a cell that printed nothing"}


def choose_nudge(branch: list[Entry], *, native_tools: bool, nudges: int, has_data: bool,
                 final: bool) -> str | None:
    """For fenced-code models answering without code: a nudge when the last cell of this
    run failed (prose only), printed nothing (even with FINAL: nothing was seen), or when
    data was attached and no cell has run yet (prose only)."""
    if native_tools or nudges >= MAX_NUDGES:
        return None
    # newest first, skipping the reply just appended (islice: no copy of a long branch)
    for e in itertools.islice(reversed(branch), 1, None):
        if isinstance(e, MessageEntry) and e.role == "tool":
            status = (e.cell or {}).get("status")
            if status == "ok" and (e.cell or {}).get("shaped", "").strip() == "":
                return NUDGE_EMPTY
            return NUDGE_FAILED if status not in (None, "ok") and not final else None
        if isinstance(e, MessageEntry) and e.role == "user":
            return NUDGE_LOOK if has_data and not final else None
    return None
