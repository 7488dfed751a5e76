"""Project memory in `.agent/`: short files the agent writes through the kernel's `memory`
helper and reads back at the head of every context (rlm.memory.files, .inject, .head,
.capture, .activity, .runs: the line each run's end adds; the host wiring is
rlm.app.memory, the reminder rule rlm.agent.policy.memory_reminder)."""

from __future__ import annotations

from rlm.memory.activity import MemoryActivity
from rlm.memory.capture import is_standing_rule, stated_conventions
from rlm.memory.files import DIRNAME, MemoryRefused, ProjectMemory, WriteResult
from rlm.memory.head import MEMORY_MARK, MemoryHead
from rlm.memory.inject import MemoryBlock, MemoryTexts, budget_tokens, memory_block

__all__ = ["DIRNAME", "MEMORY_MARK", "MemoryActivity", "MemoryBlock", "MemoryHead",
           "MemoryRefused", "MemoryTexts", "ProjectMemory", "WriteResult", "budget_tokens",
           "is_standing_rule", "memory_block", "stated_conventions"]
