"""Events the agent loop yields. The CLI renderer, the notebook magic and tests consume them.

The loop knows nothing about terminals or notebooks: it only yields these.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from rlm.outcome import RunOutcome, decide

_KINDS: dict[str, type[Event]] = {}


@dataclass
class Event:
    """Base of every loop event. `to_dict()` / `Event.from_dict()` round-trip through JSON
    (the worker's event file, `rlm attach`); a raw CellResult is not carried."""

    transient: ClassVar[tuple[str, ...]] = ()  # fields left out of to_dict()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _KINDS[cls.__name__] = cls

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": type(self).__name__}
        for f in fields(self):
            if f.name not in self.transient:
                out[f.name] = getattr(self, f.name)
        return out

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Event | None:
        """The event a `to_dict()` record describes; None for records that are not loop
        events (the worker's own lifecycle records) or do not match their class."""
        cls = _KINDS.get(str(d.get("event", "")))
        if cls is None:
            return None
        names = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in d.items() if k in names})
        except TypeError:
            return None


@dataclass
class TurnStarted(Event):
    turn: int


@dataclass
class ModelText(Event):
    """A streamed chunk of assistant text."""

    delta: str


@dataclass
class ModelCode(Event):
    """The code of a native tool call as the model writes it: the `lines` of call `index`
    completed since the last such event (a renderer drafts them; the cell's box shows the
    whole cell once it runs)."""

    index: int
    lines: list[str]


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
    transient: ClassVar[tuple[str, ...]] = ("result",)


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
class Phase(Event):
    """A step between turns that may take more than a second, named as it starts (a gate,
    a compaction's summary); `done` ends it. Ctrl-C during it stops the step and the run
    (rlm.agent.loop.Agent.in_phase)."""

    text: str
    done: bool = False


@dataclass
class FinalAnswer(Event):
    answer: str
    source: str  # final | final_var | text | reply


@dataclass
class RunEnded(Event):
    reason: str  # final | no_code | limit:<name> | stuck | interrupted | error
    turns: int
    final: str | None = None
    detail: str | None = None
    # an answer is verified when every figure and name it asserts is in the output of a
    # successful cell of this run, or is the value final()/final_var() computed
    # (rlm.agent.policy.verify); None when the run ended without an answer
    verified: bool | None = None
    why: str | None = None  # why it is not verified
    # verified: per claim, the session entry ids of the cell results that hold it
    evidence: dict[str, list[str]] | None = None
    unverified_claims: list[str] | None = None  # not verified: the claims nothing supports
    # reason "stuck": what was detected, turns and tokens spent after it, what was tried
    stuck: dict[str, Any] | None = None
    # the one outcome every surface shows (rlm.outcome.RunOutcome.to_dict()): status,
    # answered, verified, why, unmet promises, exit code
    outcome: dict[str, Any] | None = None
    # every token the run spent on the user's behalf, by role (rlm.ledger.Totals.
    # to_dict(): prompt, completion, total, by_role); None from an older worker
    tokens: dict[str, Any] | None = None

    @property
    def result(self) -> RunOutcome:
        """The run's outcome; an event without one (an older worker's) is decided from its
        reason and verdict alone."""
        return RunOutcome.from_dict(self.outcome) or decide(
            self.reason, self.detail, self.verified, self.why, [])


# ---------------------------------------------------------------- progress (issue 14.3)
@dataclass
class ModelCallStarted(Event):
    """A model call is about to be made: which model, and how many tokens the prompt has
    (counted offline; None when it could not be counted)."""

    model: str
    prompt_tokens: int | None = None


@dataclass
class CellOutput(Event):
    """Text a running cell printed, as it was printed (stdout/stderr, a displayed value, an
    image reference, the trimmed traceback). The full result still comes in CellFinished."""

    text: str
    name: str = "stdout"  # stdout | stderr | result | error


@dataclass
class ChildProgress(Event):
    """A child the run spawned (rlm_spawn, rlm_query) started, ended a turn or ended; sent
    while a parent cell runs (a cell is what waits on children)."""

    name: str
    state: str  # running | done | failed | cancelled
    turns: int = 0
    tokens: int = 0
    seconds: float = 0.0
    error: str | None = None
    note: str | None = None  # at its end: changes of its working copy that were refused


def first_run(events: list[Event]) -> list[Event]:
    """The events of the first run in `events`, up to its RunEnded (ticks delivered after
    a prompt's run are runs of their own)."""
    for i, ev in enumerate(events):
        if isinstance(ev, RunEnded):
            return events[: i + 1]
    return events
