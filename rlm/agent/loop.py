"""The agent loop: context -> model -> cells -> kernel -> results -> events.

A turn is one model call and the cells it asked for. `Agent.run(prompt)` appends the
prompt, then repeats turns until a final answer (`final()` / `final_var()` from the
kernel, or a text FINAL(...) fallback), a reply without code, or a limit; before it
stops, continuation hooks (goals, autonomous mode) may hand it a new message instead.
Everything the model sees is projected from the session log (rlm.session.context), so a
resumed session sees exactly what the live one did.

The loop knows no answer rule: it asks the answer policy (`self.answers`,
rlm.agent.policy) about each turn, reply, cell and answer, and carries out the decision
(a note for the model, a resample, a refusal, an accepted answer and its verdict).

The loop only yields `rlm.events` dataclasses; it never prints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Generator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from rlm.agent import child_report, notices, repair
from rlm.agent.acting import Outcome, act, say
from rlm.agent.budget import TokenBudget
from rlm.agent.children import Children
from rlm.agent.context_files import (
    input_descriptions_of,
    input_files_of,
    input_names_of,
    with_question_example,
)
from rlm.agent.modelcall import sample
from rlm.agent.pieces import Pieces
from rlm.agent.policy import (
    LOOP_BREAK_TEMPERATURE,
    RESAMPLE_TEMPERATURE,
    RESAMPLES,
    Accept,
    AnswerPolicy,
)
from rlm.agent.policy.dataflow import imported_names, recorded_names
from rlm.agent.recursion import Recursion
from rlm.agent.result import log_unrun_spending
from rlm.agent.runner import Work
from rlm.agent.runstate import RunState, limit_hit
from rlm.agent.slots import TreeSlots
from rlm.agent.steering import Delivered, Steered
from rlm.chain import Background, Chain, Parts, TurnHook
from rlm.config import Config
from rlm.errors import RlmError
from rlm.events import Event, Notice, RunEnded, TurnStarted
from rlm.kernel.types import RestoreReport
from rlm.ledger import BUDGETED, Ledger, Totals, charged
from rlm.llm.types import LLM, Usage
from rlm.outcome import decide
from rlm.protocols import (
    BridgeHandler,
    Continue,
    End,
    Executor,
    Handler,
    SessionLog,
    StartableExecutor,
)
from rlm.session.entries import CustomEntry, MessageEntry

# the policy's constants, where tests and callers have found them
__all__ = ["LOOP_BREAK_TEMPERATURE", "RESAMPLES", "RESAMPLE_TEMPERATURE", "Agent"]
# the stages features plug into (before the run, the prompt, a reply, a turn, the end, an
# overflow) are one typed chain: rlm.chain.Chain, `agent.chain`.
# the names holding the task's data that a run's end entry records, for the next process
# (rlm.agent.policy.dataflow): a resume reads them from the log's tail, not its whole branch
MAX_DATA_NAMES = 2000
# the session's kernel, not started yet (the Agent starts it with its bridge handler)
KernelFactory = Callable[[BridgeHandler, Config], StartableExecutor]


def _no_other_model(spec: str) -> LLM:
    raise RlmError(f"no model factory: {spec!r} cannot be built here (build agents with "
                   "rlm.app.build_agent)")


class Agent:
    """One session's agent: its model, its executor (kernel) and its log."""

    def __init__(
        self,
        session: SessionLog,
        config: Config,
        *,
        llm: LLM,
        llm_factory: Callable[[str], LLM] | None = None,
        executor: Executor | None = None,
        kernel_factory: KernelFactory | None = None,
        depth: int = 0,
        budget: TokenBudget | None = None,
        slots: TreeSlots | None = None,
        background: Background | None = None,
    ):
        """The composition root (rlm.app.build_agent) builds the model, the factory for
        sub-call and compaction models, and the kernel factory: the agent runs turns."""
        self.session = session
        self.config = config
        self.llm = llm
        self.llm_factory: Callable[[str], LLM] = llm_factory or _no_other_model
        self.executor: Executor | None = executor
        self.kernel_factory = kernel_factory
        self.depth = depth
        self.budget = budget or TokenBudget(config.token_budget, turn_limit=config.turn_budget,
                                            reserve_share=config.budget_reserve)
        # the session tree's concurrency bound (children and batched sub-calls)
        self.slots = slots or TreeSlots(config.max_children)
        self.recursion = Recursion(self, self.llm_factory)
        self.ledger = Ledger()  # every token spent on the user's behalf, by role
        self.turns = 0
        self.turn_active = False
        # the features' policies, by stage of the run (rlm.chain), and what runs beside the
        # loop: closed with the agent unless its owner (rlm.app.SessionRun) closes it first
        self.chain = Chain()
        self.background = background or Background()
        self.parts = Parts()  # what features expose by type (compaction's controller, ...)
        self.entry = "run"  # which entry point assembled this agent (rlm.app.ENTRY_POINTS)
        self.role = ""  # after the system prompt: a child's (rlm.agent.children.child_role)
        self.notices: list[Notice] = []  # shown once, at the start of the next run
        self.on_cell_output: Callable[[Any], None] | None = None
        self.state = RunState()
        self.answers = AnswerPolicy()  # the answer policy (rlm.agent.policy): rules plug in there
        self.pieces = Pieces(self)  # model calls, cells, steps: Ctrl-C (rlm.agent.pieces)
        self._steered = Steered()
        self._attached: list[CustomEntry] = []
        self._inputs: set[str] | None = None  # names of attached input variables (lazy)
        self.handlers: dict[str, Handler] = {
            "ping": lambda p: {"pong": True, **p},
            "final": self._on_final,
            "llm_query": self.recursion.llm_query,
            "llm_query_batched": self.recursion.llm_query_batched,
            "rlm_query": self.recursion.rlm_query,
        }
        self.children = Children(self)  # rlm_spawn's registry (rlm.agent.children)

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> RestoreReport | None:
        """Start the kernel (restoring its snapshot) unless an executor was given."""
        if self.executor is not None:
            self.executor.set_bridge_handler(self.handle_bridge)
            return None
        if self.kernel_factory is None:
            raise RlmError("this agent has no kernel: build agents with rlm.app.build_agent")
        kernel = self.kernel_factory(self.handle_bridge, self.config)  # as scaled by the root
        self.executor = kernel
        report = kernel.start()
        if report.snapshot_found:
            self.session.append(
                CustomEntry(
                    custom_type="kernel_restored",
                    data=report.to_dict(),
                    display=True,
                    content=notices.restored_on_start(report),
                )
            )
        return report

    def close(self) -> None:
        self.background.close()  # children, the advisor: none outlives its agent
        log_unrun_spending(self.ledger, self.session)  # `rlm compact`, a last /compact
        ex, self.executor = self.executor, None
        if ex is not None:
            ex.stop()

    def __enter__(self) -> Agent:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ model
    def context_window(self) -> int | None:
        """The window compaction is sized to: `--context-window` wins, else the model's."""
        if self.config.context_window:
            return int(self.config.context_window)
        return self.llm.context_window()

    def compaction_llm(self) -> LLM:
        """The model compaction and branch summaries call, charged as `compaction`."""
        spec = self.config.compaction_model
        return charged(self.llm_factory(spec) if spec else self.llm, self.charge, "compaction")

    # ------------------------------------------------------------------ bridge
    def handle_bridge(self, method: str, params: dict[str, Any]) -> Any:
        handler = self.handlers.get(method)
        if handler is None:
            raise RlmError(f"{method} is not available in this session")
        return handler(params)

    def _on_final(self, params: dict[str, Any]) -> dict[str, Any]:
        value = params.get("value", params.get("answer"))
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        self.state.final = (text, str(params.get("kind") or "final"))
        return {"ok": True}

    def charge(self, usage: Usage, *, role: str = "turns") -> None:
        """Charge tokens this agent spent to the ledger under `role` (rlm.ledger:
        the loop, or llm_query / the advisor / compaction from their own threads: the
        ledger and the budget are thread-safe), and to the budget when it counts them."""
        self.ledger.charge(role, usage)
        if role in BUDGETED:
            self.budget.charge(usage)

    def add_child(self, spent: Totals) -> None:
        """A child agent's whole ledger (rlm_query, rlm_spawn), split by its roles; its
        budget was charged up the tree as it spent."""
        self.ledger.add_child(spent)

    def run_totals(self) -> Totals:
        """What the current run (or the last one) spent: the ledger's change over it."""
        return self.ledger.totals().minus(self.state.spent_at_start)

    @property
    def tokens_used(self) -> int:
        """What `--max-tokens` counts: every role but compaction and the checkpoint."""
        return self.ledger.totals().budgeted

    def steer(self, text: str, custom_type: str = "steer",
              on_delivered: Delivered | None = None, shown: str | None = None) -> None:
        """Inject a message into active work (e.g. a heartbeat). Thread-safe; it reaches
        the model before the next model call, never between a call and its results.
        `on_delivered` runs once the message is in the session (a queued message waits for
        the next run if this one has ended); `shown` is said on screen then."""
        self._steered.put(text, custom_type, on_delivered, shown)

    def attach_context(self, entry: CustomEntry) -> None:
        """Describe input for the next prompt (loaded files, notebook variables). It is
        appended right before that prompt, so the question is the last thing the model
        reads (measured: the 1.5B local model answers the wrong question otherwise)."""
        self._attached.append(entry)
        self.input_names().update(input_names_of([entry]))

    def input_files(self) -> set[str]:
        """The files the input entries were loaded from: on the branch, and attached for
        the next prompt (not in the session yet)."""
        return input_files_of(self.session.branch()) | input_files_of(self._attached)

    def input_names(self) -> set[str]:
        """Kernel variables that hold input described to the model (files, parent context)."""
        if self._inputs is None:
            self._inputs = input_names_of(self.session.branch())
        return self._inputs

    def pending_steered(self) -> bool:
        """Messages queued by `steer` that no run has written into the session yet and that
        warrant a run of their own (advice waits for the next run: rlm.agent.steering)."""
        return self._steered.pending()

    @property
    def stop_requested(self) -> bool:
        """The user asked to end the run (the stop button, or Ctrl-C twice)."""
        return self.state.stopping

    # ------------------------------------------------------------- interrupts
    def stop(self) -> None:
        """End the run now: interrupt the running cell and stop after it (the stop button)."""
        self.state.stop.set()
        self.interrupt(child_report.AT_STOP)

    def interrupt(self, why: str = child_report.AT_CTRL_C) -> int:
        """Ctrl-C (rlm.agent.pieces): the presses that count on the running piece; `why`
        its children are cancelled (rlm.agent.child_report)."""
        return self.pieces.interrupt(why)

    def announce(self, text: str) -> None:
        """Name the step between turns that runs now (a gate, a summary) on screen."""
        self.pieces.announce(text)

    # --------------------------------------------------------------------- run
    def run(self, prompt: str | None) -> Generator[Event, None, None]:
        """Append `prompt` (if any) as a user message and work until the run ends. Ctrl-C
        is counted for the whole run, and taken by the next model call or cell."""
        with self.pieces.counting():
            yield from self._run(prompt)

    def _run(self, prompt: str | None) -> Generator[Event, None, None]:
        if self.executor is None:
            self.start()
        # per-run state, reset in this one place
        log_unrun_spending(self.ledger, self.session)  # a chat's /compact since the last run
        self.state = st = RunState(spent_at_start=self.ledger.totals())
        self.answers.start_run(native_tools=self.llm.native_tools,
                               max_turns=self.config.max_turns, has_data=bool(self._attached),
                               inputs=self.input_names() | imported_names(
                                   self.session.branch()),
                               held=lambda: recorded_names(self.session.branch()),
                               offer=lambda rewrites: repair.tried(
                                   rewrites, self.executor,
                                   min(repair.TRIAL_TIMEOUT_S, self.config.cell_timeout)),
                               probe=lambda code: repair.probed(
                                   code, self.executor,
                                   min(repair.TRIAL_TIMEOUT_S, self.config.cell_timeout)),
                               cwd=Path(self.config.kernel_cwd or os.getcwd()), prompt=prompt,
                               described=lambda: input_descriptions_of(self.session.branch()))
        self.chain.call(self.chain.start, self)
        notices_now, self.notices = self.notices, []
        yield from notices_now
        for entry in self._attached:  # the input first, the question last
            self.session.append(with_question_example(entry, prompt))
        self._attached.clear()
        if prompt:
            self.session.append(MessageEntry(message={"role": "user", "content": prompt}))
        yield from self.chain.events(self.chain.prompt, self)
        while True:
            limit = limit_hit(self.config, st, self.run_totals(), self.budget)
            if limit:
                yield from self._end(f"limit:{limit[0]}", st.turns, detail=limit[1])
                return
            if st.stopping:
                yield from self._end("interrupted", st.turns)
                return
            halt = self.answers.halt(st.turns + 1, self.tokens_used)
            if halt is not None:  # stuck, and the policy's one note did not help
                yield from self._end(halt.reason, st.turns, detail=halt.detail, stuck=halt.report)
                return
            st.turns += 1
            self.turns += 1
            self.budget.charge_turn()
            yield from say(self, self.answers.turn_note(st.turns))
            outcome = yield from self._turn(st.turns)
            yield from self.chain.events(self.chain.account, self)
            decision = None
            if outcome is not None:
                # queue the continuation before compaction runs, so the run never stalls;
                # a gate runs there: Ctrl-C during it ends the run, not with the answer
                stopping = st.stopping
                decision = (yield from self.in_phase(partial(self._continuation, *outcome)))
                if st.stopping and not stopping and not (
                        isinstance(decision, End) and decision.reason == "interrupted"):
                    decision = End("interrupted", "stopped by the user between turns")
                decision = decision or End(outcome[0], st.error_detail)
                if isinstance(decision, Continue):
                    st.final = st.shown = None
                    self.answers.continued(decision.work)
                    self.session.append(MessageEntry(
                        message={"role": "user", "content": decision.prompt},
                        origin="continuation"))
                    yield Notice("continuing: " + _plain_first_line(decision.prompt))
            for hook in self.chain.turn:  # a compaction: Ctrl-C stops it and the run
                if st.stopping:  # after a double Ctrl-C the user wants out, not a summary
                    break
                yield from (yield from self.in_phase(partial(_listed, hook, self)))
            if isinstance(decision, End):
                assert outcome is not None
                yield from self._end(decision.reason, st.turns, final=outcome[1],
                                     detail=decision.detail)
                return

    def _end(self, reason: str, turns: int, *, final: str | None = None,
             detail: str | None = None, stuck: dict[str, Any] | None = None) -> Iterator[Event]:
        unmet = self.chain.ending(self, reason, detail)  # a stuck run blocks its goal first
        verdict = self.state.accepted if final is not None else None
        ended = decide(reason, detail, verdict.verified if verdict else None,
                       verdict.why if verdict else None, unmet)
        spent = self.ledger.totals()
        self.ledger.logged(spent)  # what follows is the next run's or a `spent` entry's
        tokens = spent.minus(self.state.spent_at_start).to_dict()  # every surface's
        held = sorted(self.answers.flow.derived)[:MAX_DATA_NAMES] if self.answers.flow else []
        if verdict is not None:  # the answer and how it was judged, in the log
            self.session.append(CustomEntry(custom_type="final", data={
                "answer": final, "reason": reason, **_judged(verdict), "data": held,
                "outcome": ended.to_dict(), "tokens": tokens}))
        else:  # how a run without an answer ended (`rlm sessions`); never sent to the model
            self.session.append(CustomEntry(custom_type="run_end", data={
                "data": held, "reason": reason, "detail": detail, "outcome": ended.to_dict(),
                "tokens": tokens}, display=False))
        if final is not None and ended.answered and self.state.shown is not None:
            yield self.state.shown  # the answer panel: only for an answer that stands
        event = RunEnded(reason=reason, turns=turns, final=final, detail=detail, stuck=stuck,
                         outcome=ended.to_dict(), tokens=tokens,
                         **(_judged(verdict) if verdict is not None else {}))
        for after in self.chain.ended:
            after(self, event)
        yield event

    def _continuation(self, reason: str, answer: str | None) -> Continue | End | None:
        """The first decision a continuation hook (goals, the autonomous policy) makes
        about a run that would end as `reason`; None: it ends so."""
        if self.state.stopping or reason.startswith(("error", "interrupted")):
            return None
        self.state.answer = answer  # a goal's judge reads it (a completion claim)
        return self.chain.decide(self, reason)

    # -------------------------------------------------------------------- turn
    def _turn(self, turn: int) -> Generator[Event, None, Outcome]:
        """One model call and its cells. Returns (reason, answer) when the run may end."""
        yield TurnStarted(turn)
        self.turn_active = True
        for line in self._steered.drain(self.session):
            yield Notice(line, "warning")
        try:
            completion = yield from sample(self)  # resampled / retried as the policy decides
            if completion is None:
                return ("interrupted", None) if self.state.stopping else ("error", None)
            completion = yield from self.chain.chosen(self, completion)  # candidates voted
            return (yield from act(self, completion))
        finally:
            self.turn_active = False

    # ------------------------------------------------------------------ helpers
    def in_phase(self, fn: Callable[[], Any]) -> Generator[Event, None, Any]:
        """A step between turns (the continuations: a gate; the turn hooks: a compaction)
        on a worker thread the loop waits for: Ctrl-C stops it and the run (rlm.agent.
        pieces)."""
        return (yield from self.pieces.step(fn))

    def in_thread(self, fn: Work, *, cell: bool = False) -> Generator[Event, None, Any]:
        """A model call or a cell on a worker thread; Ctrl-C stays responsive (rlm.agent.
        pieces)."""
        return (yield from self.pieces.run(fn, cell=cell))

def _listed(hook: TurnHook, agent: Agent) -> list[Event]:
    """A turn hook's events, taken on the step's thread (a generator runs there whole)."""
    return list(hook(agent) or [])


def _judged(verdict: Accept) -> dict[str, Any]:
    """verified, why, and the evidence of a verified answer or the claims nothing supports."""
    if verdict.verified:
        return {"verified": True, "evidence": verdict.evidence}
    return {"verified": False, "why": verdict.why, "unverified_claims": verdict.unverified_claims}


def _plain_first_line(text: str) -> str:
    """The first line with words of a continuation prompt, its internal tags dropped
    (`<goal_context>` is for the model, not the terminal) and its text as typed (the
    prompt escapes `&`, `<`, `>` inside its tags)."""
    import html
    import re

    for line in text.splitlines():
        plain = html.unescape(re.sub(r"</?[A-Za-z_][\w-]*>", "", line)).strip()
        if plain:
            return plain[:120]
    return ""
