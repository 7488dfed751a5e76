"""Plugging compaction and long-running behaviour into an Agent.

The loop exposes hooks (`handlers`, `turn_hooks`, `continuations`, `overflow_hook`); this
module connects them to the compaction controller, goals, the autonomous policy and the
scheduler, so the loop itself stays small and each concept stays in its own package.
"""

from __future__ import annotations

from typing import Any

from rlm.compaction.controller import CompactionController
from rlm.compaction.plan import CompactionSettings
from rlm.events import Compacted, Event
from rlm.session.entries import MessageEntry


def context_window(agent: Any) -> int | None:
    if agent.config.context_window:
        return int(agent.config.context_window)
    fn = getattr(agent.llm, "context_window", None)
    return fn() if fn else None


def compaction_llm(agent: Any) -> Any:
    spec = agent.config.compaction_model
    return agent._llm_factory(spec) if spec else agent.llm


def attach_compaction(agent: Any) -> CompactionController:
    """Three triggers, one core: compact.run/status handlers, after-turn and overflow."""
    ctl = CompactionController(
        agent.session,
        lambda: compaction_llm(agent),
        CompactionSettings.from_config(agent.config),
        lambda: context_window(agent),
        current_model_fn=lambda: getattr(agent.llm, "spec", None),
        turn_active_fn=lambda: agent.turn_active,
    )
    agent.compaction = ctl
    agent.handlers["compact.run"] = lambda p: ctl.request(p.get("instructions"))
    agent.handlers["compact.status"] = lambda p: ctl.status()

    def after_turn(a: Any) -> list[Event]:
        last = next((e for e in reversed(a.session.branch())
                     if isinstance(e, MessageEntry) and e.role == "assistant"), None)
        if last is not None and last.error is None:
            ctl.note_assistant_ok()
        entry = ctl.after_turn(a.executor)
        if entry is None:
            return []
        return [Compacted(entry.trigger, entry.tokens_before, entry.summary)]

    def on_overflow(a: Any, entry: MessageEntry) -> str:
        decision = ctl.on_overflow(entry.id, entry.model, a.executor)
        return decision if decision == "retry" else (ctl.overflow_message or "report")

    agent.turn_hooks.append(after_turn)
    agent.overflow_hook = on_overflow
    return ctl


def attach_longrun(agent: Any, options: Any = None) -> Any:
    """Goals, heartbeat/cron handlers and (with --autonomous) the continuation policy.

    Returns the AutonomousPolicy when one is attached (its `last_decision` says why an
    autonomous run stopped), else None.
    """
    from pathlib import Path

    from rlm.longrun import AutonomousPolicy, GoalManager, Scheduler, install

    cfg = agent.config
    policy = None
    if options is not None and getattr(options, "autonomous", False):
        cont = getattr(options, "max_continuations", None)
        policy = AutonomousPolicy(
            max_continuations=None if cont in (None, -1) else cont,
            max_turns=cfg.max_turns, max_tokens=cfg.max_tokens, max_wall_s=cfg.max_wall_s,
            gates=list(getattr(options, "gate", None) or []), cwd=Path.cwd(),
        )
    scheduler = None
    if agent.session.dir is not None:
        scheduler = Scheduler(agent.session.dir / "scheduled-jobs.json")
    install(agent, goals=GoalManager(agent.session), scheduler=scheduler, policy=policy)
    agent.policy = policy
    return policy


def attach_all(agent: Any, options: Any = None) -> None:
    """Everything a CLI/worker/notebook session gets: compaction + long-running pieces."""
    attach_compaction(agent)
    attach_longrun(agent, options)

