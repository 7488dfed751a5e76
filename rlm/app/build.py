"""What `build_agent` (rlm.app.lifecycle) attaches to an agent: the model and kernel
factories, compaction sized to the model's window, goals, the scheduler's kernel handlers
and the autonomous policy. The Agent only runs turns; everything it is given comes from
here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from kernel_ext.contract import methods_of
from rlm.agent.assembly import projection
from rlm.agent.loop import Agent
from rlm.agent.policy.goal_evidence import GoalJudge
from rlm.app.features import Gap, gap, refuse, tells_user
from rlm.app.seam import Plain, Wiring
from rlm.app.steering import gate_place, goal_gate
from rlm.chain import LoopHost
from rlm.compaction.branch import summarize_branch
from rlm.compaction.checkpoint import WRITER_DIR, CheckpointWriter, budget_for, default_rungs
from rlm.compaction.checkpoint import reply as checkpoint_reply
from rlm.compaction.controller import CompactionController
from rlm.compaction.core import perform_compaction
from rlm.compaction.plan import CompactionSettings, effective_settings
from rlm.compaction.rebuild import is_rebuild, rebuilt_line
from rlm.compaction.tiers import relief_line
from rlm.config import Config, scaled_output_budget
from rlm.errors import RlmError
from rlm.events import Compacted, Event, Notice
from rlm.ledger import charged
from rlm.llm.tokens import warm_encoding
from rlm.llm.types import LLM
from rlm.longrun import AutonomousPolicy, GoalManager, Scheduler, install
from rlm.longrun.gates import MAX_GATE_FAILURES
from rlm.protocols import BridgeHandler, Compact, End, SessionLog, StartableExecutor
from rlm.session.entries import CompactionEntry, Entry, MessageEntry
from rlm.session.history import install_handlers as install_history
from rlm.session.store import SessionStore


def model_factory(config: Config) -> Callable[[str], LLM]:
    """spec -> model, for the run's model, its sub-calls and its compaction model."""
    from rlm.llm import get_llm

    return lambda spec: get_llm(spec, config)


def kernel_factory(session: SessionLog) -> Callable[[BridgeHandler, Config], StartableExecutor]:
    """The session's kernel, made when the Agent starts it (with its bridge handler and
    its config as it is then: the output budget scaled to the model's window)."""
    def make(handler: BridgeHandler, config: Config) -> StartableExecutor:
        from rlm.kernel import Kernel

        if session.dir is None:
            raise RlmError("a kernel needs an on-disk session; pass an executor for "
                           "in-memory ones")
        kernel = Kernel(session.dir, config, bridge_handler=handler)
        kernel.while_booting = warm_encoding  # the first prompt's count finds it loaded
        return kernel

    return make


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


def attach_checkpoint(agent: Agent, wiring: Wiring) -> None:
    """Tier 0: a checkpoint written on the compaction model, in the background at the
    configured rungs or the model's default ones (rlm.compaction.checkpoint), and on the
    main path by `/rebuild`. With no rungs (`local`, `script:`, compaction off, or
    `--no-context-tiers`: summaries only) it writes only when asked. Not for a child (its
    run is short, its parent's checkpoint covers its answer) or a log in memory. `SessionRun` closes it with the run.
    `history.checkpoint()` is every agent's."""
    wiring.handle("history.checkpoint", lambda p: checkpoint_reply(agent.session))
    ctl = agent.parts.get(CompactionController)  # attached before it (rlm.app.seam: after=)
    if gap(wiring.entry, "checkpoint") is not None or agent.session.dir is None or ctl is None:
        return
    fractions = agent.config.checkpoint_rungs
    if fractions is None:
        fractions = default_rungs(agent.config.compaction_model or agent.llm.spec)
    # the summaries' model instance: a script's replies are one queue
    # the writer's calls are charged as the checkpoint's, not compaction's
    ctl.checkpoint = wiring.task(CheckpointWriter(
        agent.session, lambda: charged(ctl.llm, agent.charge, "checkpoint"),
        budget_for(agent.context_window()),
        fractions if ctl.settings.enabled and ctl.tiers else (),
        log=lambda: writer_session(agent.session, ctl.llm)))


def writer_session(parent: SessionLog, llm: LLM) -> SessionStore:
    """The checkpoint writer's own session, a child under the parent's directory: its
    prompts and replies (`rlm log SESSION_DIR/children/checkpoint`)."""
    assert parent.dir is not None
    folder = parent.dir / WRITER_DIR
    if (folder / "session.jsonl").is_file():  # a resumed session's writer goes on in it
        return SessionStore.open(folder)
    return SessionStore.create(session_dir=folder, model=getattr(llm, "spec", ""),
                               task="the checkpoint writer", parent_session=parent.id)


def attach_compaction(agent: Agent, wiring: Wiring) -> None:
    """Three triggers, one core: compact.run/status handlers, after-turn and overflow; the
    relief notes every feature registered (rlm.app.seam.Wiring.relief_note)."""
    ctl = CompactionController(
        agent.session,
        agent.compaction_llm,
        CompactionSettings.from_config(agent.config),
        agent.context_window,
        current_model_fn=lambda: agent.llm.spec,
        turn_active_fn=lambda: agent.turn_active,
        projection=projection(agent),  # what the model call sends (rlm.agent.assembly)
        tiers=agent.config.context_tiers,
    )
    eff = ctl.effective()  # settings that cannot fit the model's window are refused at start
    # Ctrl-C stops a summary at once; the summary is named on screen while it is written
    ctl.cancelled, ctl.announce = agent.pieces.cancelled, agent.announce
    ctl.notes = wiring.notes  # <ipython_state>, and what the other features add
    wiring.expose(ctl)  # `/compact`, `/rebuild`, the run's report reach it by type
    window_note = getattr(agent.llm, "window_note", None)
    note = window_note() if eff.enabled and eff.window is None and window_note else None
    if note and tells_user(wiring.entry):
        agent.notices.append(Notice(note, "warning"))
    wiring.handle("compact.run", lambda p: ctl.request(p.get("instructions")))
    wiring.handle("compact.status", lambda p: ctl.status())
    wiring.handle("compact.shake", lambda p: ctl.request_shake())
    install_history(wiring.handlers, agent.session)  # what compaction took out stays here

    def compacted(entry: Entry | None) -> list[Event]:
        events: list[Event] = []
        if isinstance(entry, CompactionEntry) and is_rebuild(entry):
            events.append(Notice(rebuilt_line(entry)))
        elif isinstance(entry, CompactionEntry):
            events.append(Compacted(entry.trigger, entry.tokens_before, entry.summary))
        elif entry is not None:
            events.append(Notice(relief_line(entry)))
        if (notice := ctl.take_notice()) is not None:
            events.append(Notice(notice, "warning"))
        return events

    def before_prompt(a: LoopHost) -> list[Event]:
        return compacted(ctl.before_prompt(agent.executor))

    def after_turn(a: LoopHost) -> list[Event]:
        if agent.answers.halting():
            return []  # the run ends before its next turn: no summary for a turn never taken
        last = next((e for e in reversed(a.session.branch())
                     if isinstance(e, MessageEntry) and e.role == "assistant"), None)
        if last is not None and last.error is None:
            ctl.note_assistant_ok()
        return compacted(ctl.after_turn(agent.executor))

    def on_overflow(a: LoopHost, entry: MessageEntry) -> Compact | End:
        if ctl.on_overflow(entry.id, entry.model, agent.executor) == "retry":
            return Compact()
        return End("error", ctl.overflow_message)

    def at_run_start(a: LoopHost) -> None:
        ctl.start_run()  # resets the overflow guard; refuses settings that cannot fit

    wiring.chain.start.append(at_run_start)
    wiring.chain.prompt.append(before_prompt)
    wiring.chain.turn.append(after_turn)
    wiring.chain.overflow.append(on_overflow)


def attach_longrun(agent: Agent, wiring: Wiring) -> None:
    """Goals, the scheduler's kernel handlers and the autonomous policy (`wiring.clock`: a
    test's or the soak's FakeClock; default the system clock)."""
    cfg, entry, options, clock = agent.config, wiring.entry, wiring.options, wiring.clock
    policy = gated = None
    # gates run where cells run: the kernel's sandbox and environment (no provider key)
    place = gate_place(cfg, agent.session.dir, Path.cwd()) if options.gate else None
    cancelled = agent.pieces.cancelled  # Ctrl-C: a running gate is killed (rlm.longrun.gates)
    if options.autonomous and gap(entry, "autonomous") is None:
        cont = options.max_continuations
        policy = AutonomousPolicy(
            max_continuations=None if cont in (None, -1) else cont,
            max_turns=cfg.max_turns, max_tokens=cfg.max_tokens, max_wall_s=cfg.max_wall_s,
            gates=list(options.gate), cwd=Path.cwd(), gate_timeout_s=cfg.gate_timeout_s,
            skip=(cfg.home,), gate_place=place, gate_cancelled=cancelled,
            gate_announce=agent.announce,
        )
    elif options.gate:  # every run's answer waits for its gates, not only autonomous ones
        gated = AutonomousPolicy(
            max_continuations=MAX_GATE_FAILURES, gates=list(options.gate), cwd=Path.cwd(),
            gate_timeout_s=cfg.gate_timeout_s, skip=(cfg.home,), gate_place=place,
            gate_cancelled=cancelled, gate_announce=agent.announce)
    goals = None if gap(entry, "goals") else GoalManager(agent.session, clock)
    if goals is not None and options.gate:  # a goal is complete only once its gates pass
        goals.gate = goal_gate(agent, list(options.gate), place)
    scheduler = None
    sched_gap = gap(entry, "schedules")
    if agent.session.dir is not None and not (sched_gap is not None and sched_gap.refused):
        scheduler = Scheduler(agent.session.dir / "scheduled-jobs.json", clock)
    judge = None if goals is None else GoalJudge(goals, Path.cwd(), policy or gated)
    install(agent, goals=goals, scheduler=scheduler, policy=policy or gated, clock=clock,
            judge=judge, handlers=wiring.handlers)
    agent.answers.goal = goal_objective(goals)
    agent.answers.host_checks = goal_checked(goals)
    if scheduler is None and not (sched_gap is not None and sched_gap.refused):
        for m in methods_of("schedules"):  # a log in memory (tests) keeps no jobs
            wiring.handle(m.name, refuse(Gap("heartbeats and cron jobs need a session on "
                                             "disk")))


def shake_now(agent: Agent) -> list[Entry]:
    """`/shake` between turns of a chat: prune and shake all that is clearable now."""
    ctl = agent.parts.get(CompactionController)
    return [] if ctl is None else list(ctl.shake("manual").records)


def goal_objective(goals: GoalManager | None) -> Callable[[], str | None]:
    """The goal in force, for the note a stuck run gets (rlm.agent.policy.stuck: every run
    is watched; this only names the goal)."""

    def objective() -> str | None:
        goal = goals.get() if goals is not None else None
        return goal.objective if goal is not None and goal.status == "active" else None

    return objective


def goal_checked(goals: GoalManager | None) -> Callable[[], bool]:
    """Whether the session's goal is in force or complete: the host checks its files and
    gates itself, so "done" is not the answer's claim to prove (rlm.agent.policy.verify)."""

    def checked() -> bool:
        goal = goals.get() if goals is not None else None
        return goal is not None and goal.status in ("active", "complete")

    return checked


def rebuild_now(agent: Agent) -> CompactionEntry | None:
    """`/rebuild` between turns of a chat: a checkpoint written now (bounded), then the
    context rebuilt from it; None when there is nothing to rebuild."""
    ctl = agent.parts.get(CompactionController)
    return None if ctl is None else ctl.rebuild(agent.executor)


def compact_now(agent: Agent, instructions: str | None = None) -> CompactionEntry | None:
    """`/compact` between turns of a chat: the live kernel is listed, never touched; the
    settings are the ones scaled to the model's window."""
    ctl = agent.parts.get(CompactionController)
    if ctl is not None:
        return ctl.compact("manual", agent.executor, instructions)
    return perform_compaction(
        agent.session,
        agent.compaction_llm(),
        effective_settings(agent.config, agent.context_window(), strict=False).settings,
        trigger="manual",
        instructions=instructions,
        kernel=agent.executor,
    )


# budget for summarising an abandoned branch when the model's window is unknown
DEFAULT_BRANCH_BUDGET = 16_000


def move_to_branch(agent: Agent, leaf: str) -> Entry | None:
    """Resume from an earlier entry: the work on the branch being left is summarised into
    a branch_summary entry at the new position, so the model knows what was tried there."""
    session = agent.session
    old_leaf = session.leaf_id
    session.get(leaf)  # a clear error for an unknown entry id, before anything moves
    window = agent.context_window()
    threshold = effective_settings(agent.config, window, strict=False).threshold
    budget = threshold if threshold and threshold > 0 else DEFAULT_BRANCH_BUDGET
    entry = None
    if old_leaf is not None:
        entry = summarize_branch(session, old_leaf, leaf, agent.compaction_llm(), budget)
    if entry is None:
        session.set_leaf(leaf)
    return entry


# the features this module attaches (rlm.app.lifecycle.ROOT_FEATURES lists them in order)
COMPACTION = Plain("compaction", attach_compaction, answers=("compaction", "history"))
CHECKPOINT = Plain("checkpoint", attach_checkpoint, answers=("history",), after=("compaction",))
LONGRUN = Plain("longrun", attach_longrun, answers=("goals", "schedules"))
