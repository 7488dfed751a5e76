"""Project memory wired into an agent (rlm.memory): the head of every model call, the
kernel's `memory.*` bridge methods, user-stated conventions captured from prompts, and
the reminder rule. One place, for every entry point:

- run, chat, resume, worker: the `.agent/` of the kernel's working directory (the
  project's: `kernel_cwd`, else the host's cwd);
- notebook (`%%rlm`): the notebook kernel's working directory, the notebook's folder;
- child (rlm_query): the parent's directory, read-only (its writes are refused with the
  reason: the parent owns where the work stands);
- `--no-memory` (config `memory = false`): none of it.

Every write is recorded in the session log as a `memory_write` entry (display only: the
model sees the files themselves, at the head of the context), so `rlm log` and export
show them. When a run ends (not a child's), one `run` line goes into history.log: the
task, how it ended, the answer or why not, the files its cells wrote (rlm.memory.runs);
only where `.agent/` exists, so a plain run never creates it in a directory. When the
memory block had to be cut to its share of the window, the user is told once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel_ext.contract import methods_of
from rlm.agent.loop import Agent
from rlm.agent.policy.memory_reminder import MemoryReminder
from rlm.agent.steer.match import written_files
from rlm.app.seam import Plain, Wiring
from rlm.chain import LoopHost
from rlm.config import Config
from rlm.errors import RlmError
from rlm.events import Event, Notice, RunEnded
from rlm.memory import (
    MemoryActivity,
    MemoryHead,
    ProjectMemory,
    WriteResult,
    stated_conventions,
)
from rlm.memory.inject import BUDGET_FRACTION
from rlm.memory.runs import run_record
from rlm.session.entries import CustomEntry, MessageEntry, call_code

READ_ONLY = ("child",)
WRITE_METHODS = tuple(m.name for m in methods_of("memory") if m.writes)
CHILD_REFUSAL = ("project memory is read-only in an rlm_query child: return what should be "
                 "recorded in your answer, and the parent records it")
OFF_REFUSAL = "project memory is off for this session (--no-memory)"


def project_root(config: Config) -> Path:
    """The directory whose `.agent/` the session uses: where its kernel works."""
    return Path(config.kernel_cwd or os.getcwd()).resolve()


def attach_memory(agent: Agent, wiring: Wiring) -> None:
    """The memory head, the `memory.*` handlers, capture, the reminder and the run line."""
    entry = wiring.entry
    if not getattr(agent.config, "memory", True):
        for m in methods_of("memory"):
            wiring.handle(m.name, _refusing(OFF_REFUSAL))
        return
    memory = ProjectMemory(project_root(agent.config))
    head = MemoryHead(memory, agent.context_window, agent.session.branch,
                      quiet_when_empty=not agent.llm.native_tools,
                      guide=agent.llm.native_tools)
    wiring.chain.context.append(head.message)  # after the system prompt (rlm.agent.assembly)
    wiring.handle("memory.show", lambda p: {"text": head.text(), "dir": str(memory.dir)})
    if entry in READ_ONLY:  # the parent tells its user of a cut, and records its runs
        for method in WRITE_METHODS:
            wiring.handle(method, _refusing(CHILD_REFUSAL))
        return
    activity = MemoryActivity()
    writer = _Writer(agent, memory, activity)
    wiring.handle("memory.update", writer.update)
    wiring.handle("memory.log", writer.log)
    wiring.handle("memory.snapshot", writer.snapshot)
    if agent.llm.native_tools:
        # not for a fenced-code model (the local family): told to record a line, the 1.5B
        # model answered `FINAL`-style with the memory call itself, again and again, and a
        # run whose report was already right ended stuck (bench.longrun, `staff`)
        agent.answers.rules.append(MemoryReminder(activity))
    wiring.chain.start.append(lambda a: activity.reset())
    wiring.chain.prompt.append(writer.capture)
    wiring.chain.turn.append(writer.after_turn)
    wiring.chain.ended.append(writer.run_ended)
    teller = _CutTeller(head)
    wiring.chain.prompt.append(teller)
    wiring.chain.turn.append(teller)


# after compaction: the convention a prompt states is captured (and its memory_write
# logged) after compaction's check of that prompt, as before the seam (declared, so the
# root refuses a list that would swap them: rlm.app.seam.check_order)
MEMORY = Plain("memory", attach_memory, answers=("memory",), after=("compaction",))


class _CutTeller:
    """Tells the user, once per cut, that the memory block was cut to its share of the
    window (the model is told in the block itself)."""

    def __init__(self, head: MemoryHead):
        self.head = head
        self.told: tuple[str, ...] = ()

    def __call__(self, agent: LoopHost) -> list[Event]:
        cuts = self.head.block().cuts
        if not cuts or cuts == self.told:
            return []
        self.told = cuts
        return [Notice(f"memory: .agent/ is over its share of the model's window "
                       f"({BUDGET_FRACTION:.0%}, {self.head.budget():,} tokens): "
                       + "; ".join(cuts) + ". The model sees the newest part and is told "
                       "where the rest is; condense the file (`rlm memory show`)", "warning")]


def _refusing(message: str) -> Any:
    def refused(params: dict[str, Any]) -> Any:
        raise RlmError(message)

    return refused


class _Writer:
    """The write side for one agent: each write is done, logged, counted for the reminder."""

    def __init__(self, agent: Agent, memory: ProjectMemory, activity: MemoryActivity):
        self.agent, self.memory, self.activity = agent, memory, activity

    def _record(self, method: str, result: WriteResult, **extra: Any) -> dict[str, Any]:
        data = {"method": method, **result.to_dict(), **extra}
        self.agent.session.append(CustomEntry(custom_type="memory_write", data=data,
                                              display=True, content=None))
        self.activity.wrote(self.agent.state.turns)
        reply = {"ok": True, **result.to_dict()}
        if result.changed_user_conventions:
            warning = ("this write changed convention(s) the user stated; the change is "
                       "logged in .agent/history.log and shown to the user: "
                       + " | ".join(result.changed_user_conventions))
            reply["warning"] = warning
            self.agent.notices.append(Notice("memory: " + warning, "warning"))
        return reply

    def update(self, p: dict[str, Any]) -> dict[str, Any]:
        name, mode = str(p.get("file") or ""), str(p.get("mode") or "replace")
        result = self.memory.update(name, p.get("content"), mode)
        return self._record("memory.update", result, mode=mode)

    def log(self, p: dict[str, Any]) -> dict[str, Any]:
        result = self.memory.log(str(p.get("action") or ""), str(p.get("target") or ""),
                                 str(p.get("note") or ""))
        return self._record("memory.log", result, action=str(p.get("action") or ""))

    def snapshot(self, p: dict[str, Any]) -> dict[str, Any]:
        return self._record("memory.snapshot", self.memory.snapshot(str(p.get("label") or "")))

    def capture(self, agent: LoopHost) -> list[Event]:
        """The run's prompt, when the user wrote it: each rule it states goes into
        conventions.md with `stated_by: user`."""
        branch = agent.session.branch()
        last = branch[-1] if branch else None
        if not (isinstance(last, MessageEntry) and last.role == "user" and last.origin is None
                and isinstance(last.message.get("content"), str)):
            return []
        rules = stated_conventions(last.message["content"])
        if not rules:
            return []
        try:
            result = self.memory.update("conventions", "\n".join(f"- {r}" for r in rules),
                                        "merge", stated_by="user")
        except (RlmError, OSError) as e:
            return [Notice(f"memory: could not record the convention you stated ({e})",
                           "warning")]
        self._record("capture", result, stated_by="user", rules=rules)
        return [Notice("memory: recorded in .agent/conventions.md (stated_by: user): "
                       + "; ".join(rules))]

    def run_ended(self, agent: LoopHost, ended: RunEnded) -> None:
        """One `run` line in history.log, where `.agent/` exists (a write that fails is
        left out: the run's own outcome is already logged and shown)."""
        if not self.memory.exists():
            return
        task, codes = _this_run(agent.session.branch())
        files = sorted({f for code in codes for f in written_files(code)
                        if _is_file(self.memory.root, f)})
        action, target, note = run_record(task, ended.outcome or {}, ended.final, files)
        try:
            self.memory.log(action, target, note)
        except (RlmError, OSError):
            return

    def after_turn(self, agent: LoopHost) -> list[Event]:
        """A continuation queued after this turn (a goal step, autonomous work) ends a
        unit of work."""
        for e in reversed(agent.session.branch()):
            if isinstance(e, MessageEntry) and e.role == "assistant":
                break
            if isinstance(e, MessageEntry) and e.origin == "continuation":
                self.activity.complete(self.agent.state.turns, "a step of the goal was finished")
                break
        return []


def _this_run(branch: Sequence[Any]) -> tuple[str, list[str]]:
    """The run's task (the user's last prompt) and the code of the cells run since it."""
    codes: list[str] = []
    for e in reversed(branch):
        if not isinstance(e, MessageEntry):
            continue
        if e.role == "user" and e.origin is None and isinstance(e.message.get("content"), str):
            return e.message["content"], codes
        if e.role == "assistant":
            codes.extend(c for call in e.message.get("tool_calls") or []
                         if (c := call_code(call)) is not None)
    return "", codes


def _is_file(root: Path, name: str) -> bool:
    """A file the cells wrote, below the project's directory."""
    try:
        path = (root / name).resolve()
        return path.is_relative_to(root) and path.is_file()
    except (OSError, ValueError):
        return False
