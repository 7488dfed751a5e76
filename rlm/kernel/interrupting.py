"""One cell's interrupt: sent once, and only once the kernel runs the cell.

ipykernel takes SIGINT as KeyboardInterrupt only while it runs a cell; one that lands
between the execute_request and the start of the cell is caught by ipykernel itself
("KeyboardInterrupt caught in kernel") and lost, and the cell then ran to its end. An
interrupt asked for in that window (the advisor's blocker comes the moment a reply is
logged, a Ctrl-C right after a cell started) is held and sent when the kernel says it
started the cell: its `execute_input` on IOPub.

A second SIGINT that lands after the first one ended the cell, while the kernel sends its
reply, is lost the same way and takes the reply with it, so the host waited out the cell's
whole timeout (seen through a gateway: two interrupts 75 ms apart, then a `timeout`). So it
is sent once per cell: a cell that ignores the first is ended by the timeout or a second
Ctrl-C (kill after the grace), not by more SIGINTs.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol


class Signalled(Protocol):
    def interrupt(self) -> None: ...

    def note(self, text: str) -> None: ...


class CellInterrupt:
    """The interrupt state of the cell `Kernel.execute` runs (thread-safe: the cell waits
    on a worker thread, interrupts come from the caller's thread or the advisor's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = False  # a user cell is in execute (sent, or about to be)
        self.sent = False  # its SIGINT went out (status "interrupted", not "error")
        self._started = False  # the kernel said it runs the cell (execute_input)
        self._held = False  # asked for before it started

    def begin(self) -> None:
        with self._lock:
            self.running, self.sent, self._started, self._held = True, False, False, False

    def end(self) -> None:
        with self._lock:
            self.running = False

    def request(self, rt: Signalled) -> None:
        """Interrupt the running cell (or the kernel, when no cell runs)."""
        with self._lock:
            if self.running:
                if self.sent or self._held:
                    rt.note("interrupt not sent: this cell was interrupted already")
                    return
                if not self._started:
                    self._held = True
                    rt.note("interrupt held until the kernel starts the cell")
                    return
                self.sent = True
        rt.interrupt()

    def seen(self, rt: Signalled, msg: dict[str, Any]) -> None:
        """An IOPub message of the cell: at its `execute_input`, send a held interrupt."""
        if msg.get("header", {}).get("msg_type") != "execute_input":
            return
        with self._lock:
            self._started = True
            send = self.running and self._held and not self.sent
            if send:
                self.sent = True
        if send:
            rt.interrupt()
