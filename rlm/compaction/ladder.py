"""The ladder, cheapest first: prune, then shake, and a summary only if still over.

`relieve` carries out the pure decisions of rlm.compaction.tiers: each tier that frees
something is recorded as one `context_relief` custom entry (one append: the store writes a
line at a time and a torn last line is never loaded, so a record is projected whole or not
at all). A tier whose record would not make the projected context smaller is rejected and
a hidden `compaction_outcome` says so. The summary tier stays in rlm.compaction.core.

`LowYieldGuard` is the stop rule: consecutive automatic compactions that each free less
than `min_fraction` of the window stop automatic compaction, with one notice, instead of
looping while the input keeps re-filling (kendex #2687, OpenClaw #71691).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from rlm.compaction.plan import Projection, context_tokens
from rlm.compaction.tiers import Replacement, TierSettings, plan_prune, plan_shake, relief_entry
from rlm.protocols import SessionLog
from rlm.session.entries import CustomEntry

LOW_YIELD_FRACTION = 0.10  # freeing less means another compaction soon
LOW_YIELD_COUNT = 3


@dataclass
class Relief:
    """What the tiers did: the records appended, and the tokens before/after."""

    records: list[CustomEntry]
    tokens_before: int
    tokens_after: int

    @property
    def saved(self) -> int:
        return self.tokens_before - self.tokens_after


def apply_tier(session: SessionLog, tier: str, trigger: str, replacements: list[Replacement],
               projection: Projection | None) -> CustomEntry | None:
    """Append one tier's record if it shrinks the context; else log the rejection."""
    if not replacements:
        return None
    branch = session.branch()
    before = context_tokens(branch, projection)
    entry = relief_entry(tier, trigger, replacements, before, 0)
    after = context_tokens([*branch, entry], projection)
    if after >= before:
        reject(session, trigger, f"{tier} rejected: the context would not shrink "
                                 f"({before} -> {after} tokens)")
        return None
    entry.data["tokens_after"] = after
    session.append(entry)
    return entry


def relieve(session: SessionLog, settings: TierSettings, trigger: str, *, limit: int | None,
            projection: Projection | None = None, manual: bool = False,
            now: datetime | None = None) -> Relief:
    """Prune, then shake while the context is over `limit` (None: run both tiers)."""
    before = context_tokens(session.branch(), projection)
    records: list[CustomEntry] = []
    now = now or datetime.now(UTC)
    for tier in ("prune", "shake"):
        tokens = context_tokens(session.branch(), projection)
        if limit is not None and tokens <= limit:
            break
        branch = session.branch()
        if tier == "prune":
            plan = plan_prune(branch, settings, now=now, everywhere=manual)
            if limit is not None and tokens - sum(r.tokens_saved for r in plan) > limit:
                # the warm tail alone does not get under the limit: the next tier (a shake
                # or a summary) rewrites the cached prefix anyway, so prune all of it first
                # (the most precise tier: only what later cells made stale goes)
                plan = plan_prune(branch, settings, now=now, everywhere=True)
        else:
            plan = plan_shake(branch, settings, manual=manual)
        rec = apply_tier(session, tier, trigger, plan, projection)
        if rec is not None:
            records.append(rec)
    return Relief(records, before, context_tokens(session.branch(), projection))


def reject(session: SessionLog, trigger: str, reason: str) -> None:
    session.append(CustomEntry(
        custom_type="compaction_outcome",
        data={"trigger": trigger, "compacted": False, "reason": reason},
        display=True, content=None))


class LowYieldGuard:
    """Counts consecutive low-yield automatic compactions; stops them after `count`."""

    def __init__(self, min_fraction: float = LOW_YIELD_FRACTION, count: int = LOW_YIELD_COUNT):
        self.min_fraction = min_fraction
        self.count = count
        self.streak = 0
        self.stopped = False

    def reset(self) -> None:
        self.streak, self.stopped = 0, False

    def record(self, freed: int, window: int | None) -> str | None:
        """Note one compaction; the notice to log once when this one stops them."""
        if not window or freed >= self.min_fraction * window:
            self.streak = 0
            return None
        self.streak += 1
        if self.streak < self.count or self.stopped:
            return None
        self.stopped = True
        return (f"automatic compaction stopped: {self.streak} compactions in a row each freed "
                f"less than {self.min_fraction:.0%} of the {window}-token window (the context "
                "keeps re-filling). Print less per cell, keep results in variables, or "
                "/compact by hand; it resumes with the next run.")
