"""Events the agent loop yields. The CLI renderer, the notebook magic and tests consume them.

The loop knows nothing about terminals or notebooks: it only yields these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Event:
    pass


@dataclass
class TurnStarted(Event):
    turn: int


@dataclass
class ModelText(Event):
    """A streamed chunk of assistant text."""

    delta: str


@dataclass
class ModelReply(Event):
    content: str
    code_cells: list[str]
    usage: dict[str, int]


@dataclass
class CellStarted(Event):
    code: str
    index: int


@dataclass
class CellFinished(Event):
    code: str
    status: str
    shaped: str
    duration_s: float
    result: Any = None  # rlm.kernel.types.CellResult


@dataclass
class KernelRestarted(Event):
    cause: str
    restored: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


@dataclass
class Compacted(Event):
    trigger: str
    tokens_before: int
    summary: str


@dataclass
class Notice(Event):
    """Something the user should see that is not an error (retries, skipped gates, ...)."""

    text: str
    level: str = "info"  # info | warning


@dataclass
class FinalAnswer(Event):
    answer: str
    source: str  # final | final_var | text | reply


@dataclass
class RunEnded(Event):
    reason: str  # final | no_code | limit:<name> | interrupted | error
    turns: int
    final: str | None = None
    detail: str | None = None
