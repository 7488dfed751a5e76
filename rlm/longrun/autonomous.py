"""Autonomous mode: a bounded continuation policy for runs with nobody watching.

`AutonomousPolicy.decide(state)` is asked when the model would stop. It ends the run when a
limit is reached (continuations, turns, tokens, wall clock; None = unlimited) and otherwise
runs the quality gates (shell commands). All gates pass: the run may finish. A gate fails:
its bounded output (head + tail, ~4k chars) becomes the continuation message.

A failed gate is not rerun while nothing changed. "Changed" is a fingerprint of
(a) every file under the working directory — relative path, size, mtime_ns — skipping VCS,
virtualenv and cache folders (.git, .venv, __pycache__, node_modules, .rlm, *_cache) and
rlm's own home (`skip`: the session log grows every turn), taken
*after* the gate ran so the gate's own writes do not count, and (b) the number of cells the
run has executed (`RunState.cells`, if the loop passes it). Changes outside the working
directory are not seen; a cell run counts as a change because a gate may read what it wrote.
Finishing twice in a row with a failing gate and nothing changed ends the run ("stalled").

One policy object per run: it remembers its continuations and gate results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm import protocols
from rlm.chain import LoopHost
from rlm.longrun.clock import Clock
from rlm.longrun.gates import (
    SKIP_DIRS,
    GateCheck,
    GatePlace,
    GateResult,
    gate_message,
    head_tail,
    run_gate,
    workspace_fingerprint,
)

__all__ = ["SKIP_DIRS", "AutonomousPolicy", "Continue", "GateResult", "RunState", "Stop",
           "attach_policy", "gate_message", "head_tail", "run_gate", "workspace_fingerprint"]



@dataclass
class RunState:
    """What the loop knows when it asks: totals for the run so far."""

    turns: int = 0
    tokens: int = 0
    elapsed_s: float = 0.0
    finished: bool = True  # the model would stop now (final answer / reply without code)
    cells: int | None = None  # cells executed so far (part of the change fingerprint)


@dataclass
class Continue:
    message: str | None = None  # None: nothing to inject, the run simply goes on
    work: bool = False  # the message refuses an answer whose fix is work (a gate failing)


@dataclass
class Stop:
    reason: str
    limit: str | None = None  # max_turns | max_tokens | max_wall_s | max_continuations | stalled
    ok: bool = False  # True: finished with every gate passing


# the loop's names for the same limits (rlm.agent.runstate.limit_hit): "limit:turns", ...
LOOP_LIMIT = {"max_turns": "turns", "max_tokens": "tokens", "max_wall_s": "wall_clock"}


@dataclass
class AutonomousPolicy:
    max_continuations: int | None = None
    max_turns: int | None = None
    max_tokens: int | None = None
    max_wall_s: float | None = None
    gates: list[str] = field(default_factory=list)
    cwd: Path | None = None  # default: the process's working directory
    gate_timeout_s: float = 600.0
    gate_output_chars: int = 4000
    max_stalls: int = 2
    skip: tuple[Path, ...] = ()  # left out of the change fingerprint (rlm's home)
    gate_place: GatePlace | None = None  # where gates run: the kernel's sandbox (run_gate)
    # Ctrl-C stops a running gate; the phase line names it (GateCheck)
    gate_cancelled: Callable[[], bool] | None = None
    gate_announce: Callable[[str], None] | None = None
    # run state
    continuations: int = field(default=0, init=False)
    stalls: int = field(default=0, init=False)
    gate_runs: int = field(default=0, init=False)
    last_failure: GateResult | None = field(default=None, init=False)
    last_decision: Continue | Stop | None = field(default=None, init=False)
    _gates: GateCheck | None = field(default=None, init=False, repr=False)

    def limit_reached(self, state: RunState) -> Stop | None:
        checks: list[tuple[str, Any, Any, str]] = [
            ("max_turns", self.max_turns, state.turns, ""),
            ("max_tokens", self.max_tokens, state.tokens, f" ({state.tokens} tokens used)"),
            ("max_wall_s", self.max_wall_s, state.elapsed_s, f" ({state.elapsed_s:.0f} s elapsed)"),
        ]  # fmt: skip
        for name, cap, used, detail in checks:
            if cap is not None and used >= cap:
                return Stop(f"{name} ({cap:g}) reached{detail}", limit=name)
        return None

    def decide(self, state: RunState) -> Continue | Stop:
        decision = self._decide(state)
        self.last_decision = decision
        return decision

    def _decide(self, state: RunState) -> Continue | Stop:
        if not state.finished:
            return self.limit_reached(state) or Continue(None)
        # the model would stop: its answer is judged by the gates even in the last turn a
        # limit allows, so a limit never lets an ungated answer pass for a finished run
        failure = self._check_gates(state)
        if failure is not None and failure.interrupted:
            return Stop(f"the gate {failure.command!r} was stopped by the user (Ctrl-C)",
                        limit="interrupted")
        if failure is None:
            n = len(self.gates)
            return Stop(f"all {n} gates passed" if n else "finished (no gates)", ok=True)
        stop = self.limit_reached(state)
        if stop is not None:
            return Stop(f"{stop.reason}; gate {failure.command!r} still failing", limit=stop.limit)
        self.stalls = 0 if failure.rerun else self.stalls + 1
        if self.stalls >= self.max_stalls:
            return Stop(
                f"stalled: gate {failure.command!r} is failing and nothing changed "
                f"after {self.stalls} continuations",
                limit="stalled",
            )
        if self.max_continuations is not None and self.continuations >= self.max_continuations:
            return Stop(
                f"max_continuations ({self.max_continuations}) reached; "
                f"gate {failure.command!r} still failing",
                limit="max_continuations",
            )
        self.continuations += 1
        return Continue(gate_message(failure), work=True)

    def check_gates(self, cells: int | None) -> GateResult | None:
        """The first failing gate now (`cells`: the run's cell count), else None: what a
        goal's completion claim must pass (rlm.agent.policy.goal_evidence)."""
        return self._check_gates(RunState(cells=cells))

    def _check_gates(self, state: RunState) -> GateResult | None:
        """The first failing gate (rerun, or remembered when nothing changed), else None."""
        if self._gates is None:
            self._gates = GateCheck(self.gates, self.cwd, self.gate_timeout_s,
                                    self.gate_output_chars, self.skip, self.gate_place,
                                    self.gate_cancelled, self.gate_announce)
        failure = self._gates.check(state.cells)
        self.gate_runs, self.last_failure = self._gates.runs, self._gates.last_failure
        return failure


def attach_policy(agent: LoopHost, policy: AutonomousPolicy,
                  clock: Clock | None = None) -> None:
    """Ask `policy` whenever a run of `agent` (rlm.agent.Agent) would end normally, and
    hand the loop its run decision (rlm.protocols): a failing gate's message to go on
    (`Continue`); an answer that did not pass the gates ends on the limit (`End`, e.g.
    `limit:stalled`, never the model's `final`); a passing one is no objection (None).

    The reason is also `policy.last_decision.reason` (the CLI shows it). Attach goals
    first: a goal continuation wins over the policy.
    """
    now = clock.now if clock is not None else time.monotonic
    started = [now()]

    def at_start(_agent: LoopHost) -> None:
        """Its bounds are a run's (a chat's next message starts afresh)."""
        started[0], policy.continuations, policy.stalls = now(), 0, 0

    def hook(agent: LoopHost, reason: str) -> protocols.Continue | protocols.End | None:
        branch = agent.session.branch()
        cells = sum(1 for e in branch if getattr(e, "cell", None) is not None)
        state = RunState(
            turns=agent.turns, tokens=agent.tokens_used, elapsed_s=now() - started[0],
            finished=reason in ("final", "no_code"), cells=cells,
        )  # fmt: skip
        return run_decision(policy.decide(state), finished=state.finished)

    agent.chain.start.append(at_start)
    agent.chain.would_end.append(hook)


def run_decision(decision: Continue | Stop, *, finished: bool
                 ) -> protocols.Continue | protocols.End | None:
    """The policy's decision as the loop's: a gate's message goes on; an answer that did
    not pass the gates ends on the limit; anything else leaves the run to end as it would."""
    if isinstance(decision, Continue):
        return protocols.Continue(decision.message, work=decision.work) \
            if decision.message else None
    if decision.limit == "interrupted":
        return protocols.End("interrupted", decision.reason)
    if not decision.ok and finished:
        limit = LOOP_LIMIT.get(decision.limit or "", decision.limit)
        return protocols.End(f"limit:{limit}", decision.reason)
    return None
