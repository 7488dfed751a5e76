"""One run's lifecycle, the same for every entry point: `SessionRun`.

    with SessionRun.new("run", task, options) as run:    # or .open(...), .child(...)
        notes = run.prepare(task)                        # --context, --notebook, named files
        events = run.drive(task, on_event)

Entering acquires, in this order, and unwinds in reverse when any step fails:

- new:  config (defaults < TOML < env < flags) -> `check_start` (the models preflighted,
        compaction settings checked against the window known offline) -> session created
        (options recorded, `--goal` set) -> writer lock -> agent built -> kernel started;
- open: writer lock -> session opened (torn tail recovered; the options given now over the
        recorded ones) -> `check_start` -> `--goal` -> agent built (`--from` branch, options
        recorded) -> kernel started (snapshot restored);
- child: a session under the parent's `children/`, the parent's model factory and budget
        (one whose log is there already, a lost child resumed, is opened: its kernel
        restored from its snapshot).

Leaving is one `finally`: kernel stopped, session closed, lock released; a session this
run created is removed when the run failed before its first prompt reached the log.
`build_agent` is here too: every agent, with or without a SessionRun, is built by it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from rlm import trust
from rlm.agent.budget import TokenBudget
from rlm.agent.child_report import ChildrenState
from rlm.agent.children import (
    CONTEXT_FILE,
    ROLE_ENTRY,
    ChildBudgetExceeded,
    ChildRun,
    child_role,
    role_of,
    sections_of,
)
from rlm.agent.loop import Agent
from rlm.agent.policy.schema import SchemaRule, schema_note, typed_result
from rlm.agent.slots import TreeSlots
from rlm.app.advising import ADVISOR
from rlm.app.build import (
    CHECKPOINT,
    COMPACTION,
    LONGRUN,
    kernel_factory,
    model_factory,
    move_to_branch,
    size_output_to_window,
)
from rlm.app.candidates import CANDIDATES
from rlm.app.driving import drive
from rlm.app.features import ENTRY_POINTS, FEATURES, answer_every_method, gap, tells_user
from rlm.app.inputs import prepare_inputs, put_context
from rlm.app.isolation import isolate
from rlm.app.memory import MEMORY, project_root
from rlm.app.options import RunOptions, record_options, recorded_options, set_goal_given
from rlm.app.phases import kernel_phase
from rlm.app.seam import Feature, Plain, Wiring, attach_features
from rlm.app.steering import RULES
from rlm.chain import Background
from rlm.compaction.plan import effective_settings
from rlm.config import Config, load_config
from rlm.errors import ConfigError, RlmError
from rlm.events import Event, Notice, RunEnded
from rlm.kernel import reaper
from rlm.kernel.gateway import delete_recorded
from rlm.kernel.kinds import kernel_notes
from rlm.kernel.types import RestoreReport
from rlm.llm.providers import declared_window, preflight
from rlm.llm.seam import warm_for
from rlm.llm.types import LLM
from rlm.longrun.clock import Clock
from rlm.longrun.lock import LOCK_NAME, SessionLock, holder
from rlm.memory.files import DIRNAME
from rlm.paths import private_dir
from rlm.protocols import Executor, SessionLog
from rlm.secrets import scrub_left_behind
from rlm.session.entries import CustomEntry, MessageEntry, new_id
from rlm.session.store import FILE_NAME, SessionStore, resolve_session_path

# entries whose options are the user's (the CLI's flags travel with the run)
RECORDING = ("run", "chat", "resume", "worker")
# the writer-lock kind each entry takes (None: the worker holds its own; a child's session
# is written only by its parent's process)
LOCK_KINDS: dict[str, str | None] = {
    "run": "run", "chat": "chat", "resume": "resume", "worker": None, "notebook": "notebook",
    "run_task": "run", "child": None, "compact": "compact",
}
ExecutorFactory = Callable[[SessionLog, Config], Executor]
# what a lost child resumed from its own log is told (its restored variables are noted)
RESUMED_CHILD = ("[Your host stopped while you were working on your task and has started "
                 "again; your kernel's variables were restored from their snapshot, as the "
                 "note above says. Go on with the task from where you were and report with "
                 "final(answer).]")


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
    clock: Clock | None = None,
    slots: TreeSlots | None = None,
    background: Background | None = None,
    features: Sequence[Feature] = (),
) -> Agent:
    """A ready agent for `entry` (one of ENTRY_POINTS): the model built here (or `llm`),
    the kernel factory, everything attached, the gaps told. `clock` drives goals and
    schedules (tests and the soak pass a FakeClock); `background`: the owner of the
    features' background work (a SessionRun's; default the agent's own); `features`: more
    features, attached after the root's (ROOT_FEATURES)."""
    if entry not in ENTRY_POINTS:
        raise ValueError(f"unknown entry point {entry!r}")
    options = options or RunOptions()
    llm_factory = llm_factory or model_factory(config)
    agent = Agent(session, config, llm=llm or llm_factory(config.model or ""),
                  llm_factory=llm_factory, executor=executor,
                  kernel_factory=kernel_factory(session), depth=depth, budget=budget,
                  slots=slots, background=background)
    attach_all(agent, entry, options, clock, features)
    agent.notices.extend(Notice(line, "warning") for line in options.refused)
    if leaf and leaf != session.leaf_id:
        move_to_branch(agent, leaf)
    if entry in RECORDING:
        record_options(session, options)
    return agent


def attach_children(agent: Agent, wiring: Wiring) -> None:
    """rlm_spawn and its handles (rlm.agent.children): the root's child runner and sweep,
    the handlers, the log written at each turn's safe point, `<children_state>` after a
    relief, and the registry closed with the run (none outlives its parent)."""
    agent.children.runner = run_child
    agent.children.sweep_lost = lambda cid: sweep_lost_child(agent, cid)
    for method, handler in agent.children.handlers().items():
        wiring.handle(method, handler)
    wiring.chain.account.append(agent.children.flush_hook)
    wiring.relief_note(ChildrenState(agent.children))
    wiring.task(agent.children)


# every feature, in the order it attaches (each declares what must come before it); a new
# feature is one module and one line here. Children first: their log is written before a
# goal accounts the turn.
ROOT_FEATURES: tuple[Feature, ...] = (
    Plain("children", attach_children, answers=("children",)),
    COMPACTION,  # with compaction disabled, only compact.run() compacts
    CHECKPOINT,  # tier 0: the checkpoint writer (rlm.compaction.checkpoint)
    LONGRUN,  # goals, schedules, the autonomous policy (rlm.longrun)
    RULES,  # stream rules from rule files (rlm.app.steering)
    ADVISOR,  # --advisor: a second model that watches (rlm.app.advising)
    MEMORY,  # project memory in .agent/ (rlm.app.memory)
    CANDIDATES,  # config candidates > 1: replies voted by what they compute (rlm.app.candidates)
)


def attach_all(agent: Agent, entry: str = "run", options: RunOptions | None = None,
               clock: Clock | None = None, features: Sequence[Feature] = ()) -> None:
    """Wire an Agent for `entry`: the root's features (then `features`), and a Notice for
    each gap."""
    agent.entry = entry
    if entry == "child":  # a resumed child's role, as its log records it
        agent.role = role_of(agent.session.branch())
    size_output_to_window(agent)
    attach_features((*ROOT_FEATURES, *features),
                    Wiring(agent, entry, options or RunOptions(), clock))
    answer_every_method(agent.handlers, entry)  # gaps refused; none left unanswered
    if not tells_user(entry):
        return
    for feature in FEATURES:
        g = gap(entry, feature)
        if g is not None:
            agent.notices.append(Notice(g.message, "warning" if g.refused else "info"))
    if agent.executor is None:  # where the kernel runs, said once
        agent.notices.extend(Notice(n, "info") for n in kernel_notes(agent.config))


def check_start(config: Config, *, summary_only: bool = False) -> None:
    """What can be checked before a session exists, cheaply and offline: every model the
    run names can run here (`preflight`; `summary_only`: the model that writes the summary,
    for `rlm compact`, which runs no turn), and the compaction settings fit the window the
    model will report when that is known without loading it (a script's, the local
    model's n_ctx, `--context-window`). Raises a one-line RlmError naming the fix."""
    if summary_only:
        preflight(config.compaction_model or config.model, config)
    else:
        preflight(config.model, config)
        for spec in {config.sub_model, config.compaction_model} - {None, "", config.model}:
            preflight(spec, config)
    effective_settings(config, declared_window(config.model, config), strict=True)
    if not summary_only:
        warm_for(config.model)  # a hosted model's litellm import starts now, beside the rest


# -------------------------------------------------------------------------- lifecycle
@dataclass
class SessionRun:
    """One run of one session, from its lock to its teardown (see the module doc). Build
    it with `new`, `open` or `child`; enter it; `prepare` and `drive`; leave it."""

    entry: str
    options: RunOptions = field(default_factory=RunOptions)
    task: str | None = None
    session_id: str | None = None  # None: a new session
    base: Config | None = None  # the Config the options apply over (run_task, the worker)
    exact: Config | None = None  # this Config as it is (a child: its parent's, its model)
    extra: dict[str, Any] = field(default_factory=dict)  # config for this run only
    home: Path | None = None
    leaf: str | None = None  # --from ENTRY
    lock: bool = True  # False: the caller holds the session's lock (the worker)
    build: bool = True  # False: session only (the parent of a --detach worker)
    start: bool = True  # False: no kernel (rlm compact)
    executor_factory: ExecutorFactory | None = None  # %%rlm: the notebook's own kernel
    on_session: Callable[[SessionStore, RunOptions], RunOptions] | None = None  # rlm demo
    session_dir: Path | None = None  # a child's directory
    parent_session: str | None = None
    llm_factory: Callable[[str], LLM] | None = None
    depth: int = 0
    budget: TokenBudget | None = None
    # told of each slow phase before it starts ("restoring the kernel: snapshot 48 MB")
    on_phase: Callable[[str], None] | None = None
    slots: TreeSlots | None = None  # the session tree's (a child shares its parent's)
    features: tuple[Feature, ...] = ()  # attached after the root's (build_agent)
    # every background task its agents' features start: closed when the run is left (S5)
    background: Background = field(default_factory=Background)
    # set while entered
    session: SessionStore | None = None
    config: Config | None = None
    agent: Agent | None = None
    writer: SessionLock | None = None
    keep: bool = False  # True: a failure does not remove the new session (a worker may own it)
    restored: RestoreReport | None = None  # what the kernel's start brought back
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    # ---------------------------------------------------------------- constructors
    @classmethod
    def new(cls, entry: str, task: str | None, options: RunOptions | None = None,
            **kw: Any) -> SessionRun:
        return cls(entry, options or RunOptions(), task=task, **kw)

    @classmethod
    def open(cls, entry: str, session_id: str, given: RunOptions | None = None,
             **kw: Any) -> SessionRun:
        return cls(entry, given or RunOptions(), session_id=session_id, **kw)

    @classmethod
    def child(cls, parent: Agent, task: str, model: str | None = None,
              child_id: str | None = None, cwd: Path | None = None) -> SessionRun:
        """An rlm_spawn / rlm_query child: its own session and kernel under the parent's
        session, `model` (one the user configured) else the sub-model else the parent's,
        the parent's model factory, token budget and concurrency slots."""
        cfg = parent.config
        model = model or cfg.sub_model or cfg.model
        if not model:
            raise ConfigError("rlm_query needs a model: set --sub-model or --model")
        if parent.session.dir is None:
            raise RlmError("rlm_query needs an on-disk parent session")
        exact = replace(cfg, model=model, kernel_cwd=str(cwd) if cwd else cfg.kernel_cwd)
        return cls("child", task=task, exact=exact, home=cfg.home,
                   session_dir=parent.session.dir / "children" / (child_id or new_id()),
                   parent_session=parent.session.id, llm_factory=parent.llm_factory,
                   depth=parent.depth + 1, budget=parent.budget.promise(cfg.child_budget_share),
                   slots=parent.slots)

    # ------------------------------------------------------------------- lifecycle
    def __enter__(self) -> SessionRun:
        if self.entry not in ENTRY_POINTS:
            raise ValueError(f"unknown entry point {self.entry!r}")
        with contextlib.ExitStack() as stack:
            if self.session_dir is not None and (self.session_dir / FILE_NAME).is_file():
                self._reopen(stack)  # a lost child, resumed from its own log
            elif self.session_id is None:
                self._create(stack)
            else:
                self._open(stack)
            if self.build:
                self._build(stack)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stack.__exit__(exc_type, exc, tb)

    def close(self) -> None:
        """Leave the run (for holders that keep it open across calls: the worker)."""
        self._stack.close()

    def _create(self, stack: contextlib.ExitStack) -> None:
        opts = self.options
        cfg = self.exact or opts.config(base=self.base)
        if self.entry != "child":  # a child's models were checked at its parent's start
            check_start(cfg)  # a model that cannot run fails here, before a session exists
        opts = replace(opts, context=[str(Path(c).expanduser().resolve()) for c in opts.context],
                       notebook=str(Path(opts.notebook).resolve()) if opts.notebook else None)
        if cfg.snapshot_url and "snapshot_url" not in opts.overrides:  # from a config file:
            opts.overrides = {**opts.overrides, "snapshot_url": cfg.snapshot_url}  # pinned
        if self.session_dir is not None:
            private_dir(self.session_dir)
        session = SessionStore.create(self.home or cfg.home, model=cfg.model or "",
                                      task=self.task, parent_session=self.parent_session,
                                      session_dir=self.session_dir)
        self.session = session
        stack.push(self._discard_on_failure)  # runs last: after the kernel and the lock
        stack.callback(session.close)
        if self.entry != "child":
            record_options(session, opts)
            set_goal_given(session, opts)
        if self.on_session is not None:
            opts = self.on_session(session, opts)
        self.options = opts
        self._take_lock(stack, session.dir)
        self.config = self.exact or opts.config(session, base=self.base)

    def _reopen(self, stack: contextlib.ExitStack) -> None:
        """A child's own session, opened again: its config is its parent's (`exact`), and
        nobody else writes it (its parent's process holds the parent's lock)."""
        assert self.session_dir is not None and self.exact is not None
        session = SessionStore.open(self.session_dir)
        self.session = session
        stack.callback(session.close)
        self.config = self.exact

    def _open(self, stack: contextlib.ExitStack) -> None:
        assert self.session_id is not None
        home = self.home or (self.base.home if self.base is not None else load_config().home)
        path = resolve_session_path(self.session_id, home)
        # the lock first: torn-tail recovery and the options record are writes
        self._take_lock(stack, path.parent)
        session = SessionStore.open(str(path), home)
        self.session = session
        stack.callback(session.close)
        # a recorded value that would loosen the user's own is refused (rlm.trust): a cell
        # can write the log
        self.options = trust.merged(session, self.options, recorded_options(session),
                                    load_config())
        self.config = self.options.config(session, base=self.base)
        if self.build:
            check_start(self._config(), summary_only=self.entry == "compact")
        if self.entry != "compact":
            set_goal_given(session, self.options)

    def _take_lock(self, stack: contextlib.ExitStack, session_dir: Path | None) -> None:
        kind = LOCK_KINDS[self.entry]
        if not self.lock or kind is None or session_dir is None:
            return
        self.writer = SessionLock.for_session(session_dir, kind)
        self.writer.acquire()  # SessionBusy names the holder
        stack.callback(self.writer.release)

    def _build(self, stack: contextlib.ExitStack) -> None:
        assert self.session is not None
        cfg = self._config()
        executor = None
        if self.executor_factory is not None:
            executor = self.executor_factory(self.session, cfg)
        self.agent = build_agent(self.session, cfg, entry=self.entry, options=self.options,
                                 executor=executor, leaf=self.leaf,
                                 llm_factory=self.llm_factory, depth=self.depth,
                                 budget=self.budget, slots=self.slots,
                                 background=self.background, features=self.features)
        stack.callback(self._close_agent)
        stack.callback(self.background.close)  # first: background work ends with the run
        if self.start:
            if self.entry != "child":  # a host SIGKILLed mid-cell left its kernel's files
                scrub_left_behind(cfg.home / "sessions", skip=self.session.dir,
                                  is_free=lambda d: holder(d / LOCK_NAME) is None)
            if self.on_phase is not None and self.executor_factory is None:
                self.on_phase(kernel_phase(self.session.dir, cfg))
            # the kernel (its snapshot restored), or the bridge handler
            self.restored = self.agent.start()
            self.agent.children.load()  # children a dead host left go on (their handles
            # in the restored kernel answer)

    def _close_agent(self) -> None:
        if self.agent is not None:
            self.agent.close()

    def _discard_on_failure(self, exc_type: type[BaseException] | None, *_: object) -> bool:
        if exc_type is not None and not self.keep and self.session is not None:
            discard_unstarted(self.session)
        return False

    def _config(self) -> Config:
        assert self.config is not None
        return self.config.with_overrides(**self.extra) if self.extra else self.config

    # ------------------------------------------------------------------------ work
    def prepare(self, prompt: str | None = None) -> list[str]:
        """Load the run's inputs (see rlm.app.inputs.prepare_inputs); notes for the user."""
        return prepare_inputs(self._agent(), self.options, prompt)

    def drive(self, prompt: str | None,
              on_event: Callable[[Event], None] | None = None) -> list[Event]:
        """One prompt, with due schedules firing into it (rlm.app.driving)."""
        return drive(self._agent(), prompt, on_event)

    def rebuild(self, options: RunOptions) -> Agent:
        """A new agent over the same session and executor, for new options (each `%%rlm`
        cell may pass other flags); the old agent's executor is kept, not stopped."""
        assert self.session is not None and self.agent is not None
        self.options = options
        self.config = options.config(self.session, base=self.base)
        set_goal_given(self.session, options)
        executor = self.agent.executor
        if isinstance(getattr(executor, "config", None), Config):  # its limits follow the
            # flags; build_agent scales its output budget
            executor.config = self._config()  # type: ignore[union-attr]
        self.agent = build_agent(self.session, self._config(), entry=self.entry,
                                 options=options, executor=executor,
                                 llm_factory=self.llm_factory, background=self.background,
                                 features=self.features)
        self.agent.start()
        return self.agent

    def _agent(self) -> Agent:
        if self.agent is None:
            raise RlmError("the run is not entered: use it as a context manager")
        return self.agent

    @property
    def model_spec(self) -> str | None:
        """The run's model, also when the run failed before its config was complete."""
        if self.agent is not None:
            return self.agent.llm.spec
        if self.config is not None:
            return self.config.model
        return self.options.overrides.get("model")

    def kept(self) -> bool:
        """The run's session exists on disk (False when it failed before being kept)."""
        return self.session is not None and self.session.dir is not None and \
            self.session.dir.is_dir()


def discard_unstarted(session: SessionLog) -> bool:
    """Remove a session this process created when its start failed before the first
    prompt reached the log: no header-only sessions pile up. True when removed."""
    import shutil

    if session.dir is None or not session.dir.is_dir():
        return False
    if any(isinstance(e, MessageEntry) for e in session.branch()):
        return False
    session.close()
    shutil.rmtree(session.dir, ignore_errors=True)
    return True


# ---------------------------------------------------------------------- children
def run_child(parent: Agent, task: str, context: Any, control: ChildRun | None = None) -> Any:
    """rlm_spawn / rlm_query: a child agent with its own kernel and session under the
    parent's, assembled like every other agent (entry "child": compaction, no
    goals/schedules). `control` is the parent's registry entry: it reaches the child's
    agent (cancel, steer) once it is built."""
    iso = None
    if control is not None and control.isolation is not None:
        assert parent.session.dir is not None
        iso = isolate(Path(parent.config.kernel_cwd or os.getcwd()),
                      parent.session.dir / "children" / control.id, control.isolation,
                      memory=project_root(parent.config) / DIRNAME)  # never changed by it
    run = SessionRun.child(parent, task, control.model if control else None,
                           control.id if control else None, iso.cwd if iso else None)
    schema = control.schema if control is not None else None
    sections = control.sections if control is not None else {}
    pid: int | None = None
    finished = False  # only a child that finished brings its changes back
    try:
        with run:
            child = run._agent()
            pid = getattr(child.executor, "pid", None)  # a local kernel's process
            if control is not None:
                control.attach(child)
            prompt = _set_up_child(child, task, context, schema, sections,
                                   run.restored.restored if run.restored else [])
            end = next((ev for ev in reversed(run.drive(prompt))
                        if isinstance(ev, RunEnded)), None)
            if end is not None and end.reason not in ("final", "no_code"):
                why = child_failure(child.session, end.reason, end.detail)
                raise (ChildBudgetExceeded if end.reason.startswith("limit:") else RlmError)(why)
            answer = typed_result(end.final if end else None, sections, schema) \
                if schema is not None else end.final if end else None
            finished = True
            return answer
    finally:
        if run.budget is not None:
            run.budget.release()  # what it did not spend of its promise is free again
        if run.agent is not None:
            parent.add_child(run.agent.ledger.totals())  # its whole ledger, split by role
        if iso is not None and control is not None:  # its changes back, or kept
            control.isolated = iso.bring_back(finished)
        if pid is not None:
            _retry_if_alive(parent, pid, task)
        elif control is not None and parent.session.dir is not None:  # a gateway's kernel
            _delete_gateway_kernel(parent, parent.session.dir / "children" / control.id,
                                   f"the child {task[:60]!r}")


def _set_up_child(child: Agent, task: str, context: Any, schema: Any,
                  sections: dict[str, list[Any]], restored: list[str]) -> str:
    """A child's role, typed result and `context` before its run; the prompt it is driven
    with: its task, or, for a lost child resumed from its log, the note that it goes on."""
    assert child.session.dir is not None
    branch = child.session.branch()
    resumed = any(isinstance(e, MessageEntry) for e in branch)
    given = context is not None or (child.session.dir / CONTEXT_FILE).is_file()
    if resumed:  # its role is in its log (attach_all), and so are its sections
        sections.update(sections_of(branch))
    else:
        child.role = child_role(context_given=given,
                                can_spawn=child.depth < child.config.max_depth,
                                schema_note=schema_note(schema) if schema is not None else "")
        child.session.append(CustomEntry(custom_type=ROLE_ENTRY, display=False,
                                         content=None, data={"text": child.role}))
    if schema is not None:  # a typed result: the answer policy checks final()
        child.answers.rules.insert(0, SchemaRule(schema, sections))
    if given and not (resumed and "context" in restored):
        put_context(child, context)
    return RESUMED_CHILD if resumed else task


def _retry_if_alive(parent: Agent, pid: int, task: str) -> None:
    """A child's kernel process still alive after its session closed (its stop failed):
    it is killed after every compaction of the parent and at the parent's exit, until it
    is gone, so none is orphaned."""
    import psutil

    def gone() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    if gone():
        return

    def retry() -> bool:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for p in [*proc.children(recursive=True), proc]:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs([proc], timeout=5)
        return gone()

    parent.children.cleanup_later(f"the kernel (pid {pid}) of the child {task[:60]!r}", retry)


def _delete_gateway_kernel(parent: Agent, child_dir: Path, whose: str) -> None:
    """Delete the gateway kernel a child's session records; one the gateway could not be
    reached for is retried after every compaction of the parent and at its exit."""
    if not delete_recorded(child_dir):
        parent.children.cleanup_later(f"the gateway kernel of {whose}",
                                      lambda: delete_recorded(child_dir))


def sweep_lost_child(parent: Agent, child_id: str) -> None:
    """A child a dead host left running (found at resume): its kernel processes, its
    gateway kernel and its git worktree go, so nothing of it is orphaned."""
    if parent.session.dir is None:
        return
    child_dir = parent.session.dir / "children" / child_id
    reaper.sweep_session_orphans(str(child_dir))
    _delete_gateway_kernel(parent, child_dir, f"the lost child {child_id}")
    tree = child_dir / "worktree"
    if tree.is_dir():
        subprocess.run(["git", "-C", str(tree), "worktree", "remove", "--force", str(tree)],
                       capture_output=True, timeout=120, check=False)


def child_failure(session: SessionLog, reason: str, detail: str | None) -> str:
    """Why an rlm_query child ended without an answer, as its log says (an overflow says
    "context overflow", not a generic failure)."""
    err = next((e.error for e in reversed(session.branch())
                if isinstance(e, MessageEntry) and e.error), None)
    why = err or detail
    return (f"the rlm_query child {session.id} ended without an answer ({reason}"
            f"{': ' + why if why else ''})")
