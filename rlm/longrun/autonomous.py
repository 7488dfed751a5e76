"""Autonomous mode: a bounded continuation policy for runs with nobody watching.

`AutonomousPolicy.decide(state)` is asked when the model would stop. It ends the run when a
limit is reached (continuations, turns, tokens, wall clock; None = unlimited) and otherwise
runs the quality gates (shell commands). All gates pass: the run may finish. A gate fails:
its bounded output (head + tail, ~4k chars) becomes the continuation message.

A failed gate is not rerun while nothing changed. "Changed" is a fingerprint of
(a) every file under the working directory — relative path, size, mtime_ns — skipping VCS,
virtualenv and cache folders (.git, .venv, __pycache__, node_modules, .rlm, *_cache), taken
*after* the gate ran so the gate's own writes do not count, and (b) the number of cells the
run has executed (`RunState.cells`, if the loop passes it). Changes outside the working
directory are not seen; a cell run counts as a change because a gate may read what it wrote.
Finishing twice in a row with a failing gate and nothing changed ends the run ("stalled").

One policy object per run: it remembers its continuations and gate results.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm.protocols import LoopHost

SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".rlm",
             ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"}  # fmt: skip
MAX_FINGERPRINT_FILES = 20_000


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


@dataclass
class Stop:
    reason: str
    limit: str | None = None  # max_turns | max_tokens | max_wall_s | max_continuations | stalled
    ok: bool = False  # True: finished with every gate passing


@dataclass
class GateResult:
    command: str
    passed: bool
    exit_code: int | None
    output: str
    duration_s: float
    timed_out: bool = False
    fingerprint: str = ""
    rerun: bool = True  # False: the previous failure was reused (nothing changed)


def head_tail(text: str, limit: int = 4000) -> str:
    """Keep the head and the tail of `text` within about `limit` characters."""
    if len(text) <= limit:
        return text
    half = max(1, (limit - 60) // 2)
    elided = len(text) - 2 * half
    return f"{text[:half]}\n[... {elided} characters elided ...]\n{text[-half:]}"


def run_gate(command: str, cwd: Path, timeout_s: float, limit: int = 4000) -> GateResult:
    """Run one gate in a shell; stdout and stderr merged, bounded time and output.

    The gate runs in its own process group, killed whole on timeout (so a grandchild that
    holds the pipe cannot hang us).
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        command, shell=True, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        raw, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        raw, _ = proc.communicate()
        out = head_tail(
            raw.decode(errors="replace") + f"\n[gate timed out after {timeout_s:g} s]", limit
        )
        return GateResult(command, False, None, out, time.monotonic() - started, timed_out=True)
    out = head_tail(raw.decode(errors="replace"), limit)
    return GateResult(
        command, proc.returncode == 0, proc.returncode, out, time.monotonic() - started
    )


def workspace_fingerprint(cwd: Path, cells: int | None = None) -> str:
    """A digest of file paths, sizes and mtimes under `cwd`, plus the cell count."""
    h = hashlib.sha256(f"cells={cells}\n".encode())
    n = 0
    for root, dirs, files in os.walk(cwd):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith("_cache"))
        for name in sorted(files):
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            h.update(f"{os.path.relpath(path, cwd)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            n += 1
            if n >= MAX_FINGERPRINT_FILES:
                return h.hexdigest() + "+"
    return h.hexdigest()


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
    # run state
    continuations: int = field(default=0, init=False)
    stalls: int = field(default=0, init=False)
    gate_runs: int = field(default=0, init=False)
    last_failure: GateResult | None = field(default=None, init=False)
    last_decision: Continue | Stop | None = field(default=None, init=False)

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
        stop = self.limit_reached(state)
        if stop is not None:
            return stop
        if not state.finished:
            return Continue(None)
        failure = self._check_gates(state)
        if failure is None:
            n = len(self.gates)
            return Stop(f"all {n} gates passed" if n else "finished (no gates)", ok=True)
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
        return Continue(gate_message(failure))

    def _check_gates(self, state: RunState) -> GateResult | None:
        """The first failing gate (rerun, or remembered when nothing changed), else None."""
        cwd = Path(self.cwd or Path.cwd())
        last = self.last_failure
        if last is not None and workspace_fingerprint(cwd, state.cells) == last.fingerprint:
            last.rerun = False
            return last
        for command in self.gates:
            result = run_gate(command, cwd, self.gate_timeout_s, self.gate_output_chars)
            self.gate_runs += 1
            if not result.passed:
                result.fingerprint = workspace_fingerprint(cwd, state.cells)
                self.last_failure = result
                return result
        self.last_failure = None
        return None


def gate_message(r: GateResult) -> str:
    status = "timed out" if r.timed_out else f"exit code {r.exit_code}"
    if r.rerun:
        head = f"The quality gate `{r.command}` failed ({status}, {r.duration_s:.1f} s)."
    else:
        head = (
            f"The quality gate `{r.command}` was not rerun: nothing changed since it failed "
            f"({status}). Change something that addresses it before finishing again."
        )
    return (
        "<quality_gate>\n"
        f"{head}\nOutput:\n{r.output.rstrip()}\n"
        "Fix the problem and finish again; the run cannot end until every gate passes.\n"
        "</quality_gate>"
    )


def attach_policy(agent: LoopHost, policy: AutonomousPolicy, clock: Any = None) -> None:
    """Ask `policy` whenever a run of `agent` (rlm.agent.Agent) would end normally.

    A Stop leaves the run to end; its reason is `policy.last_decision.reason` (the CLI shows
    it). Attach goals first: a goal continuation wins over the policy.
    """
    now = clock.now if clock is not None else time.monotonic
    started = now()

    def hook(agent: LoopHost, reason: str) -> str | None:
        branch = agent.session.branch()
        cells = sum(1 for e in branch if getattr(e, "cell", None) is not None)
        state = RunState(
            turns=agent.turns, tokens=agent.tokens_used, elapsed_s=now() - started,
            finished=reason in ("final", "no_code"), cells=cells,
        )  # fmt: skip
        decision = policy.decide(state)
        return decision.message if isinstance(decision, Continue) else None

    agent.continuations.append(hook)
