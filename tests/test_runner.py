"""The interruptible runner (rlm/agent/runner.py) counts Ctrl-C from before its work
starts: a press that lands as soon as a cell runs interrupts it, like any other."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from rlm.agent.runner import run_interruptible
from rlm.events import Notice


def drain(gen):
    events = []
    try:
        while True:
            events.append(next(gen))
    except StopIteration as done:
        return events, done.value


def test_a_press_as_soon_as_the_work_starts_is_counted_not_raised():
    pressed = threading.Event()

    def work(emit):
        os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C as the cell starts
        assert pressed.wait(30), "the press was never handled"
        return "went on"

    def on_press():
        pressed.set()
        return Notice("interrupting the cell")

    saved = signal.signal(signal.SIGINT, signal.default_int_handler)  # as `rlm` runs
    try:
        events, result = drain(run_interruptible(
            work, stop=threading.Event(), on_keyboard_interrupt=on_press, grace_s=1.0))
    except KeyboardInterrupt:  # the old order: the cell ran, the press was not counted yet
        pytest.fail("a press as the work started raised KeyboardInterrupt; the run's "
                    "teardown would then wait for the cell it never interrupted")
    finally:
        signal.signal(signal.SIGINT, saved)
    assert result == "went on"
    assert [e.text for e in events] == ["interrupting the cell"]
    assert signal.getsignal(signal.SIGINT) is saved


def test_a_press_between_two_pieces_of_work_is_taken_by_the_next_one():
    """Between a cell and the next model call the loop runs its own code; a press there is
    counted for the run and taken by the next piece of work, not raised."""
    from rlm.agent.runner import counting_presses

    saved = signal.signal(signal.SIGINT, signal.default_int_handler)  # as `rlm` runs
    said: list[str] = []
    try:
        with counting_presses() as presses:
            first = drain(run_interruptible(lambda emit: "cell done", stop=threading.Event(),
                                            on_keyboard_interrupt=lambda: None, grace_s=1.0,
                                            presses=presses))
            os.kill(os.getpid(), signal.SIGINT)  # the loop's own code: no work running
            second = drain(run_interruptible(
                lambda emit: "reply", stop=threading.Event(),
                on_keyboard_interrupt=lambda: said.append("press") or Notice("stopping"),
                grace_s=1.0, presses=presses))
    except KeyboardInterrupt:
        pytest.fail("a press between two pieces of work raised KeyboardInterrupt")
    finally:
        signal.signal(signal.SIGINT, saved)
    assert first == ([], "cell done") and said == ["press"]
    assert [e.text for e in second[0]] == ["stopping"] and second[1] == "reply"


def test_an_abandoned_model_call_ends_at_its_next_piece():
    """After a stop the loop abandons a model call at once; the call itself (the embedded
    model generating on a core of its own) ends at the next piece it streams, instead of
    generating to its end while the process waits to exit."""
    from rlm.events import ModelText

    stop, started, ended = threading.Event(), threading.Event(), threading.Event()
    pieces: list[int] = []

    def generating(emit):
        try:
            started.set()
            for i in range(10**9):  # a reply that would go on for a long time
                pieces.append(i)
                emit(ModelText("token "))
            return "all of it"
        finally:
            ended.set()

    gen = run_interruptible(generating, stop=stop, on_keyboard_interrupt=lambda: None,
                            grace_s=1.0)
    assert isinstance(next(gen), ModelText) and started.is_set()
    stop.set()  # the user stops the run
    events, result = drain(gen)
    assert result is None  # abandoned: no reply
    assert ended.wait(30), "the abandoned call kept generating"
    n = len(pieces)
    assert ended.is_set() and len(pieces) == n  # nothing more after it ended
