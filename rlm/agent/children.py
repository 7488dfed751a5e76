"""Children beside the parent: `rlm_spawn` and its handles, host side.

A child is a full session under the parent's `children/`, built by the composition root
(`Children.runner`, rlm.app.lifecycle.run_child) and run on its own host thread, so a
cell gets a handle at once and keeps working. `rlm_query` is the blocking form of the same
path (spawn, then wait). Every child takes a slot of the session tree's `TreeSlots`
(`--max-children`) before it starts; one that is cancelled while queued leaves the queue.

The parent's log records each child as hidden `child` custom entries (id, name, task,
state, result or error, tokens, turns, session, schema): when it is spawned, when it starts,
when it ends. A child the log shows queued or running when the session is opened again was
lost with the host that ran it: `load` resumes it from its own log (its kernel restored
from its snapshot, its role, context and yield_section items as recorded) unless it was
running on a working copy, which cannot be rebuilt: that one is reported lost. A start or an end is written at the next safe point (a child handler the kernel calls,
the end of a turn, the agent's close), never from the child's thread while the parent's loop
writes. While a parent cell runs, each child's start, turns and end reach the run's events
as `ChildProgress` (`Watchers`): the terminal keeps a live line per running child.

Handlers (the kernel's `kernel_ext.children` calls them over the bridge):
`child.spawn`, `child.status`, `child.result`, `child.wait`, `child.gather`,
`child.cancel`, `child.steer`, `child.send`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlm.agent import child_report as report
from rlm.agent.budget import BudgetRefused, TokenBudget
from rlm.agent.child_input import context_blob
from rlm.agent.policy.schema import SchemaError, check_schema
from rlm.agent.recursion import Recursion, check_model
from rlm.agent.runstate import RunState
from rlm.agent.slots import Ticket, TreeSlots
from rlm.chain import Chain, LoopHost
from rlm.config import Config
from rlm.errors import RlmError
from rlm.events import ChildProgress, Event
from rlm.ledger import Ledger
from rlm.paths import private_dir, write_private_atomic
from rlm.protocols import SessionLog
from rlm.session.branch import custom_entries
from rlm.session.entries import CustomEntry, new_id

CHILD_ENTRY = "child"
ROLE_ENTRY = "child_role"  # in the child's own log: its role (`child_role`), for a resume
SECTION_ENTRY = "child_section"  # in the child's own log: one yield_section item
CONTEXT_FILE = "context.bin"  # children/<id>/: the context it was given, kept at spawn


class ParentHost(Protocol):
    """What the registry needs of the agent whose kernel calls its handlers
    (rlm.agent.loop.Agent): its log, limits, the tree's budget and slots, and the lock its
    handlers append entries under."""

    session: SessionLog
    config: Config
    depth: int
    budget: TokenBudget
    slots: TreeSlots
    recursion: Recursion


class ChildAgent(Protocol):
    """What a ChildRun reaches of its child's agent (rlm.agent.loop.Agent) while it
    exists: cancel and steer it, read its spend, and plug into its chain."""

    children: Children
    budget: TokenBudget
    chain: Chain
    ledger: Ledger
    turns: int
    session: SessionLog
    state: RunState

    def steer(self, text: str, custom_type: str = "steer") -> None: ...

    def stop(self) -> None: ...


class ChildBudgetExceeded(RlmError):
    """A child that ran out of what the tree's budget promised it (tokens or turns) before
    an answer: its `error_kind` is "budget" (so is a child the budget could promise nothing,
    rlm.agent.budget.BudgetRefused)."""
ENDED = ("done", "failed", "cancelled")
MAX_NAME = 64
JOIN_AT_CLOSE_S = 30.0  # a cancelled child stops its kernel within the interrupt grace


@dataclass
class ChildRun:
    """One spawned child, as the parent's registry holds it."""

    id: str
    name: str
    task: str
    context: bytes | None = None  # packed (rlm.agent.child_input): the child's kernel decodes it
    model: str | None = None
    schema: Any = None
    state: str = "queued"  # queued | running | done | failed | cancelled
    result: Any = None
    error: str | None = None
    error_kind: str | None = None  # budget | schema | cancelled | error
    tokens: int = 0
    turns: int = 0
    session_id: str | None = None
    queued_at: float = field(default_factory=time.time)
    started_at: float | None = None
    ended_at: float | None = None
    agent: ChildAgent | None = None  # the child's Agent while it exists
    ticket: Ticket = field(default_factory=Ticket)
    cancelled: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    slots: TreeSlots | None = None
    sections: dict[str, list[Any]] = field(default_factory=dict)  # yield_section's items
    read: bool = False  # the parent's kernel has been given its result (logged: child_read)
    cancel_why: str | None = None  # cancelled with the parent's run (rlm.agent.child_report)
    told: bool = False  # the model was told of that cancellation
    isolation: str | None = None  # "worktree" | "copy" (rlm.app.isolation)
    isolated: dict[str, Any] | None = None  # its outcome: applied / failed / skipped
    on_change: Callable[[ChildRun], None] | None = None  # started, a turn ended, ended
    resumed: bool = False  # lost with its host, run again from its own log (Children.load)
    spent_before: tuple[int, int] = (0, 0)  # (tokens, turns) before it was resumed
    # what the tree's budget promised it when it started (rlm.agent.budget; None: no limit)
    promised: dict[str, int | None] | None = None
    _inbox: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ----------------------------------------------- called by the child runner
    def attach(self, agent: ChildAgent) -> None:
        """The child's agent exists: cancel and steer reach it from now on, and it lends
        this child's slot while it waits for its own children."""
        with self._lock:
            self.agent = agent
            inbox, self._inbox = self._inbox, []
        agent.children.own = self
        budget = agent.budget
        if budget.parent is not None:  # a promise of the tree's budget (not the unlimited root)
            self.promised = {"tokens": budget.limit, "turns": budget.turn_limit}
        agent.chain.start.append(lambda a: self._stop_if_cancelled(agent))
        agent.chain.turn.append(lambda a: self.changed())
        for text, kind in inbox:
            agent.steer(text, kind)

    def changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    def _stop_if_cancelled(self, agent: ChildAgent) -> None:
        if self.cancelled.is_set():
            agent.state.stop.set()

    # ---------------------------------------------------------------- control
    def steer(self, text: str, kind: str) -> None:
        with self._lock:
            if self.state in ENDED:
                raise RlmError(f"child {self.name!r} has ended ({self.state}); spawn a new "
                               "child for more work")
            agent = self.agent
            if agent is None:
                self._inbox.append((text, kind))
                return
        agent.steer(text, kind)

    def cancel(self) -> bool:
        """Stop the child (queued: leave the queue; running: stop its run). False when it
        had already ended."""
        if self.state in ENDED:
            return False
        self.cancelled.set()
        if self.slots is not None and not self.ticket.granted:
            self.slots.withdraw(self.ticket)  # a queued waiter leaves; the pool keeps its size
        agent = self.agent
        if agent is not None:
            agent.stop()
        return True

    def view(self, *, result: bool = True) -> dict[str, Any]:
        """What the kernel and the log see of the child (a running one's spend so far)."""
        end = self.ended_at or time.time()
        agent = self.agent
        tokens, turns = (self.spent_before[0] + agent.ledger.totals().total,
                         self.spent_before[1] + agent.turns) if agent is not None else \
            (self.tokens, self.turns)
        out: dict[str, Any] = {
            "id": self.id, "name": self.name, "task": self.task, "state": self.state,
            "model": self.model, "tokens": tokens, "turns": turns,
            "session": self.session_id, "queued_at": self.queued_at,
            "started_at": self.started_at, "ended_at": self.ended_at,
            "seconds": round(end - (self.started_at or end), 3),
        }
        if self.promised is not None:
            out["promised"] = self.promised
        if self.isolated is not None:
            out["isolation"] = self.isolated
        if self.error is not None:
            out["error"], out["error_kind"] = self.error, self.error_kind or "error"
        if result and self.state == "done":
            out["result"] = self.result
        return out


class Children:
    """The registry of one agent's children and the handlers its kernel calls."""

    def __init__(self, agent: ParentHost) -> None:
        """`agent`: the rlm.agent.loop.Agent whose kernel calls the handlers."""
        self.agent = agent
        # rlm_spawn / rlm_query: (parent Agent, task, context, run) -> the child's final answer,
        # where run is its ChildRun; set by the composition root (rlm.app), which gives
        # children their own wiring. None: this agent cannot run children.
        self.runner: Callable[[Any, str, Any, ChildRun], Any] | None = None
        self.runs: dict[str, ChildRun] = {}
        self.own: ChildRun | None = None  # this agent's own entry, when it is a child
        self._names: set[str] = set()
        self.ended = threading.Condition()  # notified as each child ends; guards _unrecorded
        self._threads: list[threading.Thread] = []
        self._unrecorded: list[ChildRun] = []
        self._unshown: list[ChildRun] = []  # cancelled, not shown to the user yet
        self.cancelled: list[ChildRun] = []  # cancelled with the parent's run (cancel_all)
        self.notes = report.Notes(self)  # <children_state>, read marks (rlm.agent.child_report)
        self._loaded = False
        self._load_lock = threading.Lock()  # handlers answer from a thread pool: load once
        self.cleanups = Cleanups()  # failed clean-ups, retried after compactions and at exit
        self.watchers = Watchers()  # the running parent cell's emit (ChildProgress)
        # the root's sweep of a child a dead host left (its kernels, gateway kernel, worktree)
        self.sweep_lost: Callable[[str], None] | None = None

    def load(self) -> None:
        """The children this session's log records (a session opened again), once:
        finished ones keep their results, so handles in the restored kernel still answer;
        one the log shows queued or running was lost with the host that ran it. What that
        host left of it is swept (`sweep_lost`), and it is resumed from its own log, or
        reported lost when it ran on a working copy (swept with it) or cannot run here."""
        with self._load_lock:
            if self._loaded:
                return
            self._loaded = True
            self._load()

    def _load(self) -> None:
        lost: list[ChildRun] = []
        branch = self.agent.session.branch()
        read = report.read_ids(branch)
        for d in registry(branch):
            cid = d["id"]
            if cid in self.runs:
                continue
            run = ChildRun(id=cid, name=str(d.get("name")), task=str(d.get("task")),
                           model=d.get("model"), schema=d.get("schema"),
                           isolation=d.get("isolation_mode"), state=str(d.get("state")),
                           result=d.get("result"), error=d.get("error"),
                           tokens=int(d.get("tokens") or 0), turns=int(d.get("turns") or 0),
                           session_id=d.get("session"), queued_at=d.get("queued_at") or 0.0,
                           started_at=d.get("started_at"), ended_at=d.get("ended_at"),
                           promised=d.get("promised") if isinstance(d.get("promised"), dict)
                           else None, read=cid in read,
                           cancel_why=d.get("cancelled_because"), told=cid in read)
            self._names.add(run.name)
            self.runs[cid] = run
            if run.state in ENDED:
                run.done.set()
                continue
            if self.sweep_lost is not None:
                self.sweep_lost(cid)
            lost.append(run)
            why = self._not_resumable(run)
            if why is None:
                run.state, run.resumed = "queued", True
                run.spent_before = (run.tokens, run.turns)
                self._start(run)
                continue
            run.state, run.ended_at = "failed", time.time()
            run.error = (f"lost: the host stopped while this child was {d.get('state')} "
                         f"(its session: children/{cid}); {why}; spawn it again to redo the "
                         "work")
            run.done.set()
            self._record(run)
        self.notes.tell(lost, "Your host stopped while these children you spawned were at work; "
                   "each was resumed from its own log, or is reported lost (handles in your "
                   "variables):")

    def _not_resumable(self, run: ChildRun) -> str | None:
        """Why a lost child cannot be resumed here (None: it can)."""
        if self.runner is None or self.agent.session.dir is None:
            return "this session cannot run children"
        if run.isolation is not None and run.started_at is not None:
            return "it ran on a working copy, which went with its host"
        if run.model is not None:
            try:
                check_model(run.model, self.agent.config)
            except RlmError as e:
                return str(e)
        return None

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return ChildHandles(self).table()

    # ------------------------------------------------------------------ spawn
    def spawn(self, params: dict[str, Any], *, method: str = "rlm_spawn") -> dict[str, Any]:
        task = params.get("task")
        if not isinstance(task, str) or not task.strip():
            raise RlmError(f"{method}(task, ...): task must be a non-empty string")
        agent = self.agent
        if agent.depth >= agent.config.max_depth:
            raise RlmError(
                f"{method} depth limit reached (depth {agent.depth}, max_depth "
                f"{agent.config.max_depth}); use llm_query for a plain sub-call or raise --max-depth")
        agent.budget.check(method)
        agent.budget.can_promise(method)  # refused now, with the figures, not started on a sliver
        model = params.get("model")
        if model is not None:
            check_model(model, agent.config)
        if params.get("schema") is not None:
            check_schema(params["schema"])
        if params.get("isolation") not in (None, "worktree", "copy"):
            raise RlmError(f"rlm_spawn(isolation={params.get('isolation')!r}): use "
                           "isolation='worktree' (a git worktree whose changes come back as "
                           "a patch; a private copy outside git), 'copy' (a private copy of "
                           "the working directory) or leave it out")
        self.load()
        self.flush()
        context = context_blob(params.get("context"), agent.config.child_context_max_bytes,
                               method)
        run = ChildRun(id=new_id(), name=self._unique_name(params.get("name")), task=task,
                       context=context, model=model, schema=params.get("schema"),
                       isolation=params.get("isolation"))
        self._keep_context(run)
        self.runs[run.id] = run
        self._start(run)
        return {"id": run.id, "name": run.name}

    def _keep_context(self, run: ChildRun) -> None:
        """The context a child is given, kept in its directory from its spawn: a child
        still queued when its host dies is resumed with it."""
        folder = self.agent.session.dir
        if run.context is None or folder is None:
            return
        path = private_dir(folder / "children" / run.id) / CONTEXT_FILE
        write_private_atomic(path, run.context)

    def _start(self, run: ChildRun) -> None:
        """Record the child (queued) and run it on its own thread once it has a slot."""
        run.slots, run.on_change = self.agent.slots, self._changed
        self._record(run)
        thread = threading.Thread(target=self._work, args=(run,), daemon=True,
                                  name=f"rlm-child-{run.name}")
        self._threads.append(thread)
        thread.start()

    def _unique_name(self, name: Any) -> str:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise RlmError("rlm_spawn(name=...): a name is a non-empty string")
        with self.ended:  # spawns arrive on the bridge's thread pool
            base = (name or f"child-{len(self.runs) + 1}").strip()[:MAX_NAME]
            out, n = base, 1  # names used before a resume stay taken (load)
            while out in self._names:
                n += 1
                out = f"{base}-{n}"
            self._names.add(out)
            return out

    def _work(self, run: ChildRun) -> None:
        agent = self.agent
        try:
            if not agent.slots.acquire(run.ticket) or run.cancelled.is_set():
                raise RlmError("cancelled before it started")
            run.state, run.started_at = "running", time.time()
            run.changed()
            run.result = self._run_child(run)
            run.state = "done"
        except BaseException as e:  # noqa: BLE001 - a child's failure is its state
            run.state = "cancelled" if run.cancelled.is_set() else "failed"
            run.error = str(e) or type(e).__name__
            run.error_kind = "cancelled" if run.state == "cancelled" else \
                "budget" if isinstance(e, ChildBudgetExceeded | BudgetRefused) else \
                "schema" if isinstance(e, SchemaError) else "error"
        finally:
            run.ended_at = time.time()  # before its slot is free: spans never overlap
            agent.slots.withdraw(run.ticket)
            if run.agent is not None:
                run.tokens = run.spent_before[0] + run.agent.ledger.totals().total
                run.turns = run.spent_before[1] + run.agent.turns
                run.session_id = run.agent.session.id
                run.agent = None
            with self.ended:
                if not any(r is run for r in self._unrecorded):
                    self._unrecorded.append(run)  # recorded as it is when flushed: ended
                run.done.set()
                self.ended.notify_all()
            run.changed()

    def _changed(self, run: ChildRun) -> None:
        """A child started or ended a turn: the log records it at the next safe point (`rlm
        ps` shows its spend so far), and a running parent cell shows it."""
        if run.state == "running":
            with self.ended:
                if not any(r is run for r in self._unrecorded):
                    self._unrecorded.append(run)
        self.watchers.tell(run)

    def _run_child(self, run: ChildRun) -> Any:
        runner = self.runner
        if runner is None:
            raise RlmError("children are not available here: this agent was built without a "
                           "child runner (build agents with rlm.app.build_agent)")
        return runner(self.agent, run.task, run.context, run)

    # ------------------------------------------------------------- blocking form
    def query(self, task: Any, context: Any) -> Any:
        """rlm_query: spawn and wait; the answer, or the child's failure raised."""
        cid = self.spawn({"task": task, "context": context}, method="rlm_query")["id"]
        run = self.runs[cid]
        try:
            with self.lend():
                run.done.wait()
        except BaseException:
            run.cancel()
            raise
        self.flush()
        self.notes.mark_read([run])
        if run.state != "done":
            raise RlmError(run.error or f"the child ended {run.state}")
        return run.result

    @contextlib.contextmanager
    def lend(self) -> Iterator[None]:
        """While this agent (a child holding a slot) waits for work that needs slots, its
        slot is lent to the tree; it queues for one again afterwards."""
        own = self.own
        if own is None or not own.ticket.granted:
            yield
            return
        self.agent.slots.withdraw(own.ticket)
        try:
            yield
        finally:
            own.ticket = Ticket()
            if not own.cancelled.is_set():
                self.agent.slots.acquire(own.ticket)

    # -------------------------------------------------------------- teardown
    def cancel_all(self, why: str = report.AT_CLOSE) -> list[ChildRun]:
        """Cancel every child still queued or running (the parent was interrupted or is
        closing, `why`); the ones that were. The user is shown each (`take_unshown`, and
        `cancelled` at close), the model is told at the next safe point (`flush`)."""
        out = []
        for run in list(self.runs.values()):
            if run.cancel():
                run.cancel_why = run.cancel_why or why
                out.append(run)
        with self.ended:
            self._unshown += out
            self.cancelled += [r for r in out if r not in self.cancelled]
        return out

    def take_unshown(self) -> list[ChildRun]:
        """The children cancelled since the user was last shown them."""
        with self.ended:
            out, self._unshown = self._unshown, []
        return out

    def close(self) -> None:
        """Cancel what still works, wait for it (within JOIN_AT_CLOSE_S) and log the note
        the model reads at the next run; `cancelled` then holds every child cancelled with
        the parent's run, as it ended (for the user: rlm.cli)."""
        self.cancel_all(report.AT_CLOSE)
        deadline = time.monotonic() + JOIN_AT_CLOSE_S
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.flush()
        self.retry_cleanup()  # at exit, once more

    # --------------------------------------------------------------- clean-up
    def cleanup_later(self, what: str, retry: Callable[[], bool]) -> None:
        """A child's clean-up failed (its kernel would not stop): `retry()` (True when
        done) runs after every compaction and at exit until it succeeds."""
        self.cleanups.later(what, retry)

    def retry_cleanup(self) -> list[str]:
        """Retry every failed clean-up; what is still pending."""
        return self.cleanups.retry()

    # ------------------------------------------------------------ compaction
    def after_compaction(self) -> None:
        """After a compaction: the failed clean-ups are retried, and the model is told
        which children run or ended unread (`<children_state>`, beside `<ipython_state>`)."""
        self.retry_cleanup()
        self.load()
        self.flush()
        self.notes.tell(self.notes.open_runs(), "Children you spawned (rlm_spawn); their "
                        "handles are in your variables:")

    # ------------------------------------------------------------------- log
    def running(self) -> list[ChildRun]:
        return [r for r in self.runs.values() if r.state not in ENDED]

    def _record(self, run: ChildRun) -> None:
        data = {**run.view(), "schema": run.schema, "isolation_mode": run.isolation,
                "cancelled_because": run.cancel_why}
        self.agent.recursion.append(CustomEntry(custom_type=CHILD_ENTRY, data=data,
                                                display=False, content=None))

    def flush(self) -> None:
        """Write the starts, turn ends and ends not logged yet (at a safe point)."""
        with self.ended:
            ended, self._unrecorded = self._unrecorded, []
        for run in ended:
            self._record(run)
        self.notes.tell_cancelled()

    def flush_hook(self, agent: LoopHost) -> None:
        """The account stage's policy: the log written at the turn's safe point."""
        self.flush()


class ChildHandles:
    """What a cell's handles ask of the registry (the kernel's `kernel_ext.children` calls
    these over the bridge): status, result, wait, gather, cancel, steer, send, a typed
    child's sections and the tree's slots."""

    def __init__(self, children: Children) -> None:
        self.children = children

    def table(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "child.spawn": self.children.spawn, "child.status": self.status,
            "child.result": self.result, "child.wait": self.wait,
            "child.gather": self.gather, "child.cancel": self.cancel,
            "child.steer": lambda p: self._steer(p, "steer"),
            "child.send": lambda p: self._steer(p, "parent_message"),
            "child.section": self.section, "child.limit": self.limit,
        }

    def _run(self, params: dict[str, Any]) -> ChildRun:
        self.children.load()
        cid = params.get("id")
        run = self.children.runs.get(cid) if isinstance(cid, str) else None
        if run is None:
            raise RlmError(f"no child {cid!r} in this session (handles come from rlm_spawn)")
        return run

    def _runs(self, params: dict[str, Any]) -> list[ChildRun]:
        ids = params.get("ids")
        if not isinstance(ids, list):
            raise RlmError("expected a list of child handles")
        return [self._run({"id": i}) for i in ids]

    def status(self, params: dict[str, Any]) -> dict[str, Any]:
        self.children.flush()
        return self._run(params).view(result=False)

    def result(self, params: dict[str, Any]) -> dict[str, Any]:
        run = self._run(params)
        timeout = _timeout(params)
        if not run.done.is_set():
            with self.children.lend():
                run.done.wait(timeout)
        self.children.flush()
        self.children.notes.mark_read([run])
        return {**run.view(), "done": run.done.is_set()}

    def wait(self, params: dict[str, Any]) -> dict[str, Any]:
        """Block until any (or all) of the children ended; {"done": ids, "pending": ids}."""
        runs = self._runs(params)
        want_any = bool(params.get("any", True))

        def ready() -> bool:
            ended = [r.done.is_set() for r in runs]
            return any(ended) if want_any else all(ended)

        if runs and not ready():
            with self.children.lend(), self.children.ended:
                self.children.ended.wait_for(ready, _timeout(params))
        self.children.flush()
        return {"done": [r.id for r in runs if r.done.is_set()],
                "pending": [r.id for r in runs if not r.done.is_set()]}

    def gather(self, params: dict[str, Any]) -> dict[str, Any]:
        """Every child's view, in the order asked. `wait` False (the kernel's interrupted
        gather): no wait; the unfinished are cancelled and the answer is marked partial."""
        runs = self._runs(params)
        if params.get("wait", True):
            self.wait({**params, "any": False})
        partial = not all(r.done.is_set() for r in runs)
        if partial and not params.get("wait", True):
            for r in runs:
                r.cancel()
            with self.children.ended:  # cancelled children end within the interrupt grace
                self.children.ended.wait_for(lambda: all(r.done.is_set() for r in runs),
                                     JOIN_AT_CLOSE_S)
        self.children.flush()
        self.children.notes.mark_read(runs)
        return {"partial": partial, "children": [r.view() for r in runs]}

    def cancel(self, params: dict[str, Any]) -> bool:
        return self._run(params).cancel()

    def section(self, params: dict[str, Any]) -> int:
        """yield_section(label, item) in a child's kernel: the item joins the array
        `label` of its typed result; how many that label holds now."""
        own, label = self.children.own, params.get("label")
        if own is None or own.schema is None:
            raise RlmError("yield_section is for a child spawned with schema=...: return "
                           "the value with final() instead")
        if not isinstance(label, str) or not label:
            raise RlmError("yield_section(label, item): label must be a non-empty string")
        items = own.sections.setdefault(label, [])
        items.append(params.get("item"))
        self.children.agent.recursion.append(CustomEntry(  # kept for a resume (sections_of)
            custom_type=SECTION_ENTRY, data={"label": label, "item": params.get("item")},
            display=False, content=None))
        return len(items)

    def limit(self, params: dict[str, Any]) -> dict[str, Any]:
        """rlm_max_children(n=None): the tree's slots (limit, in use, waiting, peak); with
        `n`, resized first, never past the user's ceiling (`slots.ceiling`: --max-children,
        then chat's `/max-children N`): a cell may lower it or restore it, not raise it."""
        n, slots = params.get("n"), self.children.agent.slots
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise RlmError(f"rlm_max_children(n): n must be a whole number >= 1, got {n!r}")
            try:
                slots.resize(n)
            except RlmError as e:
                raise RlmError(f"rlm_max_children({n}): {e}") from None
        return {"limit": slots.limit, "in_use": slots.in_use, "waiting": slots.waiting,
                "peak": slots.peak}

    def _steer(self, params: dict[str, Any], kind: str) -> bool:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise RlmError("steer(text) / send(text): text must be a non-empty string")
        self._run(params).steer(text, kind)
        return True


class Cleanups:
    """Clean-ups that failed (a child's kernel that would not stop, a gateway that was
    down), each with its retry; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[str, Callable[[], bool]]] = []  # (what, retry)

    def later(self, what: str, retry: Callable[[], bool]) -> None:
        with self._lock:
            self._pending.append((what, retry))

    def retry(self) -> list[str]:
        """Run every retry (True: done); what is still pending."""
        with self._lock:
            pending, self._pending = self._pending, []
        left = []
        for what, retry in pending:
            try:
                ok = retry()
            except Exception:  # noqa: BLE001 - retried at the next compaction or exit
                ok = False
            if not ok:
                left.append((what, retry))
        with self._lock:
            self._pending[:0] = left
        return [w for w, _ in left]


class Watchers:
    """Who is shown the children's progress: the event sink of each parent cell that runs
    (`watching`), thread-safe; `tell` sends a child's state to every one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._emits: list[Callable[[Event], None]] = []

    @contextlib.contextmanager
    def watching(self, emit: Callable[[Event], None]) -> Iterator[None]:
        with self._lock:
            self._emits.append(emit)
        try:
            yield
        finally:
            with self._lock:
                self._emits.remove(emit)

    def tell(self, run: ChildRun) -> None:
        with self._lock:
            emits = list(self._emits)
        if not emits:
            return
        v = run.view(result=False)
        refused = (run.isolated or {}).get("refused")
        note = report.refused_line(run) if refused and run.state in ENDED else None
        event = ChildProgress(run.name, run.state, int(v["turns"]), int(v["tokens"]),
                              float(v["seconds"]), run.error, note)
        for emit in emits:
            emit(event)


def registry(branch: Sequence[Any]) -> list[dict[str, Any]]:
    """The children a log records, each as its newest `child` entry says (spawn order);
    O(child entries) on a long log's branch."""
    last: dict[str, dict[str, Any]] = {}
    for e in custom_entries(branch, CHILD_ENTRY):
        if isinstance(e.data, dict) and isinstance(e.data.get("id"), str):
            last[e.data["id"]] = e.data
    return list(last.values())


def registry_lines(branch: Sequence[Any]) -> list[str]:
    """`rlm tree` / `rlm ps`: one line per child (name, state, tokens, time, id)."""
    return [f"child {str(d.get('name'))[:24]:<24} {str(d.get('state')):<9} "
            f"{int(d.get('tokens') or 0):>8} tok {float(d.get('seconds') or 0):>7.1f} s  "
            f"children/{d.get('id')}" for d in registry(branch)]


def child_role(*, context_given: bool, can_spawn: bool, schema_note: str = "") -> str:
    """A child's role, after its system prompt (`Agent.role`): who it is, what it was
    given, how to report (`schema_note`: a typed child's, rlm.agent.policy.schema), what
    it cannot do. Its task is its first user message."""
    given = ("the parent's data is in the variable `context`" if context_given
             else "no data was passed to you")
    spawn = ("you may start children of your own with rlm_spawn" if can_spawn
             else "you cannot start children of your own (depth limit)")
    return (f"# Your role\nYou are a child agent: a parent agent's cell started you for the "
            f"task in the first user message and reads only your final answer; {given}. "
            f"Report with final(answer). Goals and schedules belong to the top-level "
            f"session: you cannot set them; {spawn}.{schema_note}")


def sections_of(branch: Sequence[Any]) -> dict[str, list[Any]]:
    """The yield_section items a child's log records, by label (a resumed typed child)."""
    out: dict[str, list[Any]] = {}
    for e in custom_entries(branch, SECTION_ENTRY):
        if isinstance(e.data, dict) and isinstance(e.data.get("label"), str):
            out.setdefault(e.data["label"], []).append(e.data.get("item"))
    return out


def role_of(branch: Sequence[Any]) -> str:
    """The role a child's log records (its `child_role` entry; "" for a root session)."""
    return next((str(e.data.get("text") or "") for e in custom_entries(branch, ROLE_ENTRY)
                 if isinstance(e.data, dict)), "")


def _timeout(params: dict[str, Any]) -> float | None:
    t = params.get("timeout")
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, int | float) or t < 0:
        raise RlmError(f"timeout must be a number of seconds >= 0 or None, got {t!r}")
    return float(t)
