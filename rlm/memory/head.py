"""The memory message a model call puts right after the system prompt.

Read fresh at every model call (a file the user edited between turns is what the next
call sees; each file is read from its end, at most `files.read_limit` bytes, however big
it grew), at most 10% of the model's window in tokens (rlm.memory.inject), with state.md
flagged stale when the session ran `STALE_TURNS` turns since it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from rlm.memory.files import ProjectMemory
from rlm.memory.inject import (
    HISTORY_LINES,
    MemoryBlock,
    MemoryTexts,
    budget_tokens,
    is_empty,
    memory_block,
)
from rlm.session.entries import MessageEntry

STALE_TURNS = 8
MEMORY_MARK = "Project memory (persistent"  # how a projected message is known as the block


def turns_since(branch: Sequence[Any], since: float, limit: int) -> int:
    """Model replies on `branch` after the time `since` (epoch seconds), counted up to
    `limit` from the newest back."""
    n = 0
    for e in reversed(branch):
        if not (isinstance(e, MessageEntry) and e.role == "assistant" and e.error is None):
            continue
        try:
            t = datetime.fromisoformat(e.timestamp).timestamp()
        except ValueError:
            continue
        if t <= since or n >= limit:
            break
        n += 1
    return n


class MemoryHead:
    """The block for one agent: `memory` read-only here; `window` the model's window."""

    def __init__(self, memory: ProjectMemory, window: Callable[[], int | None],
                 branch: Callable[[], Sequence[Any]], *, stale_turns: int = STALE_TURNS,
                 quiet_when_empty: bool = False, guide: bool = True):
        self.memory, self.window, self.branch = memory, window, branch
        self.stale_turns = stale_turns
        # a small fenced-code model gets no block while nothing is recorded: the guide alone
        # is ~250 tokens of instructions it does not follow (bench/bench_memory.py)
        self.quiet_when_empty = quiet_when_empty
        # nor the guide once something is: ~200 tokens at every call that bought the 1.5B
        # model nothing (bench/bench_memory.py, issue 58); its system prompt says what the
        # block is (prompts/memory_small.md)
        self.guide = guide
        # the last message and what it was made from: the same dict while nothing changed,
        # so a prompt's token count finds it by identity (rlm.llm.tokens.RunningCount)
        self._last: tuple[MemoryTexts, int, MemoryBlock, dict[str, Any] | None] | None = None
        # (files' signature, texts, the state file's mtime)
        self._read: tuple[tuple[Any, ...], MemoryTexts, float | None] | None = None

    def texts(self) -> MemoryTexts:
        m = self.memory
        sig = m.signature()  # asked several times a step: the files are read when they change
        if self._read is not None and self._read[0] == sig:
            t, mtime = replace(self._read[1]), self._read[2]
        else:
            lines, total = m.history_lines(HISTORY_LINES)
            read = {name: m.read_sized(name) for name in ("state", "conventions", "context")}
            t = MemoryTexts(dir=str(m.dir), state=read["state"][0],
                            conventions=read["conventions"][0], context=read["context"][0],
                            history=lines, history_total=total,
                            sizes={name: size for name, (_text, size) in read.items()})
            mtime = m.mtime("state")  # in the signature too: the same while it is
            self._read = (sig, replace(t), mtime)
        if mtime is not None and t.state.strip():
            if turns_since(self.branch(), mtime, self.stale_turns) >= self.stale_turns:
                t.stale_turns = self.stale_turns
        return t

    def block(self) -> MemoryBlock:
        """The block within this model's budget (what `message` sends; cuts listed)."""
        return self._current()[2]

    def text(self) -> str:
        return self.block().text

    def budget(self) -> int:
        return budget_tokens(self.window())

    def message(self) -> dict[str, Any] | None:
        """The memory message, or None (nothing recorded and `quiet_when_empty`, or not
        even a note fits the budget)."""
        return self._current()[3]

    def _current(self) -> tuple[MemoryTexts, int, MemoryBlock, dict[str, Any] | None]:
        t = self.texts()
        budget = self.budget()
        if self._last is not None and self._last[0] == t and self._last[1] == budget:
            return self._last
        block = memory_block(t, budget, guide=self.guide)
        quiet = self.quiet_when_empty and is_empty(t)
        message = None if quiet or not block.text else {"role": "user", "content": block.text}
        self._last = (t, budget, block, message)
        return self._last
