"""The interruptible runner: a model call or a cell on a worker thread, with the caller's
thread kept free for Ctrl-C and for yielding the events the work emits."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

from rlm.errors import Cancelled
from rlm.events import Event

Work = Callable[[Callable[[Event], None]], Any]


@contextlib.contextmanager
def counting_presses() -> Iterator[list[int]]:
    """Ctrl-C presses counted, not raised, while the block runs (see `_count_presses`). A
    run holds one counter for its whole length and hands it to each `run_interruptible`:
    a press between two pieces of work (the loop's own code between a cell and the next
    model call) is then taken by the next one, instead of a KeyboardInterrupt that ends
    the run without its reason (a loaded machine widened that window: test_terminal's
    interrupted listing)."""
    presses: list[int] = []
    previous = _count_presses(presses)
    try:
        yield presses
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def run_interruptible(
    fn: Work,
    *,
    stop: threading.Event,
    on_keyboard_interrupt: Callable[[], Event | None],
    grace_s: float,
    kill: Callable[[], None] | None = None,
    presses: list[int] | None = None,
) -> Generator[Event, None, Any]:
    """Run `fn(emit)` on a thread, yielding what it emits; returns its result.

    After `stop` is set: without `kill` (a model call) the work is abandoned at once (its
    result is ignored); with `kill` (a cell) the work gets `grace_s` to end after the
    interrupt, then `kill()` runs once (the executor reports the death and restores).
    `presses`: the run's counter (`counting_presses`); None counts for this work alone,
    from before it starts (a press that landed once a cell ran but before the counter was
    installed raised KeyboardInterrupt, and the teardown then waited for the cell it never
    interrupted: test_ctrl_c).
    """
    if presses is None:
        with counting_presses() as own:
            return (yield from _run(fn, stop, on_keyboard_interrupt, grace_s, kill, own))
    return (yield from _run(fn, stop, on_keyboard_interrupt, grace_s, kill, presses))


def _run(fn: Work, stop: threading.Event, on_keyboard_interrupt: Callable[[], Event | None],
         grace_s: float, kill: Callable[[], None] | None,
         presses: list[int]) -> Generator[Event, None, Any]:
    q: queue.Queue[tuple[str, Any]] = queue.Queue()

    def emit(ev: Event) -> None:
        if kill is None and stop.is_set():  # abandoned (see below): a streaming model call
            # ends at its next piece instead of generating on to its end (the embedded
            # model held a core and the process's exit for a minute after the run ended)
            raise Cancelled("the run was stopped: this call's reply is dropped")
        q.put(("event", ev))

    def work() -> None:
        try:
            q.put(("done", fn(emit)))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            q.put(("error", e))

    _workers.submit(work)
    stop_seen: float | None = None
    while True:
        while presses:  # counted by the handler, wherever the main thread was
            presses.pop()
            said = on_keyboard_interrupt()  # what happens now, for the screen
            if said is not None:
                yield said
        if kill is None and stop.is_set():
            return None  # abandoned at once, whatever it streamed meanwhile
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


class _Workers:
    """Daemon threads kept idle between pieces of work, so a step (a model call, then its
    cells) starts no thread. Work that is abandoned (a model call after a stop) keeps its
    thread until it returns; the next piece is given another."""

    IDLE_MAX = 4

    def __init__(self) -> None:
        self._forget()
        os.register_at_fork(after_in_child=self._forget)  # a forked child has none of them

    def _forget(self) -> None:
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], None]) -> None:
        """Run `fn` (which must not raise) on an idle worker, or on a new one."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name="rlm-turn", daemon=True).start()
        inbox.put(fn)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            inbox.get()()
            with self._lock:
                if len(self._idle) >= self.IDLE_MAX:
                    return
                self._idle.append(inbox)


_workers = _Workers()


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
