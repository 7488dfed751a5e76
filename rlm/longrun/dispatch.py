"""Delivering due ticks to an agent: the one piece the resident worker and a foreground
`rlm run` / `rlm chat` share (rlm.app fires schedules in the foreground with it).

Claim before deliver, confirm after (rlm.longrun.schedule gives at most once):
- a *steer* tick goes into the running agent's queue (`steer(text, kind, on_delivered)`);
  it is confirmed when the agent writes it into the session, not when it is queued — a
  tick queued after the run's last turn reaches the next run, and one that never reaches
  a session stays unconfirmed (the next start records it as interrupted, never replays);
- a *follow-up* tick starts a run of its own; it is confirmed once that run yields its
  first event (the prompt is in the session by then).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from rlm.events import Event, RunEnded
from rlm.longrun.clock import Clock, SystemClock
from rlm.longrun.schedule import Scheduler, Tick

STEER_CHECK_S = 1.0
Emit = Callable[[dict[str, object]], None]


class Steerable(Protocol):
    def steer(self, text: str, custom_type: str = "steer",
              on_delivered: Callable[[], None] | None = None) -> None: ...


class TickDispatcher:
    def __init__(self, scheduler: Scheduler, emit: Emit | None = None,
                 clock: Clock | None = None, steer_check_s: float = STEER_CHECK_S):
        self.scheduler = scheduler
        self.emit: Emit = emit or (lambda record: None)
        self.clock = clock or scheduler.clock or SystemClock()
        self.steer_check_s = steer_check_s
        self._last_steer_check = float("-inf")

    def steer_due(self, target: Steerable, *, delivery: str | None = "steer",
                  force: bool = False) -> int:
        """Claim due ticks (steer ones by default; `delivery=None`: every due tick) and queue
        them into `target`; at most once per `steer_check_s` unless `force`."""
        now = self.clock.now()
        if not force and now - self._last_steer_check < self.steer_check_s:
            return 0
        self._last_steer_check = now
        n = 0
        for tick in self.scheduler.due(delivery=delivery):
            claimed = self.scheduler.claim(tick)
            if claimed is None:
                continue
            target.steer(claimed.message(), claimed.custom_type,
                         on_delivered=self._confirm(claimed))
            n += 1
        return n

    def _confirm(self, tick: Tick) -> Callable[[], None]:
        def done() -> None:
            self.scheduler.mark_delivered(tick.tick_id)
            self.emit({"event": "TickSteered", "tick_id": tick.tick_id, "count": tick.count})
        return done

    def claim_due(self) -> list[Tick]:
        """Claim every due tick, oldest first, for delivery as runs of their own."""
        out = []
        for tick in self.scheduler.due():
            claimed = self.scheduler.claim(tick)
            if claimed is not None:
                out.append(claimed)
        return out

    def drive(self, events: Iterable[Event], tick_id: str | None,
              on_event: Callable[[Event], bool]) -> str | None:
        """Iterate one run's events, confirming `tick_id` on the first; `on_event` returns
        False to stop early. Returns the RunEnded reason (None if the run yielded none).
        A run that fails before its first event marks the tick failed, then re-raises; a
        tick's run that fails after it (an error, a limit, a stuck run) is its job's
        `last_error`, and one that answers clears it (`Scheduler.mark_outcome`)."""
        confirmed, ended = tick_id is None, None
        it = iter(events)
        try:
            for ev in it:
                if not confirmed:
                    self.scheduler.mark_delivered(tick_id or "")
                    confirmed = True
                if isinstance(ev, RunEnded):
                    ended = ev.reason
                    if tick_id is not None:
                        self.scheduler.mark_outcome(tick_id, None if ev.reason in ANSWERED
                                                    else _failure(ev))
                if not on_event(ev):
                    break
        except Exception as e:
            if not confirmed:
                self.scheduler.mark_delivered(tick_id or "", error=f"delivery failed: {e}")
                confirmed = True
            elif tick_id is not None and ended is None:
                self.scheduler.mark_outcome(tick_id, f"the run failed: {e}")
            raise
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
            if not confirmed:  # the runner yielded nothing but returned: it took the prompt
                self.scheduler.mark_delivered(tick_id or "")
        return ended


ANSWERED = ("final", "no_code")  # the run ends a scheduled tick ran to that clear its error


def _failure(ev: RunEnded) -> str:
    """A tick's run that ended without an answer, in one line (`schedule list`)."""
    return f"the run ended: {ev.reason}" + (f" ({ev.detail.splitlines()[0][:200]})"
                                            if ev.detail else "")
