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
show them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlm.agent.loop import Agent
from rlm.agent.policy.memory_reminder import MemoryReminder
from rlm.errors import RlmError
from rlm.events import Event, Notice
from rlm.memory import (
    MemoryActivity,
    MemoryHead,
    ProjectMemory,
    WriteResult,
    stated_conventions,
    with_memory,
)
from rlm.session.entries import CustomEntry, MessageEntry

READ_ONLY = ("child",)
WRITE_METHODS = ("memory.update", "memory.log", "memory.snapshot")
CHILD_REFUSAL = ("project memory is read-only in an rlm_query child: return what should be "
                 "recorded in your answer, and the parent records it")


def project_root(config: Any) -> Path:
    """The directory whose `.agent/` the session uses: where its kernel works."""
    return Path(config.kernel_cwd or os.getcwd()).resolve()


def attach_memory(agent: Agent, entry: str) -> MemoryHead | None:
    if not getattr(agent.config, "memory", True):
        return None
    memory = ProjectMemory(project_root(agent.config))
    head = MemoryHead(memory, agent.context_window, agent.session.branch,
                      quiet_when_empty=not agent.llm.native_tools)
    agent.memory = head
    if agent.compaction is not None:  # compaction counts the tokens the model is sent
        inner = agent.compaction.projection
        if inner is not None:
            agent.compaction.projection = lambda branch: with_memory(inner(branch), head)
    agent.handlers["memory.show"] = lambda p: {"text": head.text(), "dir": str(memory.dir)}
    if entry in READ_ONLY:
        for method in WRITE_METHODS:
            agent.handlers[method] = _refused
        return head
    activity = MemoryActivity()
    writer = _Writer(agent, memory, activity)
    agent.handlers["memory.update"] = writer.update
    agent.handlers["memory.log"] = writer.log
    agent.handlers["memory.snapshot"] = writer.snapshot
    if agent.llm.native_tools:
        # not for a fenced-code model (the local family): told to record a line, the 1.5B
        # model answered `FINAL`-style with the memory call itself, again and again, and a
        # run whose report was already right ended stuck (bench.longrun, `staff`)
        agent.answers.rules.append(MemoryReminder(activity))
    agent.run_start_hooks.append(lambda a: activity.reset())
    agent.prompt_hooks.append(writer.capture)
    agent.turn_hooks.append(writer.after_turn)
    return head


def _refused(params: dict[str, Any]) -> Any:
    raise RlmError(CHILD_REFUSAL)


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

    def capture(self, agent: Agent) -> list[Event]:
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

    def after_turn(self, agent: Agent) -> list[Event]:
        """A continuation queued after this turn (a goal step, autonomous work) ends a
        unit of work."""
        for e in reversed(agent.session.branch()):
            if isinstance(e, MessageEntry) and e.role == "assistant":
                break
            if isinstance(e, MessageEntry) and e.origin == "continuation":
                self.activity.complete(agent.state.turns, "a step of the goal was finished")
                break
        return []
