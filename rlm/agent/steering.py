"""Messages steered into a running agent (heartbeats, schedule ticks, `rlm worker` inbox):
queued from any thread, written into the session before the next model call."""

from __future__ import annotations

import queue
from collections.abc import Callable

from rlm.protocols import SessionLog
from rlm.session.entries import CustomEntry

Delivered = Callable[[], None]


class Steered:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, str, Delivered | None]] = queue.SimpleQueue()

    def put(self, text: str, kind: str, on_delivered: Delivered | None) -> None:
        self._queue.put((text, kind, on_delivered))

    def pending(self) -> bool:
        return not self._queue.empty()

    def drain(self, session: SessionLog) -> None:
        """Append every queued message; `on_delivered` runs once it is in the session."""
        while True:
            try:
                text, kind, delivered = self._queue.get_nowait()
            except queue.Empty:
                return
            session.append(CustomEntry(custom_type=kind, data={"text": text},
                                       display=True, content=text))
            if delivered is not None:
                delivered()
