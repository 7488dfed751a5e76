"""Driving a run: one prompt, with the session's due heartbeats and jobs firing into it
while this process holds the session and no worker does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlm.agent.loop import Agent
from rlm.app.features import gap
from rlm.events import CellFinished, Event, TurnStarted
from rlm.longrun import Scheduler
from rlm.longrun.dispatch import TickDispatcher
from rlm.longrun.events_file import EventsFile, event_record
from rlm.longrun.lock import worker_holds
from rlm.protocols import SessionLog


class ForegroundSchedules:
    """Fires a session's due ticks while this process holds it and no worker does: steer
    ticks (and follow-ups due mid-run) go into the running agent; follow-ups due when the
    run has ended become runs of their own. Events go to `worker-events.jsonl` too, so
    `rlm attach` can follow a foreground run."""

    def __init__(self, agent: Agent):
        self.agent = agent
        d = agent.session.dir
        self.events = EventsFile(d / "worker-events.jsonl") if d is not None else None
        self.dispatch = None
        g = gap(agent.entry, "schedules")
        if d is not None and not (g is not None and g.refused):
            self.dispatch = TickDispatcher(Scheduler(d / "scheduled-jobs.json"), self._emit)

    def _emit(self, record: dict[str, Any]) -> None:
        if self.events is not None:
            self.events.append(record, self.dispatch.clock.now() if self.dispatch else 0.0)

    def _taker(self, events: list[Event], on_event: Callable[[Event], None]
               ) -> Callable[[Event], bool]:
        def take(ev: Event) -> bool:
            events.append(ev)
            on_event(ev)
            if self.events is not None:
                self._emit(event_record(ev))
            if self.dispatch is not None and isinstance(ev, TurnStarted | CellFinished):
                # once per turn and per cell (not per streamed token): what fell due goes
                # into the run before its next model call
                self.dispatch.steer_due(self.agent, delivery=None, force=True)
            return True

        return take

    def run(self, prompt: str | None, on_event: Callable[[Event], None]) -> list[Event]:
        """One prompt; then, once, what fell due during it: ticks queued into the run after
        its last turn get a run of their own (they are confirmed when they reach the log),
        and follow-up ticks due now each get a run. One round only, so `rlm run` ends."""
        events: list[Event] = []
        take = self._taker(events, on_event)
        if self.dispatch is None:
            for ev in self.agent.run(prompt):
                take(ev)
            return events
        self.dispatch.drive(self.agent.run(prompt), None, take)
        if self.agent.pending_steered():
            self.dispatch.drive(self.agent.run(None), None, take)
        self._due_runs(take)
        return events

    def run_due(self, on_event: Callable[[Event], None]) -> list[Event]:
        """The ticks due now, each a run of its own (`rlm chat` while it waits for a line)."""
        events: list[Event] = []
        if self.dispatch is not None:
            self._due_runs(self._taker(events, on_event))
        return events

    def _due_runs(self, take: Callable[[Event], bool]) -> None:
        assert self.dispatch is not None
        for tick in self.dispatch.claim_due():
            self.dispatch.drive(self.agent.run(tick.message()), tick.tick_id, take)

    @property
    def active(self) -> bool:
        """This process fires the session's ticks (the entry has schedules)."""
        return self.dispatch is not None

    def seconds_to_next_due(self) -> float | None:
        """How long until a tick falls due (0 when one is due now; None: nothing is
        scheduled, or a worker fires them)."""
        if self.dispatch is None or (self.agent.session.dir is not None
                                     and worker_holds(self.agent.session.dir)):
            return None
        nxt = self.dispatch.scheduler.next_due()
        return None if nxt is None else max(0.0, nxt - self.dispatch.clock.now())


def drive(agent: Agent, prompt: str | None, on_event: Callable[[Event], None] | None = None,
          ) -> list[Event]:
    """Run one prompt with schedules firing in this process (see ForegroundSchedules)."""
    return ForegroundSchedules(agent).run(prompt, on_event or (lambda ev: None))


def schedules_note(session: SessionLog) -> str | None:
    """When active jobs remain and no worker holds the session: who will fire them."""
    if session.dir is None or worker_holds(session.dir):
        return None
    jobs = [j for j in Scheduler(session.dir / "scheduled-jobs.json").list()
            if j.status == "active" and j.next_run is not None]
    if not jobs:
        return None
    return (f"{len(jobs)} scheduled job(s) will not fire once this process exits: start a "
            f"worker with `rlm worker {session.id}` (or use `rlm run --detach`)")

