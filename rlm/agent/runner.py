"""The interruptible runner: a model call or a cell on a worker thread, with the caller's
thread kept free for Ctrl-C and for yielding the events the work emits."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

from rlm.events import Event

Work = Callable[[Callable[[Event], None]], Any]


def run_interruptible(
    fn: Work,
    *,
    stop: threading.Event,
    on_keyboard_interrupt: Callable[[], None],
    grace_s: float,
    kill: Callable[[], None] | None = None,
) -> Generator[Event, None, Any]:
    """Run `fn(emit)` on a thread, yielding what it emits; returns its result.

    After `stop` is set: without `kill` (a model call) the work is abandoned at once (its
    result is ignored); with `kill` (a cell) the work gets `grace_s` to end after the
    interrupt, then `kill()` runs once (the executor reports the death and restores).
    """
    q: queue.Queue[tuple[str, Any]] = queue.Queue()

    def work() -> None:
        try:
            q.put(("done", fn(lambda ev: q.put(("event", ev)))))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            q.put(("error", e))

    threading.Thread(target=work, name="rlm-turn", daemon=True).start()
    stop_seen: float | None = None
    while True:
        try:
            kind, value = q.get(timeout=0.1)
        except queue.Empty:
            if stop.is_set():
                stop_seen = stop_seen or time.monotonic()
                if kill is None:
                    return None
                if time.monotonic() - stop_seen > grace_s:
                    kill()
                    stop_seen = float("inf")  # once
            continue
        except KeyboardInterrupt:
            on_keyboard_interrupt()
            continue
        if kind == "event":
            yield value
        elif kind == "done":
            return value
        else:
            raise value
