"""What Ctrl-C does, said on screen when it is pressed: one rule for `rlm run`, `rlm chat`
and a worker's run. The first press interrupts the running cell (the model sees the
interruption and goes on); the second ends the run after that cell. Pure: the loop counts
the presses and yields the notice this returns."""

from __future__ import annotations

from rlm.events import Notice

KEPT = "the session is kept: `rlm resume` continues it"


def ctrl_c_notice(presses: int, *, in_cell: bool) -> Notice:
    """The line shown for the `presses`-th Ctrl-C of a run (in a cell, or while the model
    writes its reply)."""
    if presses >= 2:
        return Notice(f"Ctrl-C again: stopping the run ({KEPT})", "warning")
    first = ("Ctrl-C: interrupting the cell; the model sees the interruption and goes on"
             if in_cell else "Ctrl-C: no cell is running; the model's reply goes on")
    return Notice(f"{first}. Press Ctrl-C again to stop the run ({KEPT}).", "warning")
