"""The resident worker: one background process per session that owns its agent, kernel,
prompt queue and schedules, so closing the terminal does not stop the work.

Files in `<session_dir>/`:
- `worker.lock`          flock + pid (rlm.longrun.lock); one worker per session
- `worker.json`          status: {pid, session_id, state, activity, started_at, updated_at,
                         next_due}; state is starting | idle | busy | stopping | stopped
- `worker-events.jsonl`  one JSON object per line: {"ts", "event", ...fields}; `rlm attach`
                         tails it (`tail_events`)
- `worker-inbox/*.json`  queued requests from clients ({"kind": "prompt", "text"} or
                         {"kind": "goal", "action", ...}); taken oldest first
- `worker.log`           stdout/stderr of a detached worker

The loop (`step`): a queued prompt first, then due ticks (claim -> deliver ->
mark_delivered), then a goal continuation when the goal is active; then sleep until the
next due time, waking early for queued prompts and for any change to scheduled-jobs.json
(a job added while idle fires on time). A tick counts as delivered once the runner
yields its first event (the prompt is in the session by then). SIGTERM (`rlm stop`)
stops cleanly: the runner's `stop()` interrupts the running cell and the run ends through
its own events. With no queued request, active goal or schedule, the worker exits after
`Config.worker_idle_exit_s`; worker.json's `activity` says why an idle worker stays
("goal active", "next job at T", "idle, exits at T") and `exits_at` when it leaves.

The worker drives a `runner` (`Runner` below): a callable `prompt -> iterable of
rlm.events.Event` with `session` (None: no goals), `steer(text, kind, on_delivered)` and
`close()`. The real one is built by the composition root (`rlm.app.agent_runner`) and
passed in: this module never imports the agent layer above it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from rlm import safeio
from rlm.config import Config
from rlm.errors import RlmError, SessionGone
from rlm.events import Event
from rlm.longrun.clock import Clock, SystemClock, iso
from rlm.longrun.dispatch import STEER_CHECK_S, TickDispatcher
from rlm.longrun.events_file import MAX_FIELD_CHARS, EventsFile, event_record
from rlm.longrun.goals import GoalManager
from rlm.longrun.lock import SessionLock, WorkerRunning, holds_lock, lock_holder
from rlm.longrun.lock import holder as lock_holder_info
from rlm.longrun.schedule import Scheduler, Tick
from rlm.paths import rlm_home, sessions_path, write_private_atomic
from rlm.protocols import SessionLog
from rlm.session.store import resolve_session_dir


class Runner(Protocol):
    """What the worker drives: prompt -> events, plus steering and shutdown."""

    @property
    def session(self) -> SessionLog | None: ...

    def __call__(self, prompt: str) -> Iterable[Event]: ...

    def steer(self, text: str, custom_type: str = "steer",
              on_delivered: Callable[[], None] | None = None) -> None: ...

    def close(self) -> None: ...

    # Optional: `stop()` ends the current run now (interrupts its cell); the run still
    # ends through its own events, so the log stays whole (each tool call has its result).


RunnerFactory = Callable[[str, Any], Runner]


def _paths(session_id: str, home: Path | None) -> dict[str, Path]:
    d = resolve_session_dir(session_id, home)  # an existing session only; creates nothing
    return {
        "dir": d,
        "lock": d / "worker.lock",
        "status": d / "worker.json",
        "events": d / "worker-events.jsonl",
        "inbox": d / "worker-inbox",
        "log": d / "worker.log",
        "jobs": d / "scheduled-jobs.json",
    }


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What changes when a file is rewritten (one stat: cheap enough for every poll)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class Worker:
    def __init__(
        self,
        session_id: str,
        config: Config | None = None,
        clock: Clock | None = None,
        *,
        runner: Runner | Callable[[str], Iterable[Event]] | None = None,
        home: Path | None = None,
        poll_s: float = 0.5,
        runner_factory: RunnerFactory | None = None,
        on_record: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.config = config
        self.on_record = on_record  # shown each event record (a foreground `rlm worker`)
        self.clock = clock or SystemClock()
        self.home = home or getattr(config, "home", None) or rlm_home()
        # routed by directory: a prefix, `last` or a path names one directory, resolved once;
        # the lock, inbox, jobs and the runner's session are all that directory's
        self.paths = _paths(session_id, self.home)
        self.events = EventsFile(self.paths["events"])
        self.session_id = self.paths["dir"].name
        self.scheduler = Scheduler(self.paths["jobs"], self.clock)
        self.lock = SessionLock(self.paths["lock"], "worker")
        self.dispatch = TickDispatcher(self.scheduler, self.emit, self.clock, STEER_CHECK_S)
        self.poll_s = poll_s
        self.runner = runner
        self.runner_factory = runner_factory
        self.goals = self._goals_for(runner)
        self.state, self.activity = "starting", ""
        self.stopping = False
        self._goal_parked: tuple[str, str] | None = None
        idle = getattr(config, "worker_idle_exit_s", None)
        self.idle_exit_s: float | None = float(idle) if idle else None
        self._busy_until = self.clock.now()  # when the worker last did something

    def _goals_for(self, runner: Any) -> GoalManager | None:
        session = getattr(runner, "session", None)  # plain callables (tests) have none
        return GoalManager(session, self.clock) if session is not None else None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        ready = os.environ.pop(READY_FD_ENV, None)  # not passed on to the kernel
        self.lock.acquire()  # raises WorkerRunning
        self._status("starting", "assembling the agent")
        interrupted = self.scheduler.recover()
        if self.runner is None:
            if self.runner_factory is None:
                self.lock.release()
                raise RlmError("the worker needs a runner: start it with `rlm worker SESSION`")
            try:
                self.runner = self.runner_factory(str(self.paths["dir"]), self.config)
            except BaseException:
                self.lock.release()
                raise
            self.goals = self._goals_for(self.runner)
        self.emit({"event": "WorkerStarted", "pid": os.getpid(), "interrupted": interrupted})
        self._status("idle")
        _tell_started(ready)

    def close(self) -> None:
        if not self.lock.held:
            return
        if self.paths["dir"].is_dir():  # removed under us: recreate nothing
            self._status("stopped")
            self.emit({"event": "WorkerStopped"})
        self.events.close()
        with contextlib.suppress(Exception):
            close = getattr(self.runner, "close", None)
            if close is not None:
                close()
        self.lock.release()

    def stop(self, *_: Any) -> None:
        """SIGTERM/SIGINT: stop after the current run, which is told to end now."""
        self.stopping = True
        self._stop_runner()

    def _stop_runner(self) -> bool:
        """Ask the runner to end its run; False when it cannot be asked (plain callables)."""
        stop = getattr(self.runner, "stop", None)
        if stop is None:
            return False
        with contextlib.suppress(Exception):  # also called from the signal handler
            stop()
        return True

    def run(self) -> None:
        """Until SIGTERM/SIGINT or `stop()`."""
        self.start()
        with contextlib.suppress(ValueError):  # not the main thread: no signal handlers
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        try:
            while not self.stopping:
                jobs = _signature(self.paths["jobs"])  # before step reads the next due time
                wait = self.step()
                if self.stopping:
                    break
                why, exits_at = self.why()
                self._status("idle", why, exits_at=exits_at)
                if exits_at is not None:
                    if self.clock.now() >= exits_at:
                        self.emit({"event": "WorkerIdleExit", "idle_s": self.idle_exit_s})
                        break
                    wait = min(wait, exits_at - self.clock.now())
                self.sleep(wait, jobs)
        finally:
            if self.paths["dir"].is_dir():
                self._status("stopping")
            self.close()

    def sleep(self, seconds: float, jobs: tuple[int, int, int] | None | bool = False) -> None:
        """Sleep in slices of `poll_s`, waking for a stop, a queued request or a change to
        the jobs file (a job added by `rlm schedule`, `cron.add`, `heartbeat.create`: every
        writer goes through Scheduler, which replaces scheduled-jobs.json). `jobs`: the
        file's signature when the caller read the next due time (default: now)."""
        end = self.clock.now() + seconds
        if jobs is False:
            jobs = _signature(self.paths["jobs"])
        while not self.stopping and not self._inbox_files():
            left = end - self.clock.now()
            if left <= 0 or _signature(self.paths["jobs"]) != jobs:
                return
            self.clock.sleep(min(left, self.poll_s))

    def why(self) -> tuple[str, float | None]:
        """Why an idle worker is still there, and when it exits if nothing changes (None:
        it stays: a schedule or an active goal keeps it, or idle exit is off)."""
        nxt = None
        with contextlib.suppress(RlmError):
            nxt = self.scheduler.next_due()
        if self._inbox_files():
            return "a request is queued", None
        goal = self.goals.get() if self.goals is not None else None
        if goal is not None and goal.status == "active" and not self._goal_waits(goal):
            return "goal active", None
        if nxt is not None:
            return f"next job at {iso(nxt)}", None
        if self.idle_exit_s is None:
            return "idle (idle exit off)", None
        exits_at = self._busy_until + self.idle_exit_s
        return f"idle, exits at {iso(exits_at)}", exits_at

    def _goal_waits(self, goal: Any) -> bool:
        return self._goal_parked == (goal.goal_id, goal.updated_at)

    # -- one pass ----------------------------------------------------------------------------

    def step(self) -> float:
        """Do what is due now; return seconds until the next due time."""
        request = self._take_inbox()
        if request is not None:
            self._handle_request(request)
            return 0.0
        for tick in self.scheduler.due():
            if self.stopping:
                return 0.0
            claimed = self.scheduler.claim(tick)
            if claimed is not None:
                self.deliver(claimed)
        if not self.stopping:
            self._continue_goal()
        nxt = self.scheduler.next_due()
        return max(0.0, nxt - self.clock.now()) if nxt is not None else 3600.0

    def deliver(self, tick: Tick) -> None:
        """Hand a claimed tick to the runner; confirm once the runner has taken it."""
        self._goal_parked = None
        self.emit({"event": "TickDelivering", "tick_id": tick.tick_id, "count": tick.count,
                   "kind": tick.kind, "label": tick.label})  # fmt: skip
        self._run(tick.message(), f"tick:{tick.tick_id}", tick.tick_id)

    def _continue_goal(self) -> None:
        if self.goals is None:
            return
        goal = self.goals.get()
        if goal is None or goal.status != "active":
            return
        if self._goal_waits(goal):
            return
        message = self.goals.continuation_message()
        if message:
            self._run(message, "goal")

    def _park_goal(self, ended: str | None) -> None:
        """After a run that failed or hit a limit, an active goal waits for a new prompt,
        a tick or a user change instead of being continued in a loop."""
        goal = self.goals.get() if self.goals is not None else None
        if goal is not None and goal.status == "active" and ended not in ("final", "no_code"):
            self._goal_parked = (goal.goal_id, goal.updated_at)
            self.emit({"event": "GoalParked", "reason": ended})

    def _run(self, prompt: str, source: str, tick_id: str | None = None) -> str | None:
        """Run one prompt through the runner; returns the RunEnded reason (None if none)."""
        self._status("busy", f"{source}: {prompt.splitlines()[0][:100]}")
        self.emit({"event": "RunStarted", "source": source, "prompt": prompt[:MAX_FIELD_CHARS]})
        assert self.runner is not None

        told = False

        def on_event(ev: Event) -> bool:
            nonlocal told
            self.emit(event_record(ev))
            if not self.stopping:
                self._steer_due()
                return True
            if not told:  # a stop that came before this run had begun is passed on too
                told = True
                return self._stop_runner()  # it ends by itself: keep reading to its end
            return True

        try:
            ended = self.dispatch.drive(self.runner(prompt), tick_id, on_event)
        except SessionGone:  # nothing can be recorded any more: the worker ends
            raise
        except Exception as e:  # noqa: BLE001 - a failing run must not kill the worker
            ended = "error"
            self.emit({"event": "RunFailed", "error": f"{type(e).__name__}: {e}"})
        self._park_goal(ended)
        self._busy_until = self.clock.now()
        self._status("idle")
        return ended

    def _steer_due(self) -> None:
        steer = getattr(self.runner, "steer", None)  # plain callables (tests) cannot be steered
        if steer is not None:
            self.dispatch.steer_due(self.runner)  # type: ignore[arg-type]

    # -- requests from clients ------------------------------------------------------------

    def _inbox_files(self) -> list[Path]:
        inbox = self.paths["inbox"]
        if not inbox.is_dir():
            return []
        return sorted(p for p in inbox.iterdir() if p.suffix == ".json" and p.name[0] != ".")

    def _take_inbox(self) -> dict[str, Any] | None:
        for path in self._inbox_files():
            try:
                request = json.loads(safeio.read_text(path.parent, path.name, 1 << 20))
            except (OSError, ValueError) as e:
                self.emit({"event": "RequestRejected", "file": path.name, "error": str(e)})
                request = None
            safeio.unlink(path.parent, path.name)
            if isinstance(request, dict):
                return request
        return None

    def _handle_request(self, request: dict[str, Any]) -> None:
        kind = request.get("kind")
        try:
            self._busy_until = self.clock.now()
            if kind == "prompt" and isinstance(request.get("text"), str):
                self._goal_parked = None
                self._run(request["text"], "user")
            elif kind == "goal" and self.goals is not None:
                self._goal_request(request)
            else:
                raise RlmError(f"cannot handle request {kind!r} here")
        except RlmError as e:
            self.emit({"event": "RequestRejected", "kind": kind, "error": str(e)})

    def _goal_request(self, request: dict[str, Any]) -> None:
        assert self.goals is not None
        action = request.get("action")
        if action == "set":
            self.goals.set(request.get("objective", ""), request.get("token_budget"))
        elif action == "raise_budget":
            self.goals.raise_budget(request.get("token_budget"))  # type: ignore[arg-type]
        elif action in ("pause", "resume", "clear"):
            getattr(self.goals, action)()
        else:
            raise RlmError(f"unknown goal action {action!r}")
        self._goal_parked = None
        self.emit({"event": "GoalChanged", "action": action})

    # -- files -----------------------------------------------------------------------------

    def emit(self, record: dict[str, Any]) -> None:
        line = self.events.append(record, self.clock.now())
        if self.on_record is not None:
            try:
                self.on_record(json.loads(line))  # as the file holds it: redacted
            except Exception:  # noqa: BLE001 - the screen never stops the worker (the
                pass  # record is in the events file: `rlm attach` shows it)

    def _status(self, state: str, activity: str = "", exits_at: float | None = None) -> None:
        self.state, self.activity = state, activity
        nxt = None
        with contextlib.suppress(RlmError):
            nxt = self.scheduler.next_due()
        data = {
            "pid": os.getpid(), "session_id": self.session_id, "state": state,
            "activity": activity, "updated_at": self.clock.now(), "next_due": nxt,
            "exits_at": exits_at,
        }  # fmt: skip
        try:
            write_private_atomic(self.paths["status"], json.dumps(data).encode())
        except FileNotFoundError:
            if self.paths["dir"].is_dir():
                raise
            raise SessionGone(self.paths["dir"]) from None


# -- client side: what the CLI calls ------------------------------------------------------


def send_request(session_id: str, request: dict[str, Any], home: Path | None = None) -> Path:
    """Queue a request for the session's worker ({"kind": "prompt", "text": ...} or
    {"kind": "goal", "action": set|pause|resume|clear|raise_budget, ...})."""
    inbox = _paths(session_id, home)["inbox"]
    safeio.make_dirs(inbox.parent, inbox.name)
    path = inbox / f"{time.time_ns():020d}-{uuid.uuid4().hex[:6]}.json"
    write_private_atomic(path, json.dumps(request).encode(), root=inbox.parent)
    return path


def send_prompt(session_id: str, text: str, home: Path | None = None) -> Path:
    return send_request(session_id, {"kind": "prompt", "text": text}, home)


class WorkerSlow(RlmError):
    """The detached worker is alive but has not built its agent within the wait."""


START_WAIT_S = 120.0  # the first use of the local model joins and hashes a 1.1 GB file
# the fd of a pipe `start_detached` reads: the worker writes one byte once it has started.
# (worker.json says so too, but a first cell may remove the session dir, and the worker
# with it, between two looks at the file: the byte stays in the pipe.)
READY_FD_ENV = "RLM_WORKER_READY_FD"


def _tell_started(raw: str | None) -> None:
    """Write the started byte to the pipe `start_detached` gave (`raw`: its fd)."""
    if raw is None or not raw.isdigit():
        return
    with contextlib.suppress(OSError):
        os.write(int(raw), b"1")
    with contextlib.suppress(OSError):
        os.close(int(raw))


def start_detached(
    session_id: str,
    home: Path | None = None,
    *,
    runner: str | None = None,
    poll_s: float | None = None,
    wait_s: float = START_WAIT_S,
) -> int:
    """Spawn `python -m rlm.longrun.worker SESSION` in its own session; return its pid once
    it holds the lock and its runner is built (a byte on a pipe, `READY_FD_ENV`). A worker that
    exits first raises RlmError with its own error line; one still starting after
    `wait_s` raises WorkerSlow (it may yet start: `rlm ps`, worker.log).
    `runner` is 'module:factory' (factory(session_id, config) -> runner)."""
    paths = _paths(session_id, home)
    busy = lock_holder_info(paths["lock"])
    if busy is not None:
        raise WorkerRunning(paths["lock"], busy)
    where = str(paths["dir"])  # the directory checked here, not a name resolved again
    # -P: the cwd is not put on sys.path, so a folder named `rlm` where the user works
    # cannot shadow the package (the worker keeps the user's cwd for relative paths)
    if runner:
        argv = [sys.executable, "-P", "-m", "rlm.longrun.worker", where, "--runner", runner]
        argv += ["--poll", str(poll_s)] if poll_s else []
    else:  # the real agent: `rlm worker`, assembled by the composition root
        argv = [sys.executable, "-P", "-m", "rlm", "worker", where]
    ready_r, ready_w = os.pipe()
    env = dict(os.environ, RLM_HOME=str(home or rlm_home()), **{READY_FD_ENV: str(ready_w)})
    log_fd = safeio.open_append(paths["log"].parent, paths["log"].name)
    try:
        start = os.fstat(log_fd).st_size  # this worker's lines start here
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, env=env,
            start_new_session=True, close_fds=True, pass_fds=(ready_w,),
        )  # fmt: skip
    finally:
        os.close(log_fd)
        os.close(ready_w)
    try:
        deadline = time.monotonic() + wait_s
        closed = False  # the worker closed the pipe without the byte: it is exiting
        while time.monotonic() < deadline:
            if closed or not select.select([ready_r], [], [], 0.05)[0]:
                time.sleep(0.05 if closed else 0)
            elif os.read(ready_r, 1):
                return proc.pid  # it holds the lock and has built its runner
            else:
                closed = True
            if proc.poll() is not None:  # exited: started first only if the byte came
                if not closed and select.select([ready_r], [], [], 0)[0] \
                        and os.read(ready_r, 1):
                    return proc.pid
                raise RlmError(_start_failure(paths["log"], start, proc.returncode))
    finally:
        os.close(ready_r)
    raise WorkerSlow(f"the worker (pid {proc.pid}) has not finished starting within "
                     f"{wait_s:g} s; see {paths['log']}, and `rlm ps` once it is up")


def _start_failure(log: Path, start: int, code: int | None) -> str:
    """The worker's own error line (`rlm worker: ...`), else the tail of its log."""
    try:
        with os.fdopen(safeio.open_file(log.parent, log.name), "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        text = ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # its error line; not the "stopped (exit N)" that `rlm worker` prints after it
    own = [ln for ln in lines if ln.startswith("rlm worker: ")
           and not ln.startswith("rlm worker: stopped (exit ")]
    if own:
        return own[-1].removeprefix("rlm worker: ")
    tail = "\n".join(lines[-20:])
    return f"the worker exited at start (code {code})" + (f":\n{tail}" if tail else "")


def list_workers(home: Path | None = None) -> list[dict[str, Any]]:
    """Every session with a worker status file; `alive` says whether it holds the lock."""
    out: list[dict[str, Any]] = []
    root = sessions_path(home)
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        status = d / "worker.json"
        if not status.is_file():
            continue
        try:
            data = json.loads(safeio.read_text(d, status.name, 1 << 20))
        except (OSError, ValueError):
            data = {"session_id": d.name, "state": "unknown"}
        holder = lock_holder(d / "worker.lock")
        data["alive"] = holder is not None
        if not data["alive"] and data.get("state") not in ("stopped",):
            data["state"] = "dead"
        out.append(data)
    return out


def prune_workers(home: Path | None = None) -> list[str]:
    """Remove the status files of workers that no longer hold their session (stopped or
    dead): `rlm ps --prune`. Returns their session ids; a live worker's file is kept."""
    gone = []
    root = sessions_path(home)
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        status = d / "worker.json"
        if status.is_file() and lock_holder(d / "worker.lock") is None:
            safeio.unlink(d, status.name)
            gone.append(d.name)
    return gone


def stop_worker(session_id: str, home: Path | None = None, timeout_s: float = 30.0) -> bool:
    """SIGTERM the session's worker (the pid in its lock) and wait until the lock is free:
    its running cell is interrupted and its run ends, then its kernel is shut down.
    False when no worker was running; raises RlmError if it did not stop in time."""
    lock = _paths(session_id, home)["lock"]
    pid = lock_holder(lock)
    if not pid:
        return False
    if holds_lock(lock, pid) is False:  # the file names a process that is not the holder
        raise RlmError(f"{lock} names pid {pid}, which does not hold the session's lock; "
                       "not signalled (`rlm ps` shows the session's real worker)")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if lock_holder(lock) is None:
            return True
        time.sleep(0.05)
    raise RlmError(f"worker pid {pid} was sent SIGTERM and has not stopped within {timeout_s:g} s; "
                   f"force it with `kill -KILL {pid}` (its kernel restarts from the snapshot)")


def tail_events(
    session_id: str, home: Path | None = None, follow: bool = True, poll_s: float = 0.2
) -> Iterator[dict[str, Any]]:
    """Events from the start of the log; with `follow`, keep reading until the worker stops."""
    paths = _paths(session_id, home)
    pos, buf = 0, b""
    while True:
        events = paths["events"]
        with contextlib.suppress(FileNotFoundError), \
                os.fdopen(safeio.open_file(events.parent, events.name), "rb") as f:
            f.seek(pos)
            chunk = f.read()
            pos += len(chunk)
            buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            with contextlib.suppress(json.JSONDecodeError):
                yield json.loads(line)
        if not follow:
            return
        if not lines and lock_holder(paths["lock"]) is None:
            return
        time.sleep(poll_s)


def _load_factory(spec: str) -> RunnerFactory:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr or "runner")


def main(argv: list[str] | None = None, runner_factory: RunnerFactory | None = None,
         on_record: Callable[[dict[str, Any]], None] | None = None) -> int:
    """`python -m rlm.longrun.worker SESSION --runner module:factory` (tests, custom runners);
    `rlm worker SESSION` calls this with the composition root's factory."""
    if argv is None:  # a process of its own (start_detached): keys out of its environ block
        from rlm.secrets import protect_process_secrets

        protect_process_secrets()
    p = argparse.ArgumentParser(prog="python -m rlm.longrun.worker")
    p.add_argument("session_id")
    p.add_argument("--runner", help="module:factory, factory(session_id, config) -> runner")
    p.add_argument("--poll", type=float, default=0.5)
    args = p.parse_args(argv)
    from rlm.config import load_config

    config = load_config()
    if args.runner:
        runner_factory = _load_factory(args.runner)
    worker = Worker(args.session_id, config, poll_s=args.poll, runner_factory=runner_factory,
                    on_record=on_record)
    try:
        worker.run()
    except RlmError as e:
        print(f"rlm worker: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
