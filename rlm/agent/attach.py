"""Plugging compaction and long-running behaviour into an Agent.

The loop exposes hooks (`handlers`, `turn_hooks`, `continuations`, `overflow_hook`); this
module connects them to the compaction controller, goals, the autonomous policy and the
scheduler, so the loop itself stays small and each concept stays in its own package.
"""

from __future__ import annotations

from typing import Any

from rlm.compaction.controller import CompactionController
from rlm.compaction.plan import CompactionSettings
from rlm.config import Config
from rlm.events import Compacted, Event
from rlm.session.entries import MessageEntry


def compaction_settings(config: Config) -> CompactionSettings:
    return CompactionSettings(
        enabled=config.compaction_enabled,
        reserve_tokens=config.reserve_tokens,
        keep_recent_tokens=config.keep_recent_tokens,
    )


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
        compaction_settings(agent.config),
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


def attach_all(agent: Any, options: Any = None) -> None:
    """Everything a CLI/worker/notebook session gets: compaction + long-running pieces."""
    attach_compaction(agent)
    attach_longrun(agent, options)


def compact_now(agent: Any, instructions: str | None = None) -> Any:
    """`/compact` in chat: summarise now, with the live kernel for <ipython_state>."""
    from rlm.compaction.core import perform_compaction

    return perform_compaction(agent.session, compaction_llm(agent), compaction_settings(agent.config),
                              trigger="manual", instructions=instructions, kernel=agent.executor)


def compact_session(session: Any, config: Config, instructions: str | None = None) -> Any:
    """`rlm compact SESSION` between runs. No kernel runs here, so no <ipython_state> is
    appended (saying nothing beats saying something false); the next resume restores the
    kernel and tells the model what came back."""
    from rlm.agent.session_run import default_model
    from rlm.compaction.core import perform_compaction
    from rlm.llm import get_llm

    spec = config.compaction_model or config.model or session.header.model or default_model()
    return perform_compaction(session, get_llm(spec, config), compaction_settings(config),
                              trigger="manual", instructions=instructions, kernel=None)
