"""Messages steered into a running agent (heartbeats, schedule ticks, `rlm worker` inbox,
the advisor's advice): queued from any thread, written into the session before the next
model call."""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Callable

from rlm.protocols import SessionLog
from rlm.session.entries import CustomEntry

Delivered = Callable[[], None]
# kinds that wait for the next run and never start one (advice given after a run ended)
WAITING_KINDS = frozenset({"advisory"})


class Steered:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, str, Delivered | None, str | None]] = \
            queue.SimpleQueue()
        self._kinds: Counter[str] = Counter()
        self._lock = threading.Lock()

    def put(self, text: str, kind: str, on_delivered: Delivered | None,
            shown: str | None = None) -> None:
        """Queue `text` for the model; `shown`: the line the user reads when it is
        delivered (the advisor's advice: what the model is told is said on screen too)."""
        with self._lock:
            self._kinds[kind] += 1
        self._queue.put((text, kind, on_delivered, shown))

    def pending(self) -> bool:
        """Something queued that should reach the model soon: a run of its own if none is
        running (an advisory alone waits for the next run)."""
        with self._lock:
            return any(n for kind, n in self._kinds.items() if kind not in WAITING_KINDS)

    def drain(self, session: SessionLog) -> list[str]:
        """Append every queued message; `on_delivered` runs once it is in the session.
        Returns the lines to show the user for what was delivered."""
        shown_now: list[str] = []
        while True:
            try:
                text, kind, delivered, shown = self._queue.get_nowait()
            except queue.Empty:
                return shown_now
            with self._lock:
                self._kinds[kind] -= 1
            session.append(CustomEntry(custom_type=kind, data={"text": text},
                                       display=True, content=text))
            if shown:
                shown_now.append(shown)
            if delivered is not None:
                delivered()
