"""Gates: deterministic checks (shell commands that must exit 0) before anything is judged
done. `--gate CMD` (repeatable) guards both an autonomous run's final answer
(rlm.longrun.autonomous) and a goal's completion (`goal.complete()`, below): a goal is
marked complete only after every gate passed.

`GateCheck.check(cells)` runs the gates in order and returns the first failure, or None.
A failed gate is not rerun while neither the workspace (files under the working directory:
rlm.longrun.autonomous.workspace_fingerprint) nor the kernel (the number of cells run)
changed since it failed: the remembered failure is returned, marked `rerun=False`. Each
gate has its own timeout (`timeout_s`, default 600 s; its process group is killed), its
output is bounded (head + tail), and `max_failures` bounds how often a goal's completion
may be refused by gates before the goal is blocked and the user told.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlm.longrun.gate_why import grep_misses

SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".rlm",
             ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"}  # fmt: skip
MAX_FINGERPRINT_FILES = 20_000
GATE_TIMEOUT_S = 600.0
MAX_GATE_FAILURES = 3  # refused completions of one goal before it is blocked
POLL_S = 0.1  # how soon a running gate sees Ctrl-C


@dataclass(frozen=True)
class GatePlace:
    """Where a gate runs: the command line it is wrapped in (the kernel's sandbox launcher,
    rlm.kernel.runtime.gate_place; empty without the sandbox) and its whole environment
    (the kernel's: no provider key). None means here, as the host (tests only)."""

    prefix: tuple[str, ...]
    env: dict[str, str]


@dataclass
class GateResult:
    command: str
    passed: bool
    exit_code: int | None
    output: str
    duration_s: float
    timed_out: bool = False
    interrupted: bool = False  # the user stopped it (Ctrl-C): neither passed nor failed
    fingerprint: str = ""
    rerun: bool = True  # False: the previous failure was reused (nothing changed)


def head_tail(text: str, limit: int = 4000) -> str:
    """Keep the head and the tail of `text` within about `limit` characters."""
    if len(text) <= limit:
        return text
    half = max(1, (limit - 60) // 2)
    elided = len(text) - 2 * half
    return f"{text[:half]}\n[... {elided} characters elided ...]\n{text[-half:]}"


def run_gate(command: str, cwd: Path, timeout_s: float, limit: int = 4000,
             place: GatePlace | None = None,
             cancelled: Callable[[], bool] | None = None) -> GateResult:
    """Run one gate in a shell; stdout and stderr merged, bounded time and output.

    The gate runs where cells run (`place`): a cell wrote the files it reads (a
    `conftest.py`, a `Makefile`), so it gets the kernel's sandbox and environment, never
    the host's keys or config. It runs in its own process group, killed whole on timeout
    (so a grandchild that holds the pipe cannot hang us) and within POLL_S of
    `cancelled()` turning true (Ctrl-C: the result is `interrupted`).
    """
    started = time.monotonic()
    argv = [*(place.prefix if place else ()), "/bin/sh", "-c", command]
    proc = subprocess.Popen(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
        env=place.env if place is not None else None,
    )  # fmt: skip
    stop = None  # why it was killed: "timed out" | "stopped"
    while True:
        left = timeout_s - (time.monotonic() - started)
        try:  # communicate again after a timeout loses no output (subprocess docs)
            raw, _ = proc.communicate(timeout=max(0.0, min(POLL_S, left)))
            break
        except subprocess.TimeoutExpired:
            if cancelled is not None and cancelled():
                stop = "stopped"
            elif left <= 0:
                stop = "timed out"
            else:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        raw, _ = proc.communicate()
        break
    if stop is not None:
        why = (f"gate timed out after {timeout_s:g} s" if stop == "timed out"
               else "gate stopped by the user (Ctrl-C)")
        out = head_tail(raw.decode(errors="replace") + f"\n[{why}]", limit)
        return GateResult(command, False, None, out, time.monotonic() - started,
                          timed_out=stop == "timed out", interrupted=stop == "stopped")
    out = head_tail(raw.decode(errors="replace"), limit)
    if proc.returncode != 0 and (why := grep_misses(command, cwd)):
        out = head_tail(f"{out.rstrip()}\n{why}".lstrip("\n"), limit)
    return GateResult(
        command, proc.returncode == 0, proc.returncode, out, time.monotonic() - started
    )


def workspace_fingerprint(cwd: Path, cells: int | None = None,
                          skip: tuple[Path, ...] = ()) -> str:
    """A digest of file paths, sizes and mtimes under `cwd`, plus the cell count. `skip`:
    directories left out wherever they are (rlm's own home: its session log grows every
    turn, so a run from a folder that holds it would never look unchanged)."""
    h = hashlib.sha256(f"cells={cells}\n".encode())
    n = 0
    left_out = {os.path.realpath(p) for p in skip}
    for root, dirs, files in os.walk(cwd):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith("_cache")
                         and os.path.realpath(os.path.join(root, d)) not in left_out)
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


def gate_message(r: GateResult) -> str:
    status = "timed out" if r.timed_out else "stopped by the user (Ctrl-C)" \
        if r.interrupted else f"exit code {r.exit_code}"
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


@dataclass
class GateCheck:
    commands: list[str]
    cwd: Path | None = None  # default: the process's working directory
    timeout_s: float = GATE_TIMEOUT_S
    output_chars: int = 4000
    skip: tuple[Path, ...] = ()  # left out of the change fingerprint (rlm's home)
    place: GatePlace | None = None  # where the gates run (run_gate)
    # Ctrl-C (the run's current step is cancelled) and the phase line ("gate `make`"): set
    # by the composition root; a gate stopped by the user is not remembered as a failure
    cancelled: Callable[[], bool] | None = None
    announce: Callable[[str], None] | None = None
    runs: int = field(default=0, init=False)
    last_failure: GateResult | None = field(default=None, init=False)

    def check(self, cells: int | None) -> GateResult | None:
        """The first failing gate (rerun, or remembered when nothing changed), else None."""
        cwd = Path(self.cwd or Path.cwd())
        last = self.last_failure
        if last is not None and workspace_fingerprint(cwd, cells, self.skip) == last.fingerprint:
            last.rerun = False
            return last
        for command in self.commands:
            if self.announce is not None:
                self.announce(f"running the gate `{command}`")
            result = run_gate(command, cwd, self.timeout_s, self.output_chars, self.place,
                              self.cancelled)
            self.runs += 1
            if result.interrupted:
                return result
            if not result.passed:
                result.fingerprint = workspace_fingerprint(cwd, cells, self.skip)
                self.last_failure = result
                return result
        self.last_failure = None
        return None


class GoalGate:
    """What `goal.complete()` asks first: None (every gate passed: complete it) or the
    message the model reads instead. After `max_failures` refusals `blocked` says why the
    goal is blocked (the goal manager blocks it)."""

    def __init__(self, check: GateCheck, cells: Callable[[], int],
                 max_failures: int = MAX_GATE_FAILURES):
        self.gates, self.cells, self.max_failures = check, cells, max_failures
        self.failures = 0

    def refusal(self) -> str | None:
        # the kernel changed when a cell ran other than the ones whose completion a gate
        # refused (each refusal happens inside a cell that lands in the log afterwards)
        failure = self.gates.check(self.cells() - self.failures)
        if failure is None:
            return None
        if failure.interrupted:  # not the goal's failure: no count toward blocking it
            return (f"the goal is not complete: its gate `{failure.command}` was stopped by "
                    "the user (Ctrl-C) before it finished")
        self.failures += 1
        return ("the goal is not complete: " + gate_message(failure).replace(
            "the run cannot end", "the goal cannot be completed"))

    @property
    def exhausted(self) -> bool:
        return self.failures >= self.max_failures

    def blocked_reason(self) -> str:
        last = self.gates.last_failure
        name = last.command if last is not None else "a gate"
        return (f"the gate {name!r} still fails after {self.failures} attempts to complete the "
                "goal; fix it, or rerun without that --gate")
