"""What a run leaves in project memory when it ends: one `run` line in history.log, so
the next session (whose memory block shows history's last lines) knows what the last one
did. Pure: the host (rlm.app.memory) gathers the facts and writes the line.

    {"ts": ..., "action": "run", "target": "report.md, clean.csv",
     "note": "task: total sales by region | answered | answer: North, 1,204"}

Bounded by construction: the task, the answer or why not, and the files are each cut to
a few words (the note within files.NOTE_LIMIT), and history.log itself is cut to its
newest lines past files.HISTORY_MAX. Known secrets and key-shaped strings are redacted
when the line is written (files.ProjectMemory.log, rlm.secrets).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlm.memory.files import NOTE_LIMIT

ACTION = "run"
MAX_TASK = 100
MAX_FILES = 6
MAX_TARGET = 200


def _short(text: str, limit: int) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1].rstrip() + "…"


def run_record(task: str, outcome: dict[str, Any], final: str | None,
               files: Sequence[str]) -> tuple[str, str, str]:
    """(action, target, note) of the history line for a run that asked `task`, ended as
    `outcome` (rlm.outcome.RunOutcome.to_dict()) with answer `final`, and wrote `files`."""
    status = str(outcome.get("status") or outcome.get("reason") or "ended")
    head = f"task: {_short(task, MAX_TASK)} | {status}"
    if final is not None and outcome.get("answered", status in ("answered", "unverified")):
        tail = f"answer: {final}"
    else:
        tail = f"why: {outcome.get('why') or outcome.get('reason') or status}"
    note = _short(f"{head} | {tail}", NOTE_LIMIT)
    shown = list(files[:MAX_FILES])
    target = ", ".join(shown) + (f" (+{len(files) - len(shown)} more)"
                                 if len(files) > len(shown) else "")
    return ACTION, _short(target, MAX_TARGET), note
