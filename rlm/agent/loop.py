"""The agent loop: context -> model -> cells -> kernel -> results -> events.

A turn is one model call and the cells it asked for. `Agent.run(prompt)` appends the
prompt, then repeats turns until a final answer (`final()` / `final_var()` from the
kernel, or a text FINAL(...) fallback), a reply without code, or a limit; before it
stops, continuation hooks (goals, autonomous mode) may hand it a new message instead.
Everything the model sees is projected from the session log (rlm.session.context), so a
resumed session sees exactly what the live one did.

The loop only yields `rlm.events` dataclasses; it never prints.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

from rlm.agent import notices
from rlm.agent.codeparse import code_tool_calls, overwritten_inputs, text_final
from rlm.agent.context_files import with_question_example
from rlm.agent.nudge import (
    NUDGE_ERROR_TEXT,
    NUDGE_NOT_FOUND,
    NUDGE_UNGROUNDED,
    WHY,
    choose_nudge,
    error_text,
    last_turn_note,
    non_answer_refusal,
    ungrounded_refusal,
    unverified_why,
)
from rlm.agent.progress import ModelTextStream, OutputStream, prompt_tokens
from rlm.agent.prompts import system_prompt
from rlm.agent.recursion import Recursion, TokenBudget
from rlm.agent.runner import Work, run_interruptible
from rlm.agent.runstate import RunState
from rlm.config import Config
from rlm.errors import AuthError, ContextOverflow, RateLimited, RlmError, ScriptExhausted
from rlm.events import (
    CellFinished,
    CellStarted,
    Event,
    FinalAnswer,
    KernelRestarted,
    ModelCallStarted,
    ModelReply,
    Notice,
    RunEnded,
    TurnStarted,
)
from rlm.kernel.types import CellResult, RestoreReport
from rlm.llm.seam import retry_notices
from rlm.llm.types import LLM, PYTHON_TOOL, Completion, ToolCall, Usage
from rlm.protocols import (
    BridgeHandler,
    Continuation,
    Executor,
    Handler,
    SessionLog,
    StartableExecutor,
    TurnHook,
)
from rlm.session.entries import CustomEntry, MessageEntry

LOOP_BREAK_TEMPERATURE = 0.7
# a fenced-code reply whose first cell is the failing cell again is not run: it is sampled
# again (up to RESAMPLES times, at RESAMPLE_TEMPERATURE) and kept out of the context
RESAMPLES = 2
RESAMPLE_TEMPERATURE = 1.0
REPEATED = ("\n[You sent exactly the same code as your previous cell and it failed again. "
            "Change the code: check the names, columns and types involved with a small cell "
            "first.]")
RAN_AGAIN = ("\n[This cell is the same as one you already ran, so its output is the same. "
             "If that output answers the question, reply with FINAL(answer); if it does not, "
             "write a different cell that prints what is missing.]")
# (reason, answer) when a turn says the run may end; None to keep going
Outcome = tuple[str, str | None] | None
# Continuation (asked when the run would end: a message to keep going) and TurnHook (after
# every turn: compaction, goal accounting; may return events) are rlm.protocols types.
# rlm_query: (parent, task, context) -> the child's final answer. Set by the composition
# root (rlm.app), which gives children their own wiring.
ChildRunner = Callable[["Agent", str, Any], "str | None"]
Delivered = Callable[[], None]
# the session's kernel, not started yet (the Agent starts it with its bridge handler)
KernelFactory = Callable[[BridgeHandler], StartableExecutor]


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
        self.budget = budget or TokenBudget(config.token_budget)
        self.recursion = Recursion(self, self.llm_factory)
        self.tokens_used = 0
        self.turns = 0
        self.turn_active = False
        self.continuations: list[Continuation] = []
        # run when a run starts, after the run state is reset (compaction's overflow guard)
        self.run_start_hooks: list[Callable[[Agent], None]] = []
        # run once per run, after the input and the prompt are in the session and before
        # the first model call (compaction of a context already over its threshold)
        self.prompt_hooks: list[TurnHook] = []
        # run after every turn, before the continuation is chosen (goal accounting)
        self.account_hooks: list[TurnHook] = []
        # run after every turn, after a continuation is queued (compaction)
        self.turn_hooks: list[TurnHook] = []
        # on ContextOverflow: returns "retry" (compacted) or the message to show the user
        self.overflow_hook: Callable[[Agent, MessageEntry], str] | None = None
        self.compaction: Any = None  # rlm.compaction.controller.CompactionController
        self.child_runner: ChildRunner | None = None
        self.entry = "run"  # which entry point assembled this agent (rlm.app.ENTRY_POINTS)
        self.notices: list[Notice] = []  # shown once, at the start of the next run
        self.on_cell_output: Callable[[Any], None] | None = None
        self.state = RunState()
        self._charge_lock = threading.Lock()  # bridge handlers charge from a thread pool
        self._steered: queue.SimpleQueue[tuple[str, str, Delivered | None]] = queue.SimpleQueue()
        self._attached: list[CustomEntry] = []
        self._inputs: set[str] | None = None  # names of attached input variables (lazy)
        self.policy: Any = None  # rlm.longrun.AutonomousPolicy when --autonomous
        self.handlers: dict[str, Handler] = {
            "ping": lambda p: {"pong": True, **p},
            "final": self._on_final,
            "llm_query": self.recursion.llm_query,
            "llm_query_batched": self.recursion.llm_query_batched,
            "rlm_query": self.recursion.rlm_query,
        }

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> RestoreReport | None:
        """Start the kernel (restoring its snapshot) unless an executor was given."""
        if self.executor is not None:
            self.executor.set_bridge_handler(self.handle_bridge)
            return None
        if self.kernel_factory is None:
            raise RlmError("this agent has no kernel: build agents with rlm.app.build_agent")
        kernel = self.kernel_factory(self.handle_bridge)
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
        spec = self.config.compaction_model
        return self.llm_factory(spec) if spec else self.llm

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

    def run_child(self, task: str, context: Any) -> str | None:
        """rlm_query: run a child agent with its own kernel and session to completion."""
        if self.child_runner is None:
            raise RlmError("rlm_query is not available here: this agent was built without a "
                           "child runner (build agents with rlm.app.build_agent)")
        return self.child_runner(self, task, context)

    def charge(self, usage: Usage, *, sub: bool = False) -> None:
        """Count tokens spent by this agent (the loop, or llm_query/rlm_query handlers running
        concurrently on the bridge pool: one lock keeps the sums exact)."""
        with self._charge_lock:
            self.tokens_used += usage.total
            self.budget.charge(usage)

    def add_tokens(self, n: int) -> None:
        """Tokens a child agent spent (rlm_query); thread-safe like `charge`."""
        with self._charge_lock:
            self.tokens_used += n

    def steer(self, text: str, custom_type: str = "steer",
              on_delivered: Delivered | None = None) -> None:
        """Inject a message into active work (e.g. a heartbeat). Thread-safe; it reaches
        the model before the next model call, never between a call and its results.
        `on_delivered` runs once the message is in the session (a queued message waits for
        the next run if this one has ended)."""
        self._steered.put((text, custom_type, on_delivered))

    def attach_context(self, entry: CustomEntry) -> None:
        """Describe input for the next prompt (loaded files, notebook variables). It is
        appended right before that prompt, so the question is the last thing the model
        reads (measured: the 1.5B local model answers the wrong question otherwise)."""
        self._attached.append(entry)
        self.input_names().update(_input_names(entry))

    def input_files(self) -> set[str]:
        """The files the input entries were loaded from: on the branch, and attached for
        the next prompt (not in the session yet)."""
        return {f for e in [*self.session.branch(), *self._attached]
                if isinstance(e, CustomEntry) and e.custom_type == "context_vars"
                for f in (e.data or {}).get("files") or [] if isinstance(f, str)}

    def input_names(self) -> set[str]:
        """Kernel variables that hold input described to the model (files, parent context)."""
        if self._inputs is None:
            self._inputs = {n for e in self.session.branch() for n in _input_names(e)}
        return self._inputs

    def _drain_steered(self) -> None:
        while True:
            try:
                text, kind, delivered = self._steered.get_nowait()
            except queue.Empty:
                return
            self.session.append(CustomEntry(custom_type=kind, data={"text": text},
                                            display=True, content=text))
            if delivered is not None:
                delivered()

    def pending_steered(self) -> bool:
        """Messages queued by `steer` that no run has written into the session yet."""
        return not self._steered.empty()

    @property
    def stop_requested(self) -> bool:
        """The user asked to end the run (the stop button, or Ctrl-C twice)."""
        return self.state.stopping

    # ------------------------------------------------------------- interrupts
    def stop(self) -> None:
        """End the run now: interrupt the running cell and stop after it (the stop button)."""
        self.state.stop.set()
        self.interrupt()

    def interrupt(self) -> None:
        """Ctrl-C: once interrupts the running cell, twice ends the turn."""
        self.state.interrupts += 1
        if self.executor is not None:
            try:
                self.executor.interrupt()
            except Exception:  # noqa: BLE001 - a dead kernel is reported by execute
                pass
        if self.state.interrupts >= 2:
            self.state.stop.set()

    # --------------------------------------------------------------------- run
    def run(self, prompt: str | None) -> Generator[Event, None, None]:
        """Append `prompt` (if any) as a user message and work until the run ends."""
        if self.executor is None:
            self.start()
        # per-run state, reset in this one place
        self.state = st = RunState(tokens_at_start=self.tokens_used, has_data=bool(self._attached),
                                   prompt=prompt or "")
        for start_hook in self.run_start_hooks:
            start_hook(self)
        notices_now, self.notices = self.notices, []
        yield from notices_now
        for entry in self._attached:  # the input first, the question last
            self.session.append(with_question_example(entry, prompt))
        self._attached.clear()
        if prompt:
            self.session.append(MessageEntry(message={"role": "user", "content": prompt}))
        for prompt_hook in self.prompt_hooks:
            yield from prompt_hook(self) or []
        while True:
            limit = self._limit_hit(st.turns, st.started)
            if limit:
                yield from self._end(f"limit:{limit[0]}", st.turns, detail=limit[1])
                return
            if st.stopping:
                yield from self._end("interrupted", st.turns)
                return
            st.turns += 1
            self.turns += 1
            yield from self._last_turn_note(st.turns)
            outcome = yield from self._turn(st.turns)
            for hook in self.account_hooks:
                yield from hook(self) or []
            follow = None
            if outcome is not None:
                # queue the continuation before compaction runs, so the run never stalls
                follow = self._continuation(*outcome)
                if follow is not None:
                    st.final = None
                    self.session.append(MessageEntry(message={"role": "user", "content": follow},
                                                     origin="continuation"))
                    yield Notice("continuing: " + _plain_first_line(follow))
            if not st.stopping:  # after a double Ctrl-C the user wants out, not a summary
                for hook in self.turn_hooks:
                    yield from hook(self) or []
            if outcome is not None and follow is None:
                yield from self._end(outcome[0], st.turns, final=outcome[1], detail=st.error_detail)
                return

    def _end(self, reason: str, turns: int, *, final: str | None = None,
             detail: str | None = None) -> Iterator[Event]:
        verified = why = None
        if final is not None:
            why = self.state.unverified
            verified = why is None
            self.session.append(CustomEntry(custom_type="final", data={
                "answer": final, "reason": reason, "verified": verified,
                **({"why": why} if why else {})}))
        yield RunEnded(reason=reason, turns=turns, final=final, detail=detail,
                       verified=verified, why=why)

    def _continuation(self, reason: str, answer: str | None) -> str | None:
        if self.state.stopping or reason.startswith(("error", "interrupted")):
            return None
        for hook in self.continuations:
            msg = hook(self, reason)
            if msg:
                return msg
        return None

    def _last_turn_note(self, turn: int) -> Iterator[Event]:
        note = last_turn_note(turn, self.config.max_turns, native_tools=self.llm.native_tools,
                              cells_run=self.state.cells)
        if note is not None:
            self.session.append(MessageEntry(message={"role": "user", "content": note},
                                             origin="nudge"))
            yield Notice(f"last turn ({turn} of {self.config.max_turns}): asked the model "
                         "to answer from what its cells showed")

    def _limit_hit(self, turns: int, started: float) -> tuple[str, str] | None:
        c = self.config
        if c.max_turns is not None and turns >= c.max_turns:
            return ("turns", f"{turns} of {c.max_turns} turns used")
        spent = self.tokens_used - self.state.tokens_at_start
        if c.max_tokens is not None and spent >= c.max_tokens:
            return ("tokens", f"{spent} of {c.max_tokens} tokens used in this run")
        if c.max_wall_s is not None and time.monotonic() - started >= c.max_wall_s:
            return ("wall_clock", f"{c.max_wall_s:.0f} s elapsed")
        if self.budget.limit is not None and self.budget.remaining == 0:
            return ("token_budget", f"{self.budget.spent} of {self.budget.limit} tokens used")
        return None

    # -------------------------------------------------------------------- turn
    def _turn(self, turn: int) -> Generator[Event, None, Outcome]:
        """One model call and its cells. Returns (reason, answer) when the run may end."""
        yield TurnStarted(turn)
        self.turn_active = True
        self._drain_steered()
        try:
            completion = yield from self._call_model()
            for _ in range(RESAMPLES):
                if completion is None or (why := self._repeats_a_cell(completion)) is None:
                    break
                completion = yield from self._resample(completion, why)
            if completion is None:
                return ("interrupted", None) if self.state.stopping else ("error", None)
            return (yield from self._act(completion))
        finally:
            self.turn_active = False

    def _repeats_a_cell(self, completion: Completion) -> str | None:
        """Why a fenced-code reply's first cell is not worth running: it is the cell that
        just failed, or a cell that already succeeded twice in this run, unchanged (its
        output would be the same); None when it is new. A first repeat of a successful
        cell runs, with a note: after a refusal the local model re-runs its cell to see
        the output again, then answers from it (the e2e region test: resampling that
        repeat made it answer a bare total instead of the region)."""
        if self.llm.native_tools or completion.tool_calls:
            return None
        calls = code_tool_calls(completion.content)
        code = str(calls[0].arguments.get("code", "")).strip() if calls else ""
        failed = self.state.last_failed_code
        if code and failed is not None and code == failed.strip():
            return "the reply's first cell repeats the cell that just failed"
        if code and self.state.succeeded.get(code, 0) >= 2:
            return "the reply's first cell repeats a cell that already ran twice in this run"
        return None

    def _resample(self, rejected: Completion, why: str) -> Generator[Event, None, Completion | None]:
        """Sample again instead of running a repeated cell: a small model that sees its own
        cell repeated in the context repeats it more (the task suite's 1.5B model sent one
        failing groupby four times in a row, whatever the notes said; `rlm run`'s own
        example got one successful cell sixteen times). The rejected reply is charged and
        logged as a hidden `resampled` entry (it never reaches the model)."""
        self.charge(rejected.usage)
        self.session.append(CustomEntry(
            custom_type="resampled", display=False, content=None,
            data={"why": why, "content": rejected.content, "usage": rejected.usage.to_dict()}))
        yield Notice(f"{why}; sampling a new reply instead of running it")
        return (yield from self._call_model(temperature=RESAMPLE_TEMPERATURE))

    def _temperature(self) -> float | None:
        """The configured temperature; for a fenced-code model whose newest cell repeated
        the failing one before it (or a successful one that ran twice before), at least
        LOOP_BREAK_TEMPERATURE: at temperature 0 a small model sends the same cell again
        whatever the result says (the task suite's 1.5B model sent one failing groupby
        five times)."""
        t = self.config.temperature
        if self.state.looping and not self.llm.native_tools:
            return max(t or 0.0, LOOP_BREAK_TEMPERATURE)
        return t

    def _call_model(self, temperature: float | None = None
                    ) -> Generator[Event, None, Completion | None]:
        """One model call (a retry after a compaction on overflow); `temperature` overrides
        the run's (`_temperature`)."""
        native = self.llm.native_tools
        for attempt in range(2):
            # incremental projection kept by the store: O(new entries) per turn
            # (copied per message: the store's cache must not see provider-side mutation)
            messages = [_copy_message(m) for m in self.session.messages(
                system_prompt=system_prompt(self.config, native_tools=native), native_tools=native)]

            def call(emit: Callable[[Event], None],
                     messages: list[dict[str, Any]] = messages) -> Completion:
                with retry_notices(lambda text: emit(Notice(text, "warning"))), \
                        ModelTextStream(emit) as on_text:
                    return self.llm.complete(
                        messages,
                        tools=[PYTHON_TOOL] if native else None,
                        on_text=on_text,
                        temperature=self._temperature() if temperature is None else temperature,
                    )

            yield ModelCallStarted(self.llm.spec, prompt_tokens(messages))
            try:
                completion = yield from self._in_thread(call)
                return completion
            except (RateLimited, AuthError, ScriptExhausted) as e:
                self.session.append(MessageEntry(
                    message={"role": "assistant", "content": ""}, error=f"{type(e).__name__}: {e}",
                    model=self.llm.spec))
                self.state.error_detail = str(e)  # told once, by RunEnded
                return None
            except ContextOverflow as e:
                entry = MessageEntry(
                    message={"role": "assistant", "content": ""}, error=f"context overflow: {e}",
                    model=self.llm.spec)
                self.session.append(entry)
                decision = self.overflow_hook(self, entry) if self.overflow_hook else ""
                if decision == "retry" and attempt == 0:
                    yield Notice("context overflow: compacted, retrying once", "warning")
                    continue
                report = decision if decision not in ("", "retry", "report") else None
                yield Notice(report or notices.overflow_report(e), "warning")
                return None
        return None

    def _act(self, completion: Completion) -> Generator[Event, None, Outcome]:
        calls = [c for c in completion.tool_calls if c.name == "python"]
        if not calls:
            calls = code_tool_calls(completion.content)
        self.charge(completion.usage)
        message: dict[str, Any] = {"role": "assistant", "content": completion.content}
        if calls:
            message["tool_calls"] = [c.to_message() for c in calls]
        self.session.append(MessageEntry(
            message=message, usage=completion.usage.to_dict(), model=completion.model or None))
        yield ModelReply(completion.content, [str(c.arguments.get("code", "")) for c in calls],
                         completion.usage.to_dict())
        if not calls:
            return (yield from self._answer_without_code(completion.content))
        for i, call in enumerate(calls):
            if self.state.stopping:
                self._record_skipped(call, "not run: the turn was interrupted")
                continue
            yield from self._run_cell(call, i)
            if self.state.final is not None:
                for rest in calls[i + 1:]:
                    self._record_skipped(rest, "not run: final() was called")
                answer, kind = self.state.final
                if (yield from self._refuse_error_text(answer)):
                    self.state.final = None
                    return None
                self._accept(kind, answer)
                yield FinalAnswer(answer, kind)
                return ("final", answer)
            if call.synthetic and i + 1 < len(calls) and self._showed_something():
                # the later fences were written before this output was seen (small models
                # add "if that fails, try ..." blocks): they wait for the model's next reply
                # the reason once: a degenerate reply can hold dozens of fences
                for k, rest in enumerate(calls[i + 1:]):
                    self._record_skipped(rest, NOT_RUN_UNSEEN if k == 0 else "Not run.")
                yield Notice(f"{len(calls) - i - 1} more code block(s) in the reply not run: "
                             "written before the output above was seen")
                break
        return None

    def _showed_something(self) -> bool:
        """The cell just run failed or printed something."""
        st = self.state
        return not st.last_cell_ok or bool(st.outputs and st.outputs[-1].strip())

    def _refuse_error_text(self, answer: str) -> Generator[Event, None, bool]:
        """Refuse (once per run) an answer that is the text of an error: tell the model why."""
        what = error_text(answer)
        if what is None or NUDGE_ERROR_TEXT in self.state.refused:
            return False
        self.state.refused.add(NUDGE_ERROR_TEXT)
        self.session.append(MessageEntry(message={
            "role": "user", "content": NUDGE_ERROR_TEXT.format(what=what[:80])}))
        yield Notice(f"the model answered with an error message ({what[:80]}); asked it to fix "
                     "its code instead")
        return True

    def _refuse_ungrounded(self, answer: str) -> Generator[Event, None, bool]:
        """Refuse (each once per run, while a turn is left) a text answer that says the
        data holds nothing, or that states figures no output of this run shows."""
        st, tools, limit = self.state, self.llm.native_tools, self.config.max_turns
        refusals = [
            (NUDGE_NOT_FOUND, non_answer_refusal(answer, native_tools=tools, turn=st.turns,
                                                 limit=limit, refused=st.refused,
                                                 cells_run=st.cells),
             "the model answered that nothing was found; asked it to look at the data"),
            (NUDGE_UNGROUNDED, ungrounded_refusal(answer, st.outputs, native_tools=tools,
                                                  turn=st.turns, limit=limit,
                                                  refused=st.refused, prompt=st.prompt,
                                                  cells_run=st.cells),
             "the model answered with something no output of this run shows; asked it to "
             "compute it first"),
        ]
        for key, nudge, notice in refusals:
            if nudge is not None:
                st.refused.add(key)
                self.session.append(MessageEntry(message={"role": "user", "content": nudge},
                                                 origin="nudge"))
                yield Notice(notice)
                return True
        return False

    def _accept(self, source: str, answer: str) -> None:
        st = self.state
        st.unverified = unverified_why(source=source, cells_run=st.cells,
                                       last_cell_ok=st.last_cell_ok,
                                       error_like=error_text(answer), answer=answer,
                                       prompt=st.prompt,
                                       # fenced-code (small) models answer from outputs;
                                       # a native-tool model's closing reply may be prose
                                       outputs=None if source in ("final", "final_var")
                                       or self.llm.native_tools else st.outputs)

    def _answer_without_code(self, content: str) -> Generator[Event, None, Outcome]:
        found = text_final(content)
        nudge = choose_nudge(self.session.branch(), native_tools=self.llm.native_tools,
                             nudges=self.state.nudges, has_data=self.state.has_data,
                             final=found is not None, cells_run=self.state.cells,
                             refused=self.state.refused)
        if nudge is not None:
            # small models give up in prose after a failing cell, or answer before looking
            self.state.nudges += 1
            self.state.refused.add(nudge)
            self.session.append(MessageEntry(message={"role": "user", "content": nudge},
                                             origin="nudge"))
            yield Notice(f"the model answered without code {WHY[nudge]}; asked it to use a "
                         "cell first")
            return None
        if found is None:
            answer = content.strip()
            if (yield from self._refuse_error_text(answer)) or \
                    (yield from self._refuse_ungrounded(answer)):
                return None
            self._accept("reply", answer)
            yield FinalAnswer(answer, "reply")
            return ("no_code", answer)
        kind, value = found
        if kind == "var":
            value = self._read_var(value)
        if (yield from self._refuse_error_text(value)) or \
                (kind != "var" and (yield from self._refuse_ungrounded(value))):
            return None
        self._accept("text", value)
        yield FinalAnswer(value, "text")
        return ("final", value)

    def _read_var(self, name: str) -> str:
        res = self._executor().execute(f"print(str({name}), end='')", timeout=30)
        return res.shaped if res.ok else f"[FINAL_VAR: {name} is not defined]"

    # -------------------------------------------------------------------- cells
    def _run_cell(self, call: ToolCall, index: int) -> Iterator[Event]:
        code = call.arguments.get("code")
        if not isinstance(code, str):
            # a garbled tool call is the model's mistake: tell it, run nothing
            raw = call.arguments.get("_invalid_arguments", call.arguments)
            why = (f"Your python tool call could not be run: its arguments must be JSON "
                   f'{{"code": "<python source>"}}; got {str(raw)[:300]!r}.')
            self._record_skipped(call, why, status="error")
            self.state.last_cell_ok = False
            yield CellFinished("", "error", why, 0.0, None)
            return
        if clobbered := overwritten_inputs(code, self.input_names()):
            names = ", ".join(f"`{n}`" for n in clobbered)
            why = (f"Not run: this cell assigns a literal to {names}, which already holds your "
                   f"input (the preview you saw is only its start). Use the variable as it is: "
                   f"search it or slice it.")
            self._record_skipped(call, why, status="error")
            self.state.last_cell_ok = False
            yield CellFinished(code, "error", why, 0.0, None)
            return
        yield CellStarted(code, index)
        pre_notice = ""
        ex = self._executor()
        if not ex.is_alive():
            report = ex.restart("the kernel was not running")
            pre_notice = notices.restarted("was found dead before this cell", report)
        result: CellResult = yield from self._execute(code)
        self.state.cells += 1
        self.state.last_cell_ok = result.ok
        if result.ok:
            self.state.outputs.append(result.shaped)
        content = pre_notice + notices.cell_content(result) + self._existing_names(result)
        failed_again = result.status == "error" and self.state.last_failed_code == code
        before = self.state.succeeded.get(code.strip(), 0) if result.ok else 0
        self.state.looping = failed_again or before >= 2
        if failed_again:
            content += REPEATED  # small models at temperature 0 can loop on one failing cell
        elif before:
            content += RAN_AGAIN
        self.state.last_failed_code = code if result.status == "error" else None
        if result.ok:
            self.state.succeeded[code.strip()] = before + 1
        self.session.append(MessageEntry(
            message={"role": "tool", "tool_call_id": call.id, "name": "python", "content": content},
            cell=result.to_dict()))
        yield CellFinished(code, result.status, content, result.duration_s, result)
        if result.restart is not None:
            yield KernelRestarted(result.died_cause or result.status, list(result.restart.restored),
                                  [f["name"] for f in result.restart.failed + result.restart.skipped])

    def _existing_names(self, result: CellResult) -> str:
        """After a NameError: the names that exist, inputs first; after a KeyError: where
        that column is, or the columns that exist (rlm.agent.notices)."""
        if result.status != "error" or self.executor is None:
            return ""
        missing = notices.missing_name(result.shaped)
        key = None if missing is not None else notices.missing_key(result.shaped)
        if missing is None and key is None:
            return ""
        try:
            rows = self.executor.list_namespace(timeout=5.0).get("names", [])
        except Exception:  # noqa: BLE001 - a busy or dead kernel: the error alone still helps
            return ""
        if missing is not None:
            return notices.existing_names(missing, rows, self.input_names())
        return notices.key_note(str(key), rows, self.input_names())

    def _execute(self, code: str) -> Generator[Event, None, CellResult]:
        timeout = self.config.cell_timeout
        ex = self._executor()
        if getattr(ex, "run_in_caller_thread", False):  # optional Executor flag (notebook)
            return ex.execute(code, timeout=timeout, on_output=self.on_cell_output)
            yield  # pragma: no cover - makes this a generator

        def run(emit: Callable[[Event], None]) -> CellResult:
            with OutputStream(emit, self.session.dir, self.on_cell_output) as stream:
                return ex.execute(code, timeout=timeout, on_output=stream)

        return (yield from self._in_thread(run, cell=True))

    def _executor(self) -> Executor:
        if self.executor is None:
            raise RlmError("the agent is not started: use it as a context manager or call start()")
        return self.executor

    def _record_skipped(self, call: ToolCall, why: str, status: str = "interrupted") -> None:
        self.session.append(MessageEntry(
            message={"role": "tool", "tool_call_id": call.id, "name": "python", "content": why},
            cell=CellResult(status=status, shaped=why).to_dict()))

    # ------------------------------------------------------------------ helpers
    def _in_thread(self, fn: Work, *, cell: bool = False) -> Generator[Event, None, Any]:
        """Run fn on a worker thread (rlm.agent.runner); Ctrl-C stays responsive. After a
        second Ctrl-C a model call is abandoned; a cell that outlives the interrupt grace
        has its kernel killed, which the execute loop reports as a death and restores."""
        return (yield from run_interruptible(
            fn, stop=self.state.stop, on_keyboard_interrupt=self.interrupt,
            grace_s=self.config.interrupt_grace_s, kill=self._kill_kernel if cell else None))

    def _kill_kernel(self) -> None:
        pid = self.executor.pid if self.executor is not None else None
        if pid and pid != os.getpid():  # never the notebook's own kernel
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


NOT_RUN_UNSEEN = ("Not run: this block comes after a block whose output you had not seen when "
                  "you wrote it (that output is above). Write your next cell from that output.")


def _input_names(entry: Any) -> list[str]:
    if isinstance(entry, CustomEntry) and entry.custom_type == "context_vars":
        return [n for n in (entry.data or {}).get("names", []) if isinstance(n, str)]
    return []


def _copy_message(m: dict[str, Any]) -> dict[str, Any]:
    out = dict(m)
    if "tool_calls" in out:
        out["tool_calls"] = [{**tc, "function": dict(tc.get("function") or {})}
                             for tc in out["tool_calls"]]
    return out


def _plain_first_line(text: str) -> str:
    """The first line with words of a continuation prompt, its internal tags dropped
    (`<goal_context>` is for the model, not the terminal)."""
    import re

    for line in text.splitlines():
        plain = re.sub(r"</?[A-Za-z_][\w-]*>", "", line).strip()
        if plain:
            return plain[:120]
    return ""
