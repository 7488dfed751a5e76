"""One cell's interrupt: sent once the kernel runs the cell, and again if it did not land.

ipykernel takes SIGINT as KeyboardInterrupt only while it runs a cell; one that lands
between the execute_request and the start of the cell is caught by ipykernel itself
("KeyboardInterrupt caught in kernel") and lost, and the cell then ran to its end. An
interrupt asked for in that window (the advisor's blocker comes the moment a reply is
logged, a Ctrl-C right after a cell started) is held and sent when the kernel says it
started the cell: its `execute_input` on IOPub.

execute_input is published before the user's code runs, though: under load a SIGINT sent
at it still landed in ipykernel's own code and was swallowed (the kernel log says
"KeyboardInterrupt caught in kernel") and the cell ran on. So when, RETRY_S[k] after a
sent interrupt, the cell still runs and has shown no error (the KeyboardInterrupt's
traceback comes within milliseconds when it lands), it is sent again: after 1 s, then 2 s,
then 4 s (a loaded machine swallowed the second too: the full suite on 2 cores).

Never sooner, never more: a SIGINT that lands after the first ended the cell, while the
kernel sends its reply, is lost the same way and takes the reply with it, so the host
waited out the cell's whole timeout (seen through a gateway: two interrupts 75 ms apart,
then a `timeout`); the growing waits leave the first's error time to be seen. A cell that
ignores them all is ended by the timeout or a second Ctrl-C (kill after the grace). A
request ipykernel dropped that way (idle on IOPub, no execute_reply) ends the cell as
interrupted after rlm.kernel.execution.NO_REPLY_GRACE_S, with a note, not at its timeout.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

# a sent interrupt with no error and the cell still running: sent again after each of these
RETRY_S = (1.0, 2.0, 4.0)


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
        self._errored = False  # the cell showed an error (an interrupt that landed does)
        self._retries = 0  # interrupts sent again for this cell
        self._timer: threading.Timer | None = None

    def begin(self) -> None:
        with self._lock:
            self.running, self.sent, self._started, self._held = True, False, False, False
            self._errored, self._retries = False, 0
            self._cancel_timer()

    def end(self) -> None:
        with self._lock:
            self.running = False
            self._cancel_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _send(self, rt: Signalled) -> None:
        """Send now, and check later that it landed (call without the lock)."""
        rt.interrupt()
        self._check_later(rt)

    def _check_later(self, rt: Signalled) -> None:
        with self._lock:
            if not self.running or self._retries >= len(RETRY_S):
                return
            self._cancel_timer()
            self._timer = timer = threading.Timer(RETRY_S[self._retries], self._retry, (rt,))
            timer.daemon = True
        timer.start()

    def _retry(self, rt: Signalled) -> None:
        with self._lock:
            again = self.running and self.sent and not self._errored \
                and self._retries < len(RETRY_S)
            self._retries += int(again)
        if again:
            rt.note("interrupt sent again: the cell still runs and showed no error")
            rt.interrupt()
            self._check_later(rt)

    def request(self, rt: Signalled) -> None:
        """Interrupt the running cell (or the kernel, when no cell runs)."""
        with self._lock:
            cell = self.running
            if cell:
                if self.sent or self._held:
                    rt.note("interrupt not sent: this cell was interrupted already")
                    return
                if not self._started:
                    self._held = True
                    rt.note("interrupt held until the kernel starts the cell")
                    return
                self.sent = True
        if cell:
            self._send(rt)
        else:
            rt.interrupt()  # no cell runs: the kernel itself

    def seen(self, rt: Signalled, msg: dict[str, Any]) -> None:
        """An IOPub message of the cell: at its `execute_input`, send a held interrupt."""
        kind = msg.get("header", {}).get("msg_type")
        if kind == "error":
            with self._lock:
                self._errored = True
            return
        if kind != "execute_input":
            return
        with self._lock:
            self._started = True
            send = self.running and self._held and not self.sent
            if send:
                self.sent = True
        if send:
            self._send(rt)
