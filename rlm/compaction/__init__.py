"""Compaction: pure planning (plan.py), one LLM call site (summarize.py), the core that
appends the entries (core.py), triggers and guards (controller.py), branch summaries."""

from rlm.compaction.branch import summarize_branch
from rlm.compaction.controller import CompactionController
from rlm.compaction.core import perform_compaction
from rlm.compaction.plan import (
    CompactionSettings,
    Preparation,
    Skip,
    context_tokens,
    plan_compaction,
    prepare_compaction,
    should_compact,
)

__all__ = [
    "CompactionController",
    "CompactionSettings",
    "Preparation",
    "Skip",
    "context_tokens",
    "perform_compaction",
    "plan_compaction",
    "prepare_compaction",
    "should_compact",
    "summarize_branch",
]
