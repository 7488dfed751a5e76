"""Stuck detection: a run that no longer brings new information is noticed, told once what
repeats, given one recovery turn, then ended with reason `stuck`. Every run is watched
(chats, goals, --autonomous, children: a run that loops until its turn limit ends unanswered
either way, only later and dearer). Pure state, no I/O.

Progress is new information (issue 58): a cell that binds a name no earlier cell of the run
bound, or prints an output that differs from every earlier output of the run beyond
volatile tokens and counters (rlm.agent.policy.novelty: a poll whose output goes 10% ->
20% -> ... -> done is progress each time; `iteration 7`, `iteration 8`, `iteration 9` is
not). The same cell run again is progress when its output changed that way (polling), a
repeat when it did not. A failed cell is progress only when its error is one not seen in
this run. What is missing: the kernel does not say which names' values a cell changed, so
a cell that silently rebinds an existing name (`df = df.dropna()`) is not progress until
something it changed is printed.

The run is *stuck* when, since the last turn with progress,
  - `repeats` cells repeated (the same code, or an earlier output again, or one that
    differs only in counters, with nothing new; counted after resampling: a resampled
    reply never ran), or
  - `idle` turns in a row brought nothing new (a turn whose reply ran no cell is idle too:
    a final answer the goal did not accept, a resample that gave up, prose).
On detection the policy escalates: before the next model call the model reads one note
that names the repeat (what repeated, the cell, the last output, the goal and what is
missing). That is its recovery turn: a turn with progress clears the stuck state (a later
detection gets a note of its own), a turn without ends the run: `End("stuck")` (the run
decision, rlm.protocols), whose `report` is what `--json` shows (turns and tokens after
detection, what was tried).

Thresholds scale with the model (`thresholds_for`): a fenced-code model (the small local
one) is held tighter than a tool-calling one. `repeats` and `idle` come from issue 33's
trace of the 1.5B model (28 of the 29 cells after its first the same, 51 resamples without
a different cell) and were measured on bench/longrun.py against the LARGE ones for that
model (bench/RESULTS.md, "Long autonomous runs", stop 44: no note was followed by a
completion, and the looser thresholds ran the same loops 1.9-7.9x longer without
progress). The grace after the note was 2 (SMALL) / 3 (LARGE) idle turns until issue 58
made it one recovery turn for both; that measurement (no note followed by a completion)
is what says more turns after the note did not help.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rlm.agent.policy.novelty import Outputs
from rlm.kernel.binds import kept_names
from rlm.protocols import End


@dataclass(frozen=True)
class Thresholds:
    repeats: int  # repeated cells with nothing new since the last progress
    idle: int  # turns in a row without new information
    grace: int  # recovery turns after the note before the run ends


SMALL = Thresholds(repeats=3, idle=3, grace=1)  # fenced-code models (local 1.5B)
LARGE = Thresholds(repeats=5, idle=5, grace=1)  # tool-calling models


def thresholds_for(native_tools: bool) -> Thresholds:
    return LARGE if native_tools else SMALL


def _first_line(code: str) -> str:
    lines = [ln for ln in code.strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    return (first[:100] + (" ..." if len(lines) > 1 or len(first) > 100 else "")).strip()


@dataclass
class StuckWatch:
    """One run's progress record."""

    limits: Thresholds = SMALL
    codes: set[str] = field(default_factory=set)
    outputs: Outputs = field(default_factory=Outputs)
    names: set[str] = field(default_factory=set)
    repeats: int = 0  # repeated cells since the last turn with progress
    idle: int = 0
    turn_open: bool = False
    progress: bool = False  # the open turn made progress
    repeat: str | None = None  # how the newest cell without news repeated (the note says it)
    repeated_code: str | None = None  # that cell's code, when it had run before
    resamples: int = 0
    hot_turns: int = 0  # turns sampled hotter because the run looped
    last_output: str = ""
    signal: str | None = None  # why the run is stuck (None: it is not)
    detected: dict[str, Any] | None = None  # turn, tokens, signal at the detection
    escalated_turn: int | None = None  # the note's turn for the current detection
    notes: list[int] = field(default_factory=list)  # every note's turn
    after: int = 0  # idle turns since the note
    turns_seen: int = 0
    repeated_cells: list[str] = field(default_factory=list)
    total_repeats: int = 0

    # ------------------------------------------------------------------ observations
    def cell(self, code: str, output: str, ok: bool,
             binds: Iterable[str] | None = None) -> str | None:
        """A cell ran: None when it brought new information, else how it repeated.
        `binds`: the names it bound (CellResult.binds, the kernel's word); one the run has
        not bound before is progress, but not a loop's variable (`for j` after `for i`
        is the same loop renamed: rlm.kernel.binds.kept_names)."""
        key = code.strip()
        again = key in self.codes
        new_names = kept_names(binds, code) - self.names if ok else set()
        kind = self.outputs.see(output, values_count=ok) if output.strip() else "none"
        self.codes.add(key)
        self.names |= new_names
        if output.strip():
            self.last_output = output.strip()
        if new_names or kind is None:
            self.progress = True
            return None
        what = _repeat_text(kind, again, ok)
        self.repeat, self.repeated_code = what, key if again else None
        if again or kind != "none":
            self.repeats += 1
            self.total_repeats += 1
            if key not in self.repeated_cells:
                self.repeated_cells.append(key)
        return what

    def resampled(self) -> None:
        self.resamples += 1

    def sampled_hot(self) -> None:
        self.hot_turns += 1

    # ----------------------------------------------------------------------- turns
    def turn_ended(self) -> None:
        """Close the open turn: idle or not, and whether that makes the run stuck."""
        if not self.turn_open:
            return
        self.turn_open = False
        self.turns_seen += 1
        if self.progress:  # recovered: a later detection is a new one, with its own note
            self.idle = self.repeats = self.after = 0
            self.signal, self.detected, self.escalated_turn = None, None, None
            return
        if self.repeat is None:
            self.repeat = "no cell ran"
        self.idle += 1
        if self.escalated_turn is not None:
            self.after += 1
        if self.signal is None:
            if self.repeats >= self.limits.repeats:
                self.signal = f"{self.repeats} cells brought nothing new (the last: {self.repeat})"
            elif self.idle >= self.limits.idle:
                self.signal = f"{self.idle} turns brought nothing new (the last: {self.repeat})"

    def halt(self, turn: int, tokens: int) -> End | None:
        """Before turn `turn`: close the previous turn; End("stuck") when the recovery turn
        after the note brought nothing new. Records when the stuck state was detected."""
        ending = self.halting()
        if self.signal is not None and self.detected is None:
            self.detected = {"turn": turn, "tokens": tokens, "signal": self.signal}
        if not ending:
            return None
        d = self.detected or {"turn": turn, "tokens": tokens, "signal": self.signal}
        detail = (f"{d['signal']} (detected before turn {d['turn']}); "
                  f"{self.after} more turn{'s' * (self.after != 1)} without progress after the "
                  "host's note")
        return End("stuck", detail, {
            "detail": detail,
            "signal": d["signal"],
            "detected_turn": d["turn"],
            "turns_after_detection": turn - d["turn"],
            "tokens_after_detection": tokens - d["tokens"],
            "tried": self.tried(),
        })

    def halting(self) -> bool:
        """Whether `halt` ends the run before the next turn (closes the open turn first)."""
        self.turn_ended()
        return self.escalated_turn is not None and self.after >= self.limits.grace

    def open_turn(self) -> None:
        self.turn_open, self.progress, self.repeat = True, False, None

    def escalate(self, turn: int) -> bool:
        """True once per detection, at the first turn that starts while the run is stuck."""
        if self.signal is None or self.escalated_turn is not None:
            return False
        self.escalated_turn = turn
        self.notes.append(turn)
        self.after = 0
        return True

    def tried(self) -> list[str]:
        out = []
        if self.resamples:
            out.append(f"resampled {self.resamples} repeated replies at a higher temperature")
        if self.hot_turns:
            out.append(f"sampled {self.hot_turns} turns hotter after a repeat")
        if self.repeated_cells:
            out.append(f"{self.total_repeats} repeated cells ({len(self.repeated_cells)} "
                       "distinct)")
        if self.notes:
            at = ", ".join(map(str, self.notes))
            out.append(f"a note naming the repeat at turn{'s' * (len(self.notes) > 1)} {at}, "
                       "with the goal, the last output and what was missing")
        return out


def _repeat_text(kind: str, again: bool, ok: bool) -> str:
    """How a cell without news repeated, as the note says it."""
    if not ok:
        return "the same cell failed with the same error again" if again else \
            "another cell failed with an error seen before"
    if kind == "none":
        return "the same cell ran again and printed nothing" if again else \
            "a cell printed nothing and bound no new name"
    if kind == "counter":
        return (("the same cell" if again else "a cell") + " printed what an earlier cell "
                "printed with only a counter, timestamp or id changed")
    return "the same cell printed the same output again" if again else \
        "another cell printed an output seen before"


def escalation_note(signal: str, repeated_code: str | None, goal: str | None,
                    last_output: str, missing: str) -> str:
    """The note a stuck run gets: what repeated (the cell), the goal, the last output, what
    is missing, and that one more turn without anything new ends the run."""
    shown = last_output if len(last_output) <= 600 else last_output[:300] + " ... " + last_output[-280:]
    return (
        f"<stuck>\nNothing new: {signal}.\n"
        + (f"The repeated cell: `{_first_line(repeated_code)}`\n" if repeated_code else "")
        + (f"Goal: {goal}\n" if goal else "")
        + f"Last output:\n{shown or '(none)'}\n"
        f"Still missing: {missing}\n"
        "Do not run that cell again. Look at what is wrong (print a column, a file, a few "
        "rows), then try a different approach. If the output already answers, answer now; "
        "if you cannot make progress, say so in one line. If your next turn brings nothing "
        "new either, the run ends.\n</stuck>"
    )
