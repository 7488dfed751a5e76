"""What Ctrl-C does, said on screen when it is pressed: one rule for `rlm run`, `rlm chat`
and a worker's run. Presses are counted per piece of work (a cell, a model call, a step
between turns such as a gate or a compaction), not per run: the first press on a cell
interrupts it (the model sees the interruption and goes on), the second on the same piece
ends the run after it. A press on a step between turns stops that step and the run at
once (nothing is waiting for the model there). Two presses within DOUBLE_PRESS_S count as
a double press wherever they land (the first one's cell may end before the second comes).
The counting is `PressCount`; the loop carries it out and yields the notice this returns."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlm.events import Notice

KEPT = "the session is kept: `rlm resume` continues it"
DOUBLE_PRESS_S = 2.0


@dataclass
class PressCount:
    """Ctrl-C presses of one run, counted per piece of work: `begin` marks a new piece,
    `press` returns how many presses count now (1, or 2+ to end the run)."""

    piece: int = 0
    count: int = 0
    _pressed_piece: int = -1
    _pressed_at: float = -math.inf

    def begin(self) -> None:
        self.piece += 1

    def press(self, now: float) -> int:
        if self._pressed_piece != self.piece and now - self._pressed_at > DOUBLE_PRESS_S:
            self.count = 0  # an earlier piece's press: this one starts again
        self.count += 1
        self._pressed_piece, self._pressed_at = self.piece, now
        return self.count


def ctrl_c_notice(presses: int, *, in_cell: bool, step: str | None = None) -> Notice:
    """The line shown for a Ctrl-C that counts `presses` on the piece of work running (a
    cell, the model's reply, or `step`: a step between turns, stopped with the run)."""
    if step is not None:
        return Notice(f"Ctrl-C: stopped {step} and the run ({KEPT})", "warning")
    if presses >= 2:
        return Notice(f"Ctrl-C again: stopping the run ({KEPT})", "warning")
    first = ("Ctrl-C: interrupting the cell; the model sees the interruption and goes on"
             if in_cell else "Ctrl-C: no cell is running; the model's reply goes on")
    return Notice(f"{first}. Press Ctrl-C again to stop the run ({KEPT}).", "warning")
