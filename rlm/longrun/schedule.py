"""Heartbeats, one-time prompts and cron jobs for one session, persisted outside the chat.

File `<session_dir>/scheduled-jobs.json` (0600, written atomically under an flock on
`<path>.lock`): `{"version": 1, "jobs": [Job...], "dispatches": [Dispatch...]}`.

Delivery is at most once: a due tick is *claimed* first (a dispatch record with
`delivered: false` is persisted and the job's `next_run` moves past now), then delivered,
then `mark_delivered`. A crash between claim and confirmation is never replayed: `recover()`
at start marks such dispatches "Interrupted before delivery confirmed" (one-shot jobs are
completed).

No drift, no backlog: repeating jobs keep their grid (interval anchor or cron expression);
all instants missed while the session was busy or the worker was down become ONE delivery
whose `count` says how many were merged, and `next_run` jumps to the first instant after now.

Cron uses croniter in local time with standard (Vixie) semantics: when both day-of-month
and day-of-week are restricted, either may match.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from croniter import CroniterBadDateError, croniter

from kernel_ext import contract
from rlm import safeio
from rlm.errors import RlmError, SessionGone
from rlm.longrun.clock import Clock, SystemClock, iso
from rlm.paths import write_private_atomic

FILE_VERSION = 1
MIN_INTERVAL_S = 10.0
MAX_JOBS = 50
KEEP_DISPATCHES = 200
MAX_COUNTED_CRON = 10_000
INTERRUPTED = "Interrupted before delivery confirmed"
DELIVERIES = ("steer", "follow_up")
KINDS = ("user_heartbeat", "heartbeat", "once", "cron")
HEARTBEATS = ("user_heartbeat", "heartbeat")
CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}  # fmt: skip
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-z]+)$")


class ScheduleError(RlmError):
    """A bad schedule, an unknown job, a forbidden change, or an unreadable jobs file."""


# -- parsing -------------------------------------------------------------------------------


@dataclass
class When:
    """A parsed schedule: exactly one of interval_s / at / cron is set."""

    kind: str  # interval | once | cron
    text: str
    interval_s: float | None = None
    at: float | None = None
    cron: str | None = None


# The furthest ahead a schedule may point: past this, times stop being representable
# (`in 99999999999d` overflowed every later `rlm schedule list`).
MAX_AHEAD_S = 100 * 366 * 86400.0


def parse_duration(text: str) -> float:
    """'10m', '30 s', '2 hours', '1d' -> seconds (at most 100 years)."""
    m = _DURATION.match(text.strip().lower())
    if not m or m.group(2) not in _UNITS:
        raise ScheduleError(f"cannot read duration {text!r}; write e.g. 30s, 10m, 2h or 1d")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds > MAX_AHEAD_S:
        raise ScheduleError(f"duration {text!r} is more than 100 years; pick a shorter one")
    return seconds


def _parse_iso(text: str, now: float) -> float:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as e:
        raise ScheduleError(f"cannot read time {text!r}: {e}") from None
    ts = dt.timestamp()  # naive = local time
    if ts - now > MAX_AHEAD_S:
        raise ScheduleError(f"{text} is more than 100 years away; pick a nearer time")
    if ts <= now:
        raise ScheduleError(f"{text} is in the past (now is {iso(now)}); pick a future time")
    return ts


def _is_cron(text: str) -> bool:
    return text.lower() in CRON_ALIASES or len(text.split()) == 5


CRON_FIELDS = (("minute", "0-59"), ("hour", "0-23"), ("day of month", "1-31"),
               ("month", "1-12 or jan-dec"), ("day of week", "0-6 or sun-sat"))


def _bad_cron_field(expr: str) -> str:
    """Which of the 5 fields croniter refuses, alone among `*`s, and its range."""
    fields = expr.split()
    if len(fields) != 5:
        return "5 fields: minute hour day-of-month month day-of-week"
    for i, (name, allowed) in enumerate(CRON_FIELDS):
        alone = ["*"] * 5
        alone[i] = fields[i]
        if not croniter.is_valid(" ".join(alone)):
            return f"field {i + 1} ({name}) {fields[i]!r} is not valid: {allowed}"
    return "the fields do not combine (5 fields: minute hour day-of-month month day-of-week)"


def parse_when(text: str, now: float, *, bare_interval: bool = False) -> When:
    """Read 'every 10m' / 'in 30m' / 'at 2026-01-02T09:00' / '0 9 * * 1-5' / '@daily'.

    A bare duration ('10m') means 'every 10m' only with `bare_interval` (heartbeats).
    """
    raw = " ".join(str(text).split())
    low = raw.lower()
    if not raw:
        raise ScheduleError("empty schedule; write e.g. 'every 10m', 'in 30m' or '0 9 * * 1-5'")
    head, _, rest = low.partition(" ")
    if head in ("every", "each") or (bare_interval and _DURATION.match(low)):
        seconds = parse_duration(rest if head in ("every", "each") else low)
        if seconds < MIN_INTERVAL_S:
            raise ScheduleError(f"interval {raw!r} is below the minimum of {MIN_INTERVAL_S:g}s")
        return When("interval", raw, interval_s=seconds)
    if head == "in":
        return When("once", raw, at=now + max(1.0, parse_duration(rest)))
    if head == "at":
        return When("once", raw, at=_parse_iso(raw[3:].strip(), now))
    if re.match(r"^\d{4}-\d\d-\d\d", raw):
        return When("once", raw, at=_parse_iso(raw, now))
    if _is_cron(raw):
        if not croniter.is_valid(low):
            raise ScheduleError(f"invalid cron expression {raw!r}: {_bad_cron_field(low)}")
        try:
            cron_next(low, now)
        except (CroniterBadDateError, ValueError, OverflowError):
            raise ScheduleError(f"cron expression {raw!r} never fires (no such date, e.g. "
                                "31 February); check the day and month fields") from None
        return When("cron", raw, cron=low)
    if _DURATION.match(low):
        raise ScheduleError(f"{raw!r} is ambiguous: write 'in {raw}' (once) or 'every {raw}'")
    raise ScheduleError(
        f"cannot read schedule {raw!r}; write 'every 10m', 'in 30m', 'at 2026-05-01T09:00', "
        "a 5-field cron expression like '0 9 * * 1-5', or @hourly/@daily/@weekly/@monthly"
    )


def cron_next(expr: str, after: float) -> float:
    """The first fire time strictly after `after`, in local wall time."""
    it = croniter(expr, datetime.fromtimestamp(after))
    return float(it.get_next(datetime).timestamp())


# -- records -------------------------------------------------------------------------------


@dataclass
class Job:
    id: str
    kind: str  # user_heartbeat | heartbeat | once | cron
    prompt: str
    schedule: str  # the text the schedule was written as
    owner: str = "user"  # user | agent
    delivery: str = "follow_up"  # steer | follow_up
    label: str | None = None
    interval_s: float | None = None
    anchor: float | None = None  # interval grid origin
    cron: str | None = None
    at: float | None = None
    next_run: float | None = None
    status: str = "active"  # active | paused | completed
    created_at: float = 0.0
    last_run_at: float | None = None
    run_count: int = 0  # deliveries claimed
    ticks_total: int = 0  # scheduled instants covered, coalesced ones included
    last_count: int = 0
    last_error: str | None = None
    missed_down: bool = False  # overdue when the worker started

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def view(self) -> dict[str, Any]:
        """JSON for listings: the record plus readable times."""
        d = self.to_dict()
        d["next_run_iso"] = iso(self.next_run) if self.next_run is not None else None
        return d


@dataclass
class Tick:
    tick_id: str
    job_id: str
    kind: str
    prompt: str
    delivery: str
    scheduled_for: float
    count: int = 1
    label: str | None = None
    reason: str = "busy"  # why count > 1: busy | down

    @property
    def custom_type(self) -> str:
        return "heartbeat_prompt" if self.kind in HEARTBEATS else "cron_prompt"

    def message(self) -> str:
        """The prompt as the model sees it, with the coalesced count when more than one."""
        name = self.label or self.job_id
        tag = "heartbeat" if self.kind in HEARTBEATS else "scheduled"
        text = f"[{tag} {name}] {self.prompt}"
        if self.count > 1:
            what = "heartbeat ticks" if self.kind in HEARTBEATS else "scheduled runs"
            why = "while you were busy" if self.reason == "busy" else "while the worker was down"
            text += f"\n({self.count} {what} coalesced {why})"
        return text


@dataclass
class State:
    jobs: list[Job] = field(default_factory=list)
    dispatches: list[dict[str, Any]] = field(default_factory=list)

    def job(self, job_id: str) -> Job:
        for j in self.jobs:
            if j.id == job_id:
                return j
        raise ScheduleError(f"no scheduled job {job_id!r}; list them with `rlm schedule SESSION list`")

    def in_flight(self, job_id: str) -> bool:
        return any(
            d["job_id"] == job_id and not d["delivered"] and not d.get("error")
            for d in self.dispatches
        )


def _job_from_dict(d: Any, where: str) -> Job:
    if not isinstance(d, dict):
        raise ScheduleError(f"{where}: a job is not an object")
    names = {f.name for f in fields(Job)}
    try:
        job = Job(**{k: v for k, v in d.items() if k in names})
    except TypeError as e:
        raise ScheduleError(f"{where}: malformed job ({e})") from None
    if job.kind not in KINDS or job.delivery not in DELIVERIES:
        raise ScheduleError(f"{where}: job {job.id!r} has kind {job.kind!r}/{job.delivery!r}")
    return job


# -- the scheduler -------------------------------------------------------------------------


class Scheduler:
    """The jobs of one session. Every change reloads the file under the lock: several
    processes (worker, CLI, kernel bridge) can share it. The questions asked every step
    (`due`, `next_due`) read it without the lock (`_peek`)."""

    def __init__(self, path: Path, clock: Clock | None = None, max_jobs: int = MAX_JOBS):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.clock = clock or SystemClock()
        self.max_jobs = max_jobs
        self._seen: tuple[tuple[int, int, int], State] | None = None  # (signature, jobs)

    # storage

    def _load(self) -> State:
        try:
            raw = safeio.read_text(self.path.parent, self.path.name)
        except FileNotFoundError:
            return State()
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ScheduleError(f"{self.path}: not valid JSON ({e}); fix or remove it") from None
        if not isinstance(data, dict) or data.get("version") != FILE_VERSION:
            raise ScheduleError(f"{self.path}: unknown format (expected version {FILE_VERSION})")
        jobs = [_job_from_dict(j, str(self.path)) for j in data.get("jobs") or []]
        dispatches = data.get("dispatches") or []
        if not all(isinstance(d, dict) and "job_id" in d for d in dispatches):
            raise ScheduleError(f"{self.path}: malformed dispatch records")
        return State(jobs, dispatches)

    def _save(self, state: State) -> None:
        done = [d for d in state.dispatches if d["delivered"] or d.get("error")]
        open_ = [d for d in state.dispatches if not (d["delivered"] or d.get("error"))]
        keep = {id(d) for d in open_ + done[-KEEP_DISPATCHES:]}
        state.dispatches = [d for d in state.dispatches if id(d) in keep]
        data = {
            "version": FILE_VERSION,
            "jobs": [j.to_dict() for j in state.jobs],
            "dispatches": state.dispatches,
        }
        write_private_atomic(self.path, (json.dumps(data, indent=1) + "\n").encode())

    @contextmanager
    def _txn(self, write: bool = True) -> Iterator[State]:
        if not self.path.parent.is_dir():  # the session's directory: never recreated here
            raise SessionGone(self.path.parent)
        fd = safeio.open_file(self.lock_path.parent, self.lock_path.name, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            state = self._load()
            yield state
            if write:
                self._save(state)
        finally:
            os.close(fd)  # closing releases the flock

    def _peek(self) -> State:
        """The jobs as the file holds them now, to read only: a change replaces the file
        whole (`write_private_atomic`), so a read needs no lock; it is parsed again only
        when the file changed (another inode, mtime or size). No file: no jobs."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if not self.path.parent.is_dir():  # the session's directory: never recreated
                raise SessionGone(self.path.parent) from None
            return State()
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._seen is None or self._seen[0] != sig:
            self._seen = (sig, self._load())
        return self._seen[1]

    # jobs

    def add(
        self,
        when: str,
        prompt: str,
        *,
        owner: str = "user",
        delivery: str | None = None,
        label: str | None = None,
        heartbeat: bool = False,
    ) -> Job:
        """Add a job. Intervals become heartbeats; 'in'/'at'/ISO one-shots; cron otherwise.

        `heartbeat=True` also accepts a bare duration ('10m' = 'every 10m') and refuses
        one-shot and cron schedules.
        """
        now = self.clock.now()
        parsed = parse_when(when, now, bare_interval=heartbeat)
        if heartbeat and parsed.kind != "interval":
            raise ScheduleError(f"a heartbeat repeats: write 'every 10m', not {when!r}")
        kind = {"interval": "heartbeat", "once": "once", "cron": "cron"}[parsed.kind]
        job = self._new_job(parsed, kind, prompt, owner, delivery, label, now)
        with self._txn() as state:
            self._check_cap(state)
            state.jobs.append(job)
        return job

    def set_user_heartbeat(
        self, when: str, prompt: str, delivery: str = "steer", label: str | None = None
    ) -> Job:
        """The one user heartbeat of the session (replaces the previous one)."""
        now = self.clock.now()
        parsed = parse_when(when, now, bare_interval=True)
        if parsed.kind != "interval":
            raise ScheduleError(f"a heartbeat repeats: write 'every 10m', not {when!r}")
        job = self._new_job(parsed, "user_heartbeat", prompt, "user", delivery, label, now)
        with self._txn() as state:
            state.jobs = [j for j in state.jobs if j.kind != "user_heartbeat"]
            self._check_cap(state)
            state.jobs.append(job)
        return job

    def clear_user_heartbeat(self) -> bool:
        with self._txn() as state:
            before = len(state.jobs)
            state.jobs = [j for j in state.jobs if j.kind != "user_heartbeat"]
            return len(state.jobs) < before

    def _new_job(self, parsed, kind, prompt, owner, delivery, label, now) -> Job:  # noqa: ANN001
        if not isinstance(prompt, str) or not prompt.strip():
            raise ScheduleError("a scheduled job needs a non-empty prompt")
        delivery = delivery or ("steer" if kind in HEARTBEATS else "follow_up")
        if delivery not in DELIVERIES:
            raise ScheduleError(f"delivery must be 'steer' or 'follow_up', not {delivery!r}")
        job = Job(
            id=uuid.uuid4().hex[:8], kind=kind, prompt=prompt.strip(), schedule=parsed.text,
            owner=owner, delivery=delivery, label=label, interval_s=parsed.interval_s,
            cron=parsed.cron, at=parsed.at, created_at=now,
        )  # fmt: skip
        if parsed.kind == "interval":
            job.anchor = now
            job.next_run = now + (parsed.interval_s or 0)
        elif parsed.kind == "cron":
            job.next_run = cron_next(parsed.cron or "", now)
        else:
            job.next_run = parsed.at
        return job

    def _check_cap(self, state: State) -> None:
        live = [j for j in state.jobs if j.status != "completed"]
        if len(live) >= self.max_jobs:
            raise ScheduleError(
                f"this session already has {len(live)} scheduled jobs (the cap is "
                f"{self.max_jobs}); cancel some with `rlm schedule SESSION cancel` or cron.cancel(id)"
            )

    # This method shadows the builtin in the class body: later annotations use builtins.list.
    def list(self, include_completed: bool = False) -> list[Job]:
        with self._txn(write=False) as state:
            return [j for j in state.jobs if include_completed or j.status != "completed"]

    def get(self, job_id: str) -> Job:
        with self._txn(write=False) as state:
            return state.job(job_id)

    def _editable(self, state: State, job_id: str, owner: str) -> Job:
        job = state.job(job_id)
        if owner == "agent" and job.owner != "agent":
            what = "the user heartbeat" if job.kind == "user_heartbeat" else "a user's job"
            raise ScheduleError(f"job {job_id} is {what}; only the user can change it")
        return job

    def cancel(self, job_id: str, owner: str = "user") -> Job:
        with self._txn() as state:
            job = self._editable(state, job_id, owner)
            state.jobs.remove(job)
            return job

    def pause(self, job_id: str, owner: str = "user") -> Job:
        with self._txn() as state:
            job = self._editable(state, job_id, owner)
            if job.status == "active":
                job.status = "paused"
            return job

    def resume(self, job_id: str, owner: str = "user") -> Job:
        """Paused ticks are not owed: the job restarts at its next instant after now."""
        now = self.clock.now()
        with self._txn() as state:
            job = self._editable(state, job_id, owner)
            if job.status == "paused":
                job.status = "active"
                if job.kind != "once":
                    job.next_run = _next_after(job, now)
            return job

    # ticks

    def due(self, now: float | None = None, delivery: str | None = None) -> builtins.list[Tick]:
        """Ticks due at `now` (read only; claim each before delivering it)."""
        now = self.clock.now() if now is None else now
        state = self._peek()
        ticks = []
        for job in state.jobs:
            if job.status != "active" or job.next_run is None or job.next_run > now:
                continue
            if (delivery and job.delivery != delivery) or state.in_flight(job.id):
                continue
            ticks.append(_tick(job, now))
        return sorted(ticks, key=lambda t: t.scheduled_for)

    def next_due(self) -> float | None:
        state = self._peek()
        times = [
            j.next_run
            for j in state.jobs
            if j.status == "active" and j.next_run is not None and not state.in_flight(j.id)
        ]
        return min(times) if times else None

    def claim(self, tick: Tick) -> Tick | None:
        """Persist the dispatch and move the job past now. None: not ours to deliver
        (already claimed elsewhere, cancelled, paused or rescheduled)."""
        now = self.clock.now()
        with self._txn() as state:
            try:
                job = state.job(tick.job_id)
            except ScheduleError:
                return None
            if job.status != "active" or job.next_run != tick.scheduled_for:
                return None
            if f"{job.id}:{job.run_count + 1}" != tick.tick_id or state.in_flight(job.id):
                return None
            claimed = _tick(job, now)
            job.next_run = None if job.kind == "once" else _next_after(job, now)
            job.run_count += 1
            job.ticks_total += claimed.count
            job.last_count, job.last_run_at, job.missed_down = claimed.count, now, False
            state.dispatches.append({
                "job_id": job.id, "tick_id": claimed.tick_id, "claimed_at": now,
                "scheduled_for": claimed.scheduled_for, "count_coalesced": claimed.count,
                "delivered": False, "delivered_at": None, "error": None,
            })  # fmt: skip
            return claimed

    def mark_delivered(self, tick_id: str, error: str | None = None) -> None:
        now = self.clock.now()
        with self._txn() as state:
            for d in state.dispatches:
                if d["tick_id"] == tick_id and not d["delivered"]:
                    d["delivered"], d["delivered_at"] = error is None, now
                    d["error"] = error
                    self._settle(state, d["job_id"], error)
                    return
        raise ScheduleError(f"no undelivered claim {tick_id!r}")

    def mark_outcome(self, tick_id: str, error: str | None) -> None:
        """How a delivered tick's run ended: `error` (why it failed: an error, a limit, a
        stuck run) becomes its job's `last_error` (`schedule list` says it), None clears it."""
        with self._txn() as state:
            for d in state.dispatches:
                if d["tick_id"] == tick_id:
                    d["outcome"] = error
                    job = next((j for j in state.jobs if j.id == d["job_id"]), None)
                    if job is not None:
                        job.last_error = error
                    return

    def _settle(self, state: State, job_id: str, error: str | None) -> None:
        job = next((j for j in state.jobs if j.id == job_id), None)
        if job is None:
            return
        job.last_error = error
        if job.kind == "once":
            job.status = "completed"

    def recover(self, now: float | None = None) -> builtins.list[dict[str, Any]]:
        """At worker start: never replay unconfirmed claims; note overdue jobs."""
        now = self.clock.now() if now is None else now
        with self._txn() as state:
            interrupted = []
            for d in state.dispatches:
                if not d["delivered"] and not d.get("error"):
                    d["error"] = INTERRUPTED
                    self._settle(state, d["job_id"], INTERRUPTED)
                    interrupted.append(dict(d))
            for job in state.jobs:
                if job.status == "active" and job.next_run is not None and job.next_run <= now:
                    job.missed_down = True
            return interrupted

    def dispatches(self) -> builtins.list[dict[str, Any]]:
        with self._txn(write=False) as state:
            return [dict(d) for d in state.dispatches]

    # kernel bridge

    def handle(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """heartbeat.create/list/pause/resume/delete and cron.add/list/cancel (owner: agent)."""
        return _handle(self, method, dict(params or {}))


def _next_after(job: Job, now: float) -> float:
    """The job's first instant strictly after `now`, on its own grid (no drift)."""
    if job.kind == "once":
        return job.at or now
    if job.cron:
        return cron_next(job.cron, now)
    step = job.interval_s or MIN_INTERVAL_S
    anchor = job.anchor if job.anchor is not None else now
    k = int((now - anchor) // step) + 1
    return anchor + max(1, k) * step


def _missed(job: Job, now: float) -> int:
    """How many scheduled instants lie in [next_run, now]."""
    assert job.next_run is not None
    if job.kind == "once":
        return 1
    if job.cron:
        count, t = 1, job.next_run
        while count < MAX_COUNTED_CRON:
            t = cron_next(job.cron, t)
            if t > now:
                break
            count += 1
        return count
    step = job.interval_s or MIN_INTERVAL_S
    return int((now - job.next_run) // step) + 1


def _tick(job: Job, now: float) -> Tick:
    assert job.next_run is not None
    return Tick(
        tick_id=f"{job.id}:{job.run_count + 1}", job_id=job.id, kind=job.kind,
        prompt=job.prompt, delivery=job.delivery, scheduled_for=job.next_run,
        count=_missed(job, now), label=job.label,
        reason="down" if job.missed_down else "busy",
    )  # fmt: skip


# -- kernel bridge -------------------------------------------------------------------------

# method: (required, optional), as kernel_ext.contract declares the schedules' methods
KERNEL_METHODS: dict[str, tuple[set[str], set[str]]] = {
    m.name: (set(m.required), set(m.params) - set(m.required))
    for m in contract.methods_of("schedules")}


def _handle(sched: Scheduler, method: str, params: dict[str, Any]) -> Any:
    spec = KERNEL_METHODS.get(method)
    if spec is None:
        raise ScheduleError(f"unknown method {method!r}; available: {', '.join(KERNEL_METHODS)}")
    required, optional = spec
    missing, extra = required - set(params), set(params) - required - optional
    if missing or extra:
        raise ScheduleError(
            f"{method}() takes {', '.join(sorted(required | optional)) or 'no arguments'}"
            + (f"; missing {', '.join(sorted(missing))}" if missing else "")
            + (f"; unexpected {', '.join(sorted(extra))}" if extra else "")
        )
    group, _, verb = method.partition(".")
    kinds = HEARTBEATS if group == "heartbeat" else ("once", "cron")
    if verb == "list":
        return [j.view() for j in sched.list() if j.kind in kinds]
    if verb in ("pause", "resume", "delete", "cancel"):
        job = sched.get(str(params["id"]))
        if job.kind not in kinds:
            raise ScheduleError(f"job {job.id} is a {job.kind} job; use the {job.kind} methods")
        action = {"delete": sched.cancel, "cancel": sched.cancel}.get(verb)
        action = action or getattr(sched, verb)
        return action(job.id, owner="agent").view()
    if verb == "create":
        interval = params["interval"]
        when = f"every {interval}s" if isinstance(interval, int | float) else str(interval)
        job = sched.add(
            when,
            params["prompt"],
            owner="agent",
            heartbeat=True,
            label=params.get("label"),
            delivery=params.get("delivery"),
        )
        return job.view()
    parsed = parse_when(str(params["when"]), sched.clock.now())
    if parsed.kind == "interval":
        raise ScheduleError(
            "cron.add takes a one-time or cron schedule; for a repeating "
            "interval use heartbeat.create(prompt, interval, label)"
        )
    job = sched.add(
        str(params["when"]),
        params["prompt"],
        owner="agent",
        label=params.get("label"),
        delivery=params.get("delivery"),
    )
    return job.view()
