"""The memory reminder: after a turn that completed work with no memory write for
`after` turns, one short note. Models record rarely on their own; prompt and helper
docstring fix most of it, a post-check catches the rest (context-governance.md).

`MemoryActivity` (rlm.memory.activity) is what the host saw (completed units, writes), per
run; `reminder_due` is the pure decision; `MemoryReminder` plugs it into the answer
policy's Rule seam (rlm.agent.policy.rules), like any other rule.
"""

from __future__ import annotations

from rlm.agent.policy.decisions import Cell, Facts, Note
from rlm.agent.policy.rules import Rule
from rlm.memory.activity import MemoryActivity

REMIND_AFTER = 2  # turns without a memory write after a completed unit
REMINDER = ("[Memory: {what} in turn {turn} and nothing was recorded in .agent/ since. If "
            "where the work stands, a decision or a convention changed, record it in one "
            "short factual line (memory.update('state', ..., mode='merge'), memory.update("
            "'conventions', ...) or memory.log(...)); if nothing changed, go on.]")


def reminder_due(activity: MemoryActivity, turn: int, after: int = REMIND_AFTER
                 ) -> tuple[int, str] | None:
    """The completed unit to remind about before `turn`, or None: the newest unit done at
    least `after` turns ago, with no write since it was done (its own turn included),
    not reminded yet."""
    for done_turn, what in reversed(activity.completed):
        if turn - done_turn < after:
            continue
        if done_turn in activity.reminded:
            return None
        if any(w >= done_turn for w in activity.writes):
            return None
        return done_turn, what
    return None


class MemoryReminder(Rule):
    """Reads `activity` (filled by the memory handlers and the host's turn hook) and notes
    a successful cell after a failed one as a completed unit."""

    def __init__(self, activity: MemoryActivity, after: int = REMIND_AFTER):
        self.activity, self.after = activity, after

    def on_cell(self, facts: Facts, cell: Cell) -> str | None:
        if cell.ok and facts.last_failed_code is not None:
            self.activity.complete(facts.turn, "a cell succeeded after a failed one")
        return None

    def on_turn(self, facts: Facts, turn: int) -> Note | None:
        due = reminder_due(self.activity, turn, self.after)
        if due is None:
            return None
        self.activity.reminded.append(due[0])
        return Note(REMINDER.format(what=due[1], turn=due[0]),
                    f"memory: reminded the model to record {due[1]} (turn {due[0]})")
