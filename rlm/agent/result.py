"""`RunResult`: what one run produced, read from its events (rlm run --json, run_task)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from rlm.agent.advisor import Advisor
from rlm.chain import Parts
from rlm.compaction.controller import CompactionController
from rlm.events import CellFinished, Event, FinalAnswer, ModelReply, RunEnded
from rlm.ledger import SPENT_ENTRY, Ledger, Totals, of_replies
from rlm.outcome import EXIT_NO_ANSWER, RunOutcome
from rlm.protocols import SessionLog
from rlm.session.entries import CustomEntry


def run_totals(events: list[Event]) -> Totals:
    """What the run spent, by role, as its end recorded it (`RunEnded.tokens`); the
    replies' usage, as turns, for a run that did not end or an older worker's events."""
    end = next((e for e in reversed(events) if isinstance(e, RunEnded)), None)
    recorded = Totals.from_dict(end.tokens) if end is not None else None
    if recorded is not None:
        return recorded
    return of_replies([e.usage for e in events if isinstance(e, ModelReply)])


class Described(Protocol):
    """What a run's result reads of its agent (rlm.agent.loop.Agent): the parts its
    features expose (compaction's controller, the advisor)."""

    parts: Parts


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
    # what the run spent (rlm.ledger.Totals.to_dict()): prompt, completion, total, by_role
    tokens: dict[str, Any] = field(default_factory=lambda: Totals().to_dict())
    duration_s: float | None = None
    images: list[str] = field(default_factory=list)  # absolute paths of saved images
    error: str | None = None  # why the run ended, for reason "error"
    verified: bool | None = None  # RunEnded.verified: None when the run gave no answer
    why: str | None = None  # why the answer is not verified
    evidence: dict[str, list[str]] | None = None  # RunEnded.evidence
    unverified_claims: list[str] | None = None  # RunEnded.unverified_claims
    stuck: dict[str, Any] | None = None  # RunEnded.stuck: reason "stuck"
    advisor: dict[str, Any] | None = None  # AdvisorStats.report(): --advisor runs only
    limit: str | None = None  # which limit ended a "limit:..." run, and what was left undone
    # the run's one outcome (rlm.outcome): what the terminal, `rlm sessions` and the exit
    # code say; None for a run that failed before it ended (reason "error")
    outcome: RunOutcome | None = None

    @property
    def status(self) -> str:
        return self.outcome.status if self.outcome is not None else "error"

    @property
    def exit_code(self) -> int:
        return self.outcome.exit_code if self.outcome is not None else EXIT_NO_ANSWER

    @classmethod
    def from_events(cls, session: SessionLog, events: list[Event], *,
                    duration_s: float | None = None, model: str | None = None) -> RunResult:
        end = next((e for e in reversed(events) if isinstance(e, RunEnded)), None)
        final = end.final if end else None
        if final is None:
            final = next((e.answer for e in reversed(events) if isinstance(e, FinalAnswer)), None)
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
            tokens=run_totals(events).to_dict(),
            duration_s=None if duration_s is None else round(duration_s, 3),
            images=_images(session, events),
            error=(end.detail if end and reason == "error" else None),
            verified=end.result.verified if end else None,
            why=end.why if end else None,
            evidence=end.evidence if end else None,
            unverified_claims=end.unverified_claims if end else None,
            stuck=end.stuck if end else None,
            limit=(end.detail if end and reason.startswith("limit:") else None),
            outcome=end.result if end else None,
        )

    def describe_agent(self, agent: Described) -> RunResult:
        """What the run's agent used: the effective compaction settings (window, threshold,
        reserve, keep-recent) and the advisor's report (calls, tokens, advice, health)."""
        if (ctl := agent.parts.get(CompactionController)) is not None:
            self.compaction = ctl.effective().to_dict()
        if (advisor := agent.parts.get(Advisor)) is not None:
            self.advisor = advisor.stats.report()
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "session_path": self.session_path,
            "final": self.final,
            "turns": self.turns,
            "reason": self.reason,
            "status": self.status,
            "exit_code": self.exit_code,
            **({"not_answered": self.outcome.why} if self.outcome is not None
               and not self.outcome.answered else {}),
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
            **({"limit": self.limit} if self.limit else {}),
            **({"stuck": self.stuck} if self.stuck is not None else {}),
            **({"advisor": self.advisor} if self.advisor is not None else {}),
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


def log_unrun_spending(ledger: Ledger, session: SessionLog) -> None:
    """What was spent outside any run since the log last recorded a total (a chat's
    /compact, `rlm compact`, the advisor or the checkpoint writer finishing after a run)
    as one hidden `spent` entry (never sent to the model): `rlm sessions` adds it to the
    runs' totals, so the session's total is every token (rlm.ledger)."""
    now = ledger.totals()
    gap = now.minus(ledger.logged_upto)
    if gap.total > 0:
        session.append(CustomEntry(custom_type=SPENT_ENTRY, data={"tokens": gap.to_dict()},
                                   display=False))
    ledger.logged(now)
