"""Building agents for sessions: new runs, resumed runs and rlm_query children."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any

from rlm.config import Config
from rlm.errors import ConfigError, RlmError
from rlm.events import CellFinished, Event, FinalAnswer, RunEnded
from rlm.paths import private_dir
from rlm.session.entries import new_id

# Provider keys and the model used when one is set but no model is configured.
_KEY_DEFAULTS = (
    ("OPENAI_API_KEY", "openai/gpt-4o-mini"),
    ("ANTHROPIC_API_KEY", "anthropic/claude-3-5-haiku-latest"),
    ("GEMINI_API_KEY", "gemini/gemini-2.0-flash"),
    ("OPENROUTER_API_KEY", "openrouter/openai/gpt-4o-mini"),
)


def default_model() -> str:
    """`local` unless a provider key is set; then that provider's small model."""
    for key, model in _KEY_DEFAULTS:
        if os.environ.get(key):
            return model
    return "local"


def resolve_model(config: Config) -> Config:
    return config if config.model else replace(config, model=default_model())


@dataclass
class RunResult:
    session_id: str
    session_path: str
    final: str | None
    turns: int
    reason: str
    cells: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # effective compaction settings (CompactionController.effective().to_dict()), when known
    compaction: dict[str, Any] | None = None

    @classmethod
    def from_events(cls, session: Any, events: list[Event]) -> RunResult:
        end = next((e for e in reversed(events) if isinstance(e, RunEnded)), None)
        final = end.final if end else None
        if final is None:
            final = next((e.answer for e in reversed(events) if isinstance(e, FinalAnswer)), None)
        return cls(
            session_id=session.id,
            session_path=str(session.path),
            final=final,
            turns=end.turns if end else 0,
            reason=end.reason if end else "unknown",
            cells=[e.code for e in events if isinstance(e, CellFinished)],
            events=events,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "session_path": self.session_path,
            "final": self.final,
            "turns": self.turns,
            "reason": self.reason,
            "cells": len(self.cells),
            **({"compaction": self.compaction} if self.compaction is not None else {}),
        }


def new_session_agent(task: str | None, config: Config, **agent_kw: Any) -> tuple[Any, Any]:
    from rlm.agent.loop import Agent
    from rlm.session.store import SessionStore

    config = resolve_model(config)
    session = SessionStore.create(config.home, model=config.model or "", task=task)
    return Agent(session, config, **agent_kw), session


def open_session_agent(session_id: str, config: Config, *, leaf: str | None = None,
                       **agent_kw: Any) -> tuple[Any, Any]:
    from rlm.agent.loop import Agent
    from rlm.session.store import SessionStore

    session = SessionStore.open(session_id, config.home)
    if not config.model:
        config = replace(config, model=session.header.model or default_model())
    agent = Agent(session, config, **agent_kw)
    if leaf and leaf != session.leaf_id:
        move_to_branch(agent, leaf)
    return agent, session


# budget for summarising an abandoned branch when the model's window is unknown
DEFAULT_BRANCH_BUDGET = 16_000


def move_to_branch(agent: Any, leaf: str) -> Any:
    """Resume from an earlier entry: the work on the branch being left is summarised into
    a branch_summary entry at the new position, so the model knows what was tried there."""
    from rlm.agent.attach import compaction_llm, context_window
    from rlm.compaction.branch import summarize_branch

    session = agent.session
    old_leaf = session.leaf_id
    session.get(leaf)  # a clear error for an unknown entry id, before anything moves
    from rlm.compaction.plan import effective_settings

    window = context_window(agent)
    threshold = effective_settings(agent.config, window, strict=False).threshold
    budget = threshold if threshold and threshold > 0 else DEFAULT_BRANCH_BUDGET
    entry = None
    if old_leaf is not None:
        entry = summarize_branch(session, old_leaf, leaf, compaction_llm(agent), budget)
    if entry is None:
        session.set_leaf(leaf)
    return entry


def run_child(parent: Any, task: str, context: Any) -> str | None:
    """Run an rlm_query child to completion: own kernel, own session under the parent's."""
    from rlm.agent.loop import Agent
    from rlm.session.store import SessionStore

    cfg = parent.config
    child_model = cfg.sub_model or cfg.model
    if not child_model:
        raise ConfigError("rlm_query needs a model: set --sub-model or --model")
    child_cfg = replace(cfg, model=child_model)
    child_dir = private_dir(parent.session.dir / "children" / new_id())
    session = SessionStore.create(cfg.home, model=child_model, task=task,
                                  parent_session=parent.session.id, session_dir=child_dir)
    child = Agent(session, child_cfg, llm_factory=parent._llm_factory,
                  depth=parent.depth + 1, budget=parent.budget)
    try:
        with child:
            if context is not None:
                _put_context(child, context)
            end = None
            for ev in child.run(task):
                if isinstance(ev, RunEnded):
                    end = ev
        if end is not None and end.final is None and end.reason.startswith("error"):
            raise RlmError(child_failure(session, end.detail))
        return end.final if end else None
    finally:
        parent.tokens_used += child.tokens_used


def child_failure(session: Any, detail: str | None) -> str:
    """Why an rlm_query child ended without an answer, as its log says (an overflow says
    "context overflow", not a generic failure)."""
    from rlm.session.entries import MessageEntry

    err = next((e.error for e in reversed(session.branch())
                if isinstance(e, MessageEntry) and e.error), None)
    return f"rlm_query child {session.id} ended without an answer: {err or detail or 'error'}"


def _put_context(agent: Any, context: Any) -> None:
    from rlm.agent.context_files import describe_variables
    from rlm.paths import write_private_atomic
    from rlm.session.entries import CustomEntry

    path = agent.session.dir / "context.json"
    write_private_atomic(path, json.dumps(context, default=str).encode())
    res = agent.executor.execute(
        f"import json as _j\nwith open({str(path)!r}) as _f:\n    context = _j.load(_f)\ndel _j, _f\n",
        timeout=120,
    )
    if not res.ok:
        raise RuntimeError(f"could not load the rlm_query context: {res.shaped[:500]}")
    agent.attach_context(CustomEntry(
        custom_type="context_vars", data={"names": ["context"]}, display=True,
        content=describe_variables(agent, ["context"], origin="passed by the parent agent")))
