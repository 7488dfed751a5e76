"""A run's pieces of work — model calls, cells, and the steps between turns (gates, a
compaction) — each on a worker thread (rlm.agent.runner), so Ctrl-C stays responsive and
acts on what runs; presses are counted per piece (rlm.agent.interrupts.PressCount).

A model call is abandoned after a second press; a cell that outlives the interrupt grace
has its kernel killed (the execute loop reports the death and restores); a step is waited
for, never abandoned (what it writes stays on one thread): one press stops it — it watches
`RunState.cancel` — and the run. What a step names with `announce` is shown as it runs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Protocol

from rlm.agent import child_report
from rlm.agent.cells import kill_kernel
from rlm.agent.child_report import ChildView
from rlm.agent.interrupts import ctrl_c_notice
from rlm.agent.recursion import Recursion
from rlm.agent.runner import Work, counting_presses, run_interruptible
from rlm.agent.runstate import RunState
from rlm.config import Config
from rlm.events import Event, Notice, Phase
from rlm.protocols import Executor


class Cancelling(Protocol):
    """What Ctrl-C does to the agent's children (rlm.agent.children.Children): cancels
    them, and says which were."""

    def cancel_all(self, why: str = ...) -> Sequence[ChildView]: ...

    def take_unshown(self) -> Sequence[ChildView]: ...


class PiecesHost(Protocol):
    """What the pieces of a run act on (rlm.agent.loop.Agent): its run's state, its
    kernel, its children and batched prompts, and its interrupt grace."""

    state: RunState
    config: Config
    executor: Executor | None
    recursion: Recursion

    @property
    def children(self) -> Cancelling: ...

    def stop(self) -> None: ...


class Pieces:
    def __init__(self, agent: PiecesHost) -> None:
        self.agent = agent
        self.presses: list[int] | None = None  # counted for the whole run (counting)
        self._emit: Callable[[Event], None] | None = None  # the running step's
        self._step: str | None = None  # what that step announced it does

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Ctrl-C counted, not raised, for the whole run: taken by the next piece."""
        with counting_presses() as self.presses:
            yield

    def interrupt(self, why: str = child_report.AT_CTRL_C) -> int:
        """Ctrl-C: once interrupts the running cell (and stops a running gate or summary),
        twice on the same piece of work ends the run. Returns the presses that count;
        `why` the children are cancelled (rlm.agent.child_report)."""
        a = self.agent
        st = a.state
        presses = st.presses.press(time.monotonic())
        st.cancel.set()
        a.children.cancel_all(why)  # an interrupted parent's children stop too
        a.recursion.abandon()  # and its batched prompts still queued leave the pool
        if a.executor is not None:
            try:
                a.executor.interrupt()
            except Exception:  # noqa: BLE001 - a dead kernel is reported by execute
                pass
        if presses >= 2:
            st.stop.set()
        return presses

    def cancelled(self) -> bool:
        """Ctrl-C was pressed for the piece that runs now (a step stops its gate or its
        summary when it reads True)."""
        return self.agent.state.cancel.is_set()

    def announce(self, text: str) -> None:
        """Name the step that runs now on screen; outside a step a no-op."""
        if self._emit is not None:
            self._step = text
            self._emit(Phase(text))

    def run(self, fn: Work, *, cell: bool) -> Generator[Event, None, Any]:
        """A model call or a cell (`cell`) on a worker thread."""
        a = self.agent
        self._begin()
        return (yield from run_interruptible(
            fn, stop=a.state.stop, grace_s=a.config.interrupt_grace_s, presses=self.presses,
            on_keyboard_interrupt=lambda: self._ctrl_c(cell),
            kill=(lambda: kill_kernel(a.executor)) if cell else None))

    def step(self, fn: Callable[[], Any]) -> Generator[Event, None, Any]:
        """A step between turns on a worker thread the loop waits for."""
        self._begin()

        def work(emit: Callable[[Event], None]) -> Any:
            self._emit, self._step = emit, None
            try:
                return fn()
            finally:
                self._emit = None

        result = yield from run_interruptible(
            work, stop=self.agent.state.stop, on_keyboard_interrupt=self._step_ctrl_c,
            grace_s=0.0, presses=self.presses, kill=lambda: None)
        if self._step is not None:
            self._step = None
            yield Phase("", done=True)
        return result

    def _begin(self) -> None:
        st = self.agent.state
        st.presses.begin()
        st.cancel.clear()

    def _ctrl_c(self, in_cell: bool) -> Event:
        """Ctrl-C on a cell or a model call: interrupt, and say what happens next and which
        children it cancelled, with their spend."""
        said = ctrl_c_notice(self.interrupt(), in_cell=in_cell)
        return _with_cancelled(said, self.agent.children.take_unshown())

    def _step_ctrl_c(self) -> Event:
        """Ctrl-C during a step between turns: it stops, and the run with it."""
        self.agent.stop()
        said = ctrl_c_notice(2, in_cell=False, step=self._step or "the step between turns")
        return _with_cancelled(said, self.agent.children.take_unshown())


def _with_cancelled(said: Notice, cancelled: Sequence[ChildView]) -> Notice:
    if not cancelled:
        return said
    return Notice("\n".join([said.text, *map(child_report.cancelled_line, cancelled)]),
                  said.level)
