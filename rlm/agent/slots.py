"""The session tree's concurrency bound: one `TreeSlots` shared by a root agent, all its
children (`rlm_spawn`, `rlm_query`) and every `llm_query_batched` prompt in the tree.

A FIFO semaphore whose waiters can leave: `acquire(ticket)` blocks until the slot is
granted or the ticket is withdrawn; `withdraw(ticket)` takes a waiter out of the queue,
and gives its slot back when it was granted in the same instant, so a waiter that gives
up (a cancelled child, an interrupted parent) never shrinks the pool (the oh-my-pi #3464
defect). `resize(n)` changes the limit at run time; slots already held are not taken
back, new grants wait until fewer than `n` are in use. `limit` 0 (or None) is unlimited.

Two numbers, one place: `ceiling` is the user's allowance (`--max-children` at start,
`/max-children N` in chat: `allow(n)`, which sets the limit too); `limit` is the current
bound, which a cell (`rlm_max_children(n)`) may lower and restore, never raise past the
ceiling (`resize` refuses it, naming the ceiling). A ceiling of 0 is unlimited.

A holder that blocks on work that needs slots (a child waiting for its own children, a
child's `llm_query_batched`) lends its slot for the wait (`withdraw`, then `acquire`
again with a new ticket): everything holding a slot is then running, so the tree cannot deadlock.
"""

from __future__ import annotations

import threading
from collections import deque

from rlm.errors import RlmError


class Ticket:
    """One claim on a slot: queued, granted, or withdrawn."""

    __slots__ = ("granted", "withdrawn", "_event")

    def __init__(self) -> None:
        self.granted = False
        self.withdrawn = False
        self._event = threading.Event()


class TreeSlots:
    def __init__(self, limit: int | None = None) -> None:
        self.ceiling = limit or 0  # the user's allowance; 0: unlimited
        self.limit = self.ceiling
        self.in_use = 0
        self.peak = 0  # most slots held at once (tests, `rlm ps`)
        self._queue: deque[Ticket] = deque()
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- grants
    def _free(self) -> bool:
        return self.limit <= 0 or self.in_use < self.limit

    def _grant(self, ticket: Ticket) -> None:
        ticket.granted = True
        self.in_use += 1
        self.peak = max(self.peak, self.in_use)
        ticket._event.set()

    def _grant_waiters(self) -> None:
        while self._queue and self._free():
            self._grant(self._queue.popleft())

    def acquire(self, ticket: Ticket | None = None, timeout: float | None = None) -> bool:
        """Block until a slot is granted (True) or the ticket is withdrawn / the timeout
        passes (False; the ticket then holds nothing)."""
        ticket = ticket or Ticket()
        with self._lock:
            if ticket.withdrawn:
                return False
            if not self._queue and self._free():
                self._grant(ticket)
                return True
            self._queue.append(ticket)
        ticket._event.wait(timeout)
        if not ticket.granted:
            self.withdraw(ticket)
        return ticket.granted and not ticket.withdrawn

    def withdraw(self, ticket: Ticket) -> None:
        """Done with the ticket: a waiter leaves the queue, a holder gives its slot back
        (also one granted in the same instant the waiter gave up). Idempotent, so a cancel
        and the holder's own clean-up may both call it."""
        with self._lock:
            if ticket.withdrawn:
                return
            ticket.withdrawn = True
            if ticket.granted:
                ticket.granted = False
                self.in_use = max(0, self.in_use - 1)
                self._grant_waiters()
            else:
                try:
                    self._queue.remove(ticket)
                except ValueError:
                    pass
            ticket._event.set()

    def resize(self, limit: int | None) -> None:
        """A new limit within the user's ceiling (0/None: unlimited, only under no ceiling);
        more room is granted to waiters at once. Past the ceiling: RlmError, naming it."""
        limit = limit or 0
        with self._lock:
            if self.ceiling and not 0 < limit <= self.ceiling:
                raise RlmError(f"the user allowed at most {self.ceiling} children at once "
                               "(--max-children, or /max-children in chat); ask them to "
                               "raise it")
            self.limit = limit
            self._grant_waiters()

    def allow(self, ceiling: int | None) -> None:
        """The user's new allowance (0/None: unlimited), which is also the limit from now
        on; more room is granted to waiters at once."""
        with self._lock:
            self.ceiling = self.limit = ceiling or 0
            self._grant_waiters()

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._queue)
