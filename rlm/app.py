"""The composition root: every agent is assembled here, the same way.

Entry points — `rlm run`, `chat`, `resume`, the worker behind `--detach`, `%%rlm`,
`run_task`, `rlm_query` children — differ only in what they pass to `build_agent`:

    options = RunOptions(autonomous=True, overrides={"max_turns": 5})
    session = new_session(task, options)            # records the options in the session
    agent = build_agent(session, options.config(session), entry="run", options=options)

`build_agent` attaches compaction (sized to the model's window), goals, the scheduler's
kernel handlers, the autonomous policy and the rlm_query child runner. `drive()` runs one
prompt and fires due heartbeats / one-shot jobs into it while no worker holds the session.
What an entry point cannot offer is decided in ONE place, `GAPS` below; the user is told
(a Notice at the start of the run), and the model's calls to a refused feature fail with
the same message.

Run options travel with the run: `new_session` records them as a hidden `run_options`
entry (custom, content None: never sent to the model), and `open_session` merges what the
user passes now over what was recorded, so `--detach`, a worker restart and `rlm resume`
keep the options the run started with. Logs written before this entry existed open with
the defaults.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rlm import trust
from rlm.agent.context_files import (
    NAMED_FILE_LIMIT,
    describe_variables,
    load_context_files,
    named_files,
)
from rlm.agent.loop import Agent
from rlm.agent.prompts import system_prompt
from rlm.agent.recursion import TokenBudget
from rlm.agent.session_run import RunResult, default_model, move_to_branch, resolve_model
from rlm.compaction.controller import CompactionController
from rlm.compaction.core import perform_compaction
from rlm.compaction.plan import CompactionSettings, effective_settings
from rlm.config import Config, load_config, scaled_output_budget
from rlm.errors import ConfigError, RlmError
from rlm.events import CellFinished, Compacted, Event, Notice, RunEnded, TurnStarted
from rlm.kernel.kinds import kernel_notes
from rlm.llm.preflight import preflight
from rlm.llm.types import LLM
from rlm.longrun import AutonomousPolicy, GoalManager, GoalState, Scheduler, install
from rlm.longrun.dispatch import TickDispatcher
from rlm.longrun.lock import LOCK_NAME, SessionLock, holder, worker_holds
from rlm.longrun.schedule import KERNEL_METHODS as SCHEDULE_METHODS
from rlm.longrun.worker import Worker, append_event, event_record, send_prompt, send_request
from rlm.longrun.worker import start_detached as spawn_worker
from rlm.paths import private_dir, write_private_atomic
from rlm.protocols import Executor, SessionLog
from rlm.session.context import build_messages
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry, new_id
from rlm.session.store import SessionStore, resolve_session_path

RUN_OPTIONS = "run_options"

# --------------------------------------------------------------- entry point x feature
ENTRY_POINTS = ("run", "chat", "resume", "worker", "notebook", "run_task", "child")
FEATURES = ("compaction", "goals", "schedules", "autonomous", "snapshot")


@dataclass(frozen=True)
class Gap:
    """A feature an entry point lacks (`refused`: its kernel calls fail with `message`) or
    offers only in part (`refused=False`: the user is told the limit)."""

    message: str
    refused: bool = True


# Every feature is offered at every entry point except these. The one place to look.
GAPS: dict[str, dict[str, Gap]] = {
    "notebook": {
        "snapshot": Gap(
            "%%rlm runs in your notebook's own kernel: rlm does not snapshot it, so nothing is "
            "restored after a kernel restart (restart it from JupyterLab and rerun your cells)",
            refused=True),
        "schedules": Gap(
            "heartbeats and cron jobs of a %%rlm session fire only while a %%rlm cell runs "
            "(the notebook has no worker)", refused=False),
    },
    "child": {
        "goals": Gap("goals belong to the top-level session: an rlm_query child cannot read "
                     "or change them; report back to the parent instead"),
        "schedules": Gap("heartbeats and cron jobs belong to the top-level session: an "
                         "rlm_query child cannot create them"),
    },
}


def gap(entry: str, feature: str) -> Gap | None:
    if entry not in ENTRY_POINTS or feature not in FEATURES:
        raise ValueError(f"unknown entry point/feature {entry!r}/{feature!r}")
    return GAPS.get(entry, {}).get(feature)


def feature_table() -> dict[str, dict[str, str]]:
    """entry point -> feature -> "yes" | "partial: ..." | "no: ..." (docs and tests)."""
    out: dict[str, dict[str, str]] = {}
    for e in ENTRY_POINTS:
        row = {}
        for f in FEATURES:
            g = gap(e, f)
            row[f] = "yes" if g is None else ("no: " if g.refused else "partial: ") + g.message
        out[e] = row
    return out


# ------------------------------------------------------------------------ run options
@dataclass
class RunOptions:
    """How a run was asked for: the command line's run flags plus its Config overrides
    (only the flags the user gave; -1 means "unlimited" for the limit flags)."""

    autonomous: bool = False
    gate: list[str] = field(default_factory=list)
    max_continuations: int | None = None
    context: list[str] = field(default_factory=list)  # files loaded before the first prompt
    named: list[str] = field(default_factory=list)  # files the task named (loaded if they can be)
    notebook: str | None = None  # .ipynb executed before the first prompt
    overrides: dict[str, Any] = field(default_factory=dict)
    workdir: str | None = None  # the kernel's working directory for inputs (rlm demo)
    # set as the session's goal when it is opened for this run; not recorded with the
    # options (the goal lives in its own entries, and a resume must not reset it)
    goal: str | None = None
    refused: list[str] = field(default_factory=list, compare=False)  # trust.screen's lines

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["goal"], d["refused"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunOptions:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        opts = cls(**known)
        opts.gate, opts.context = list(opts.gate or []), list(opts.context or [])
        opts.named = list(opts.named or [])
        opts.overrides = dict(opts.overrides or {})
        return opts

    def over(self, recorded: RunOptions | None) -> RunOptions:
        """These options (given now) over `recorded` ones: what the user gives wins."""
        if recorded is None:
            return self
        return RunOptions(
            autonomous=self.autonomous or recorded.autonomous,
            gate=self.gate or recorded.gate,
            max_continuations=(self.max_continuations if self.max_continuations is not None
                               else recorded.max_continuations),
            context=self.context or recorded.context,
            named=self.named or recorded.named,
            notebook=self.notebook or recorded.notebook,
            overrides={**recorded.overrides, **self.overrides},
            workdir=self.workdir or recorded.workdir,
            goal=self.goal,
        )

    def config(self, session: SessionLog | None = None, base: Config | None = None) -> Config:
        """Defaults < TOML < env < these overrides; the session's model unless one is given."""
        flags = {k: v for k, v in self.overrides.items() if v is not None and v != -1}
        cfg = base.with_overrides(**flags) if base is not None else load_config(**flags)
        if self.overrides.get("max_turns") == -1:
            cfg = replace(cfg, max_turns=None)
        if self.overrides.get("max_tokens") == -1:
            cfg = replace(cfg, max_tokens=None)
        if not cfg.model and session is not None and session.header.model:
            cfg = replace(cfg, model=session.header.model)
        if self.workdir:  # every kernel of the run starts there: resume and restarts too
            cfg = replace(cfg, kernel_cwd=self.workdir)
        return resolve_model(cfg)


def recorded_options(session: SessionLog) -> RunOptions | None:
    """The newest `run_options` entry on the branch (None for logs written before them)."""
    for e in reversed(session.branch()):
        if isinstance(e, CustomEntry) and e.custom_type == RUN_OPTIONS:
            return RunOptions.from_dict(e.data or {})
    return None


def record_options(session: SessionLog, options: RunOptions) -> None:
    recorded = recorded_options(session)
    if recorded is None or recorded.to_dict() != options.to_dict():
        session.append(CustomEntry(custom_type=RUN_OPTIONS, data=options.to_dict(),
                                   display=False, content=None))
        trust.remember(session.id, session.dir, options.to_dict(), session.header.model)


# --------------------------------------------------------------------------- sessions
def new_session(task: str | None, options: RunOptions, *, home: Path | None = None) -> SessionStore:
    """A new session with the options recorded (context paths made absolute)."""
    cfg = options.config()
    options = replace(options, context=[str(Path(c).expanduser().resolve()) for c in options.context],
                      notebook=str(Path(options.notebook).resolve()) if options.notebook else None)
    preflight(cfg.model, cfg)  # a model that cannot run fails here, before a session exists
    if cfg.snapshot_url and "snapshot_url" not in options.overrides:  # from a config file:
        options.overrides = {**options.overrides, "snapshot_url": cfg.snapshot_url}  # pinned
    session = SessionStore.create(home or cfg.home, model=cfg.model or "", task=task)
    try:
        record_options(session, options)
        set_goal_given(session, options)
    except BaseException:
        discard_unstarted(session)
        raise
    return session


def set_goal_given(session: SessionLog, options: RunOptions) -> None:
    """`--goal TEXT`: the session's goal from now on (replacing any), before the first
    prompt, so the run continues until the goal is complete (rlm.longrun.goals)."""
    if options.goal is not None:
        GoalManager(session).set(options.goal)


def discard_unstarted(session: SessionLog) -> bool:
    """Remove a session this process created when its start failed before the first
    prompt reached the log: no header-only sessions pile up. True when removed."""
    if session.dir is None or not session.dir.is_dir():
        return False
    if any(isinstance(e, MessageEntry) for e in session.branch()):
        return False
    session.close()
    shutil.rmtree(session.dir, ignore_errors=True)
    return True


def open_session(session_id: str, given: RunOptions | None = None, *,
                 home: Path | None = None, readonly: bool = False) -> tuple[SessionStore, RunOptions]:
    """Open a stored session; returns it with the effective options (given over recorded).
    `build_agent` records them (after moving to a `--from` branch) when they changed."""
    session = SessionStore.open(session_id, home or load_config().home, readonly=readonly)
    options = trust.merged(session, given or RunOptions(), recorded_options(session), load_config())
    return session, options


def open_for_write(session_id: str, kind: str, given: RunOptions | None = None, *,
                   home: Path | None = None) -> tuple[SessionStore, RunOptions, SessionLock]:
    """Take the session's writer lock, then open it (torn-tail recovery and the options
    record are writes: never done while another process writes the log)."""
    path = resolve_session_path(session_id, home or load_config().home)
    lock = SessionLock.for_session(path.parent, kind)
    lock.acquire()
    try:
        session, options = open_session(str(path), given, home=home)
        if kind in ("resume", "chat"):  # they run the model: check it before any turn
            try:
                cfg = options.config(session)
                preflight(cfg.model, cfg)
                set_goal_given(session, options)
            except BaseException:
                session.close()
                raise
    except BaseException:
        lock.release()
        raise
    return session, options, lock


def writer_lock(session: SessionLog, kind: str) -> SessionLock:
    """The session's one-writer lock, acquired (raises SessionBusy naming the holder)."""
    if session.dir is None:
        raise RlmError("an in-memory session has no lock")
    lock = SessionLock.for_session(session.dir, kind)
    lock.acquire()
    return lock


def resume_prompt(session: SessionLog, task: str | None, from_entry: str | None) -> str | None:
    """`rlm resume` without a task: continue an unanswered prompt as it is, else "Continue."."""
    if task is not None or from_entry is not None:
        return task
    msgs = [e for e in session.branch() if isinstance(e, MessageEntry)]
    if msgs and msgs[-1].role == "user":
        return None
    return "Continue."


# ------------------------------------------------------------------------------ build
def build_agent(
    session: SessionLog,
    config: Config,
    *,
    entry: str = "run",
    options: RunOptions | None = None,
    executor: Executor | None = None,
    llm: LLM | None = None,
    llm_factory: Callable[[str], LLM] | None = None,
    depth: int = 0,
    budget: TokenBudget | None = None,
    leaf: str | None = None,
) -> Agent:
    """A ready agent for `entry` (one of ENTRY_POINTS): everything attached, gaps told."""
    if entry not in ENTRY_POINTS:
        raise ValueError(f"unknown entry point {entry!r}")
    options = options or RunOptions()
    agent = Agent(session, config, executor=executor, llm=llm, llm_factory=llm_factory,
                  depth=depth, budget=budget)
    attach_all(agent, entry, options)
    agent.notices.extend(Notice(line, "warning") for line in options.refused)
    if leaf and leaf != session.leaf_id:
        move_to_branch(agent, leaf)
    if entry in ("run", "chat", "resume", "worker"):  # the CLI's options travel with the run
        record_options(session, options)
    return agent


def attach_all(agent: Agent, entry: str = "run", options: RunOptions | None = None) -> None:
    """Wire an Agent for `entry`: child runner, compaction, goals, schedules, policy, and
    a Notice for each gap (tests that build an Agent around a fake model use this)."""
    agent.child_runner = run_child
    agent.entry = entry
    size_output_to_window(agent)
    attach_compaction(agent)  # with compaction disabled, only compact.run() compacts
    _attach_longrun(agent, entry, options or RunOptions())
    for feature in FEATURES:
        g = gap(entry, feature)
        if g is not None and entry != "child":  # a child's user is its parent's model
            agent.notices.append(Notice(g.message, "warning" if g.refused else "info"))
    if entry != "child" and agent.executor is None:  # where the kernel runs, said once
        agent.notices.extend(Notice(n, "info") for n in kernel_notes(agent.config))


def _refuse(g: Gap | None) -> Callable[[dict[str, Any]], Any]:
    message = g.message if g is not None else "not available here"

    def refuse(params: dict[str, Any]) -> Any:
        raise RlmError(message)

    return refuse


def size_output_to_window(agent: Agent) -> None:
    """An output budget the user did not set is scaled to the model's window, for the
    prompt, the kernel's shaping and notebook imports alike (an executor handed in, e.g.
    `%%rlm`'s or a parent's kernel, gets the same value)."""
    if agent.config.output_budget_chars is not None:
        return
    budget = scaled_output_budget(agent.context_window())
    agent.config = replace(agent.config, output_budget_chars=budget)
    executor_config = getattr(agent.executor, "config", None)
    if isinstance(executor_config, Config) and executor_config.output_budget_chars is None:
        agent.executor.config = replace(executor_config,  # type: ignore[union-attr]
                                        output_budget_chars=budget)


def attach_compaction(agent: Agent) -> CompactionController:
    """Three triggers, one core: compact.run/status handlers, after-turn and overflow."""
    ctl = CompactionController(
        agent.session,
        agent.compaction_llm,
        CompactionSettings.from_config(agent.config),
        agent.context_window,
        current_model_fn=lambda: agent.llm.spec,
        turn_active_fn=lambda: agent.turn_active,
        projection=lambda branch: build_messages(
            list(branch), system_prompt=system_prompt(agent.config,
                                                      native_tools=agent.llm.native_tools),
            native_tools=agent.llm.native_tools),
    )
    eff = ctl.effective()  # settings that cannot fit the model's window are refused at start
    agent.compaction = ctl
    window_note = getattr(agent.llm, "window_note", None)
    note = window_note() if eff.enabled and eff.window is None and window_note else None
    if note and agent.entry != "child":
        agent.notices.append(Notice(note, "warning"))
    agent.handlers["compact.run"] = lambda p: ctl.request(p.get("instructions"))
    agent.handlers["compact.status"] = lambda p: ctl.status()

    def compacted(entry: CompactionEntry | None) -> list[Event]:
        return [] if entry is None else [Compacted(entry.trigger, entry.tokens_before,
                                                   entry.summary)]

    def before_prompt(a: Agent) -> list[Event]:
        return compacted(ctl.before_prompt(a.executor))

    def after_turn(a: Agent) -> list[Event]:
        last = next((e for e in reversed(a.session.branch())
                     if isinstance(e, MessageEntry) and e.role == "assistant"), None)
        if last is not None and last.error is None:
            ctl.note_assistant_ok()
        return compacted(ctl.after_turn(a.executor))

    def on_overflow(a: Agent, entry: MessageEntry) -> str:
        decision = ctl.on_overflow(entry.id, entry.model, a.executor)
        return decision if decision == "retry" else (ctl.overflow_message or "report")

    def at_run_start(a: Agent) -> None:
        ctl.start_run()  # resets the overflow guard; refuses settings that cannot fit

    agent.run_start_hooks.append(at_run_start)
    agent.prompt_hooks.append(before_prompt)
    agent.turn_hooks.append(after_turn)
    agent.overflow_hook = on_overflow
    return ctl


def _attach_longrun(agent: Agent, entry: str, options: RunOptions) -> None:
    cfg = agent.config
    policy = None
    if options.autonomous and gap(entry, "autonomous") is None:
        cont = options.max_continuations
        policy = AutonomousPolicy(
            max_continuations=None if cont in (None, -1) else cont,
            max_turns=cfg.max_turns, max_tokens=cfg.max_tokens, max_wall_s=cfg.max_wall_s,
            gates=list(options.gate), cwd=Path.cwd(),
        )
    goals = None if gap(entry, "goals") else GoalManager(agent.session)
    scheduler = None
    sched_gap = gap(entry, "schedules")
    if agent.session.dir is not None and not (sched_gap is not None and sched_gap.refused):
        scheduler = Scheduler(agent.session.dir / "scheduled-jobs.json")
    install(agent, goals=goals, scheduler=scheduler, policy=policy)
    agent.policy = policy
    for feature, methods in (("goals", [f"goal.{v}" for v in ("get", "complete", "block")]),
                             ("schedules", list(SCHEDULE_METHODS))):
        g = gap(entry, feature)
        if g is not None and g.refused:
            for m in methods:
                agent.handlers[m] = _refuse(g)


def compact_now(agent: Agent, instructions: str | None = None) -> CompactionEntry | None:
    """`/compact` between turns of a chat: the live kernel is listed, never touched; the
    settings are the ones scaled to the model's window."""
    if agent.compaction is not None:
        return agent.compaction.compact("manual", agent.executor, instructions)
    return perform_compaction(
        agent.session,
        agent.compaction_llm(),
        effective_settings(agent.config, agent.context_window(), strict=False).settings,
        trigger="manual",
        instructions=instructions,
        kernel=agent.executor,
    )


# ------------------------------------------------------------------------ inputs
def prepare_inputs(agent: Agent, options: RunOptions, prompt: str | None = None) -> list[str]:
    """Before a session's first prompt: execute --notebook, load --context files and the
    files the task named. A session that already has messages got them at its start (its
    kernel restores them); there, files the new `prompt` names are loaded. Returns notes
    for the user."""
    if any(isinstance(e, MessageEntry) for e in agent.session.branch()):
        return attach_named_files(agent, prompt)
    ex = agent.executor
    if ex is None:
        raise RlmError("start the agent before loading its inputs")
    if options.notebook:
        from rlm.notebook.from_notebook import import_notebook

        import_notebook(Path(options.notebook), ex, agent.session)
    if options.context or options.named:
        load_context_files(agent, [*options.context, *options.named], optional=options.named)
    return []


def with_named_files(task: str | None, options: RunOptions) -> tuple[RunOptions, list[str]]:
    """A new session's task that names existing files (`... in sales.csv`) gets them as
    inputs (`RunOptions.named`, recorded with the options, so a --detach worker loads them
    too); returns the options and a note per file too big to load up front."""
    if not task:
        return options, []
    load, big = named_files(task, Path(options.workdir or os.getcwd()), options.context)
    return (replace(options, named=load) if load else options), _too_big(big)


def attach_named_files(agent: Agent, prompt: str | None) -> list[str]:
    """A prompt to a session that already ran (a chat message, `rlm resume ID "..."`)
    that names files no input entry holds yet: they are loaded as `/load` does. Returns
    notes for the user: what was loaded, what was too big."""
    if not prompt or agent.executor is None:
        return []
    held = sorted(agent.input_files())
    load, big = named_files(prompt, Path(agent.config.kernel_cwd or os.getcwd()), held)
    notes = _too_big(big)
    if load:
        names = load_context_files(agent, load, optional=load)
        notes.append(f"loaded {', '.join(Path(f).name for f in load)} (named in the prompt)"
                     + (f" as {', '.join(names)}" if names else ": none could be read"))
    return notes


def _too_big(big: list[str]) -> list[str]:
    return [f"{b}, named in the prompt, is over {NAMED_FILE_LIMIT // 2**20} MB: not loaded "
            f"up front (the model's code can read it; --context loads it anyway)" for b in big]


def put_context(agent: Agent, context: Any) -> None:
    """An rlm_query child's `context` argument, as the kernel variable `context`."""
    assert agent.session.dir is not None and agent.executor is not None
    path = agent.session.dir / "context.json"
    write_private_atomic(path, json.dumps(context, default=str).encode())
    res = agent.executor.execute(
        f"import json as _j\nwith open({str(path)!r}) as _f:\n    context = _j.load(_f)\ndel _j, _f\n",
        timeout=120,
    )
    if not res.ok:
        raise RlmError(f"could not load the rlm_query context: {res.shaped[:500]}")
    agent.attach_context(CustomEntry(
        custom_type="context_vars", data={"names": ["context"]}, display=True,
        content=describe_variables(agent, ["context"], origin="passed by the parent agent")))


def run_child(parent: Agent, task: str, context: Any) -> str | None:
    """rlm_query: a child agent with its own kernel and session under the parent's,
    assembled like every other agent (entry "child": compaction, no goals/schedules)."""
    cfg = parent.config
    child_model = cfg.sub_model or cfg.model
    if not child_model:
        raise ConfigError("rlm_query needs a model: set --sub-model or --model")
    if parent.session.dir is None:
        raise RlmError("rlm_query needs an on-disk parent session")
    child_cfg = replace(cfg, model=child_model)
    child_dir = private_dir(parent.session.dir / "children" / new_id())
    session = SessionStore.create(cfg.home, model=child_model, task=task,
                                  parent_session=parent.session.id, session_dir=child_dir)
    child = build_agent(session, child_cfg, entry="child", llm_factory=parent._llm_factory,
                        depth=parent.depth + 1, budget=parent.budget)
    try:
        with child:
            if context is not None:
                put_context(child, context)
            end = None
            for ev in child.run(task):
                if isinstance(ev, RunEnded):
                    end = ev
        if end is not None and end.reason not in ("final", "no_code"):
            raise RlmError(child_failure(session, end.reason, end.detail))
        return end.final if end else None
    finally:
        parent.add_tokens(child.tokens_used)
        session.close()


def child_failure(session: SessionStore, reason: str, detail: str | None) -> str:
    """Why an rlm_query child ended without an answer, as its log says (an overflow says
    "context overflow", not a generic failure)."""
    err = next((e.error for e in reversed(session.branch())
                if isinstance(e, MessageEntry) and e.error), None)
    why = err or detail
    return (f"the rlm_query child {session.id} ended without an answer ({reason}"
            f"{': ' + why if why else ''})")


# ---------------------------------------------------------------------- driving
class ForegroundSchedules:
    """Fires a session's due ticks while this process holds it and no worker does: steer
    ticks (and follow-ups due mid-run) go into the running agent; follow-ups due when the
    run has ended become runs of their own. Events go to `worker-events.jsonl` too, so
    `rlm attach` can follow a foreground run."""

    def __init__(self, agent: Agent):
        self.agent = agent
        d = agent.session.dir
        self.events_path = d / "worker-events.jsonl" if d is not None else None
        self.dispatch = None
        g = gap(agent.entry, "schedules")
        if d is not None and not (g is not None and g.refused):
            self.dispatch = TickDispatcher(Scheduler(d / "scheduled-jobs.json"), self._emit)

    def _emit(self, record: dict[str, Any]) -> None:
        if self.events_path is not None:
            append_event(self.events_path, record, self.dispatch.clock.now() if self.dispatch
                         else 0.0)

    def run(self, prompt: str | None, on_event: Callable[[Event], None]) -> list[Event]:
        """One prompt; then, once, what fell due during it: ticks queued into the run after
        its last turn get a run of their own (they are confirmed when they reach the log),
        and follow-up ticks due now each get a run. One round only, so `rlm run` ends."""
        events: list[Event] = []

        def take(ev: Event) -> bool:
            events.append(ev)
            on_event(ev)
            if self.events_path is not None:
                self._emit(event_record(ev))
            if self.dispatch is not None and isinstance(ev, TurnStarted | CellFinished):
                # once per turn and per cell (not per streamed token): what fell due goes
                # into the run before its next model call
                self.dispatch.steer_due(self.agent, delivery=None, force=True)
            return True

        if self.dispatch is None:
            for ev in self.agent.run(prompt):
                take(ev)
            return events
        self.dispatch.drive(self.agent.run(prompt), None, take)
        if self.agent.pending_steered():
            self.dispatch.drive(self.agent.run(None), None, take)
        for tick in self.dispatch.claim_due():
            self.dispatch.drive(self.agent.run(tick.message()), tick.tick_id, take)
        return events


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


# ------------------------------------------------------------------ entry points
def run_task(
    task: str,
    *,
    model: str | None = None,
    config: Config | None = None,
    context_files: list[Any] | None = None,
    on_event: Callable[[Event], None] | None = None,
    options: RunOptions | None = None,
) -> RunResult:
    """Run one task in a fresh session and return a `RunResult` (scripts, benchmarks)."""
    cfg = resolve_model((config or load_config()).with_overrides(model=model))
    options = options or RunOptions()
    if context_files:
        options = replace(options, context=[str(p) for p in context_files])
    options, _ = with_named_files(task, options)
    session = SessionStore.create(cfg.home, model=cfg.model or "", task=task)
    record_options(session, options)
    agent = build_agent(session, cfg, entry="run_task", options=options)
    with agent:
        prepare_inputs(agent, options)
        events = drive(agent, task, on_event)
    session.close()
    return RunResult.from_events(session, events)


class AgentRunner:
    """The worker's runner: the session's agent, assembled from its recorded options."""

    def __init__(self, session_id: str, config: Config | None = None):
        home = config.home if config is not None else None
        self.session, self.options = open_session(session_id, home=home)
        cfg = self.options.config(self.session, base=config)
        self.agent = build_agent(self.session, cfg, entry="worker", options=self.options)
        self.agent.start()  # restores the kernel from its snapshot
        prepare_inputs(self.agent, self.options)

    def __call__(self, prompt: str) -> Iterator[Event]:
        attach_named_files(self.agent, prompt)  # a later prompt's files (the first's: options)
        return self.agent.run(prompt)

    def steer(self, text: str, custom_type: str = "steer",
              on_delivered: Callable[[], None] | None = None) -> None:
        self.agent.steer(text, custom_type, on_delivered)

    def stop(self) -> None:
        """`rlm stop` (the worker's SIGTERM): interrupt the running cell, end the run."""
        if not self.agent.stop_requested:
            self.agent.stop()

    def close(self) -> None:
        self.agent.close()
        self.session.close()


def agent_runner(session_id: str, config: Any = None) -> AgentRunner:
    return AgentRunner(session_id, config)


def run_worker(session_id: str) -> int:
    """`rlm worker SESSION`: the resident worker over the real agent."""
    from rlm.longrun.worker import main as worker_main

    return worker_main([session_id], runner_factory=agent_runner)


def start_detached(task: str, options: RunOptions) -> tuple[SessionStore, int]:
    """`rlm run --detach`: create the session (options recorded), queue the task, start
    its worker; the worker assembles the agent from the recorded options."""
    home = options.config().home
    session = new_session(task, options, home=home)
    session.close()
    try:
        send_prompt(session.id, task, home)
        pid = spawn_worker(session.id, home)
    except BaseException:
        discard_unstarted(session)  # no worker will ever take it
        raise
    return session, pid


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
    session, _, lock = open_for_write(str(path), "goal", home=home)
    try:
        return goal_line(GoalManager(session), action, text, budget)
    finally:
        session.close()
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
    return f"goal [{g.status}] {g.objective} (tokens {budget_s}, continuations {g.continuations})"


def session_holder(session: SessionLog) -> str | None:
    """Who holds the session now, for `rlm schedule list` and friends (None: nobody)."""
    if session.dir is None:
        return None
    h = holder(session.dir / LOCK_NAME)
    return h.describe() if h is not None else None


__all__ = [
    "ENTRY_POINTS", "FEATURES", "GAPS", "AgentRunner", "ForegroundSchedules", "Gap",
    "RunOptions", "Worker", "agent_runner", "attach_compaction", "build_agent", "change_goal",
    "default_model", "discard_unstarted", "drive", "feature_table", "new_session", "open_session", "prepare_inputs",
    "record_options", "recorded_options", "resume_prompt", "run_child", "run_task",
    "run_worker", "schedules_note", "start_detached", "writer_lock",
]  # fmt: skip
