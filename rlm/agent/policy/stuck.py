"""Stuck detection: a run that continues on its own (a goal, --autonomous) and no longer
makes progress is noticed, told once, then ended with reason `stuck`. Pure state, no I/O.

Progress is a cell that binds a name no earlier cell of the run bound, or prints an output
no earlier cell printed. The run is *stuck* when
  - cells repeat: the same code, or an output identical to an earlier one, `repeats`
    times in the run (counted after resampling: a resampled reply never ran), or
  - `idle` turns in a row made no progress (a turn whose reply ran no cell is idle too:
    a final answer the goal did not accept, a resample that gave up, prose).
On detection the policy escalates once: before the next model call the model reads one
short note (the goal, the last output, what is missing). A turn with progress after it
clears the stuck state; `grace` more idle turns end the run: `End("stuck")` (the run
decision, rlm.protocols), whose
`report` is what `--json` shows (turns and tokens after detection, what was tried).

Thresholds scale with the model (`thresholds_for`): a fenced-code model (the small local
one) is held tighter than a tool-calling one. They come from issue 33's trace of the 1.5B
model (28 of the 29 cells after its first the same, 51 resamples without a different
cell) and were measured on bench/longrun.py against the LARGE ones for that model
(bench/RESULTS.md, "Long autonomous runs", stop 44: no note was followed by a completion,
and the looser thresholds ran the same loops 1.9-7.9x longer without progress).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from rlm.protocols import End


@dataclass(frozen=True)
class Thresholds:
    repeats: int  # repeated cells (same code or same output) in a run
    idle: int  # turns in a row without a new name or a new output
    grace: int  # idle turns after the escalation before the run ends


SMALL = Thresholds(repeats=3, idle=3, grace=2)  # fenced-code models (local 1.5B)
LARGE = Thresholds(repeats=5, idle=5, grace=3)  # tool-calling models


def thresholds_for(native_tools: bool) -> Thresholds:
    return LARGE if native_tools else SMALL


def bound_names(code: str) -> set[str]:
    """Names a cell binds at top level or anywhere (assignments, imports, defs, loops);
    code that does not parse binds nothing we can tell."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def _norm(text: str) -> str:
    return " ".join(text.split())


@dataclass
class StuckWatch:
    """One run's progress record. `enabled` only for runs that continue on their own."""

    limits: Thresholds = SMALL
    enabled: bool = False
    codes: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    repeats: int = 0
    idle: int = 0
    turn_open: bool = False
    progress: bool = False  # the open turn made progress
    resamples: int = 0
    hot_turns: int = 0  # turns sampled hotter because the run looped
    last_output: str = ""
    signal: str | None = None  # why the run is stuck (None: it is not)
    detected: dict[str, Any] | None = None  # turn, tokens, signal at the first detection
    escalated_turn: int | None = None
    after: int = 0  # idle turns since the escalation
    turns_seen: int = 0
    repeated_cells: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ observations
    def cell(self, code: str, output: str, ok: bool) -> None:
        if not self.enabled:
            return
        key, out = code.strip(), _norm(output)
        repeat = key in self.codes or (bool(out) and out in self.outputs)
        new_names = bound_names(code) - self.names if ok else set()
        new_output = bool(out) and out not in self.outputs
        if repeat:
            self.repeats += 1
            if key not in self.repeated_cells:
                self.repeated_cells.append(key)
        if ok and (new_names or new_output) and not repeat:
            self.progress = True
        self.codes.add(key)
        if out:
            self.outputs.add(out)
        if ok:
            self.names |= new_names
        if output.strip():
            self.last_output = output.strip()

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
        if self.progress:
            self.idle, self.signal = 0, None
            if self.escalated_turn is not None:
                self.after = 0
            return
        self.idle += 1
        if self.escalated_turn is not None:
            self.after += 1
        if self.signal is None:
            if self.repeats >= self.limits.repeats:
                self.signal = f"the same cell or output {self.repeats} times"
            elif self.idle >= self.limits.idle:
                self.signal = f"no new name or output for {self.idle} turns"

    def halt(self, turn: int, tokens: int) -> End | None:
        """Before turn `turn`: close the previous turn; End("stuck") when the escalation did
        not help. Records when the stuck state was first detected."""
        if not self.enabled:
            return None
        self.turn_ended()
        if self.signal is not None and self.detected is None:
            self.detected = {"turn": turn, "tokens": tokens, "signal": self.signal}
        if self.escalated_turn is None or self.after < self.limits.grace:
            return None
        d = self.detected or {"turn": turn, "tokens": tokens, "signal": self.signal}
        detail = (f"{d['signal']} (detected before turn {d['turn']}); "
                  f"{self.after} more turns without progress after the host's note")
        return End("stuck", detail, {
            "detail": detail,
            "signal": d["signal"],
            "detected_turn": d["turn"],
            "turns_after_detection": turn - d["turn"],
            "tokens_after_detection": tokens - d["tokens"],
            "tried": self.tried(),
        })

    def open_turn(self) -> None:
        self.turn_open, self.progress = True, False

    def escalate(self, turn: int) -> bool:
        """True once per run, at the first turn that starts while the run is stuck."""
        if not self.enabled or self.signal is None or self.escalated_turn is not None:
            return False
        self.escalated_turn = turn
        self.after = 0
        return True

    def tried(self) -> list[str]:
        out = []
        if self.resamples:
            out.append(f"resampled {self.resamples} repeated replies at a higher temperature")
        if self.hot_turns:
            out.append(f"sampled {self.hot_turns} turns hotter after a repeat")
        if self.repeated_cells:
            out.append(f"{self.repeats} repeated cells ({len(self.repeated_cells)} distinct)")
        if self.escalated_turn is not None:
            out.append(f"one note at turn {self.escalated_turn} with the goal, the last "
                       "output and what was missing")
        return out


def escalation_note(goal: str | None, last_output: str, missing: str) -> str:
    """The one note a stuck run gets: the goal, the last output, what is missing."""
    shown = last_output if len(last_output) <= 600 else last_output[:300] + " ... " + last_output[-280:]
    return (
        "<stuck>\nYou are repeating yourself: your recent cells produce nothing new.\n"
        + (f"Goal: {goal}\n" if goal else "")
        + f"Last output:\n{shown or '(none)'}\n"
        f"Still missing: {missing}\n"
        "Do not run the same cell again. Look at what is wrong (print a column, a file, a "
        "few rows), then try a different approach. If you cannot make progress, say so in "
        "one line.\n</stuck>"
    )
