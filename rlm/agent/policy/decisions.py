"""What the answer policy hands the loop: small decisions, and the facts rules read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from rlm.agent.policy.verify import Shown


# ------------------------------------------------------------------ what the loop asks about
@dataclass(frozen=True)
class Reply:
    """A model reply before any of its cells runs."""

    content: str
    tool_calls: bool  # the reply holds native tool calls


@dataclass(frozen=True)
class Cell:
    """A cell that just ran, as the rules see it."""

    code: str
    ok: bool
    status: str
    failed_again: bool  # the same code as the cell that failed just before
    runs_before: int  # how often this code already succeeded in this run
    repeat: str | None = None  # how it repeated with nothing new (None: new information)
    output: str = ""  # what the model reads of it (its shaped output)
    wrote: tuple[str, ...] = ()  # the files it opened for writing (kernel provenance)


class Answer:
    """An answer the model gave. `source`: final | final_var (from the kernel), text
    (FINAL(...)), var (FINAL_VAR(name): `read` fetches its value, only when a rule needs
    it) or reply (prose without code). `unknown_tools`: the names of tool calls the reply
    made to tools that do not exist (only `python` does)."""

    def __init__(self, raw: str, source: str, read: Callable[[str], str] | None = None,
                 unknown_tools: tuple[str, ...] = ()):
        self.raw, self.source, self._read = raw, source, read
        self.unknown_tools = unknown_tools

    @cached_property
    def text(self) -> str:
        return self._read(self.raw) if self._read is not None else self.raw

    @property
    def from_kernel(self) -> bool:
        return self.source in ("final", "final_var")

    @property
    def without_code(self) -> bool:
        return self.source in ("text", "var", "reply")


# --------------------------------------------------------------------------- decisions
@dataclass(frozen=True)
class Run:
    """Run the reply's cells."""


@dataclass(frozen=True)
class Resample:
    """Do not run the reply: log it hidden and sample again at `temperature`."""

    why: str
    temperature: float
    # the cell whose exchanges the new reply's context leaves out (rlm.agent.policy.retry)
    leave_out: str | None = None

    @property
    def notice(self) -> str:
        return f"{self.why}; sampling a new reply instead of running it"


@dataclass(frozen=True)
class CellVerdict:
    note: str  # appended to the cell's result (what the model reads)
    looping: bool  # the run repeats itself: the next call samples hotter


@dataclass(frozen=True)
class Note:
    """A message for the model (a user message the loop writes) and a notice for the user."""

    text: str
    notice: str
    origin: str | None = "nudge"  # the MessageEntry origin; None reads as the user's words


@dataclass(frozen=True)
class Refuse(Note):
    """The answer is not accepted: the model is told why and the run goes on."""

    key: str = ""  # which refusal (each is given once per run)
    counts_as_nudge: bool = False  # counts toward nudge.MAX_NUDGES


@dataclass(frozen=True)
class Accept:
    """The answer ends the run; `verified` with the evidence for each claim, or why not."""

    verified: bool
    why: str | None = None
    evidence: dict[str, list[str]] = field(default_factory=dict)
    unverified_claims: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- the run's facts
@dataclass
class Facts:
    """What the rules may read: the policy's state for one run, reset at its start."""

    native_tools: bool = False
    max_turns: int | None = None
    has_data: bool = False  # input was attached for this run's prompt
    steps: list[str] = field(default_factory=list)  # the prompt's steps (policy.steps)
    prompt: str = ""  # the run's prompt
    turn: int = 0
    cells: int = 0  # cells executed in this run
    last_cell_ok: bool | None = None  # the status of the newest of them
    shown: list[Shown] = field(default_factory=list)  # successful cells: entry id, output
    codes: list[str] = field(default_factory=list)  # the code of every executed cell
    last_entry: str | None = None  # the session entry of the newest cell's result
    # the newest successful cell called final() on data (rlm.agent.policy.dataflow)
    final_depends: bool = False
    last_failed_code: str | None = None
    succeeded: dict[str, int] = field(default_factory=dict)  # successful cells' code: runs
    stale: set[str] = field(default_factory=set)  # codes whose newest run brought nothing new
    looping: bool = False  # the newest cell repeated the failing one, or a successful one
    refused: set[str] = field(default_factory=set)  # refusals given (their keys)
    # an answer was refused and the fix is work: the next reply must be a cell (cleared
    # when one is sent, run or not; AnswerPolicy.tool_choice)
    work_asked: bool = False
    nudges: int = 0
    resamples: int = 0  # in this turn
    # input tables a cell read again in part into their own names: name -> (rows, loaded)
    shrunk: dict[str, tuple[int, int]] = field(default_factory=dict)
    # failed cells' statements that ran before the error and bound names
    ran_before_errors: list[str] = field(default_factory=list)
    # runs rewrites of a cell (rlm.agent.rewrites.Rewrite) on a forked copy of the
    # namespace and returns the first that ran whole (rlm.agent.repair.tried), or None; the
    # data a rule asks about before it decides (none where the executor cannot fork)
    offer: Callable[[list[Any]], Any] = field(default=lambda rewrites: None)
    # the text of a file a cell of this session wrote, by the name the question gives it
    # (under the kernel's working directory); None when no cell wrote it, it cannot be
    # read as a regular file there, or a goal's judge checks it (rlm.agent.policy.file_shape)
    read_written: Callable[[str], str | None] = field(default=lambda name: None)
    # the name a file a cell wrote was written from (rlm.agent.policy.written.Written.writer)
    writer: Callable[[str], str | None] = field(default=lambda name: None)
    # whether a cell of this session wrote the file the question names so (rlm.agent.
    # policy.written), goal or none
    wrote: Callable[[str], bool] = field(default=lambda name: False)
    # the input's descriptions (the `context_vars` entries' text)
    described: Callable[[], list[str]] = field(default=lambda: [])
    noted: set[str] = field(default_factory=set)  # notes given once per run (their keys)
    first_cell: str | None = None  # a cell shown before the first turn, tried on a fork
    # runs the host's own code on a fork of the kernel and returns what it printed, or None
    # (rlm.agent.repair.probed; none where the executor cannot fork)
    probe: Callable[[str], str | None] = field(default=lambda code: None)

    @property
    def outputs(self) -> list[str]:
        return [s.text for s in self.shown]

    @property
    def computed(self) -> list[str]:
        """The code whose work is in the kernel: successful cells, and what a failed cell
        ran and bound before its error (`means = df.groupby('k').v.mean()` on line 12 is
        computed when line 18 fails; a later cell may read `means`)."""
        return [s.code for s in self.shown] + self.ran_before_errors
