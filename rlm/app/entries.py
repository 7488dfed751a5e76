"""The entry points that are not a CLI command's own few lines: `run_task` (scripts,
benchmarks), the worker's runner, `rlm run --detach`, `rlm goal`. Each is a few lines over
`SessionRun` (rlm.app.lifecycle)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from rlm.agent.loop import Agent
from rlm.agent.result import RunResult
from rlm.app.inputs import attach_named_files, with_named_files
from rlm.app.lifecycle import SessionRun
from rlm.app.options import RunOptions
from rlm.config import Config, load_config
from rlm.errors import ConfigError
from rlm.events import Event, Notice
from rlm.longrun import GoalManager, GoalState
from rlm.longrun.lock import LOCK_NAME, SessionLock, holder, worker_holds
from rlm.longrun.worker import WorkerSlow, send_prompt, send_request
from rlm.longrun.worker import start_detached as spawn_worker
from rlm.protocols import SessionLog
from rlm.session.entries import MessageEntry
from rlm.session.store import SessionStore, resolve_session_path


def run_task(
    task: str,
    *,
    model: str | None = None,
    config: Config | None = None,
    context_files: list[Any] | None = None,
    on_event: Callable[[Event], None] | None = None,
    options: RunOptions | None = None,
) -> RunResult:
    """Run one task in a fresh session and return a `RunResult` (scripts, benchmarks).
    `options.goal` is the session's goal: the run continues until it is complete."""
    base = (config or load_config()).with_overrides(model=model)
    options = options or RunOptions()
    if context_files:
        options = replace(options, context=[str(p) for p in context_files])
    options, _ = with_named_files(task, options)
    run = SessionRun.new("run_task", task, options, base=base, home=base.home)
    started = time.monotonic()
    with run:
        run.prepare()
        events = run.drive(task, on_event)
        assert run.session is not None and run.agent is not None
        # as `rlm run --json` reports it: the model, the compaction settings, the advisor
        return RunResult.from_events(run.session, events, model=run.agent.llm.spec,
                                     duration_s=time.monotonic() - started
                                     ).describe_agent(run.agent)


class AgentRunner:
    """The worker's runner: the session's agent, assembled from its recorded options (the
    worker holds the session's lock)."""

    def __init__(self, session_id: str, config: Config | None = None):
        self.run = SessionRun.open("worker", session_id, base=config,
                                   home=config.home if config is not None else None, lock=False)
        self.run.__enter__()  # kept open until close(): the kernel restored from its snapshot
        try:
            self.run.prepare()
        except BaseException:
            self.run.close()
            raise
        assert self.run.session is not None and self.run.agent is not None
        self.session: SessionLog = self.run.session
        self.options = self.run.options
        self.agent: Agent = self.run.agent

    def __call__(self, prompt: str) -> Iterator[Event]:
        """The run of `prompt`, after the files it names that no input holds yet are
        loaded (the first prompt's came with the options); what was loaded, or which near
        names were meant, is said first, as `rlm chat` says it."""
        for note in attach_named_files(self.agent, prompt):
            yield Notice(note)
        yield from self.agent.run(prompt)

    def steer(self, text: str, custom_type: str = "steer",
              on_delivered: Callable[[], None] | None = None) -> None:
        self.agent.steer(text, custom_type, on_delivered)

    def stop(self) -> None:
        """`rlm stop` (the worker's SIGTERM): interrupt the running cell, end the run."""
        if not self.agent.stop_requested:
            self.agent.stop()

    def close(self) -> None:
        self.run.close()


def agent_runner(session_id: str, config: Config | None = None) -> AgentRunner:
    return AgentRunner(session_id, config)


def run_worker(session_id: str,
               on_record: Callable[[dict[str, Any]], None] | None = None) -> int:
    """`rlm worker SESSION`: the resident worker over the real agent; `on_record` is shown
    each event record as it is written (a foreground worker renders its runs)."""
    from rlm.longrun.worker import main as worker_main

    return worker_main([session_id], runner_factory=agent_runner, on_record=on_record)


def start_detached(task: str, options: RunOptions) -> tuple[SessionStore, int]:
    """`rlm run --detach`: everything that can be checked is checked here, before a worker
    exists (config, models, compaction settings: `check_start`); the session is created
    with the options recorded, the task queued, and the worker started. It returns once
    the worker has built its agent; a worker that fails while building is reported here
    (and its session removed), one that is still building after the wait is left to run."""
    run = SessionRun.new("worker", task, options, build=False)
    with run:
        assert run.session is not None and run.config is not None
        home = run.config.home
        send_prompt(run.session.id, task, home)
        try:
            pid = spawn_worker(run.session.id, home)
        except WorkerSlow:
            run.keep = True  # the worker may still take it: never remove its session
            raise
    return run.session, pid


def resume_detached(session_id: str, task: str | None) -> tuple[str, int | None]:
    """`rlm resume SESSION --detach`: the prompt (default: continue where it stopped) goes
    to the session's worker, started in the background when none holds the session.
    Returns (session id, the new worker's pid, or None when a worker already held it)."""
    home = load_config().home
    path = resolve_session_path(session_id, home)
    with contextlib.closing(SessionStore.open(str(path), home, readonly=True)) as session:
        text = resume_prompt(session, task, None) or "Continue."
        sid = session.id
    send_request(str(path.parent), {"kind": "prompt", "text": text}, home)
    if worker_holds(path.parent):
        return sid, None
    return sid, spawn_worker(str(path.parent), home)


def ensure_worker(session_id: str) -> tuple[str, int | None]:
    """A background worker for the session (`--worker` on schedule, heartbeat, goal):
    (its id, the pid of the worker started now, or None when one already held it)."""
    home = load_config().home
    path = resolve_session_path(session_id, home)
    if worker_holds(path.parent):
        return path.parent.name, None
    return path.parent.name, spawn_worker(str(path.parent), home)


def resume_prompt(session: SessionLog, task: str | None, from_entry: str | None) -> str | None:
    """`rlm resume` without a task: continue an unanswered prompt as it is, else "Continue."."""
    if task is not None or from_entry is not None:
        return task
    msgs = [e for e in session.branch() if isinstance(e, MessageEntry)]
    if msgs and msgs[-1].role == "user":
        return None
    return "Continue."


def change_goal(session_id: str, action: str, text: str, budget: int | None) -> str:
    """`rlm goal`: through the worker's inbox when a worker holds the session (it is the
    only writer then); else applied here under the session's lock."""
    home = load_config().home
    path = resolve_session_path(session_id, home)
    if action == "status":
        return goal_line(GoalManager(SessionStore.open(path, home, readonly=True)), action, "", None)
    if worker_holds(path.parent):
        req: dict[str, Any] = {"kind": "goal",
                               "action": "raise_budget" if action == "budget" else action}
        if action == "set":
            req.update(objective=text, token_budget=budget)
        elif action == "budget":
            req["token_budget"] = _int(text, "rlm goal SESSION budget N")
        send_request(str(path.parent), req, home)  # by directory: a copy has its own inbox
        return "sent to the running worker"
    lock = SessionLock.for_session(path.parent, "goal")
    lock.acquire()  # the one writer; then open (torn-tail recovery is a write)
    try:
        with contextlib.closing(SessionStore.open(str(path), home)) as session:
            return goal_line(GoalManager(session), action, text, budget)
    finally:
        lock.release()


def _int(text: str, usage: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not a whole number: {usage}") from None


def goal_line(goals: GoalManager, action: str, text: str, budget: int | None) -> str:
    """Apply one goal action; the one-line status the user sees."""
    g: GoalState | None
    if action == "set":
        if not text:
            raise ConfigError("rlm goal SESSION set OBJECTIVE [--budget N]")
        g = goals.set(text, token_budget=budget)
    elif action == "pause":
        g = goals.pause()
    elif action == "resume":
        g = goals.resume()
    elif action == "clear":
        goals.clear()
        return "goal cleared"
    elif action == "budget":
        g = goals.raise_budget(_int(text, "rlm goal SESSION budget N"))
    else:
        g = goals.get()
    if g is None:
        return "no goal"
    budget_s = f"{g.tokens_used:,}/{g.token_budget:,}" if g.token_budget else f"{g.tokens_used:,}"
    line = f"goal [{g.status}] {g.objective} (tokens {budget_s}, continuations {g.continuations})"
    if g.status in ("blocked", "budget_limited") and g.last_reason:
        line += f"\n  {g.last_reason}"  # why it stopped (a stuck run: what the host saw)
    return line


def session_holder(session: SessionLog) -> str | None:
    """Who holds the session now, for `rlm schedule list` and friends (None: nobody)."""
    if session.dir is None:
        return None
    h = holder(session.dir / LOCK_NAME)
    return h.describe() if h is not None else None
