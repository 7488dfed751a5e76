"""The interruptible runner: a model call or a cell on a worker thread, with the caller's
thread kept free for Ctrl-C and for yielding the events the work emits."""

from __future__ import annotations

import queue
import signal
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
    on_keyboard_interrupt: Callable[[], Event | None],
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

    stop_seen: float | None = None
    presses: list[int] = []
    # counted from before the work starts: a press that lands once the cell runs but
    # before the main thread got here raised KeyboardInterrupt, and the run's teardown
    # then waited for the cell it never interrupted (a loaded machine; test_ctrl_c)
    previous = _count_presses(presses)
    try:
        threading.Thread(target=work, name="rlm-turn", daemon=True).start()
        while True:
            while presses:  # counted by the handler, wherever the main thread was
                presses.pop()
                said = on_keyboard_interrupt()  # what happens now, for the screen
                if said is not None:
                    yield said
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
            except KeyboardInterrupt:  # a handler of someone else's (not the default)
                presses.append(1)
                continue
            if kind == "event":
                yield value
            elif kind == "done":
                return value
            else:
                raise value
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _count_presses(presses: list[int]) -> Any:
    """On the main thread with Python's default SIGINT handler: count Ctrl-C presses
    instead of raising KeyboardInterrupt wherever the thread happens to be (a second press
    while the first one's notice was drawn was lost, and the run then waited on a cell
    that ignores interrupts). Returns the handler to restore, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return None
        return signal.signal(signal.SIGINT, lambda *_: presses.append(1))
    except ValueError:
        return None
