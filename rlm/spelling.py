"""Did-you-mean: the one candidate a misspelled word most likely meant. Pure; used for
file names in a task, slash commands, model names and cron fields."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def edits(a: str, b: str) -> int:
    """Edit distance with swaps of neighbours counted as one edit (`cvs` -> `csv`: 1)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def one_edit_away(word: str, candidates: Iterable[str]) -> str | None:
    """The only candidate one edit from `word` (None when none is, or several are)."""
    near = sorted({c for c in candidates if c != word and edits(word, c) == 1})
    return near[0] if len(near) == 1 else None


def did_you_mean(word: str, candidates: Iterable[str], n: int = 3) -> str:
    """`did you mean X?` for the closest candidates, or "" when none is close."""
    pool = list(dict.fromkeys(candidates))
    near = [c for c in pool if edits(word.lower(), c.lower()) == 1]
    for c in difflib.get_close_matches(word, pool, n=n, cutoff=0.75):
        if c not in near:
            near.append(c)
    return f"did you mean {' or '.join(near[:n])}?" if near else ""
