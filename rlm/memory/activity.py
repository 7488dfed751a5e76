"""What the host saw of memory in one run: completed units of work and memory writes,
by turn. Filled by the memory handlers and hooks (rlm.app.memory), read by the reminder
rule (rlm.agent.policy.memory_reminder)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MemoryActivity:
    """This run's completed units (turn, what) and memory writes (turns); reset per run."""

    completed: list[tuple[int, str]] = field(default_factory=list)
    writes: list[int] = field(default_factory=list)
    reminded: list[int] = field(default_factory=list)  # turns of completions reminded about

    def reset(self) -> None:
        self.completed, self.writes, self.reminded = [], [], []

    def complete(self, turn: int, what: str) -> None:
        self.completed.append((turn, what))

    def wrote(self, turn: int) -> None:
        self.writes.append(turn)
