"""Output shaping for the model: pure functions, no I/O.

The model sees at most about `budget` characters of a cell's output: the head and the
tail, joined by an explicit marker that says how many characters were elided and where
the full output lives. ANSI escape sequences are stripped (tracebacks are colored).

`HeadTail` accumulates text chunk by chunk in bounded memory, so the caller can stream a
100 MB print through it while the bytes themselves go to a file.
"""

from __future__ import annotations

import re
from collections import deque

# CSI sequences (colors, cursor moves), OSC sequences (titles, hyperlinks), lone escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

MARKER_RESERVE = 160  # room kept for the marker inside the budget


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def marker(elided: int, full_path: str | None) -> str:
    where = f"; full output: {full_path}" if full_path else ""
    return f"\n[... {elided} characters elided{where}]\n"


def split_budget(budget: int) -> tuple[int, int]:
    """(head_cap, tail_cap) for a total budget, leaving room for the marker."""
    room = max(budget - MARKER_RESERVE, 2)
    head = room // 2
    return head, room - head


class HeadTail:
    """The first `head_cap` and last `tail_cap` characters of a stream of chunks."""

    def __init__(self, head_cap: int, tail_cap: int):
        self.head_cap, self.tail_cap = head_cap, tail_cap
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.total = 0

    def add(self, chunk: str) -> None:
        if not chunk:
            return
        self.total += len(chunk)
        if self._head_len < self.head_cap:
            take = chunk[: self.head_cap - self._head_len]
            self._head.append(take)
            self._head_len += len(take)
            chunk = chunk[len(take) :]
            if not chunk:
                return
        if len(chunk) > self.tail_cap:
            chunk = chunk[-self.tail_cap :]
            self._tail.clear()
            self._tail_len = 0
        self._tail.append(chunk)
        self._tail_len += len(chunk)
        while self._tail and self._tail_len - len(self._tail[0]) >= self.tail_cap:
            self._tail_len -= len(self._tail.popleft())

    @property
    def elided(self) -> int:
        return max(self.total - self._head_len - min(self._tail_len, self.tail_cap), 0)

    def text(self, full_path: str | None = None) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        if not self.elided:
            return head + tail
        return head + marker(self.elided, full_path) + tail[-self.tail_cap :]


def shape(text: str, budget: int, full_path: str | None = None) -> tuple[str, int]:
    """Shape one string: (shaped text, elided char count). ANSI is stripped first."""
    acc = HeadTail(*split_budget(budget))
    acc.add(strip_ansi(text))
    return acc.text(full_path), acc.elided
