"""What a run needs around the loop: the default model, a run's result, moving to another
branch. Building agents is the composition root's job (rlm.app)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from rlm.agent.loop import Agent
from rlm.config import Config
from rlm.events import CellFinished, Event, FinalAnswer, ModelReply, RunEnded
from rlm.protocols import SessionLog
from rlm.session.entries import Entry

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


TOKEN_KEYS = ("prompt", "completion", "total")


@dataclass
class RunResult:
    session_id: str | None  # None: the run failed before its session was kept
    session_path: str | None
    final: str | None
    turns: int
    reason: str
    cells: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # effective compaction settings (CompactionController.effective().to_dict()), when known
    compaction: dict[str, Any] | None = None
    model: str | None = None
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    duration_s: float | None = None
    images: list[str] = field(default_factory=list)  # absolute paths of saved images
    error: str | None = None  # why the run ended, for reason "error"
    verified: bool | None = None  # RunEnded.verified: None when the run gave no answer
    why: str | None = None  # why the answer is not verified
    evidence: dict[str, list[str]] | None = None  # RunEnded.evidence
    unverified_claims: list[str] | None = None  # RunEnded.unverified_claims

    @classmethod
    def from_events(cls, session: SessionLog, events: list[Event], *,
                    duration_s: float | None = None, model: str | None = None) -> RunResult:
        end = next((e for e in reversed(events) if isinstance(e, RunEnded)), None)
        final = end.final if end else None
        if final is None:
            final = next((e.answer for e in reversed(events) if isinstance(e, FinalAnswer)), None)
        prompt = sum(int(e.usage.get("input_tokens", 0)) for e in events if isinstance(e, ModelReply))
        completion = sum(int(e.usage.get("output_tokens", 0))
                         for e in events if isinstance(e, ModelReply))
        reason = end.reason if end else "unknown"
        return cls(
            session_id=session.id,
            session_path=str(session.path),
            final=final,
            turns=end.turns if end else 0,
            reason=reason,
            cells=[e.code for e in events if isinstance(e, CellFinished)],
            events=events,
            model=model or session.header.model or None,
            tokens={"prompt": prompt, "completion": completion, "total": prompt + completion},
            duration_s=None if duration_s is None else round(duration_s, 3),
            images=_images(session, events),
            error=(end.detail if end and reason == "error" else None),
            verified=end.verified if end else None,
            why=end.why if end else None,
            evidence=end.evidence if end else None,
            unverified_claims=end.unverified_claims if end else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "session_path": self.session_path,
            "final": self.final,
            "turns": self.turns,
            "reason": self.reason,
            "cells": len(self.cells),
            "verified": self.verified,
            **({"unverified_why": self.why} if self.why else {}),
            **({"evidence": self.evidence} if self.evidence is not None else {}),
            **({"unverified_claims": self.unverified_claims}
               if self.unverified_claims is not None else {}),
            **({"compaction": self.compaction} if self.compaction is not None else {}),
            "model": self.model,
            "tokens": self.tokens,
            "duration_s": self.duration_s,
            "images": self.images,
            **({"error": self.error} if self.reason == "error" else {}),
        }


def _images(session: SessionLog, events: list[Event]) -> list[str]:
    """Absolute paths of the images the run's cells saved under the session's artifacts."""
    if session.dir is None:
        return []
    out: list[str] = []
    for e in events:
        result = e.result if isinstance(e, CellFinished) else None
        for o in getattr(result, "outputs", None) or []:
            for mime, rel in (o.refs or {}).items():
                if mime.startswith("image/"):
                    out.append(str((session.dir / rel).resolve()))
    return out


# budget for summarising an abandoned branch when the model's window is unknown
DEFAULT_BRANCH_BUDGET = 16_000


def move_to_branch(agent: Agent, leaf: str) -> Entry | None:
    """Resume from an earlier entry: the work on the branch being left is summarised into
    a branch_summary entry at the new position, so the model knows what was tried there."""
    from rlm.compaction.branch import summarize_branch

    session = agent.session
    old_leaf = session.leaf_id
    session.get(leaf)  # a clear error for an unknown entry id, before anything moves
    from rlm.compaction.plan import effective_settings

    window = agent.context_window()
    threshold = effective_settings(agent.config, window, strict=False).threshold
    budget = threshold if threshold and threshold > 0 else DEFAULT_BRANCH_BUDGET
    entry = None
    if old_leaf is not None:
        entry = summarize_branch(session, old_leaf, leaf, agent.compaction_llm(), budget)
    if entry is None:
        session.set_leaf(leaf)
    return entry
