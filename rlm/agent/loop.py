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

import itertools
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
from rlm.agent.prompts import system_prompt
from rlm.agent.recursion import Recursion, TokenBudget
from rlm.config import Config
from rlm.errors import ContextOverflow, RateLimited, RlmError, ScriptExhausted
from rlm.events import (
    CellFinished,
    CellStarted,
    Event,
    FinalAnswer,
    ModelReply,
    ModelText,
    Notice,
    RunEnded,
    TurnStarted,
)
from rlm.kernel.types import CellResult, RestoreReport
from rlm.llm.types import LLM, PYTHON_TOOL, Completion, ToolCall, Usage
from rlm.session.entries import CustomEntry, MessageEntry

Handler = Callable[[dict[str, Any]], Any]
MAX_NUDGES = 2
NUDGE_FAILED = ("Your last cell failed. Fix it with a new ```python cell (check the names and "
                "columns that exist first), or, if you already know the answer, reply with "
                "FINAL(answer).")
REPEATED = ("\n[You sent exactly the same code as your previous cell and it failed again. "
            "Change the code: check the names, columns and types involved with a small cell "
            "first.]")
NUDGE_EMPTY = ("Your last cell printed nothing, so you have not seen an answer yet. Print "
               "what you found (for a search: the matching line) with a ```python cell, then "
               "answer with FINAL(answer).")
NUDGE_LOOK = ("You have not looked at the data yet. Reply with a ```python cell that reads "
              "the variables you were given (in slices, or by searching them) and prints what "
              "answers the question; answer with FINAL(answer) after you see the output.")
# (reason, answer) when a turn says the run may end; None to keep going
Outcome = tuple[str, str | None] | None
# A continuation hook is asked when the run would end; it returns a message to keep going.
Continuation = Callable[["Agent", str], str | None]
# A turn hook runs after every turn (compaction, goal accounting, ...); may yield events.
TurnHook = Callable[["Agent"], list[Event] | None]


class Agent:
    """One session's agent: its model, its executor (kernel) and its log."""

    def __init__(
        self,
        session: Any,
        config: Config,
        *,
        executor: Any = None,
        llm: LLM | None = None,
        llm_factory: Callable[[str], LLM] | None = None,
        depth: int = 0,
        budget: TokenBudget | None = None,
    ):
        from rlm.llm import get_llm

        self.session = session
        self.config = config
        self._llm_factory = llm_factory or (lambda spec: get_llm(spec, config))
        self.llm = llm or self._llm_factory(config.model or "")
        self.executor = executor
        self.depth = depth
        self.budget = budget or TokenBudget(config.token_budget)
        self.recursion = Recursion(self, self._llm_factory)
        self.tokens_used = 0
        self.turns = 0
        self.turn_active = False
        self.continuations: list[Continuation] = []
        self.turn_hooks: list[TurnHook] = []
        # on ContextOverflow: returns "retry" (compacted) or the message to show the user
        self.overflow_hook: Callable[[Agent, MessageEntry], str] | None = None
        self.compaction: Any = None
        self.on_cell_output: Callable[[Any], None] | None = None
        self._final: tuple[str, str] | None = None
        self._error_detail: str | None = None
        self._nudges = 0
        self._tokens_at_start = 0
        self._run_has_data = False
        self._last_failed_code: str | None = None
        self._stop = threading.Event()
        self._interrupts = 0
        self._steered: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._attached: list[CustomEntry] = []
        self._inputs: set[str] | None = None  # names of attached input variables (lazy)
        self.policy: Any = None
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
        from rlm.kernel import Kernel

        self.executor = Kernel(self.session.dir, self.config, bridge_handler=self.handle_bridge)
        report = self.executor.start()
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
        if ex is not None and hasattr(ex, "stop"):
            ex.stop()

    def __enter__(self) -> Agent:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ bridge
    def handle_bridge(self, method: str, params: dict[str, Any]) -> Any:
        handler = self.handlers.get(method)
        if handler is None:
            raise RlmError(f"{method} is not available in this session")
        return handler(params)

    def _on_final(self, params: dict[str, Any]) -> dict[str, Any]:
        value = params.get("value", params.get("answer"))
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        self._final = (text, str(params.get("kind") or "final"))
        return {"ok": True}

    def run_child(self, task: str, context: Any) -> str | None:
        """rlm_query: run a child agent with its own kernel and session to completion."""
        from rlm.agent.session_run import run_child

        return run_child(self, task, context)

    def charge(self, usage: Usage, *, sub: bool = False) -> None:
        self.tokens_used += usage.total
        self.budget.charge(usage)

    def steer(self, text: str, custom_type: str = "steer") -> None:
        """Inject a message into active work (e.g. a heartbeat). Thread-safe; it reaches
        the model before the next model call, never between a call and its results."""
        self._steered.put((text, custom_type))

    def attach_context(self, entry: CustomEntry) -> None:
        """Describe input for the next prompt (loaded files, notebook variables). It is
        appended right before that prompt, so the question is the last thing the model
        reads (measured: the 1.5B local model answers the wrong question otherwise)."""
        self._attached.append(entry)
        self.input_names().update(_input_names(entry))

    def input_names(self) -> set[str]:
        """Kernel variables that hold input described to the model (files, parent context)."""
        if self._inputs is None:
            self._inputs = {n for e in self.session.branch() for n in _input_names(e)}
        return self._inputs

    def _drain_steered(self) -> None:
        while True:
            try:
                text, kind = self._steered.get_nowait()
            except queue.Empty:
                return
            self.session.append(CustomEntry(custom_type=kind, data={"text": text},
                                            display=True, content=text))

    # ------------------------------------------------------------- interrupts
    def stop(self) -> None:
        """End the run now: interrupt the running cell and stop after it (the stop button)."""
        self._stop.set()
        self.interrupt()

    def interrupt(self) -> None:
        """Ctrl-C: once interrupts the running cell, twice ends the turn."""
        self._interrupts += 1
        if self.executor is not None:
            try:
                self.executor.interrupt()
            except Exception:  # noqa: BLE001 - a dead kernel is reported by execute
                pass
        if self._interrupts >= 2:
            self._stop.set()

    # --------------------------------------------------------------------- run
    def run(self, prompt: str | None) -> Generator[Event, None, None]:
        """Append `prompt` (if any) as a user message and work until the run ends."""
        if self.executor is None:
            self.start()
        self._stop.clear()
        self._interrupts = 0
        self._final = None
        self._error_detail = None
        self._nudges = 0
        self._run_has_data = bool(self._attached)
        for entry in self._attached:  # the input first, the question last
            self.session.append(entry)
        self._attached.clear()
        if prompt:
            self.session.append(MessageEntry(message={"role": "user", "content": prompt}))
        started, turns = time.monotonic(), 0
        self._tokens_at_start = self.tokens_used  # limits are per run (chat runs many)
        while True:
            limit = self._limit_hit(turns, started)
            if limit:
                yield from self._end(f"limit:{limit[0]}", turns, detail=limit[1])
                return
            if self._stop.is_set():
                yield from self._end("interrupted", turns)
                return
            turns += 1
            self.turns += 1
            outcome = yield from self._turn(turns)
            follow = None
            if outcome is not None:
                # queue the continuation before compaction runs, so the run never stalls
                follow = self._continuation(*outcome)
                if follow is not None:
                    self._final = None
                    self.session.append(MessageEntry(message={"role": "user", "content": follow}))
                    yield Notice("continuing: " + follow.splitlines()[0][:120])
            for hook in self.turn_hooks:
                yield from hook(self) or []
            if outcome is not None and follow is None:
                yield from self._end(outcome[0], turns, final=outcome[1], detail=self._error_detail)
                return

    def _end(self, reason: str, turns: int, *, final: str | None = None,
             detail: str | None = None) -> Iterator[Event]:
        if final is not None:
            self.session.append(CustomEntry(custom_type="final", data={"answer": final, "reason": reason}))
        yield RunEnded(reason=reason, turns=turns, final=final, detail=detail)

    def _continuation(self, reason: str, answer: str | None) -> str | None:
        if self._stop.is_set() or reason.startswith(("error", "interrupted")):
            return None
        for hook in self.continuations:
            msg = hook(self, reason)
            if msg:
                return msg
        return None

    def _limit_hit(self, turns: int, started: float) -> tuple[str, str] | None:
        c = self.config
        if c.max_turns is not None and turns >= c.max_turns:
            return ("turns", f"{turns} of {c.max_turns} turns used")
        spent = self.tokens_used - self._tokens_at_start
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
            if completion is None:
                return ("interrupted", None) if self._stop.is_set() else ("error", None)
            return (yield from self._act(completion))
        finally:
            self.turn_active = False

    def _call_model(self) -> Generator[Event, None, Completion | None]:
        native = getattr(self.llm, "native_tools", True)
        for attempt in range(2):
            # incremental projection kept by the store: O(new entries) per turn
            # (copied per message: the store's cache must not see provider-side mutation)
            messages = [_copy_message(m) for m in self.session.messages(
                system_prompt=system_prompt(self.config, native_tools=native), native_tools=native)]

            def call(emit: Callable[[Event], None],
                     messages: list[dict[str, Any]] = messages) -> Completion:
                return self.llm.complete(
                    messages,
                    tools=[PYTHON_TOOL] if native else None,
                    on_text=lambda d: emit(ModelText(d)),
                    temperature=self.config.temperature,
                )

            try:
                completion = yield from self._in_thread(call)
                return completion
            except (RateLimited, ScriptExhausted) as e:
                self.session.append(MessageEntry(
                    message={"role": "assistant", "content": ""}, error=f"{type(e).__name__}: {e}",
                    model=getattr(self.llm, "spec", None)))
                self._error_detail = str(e)
                yield Notice(str(e), "warning")
                return None
            except ContextOverflow as e:
                entry = self.session.append(MessageEntry(
                    message={"role": "assistant", "content": ""}, error=f"context overflow: {e}",
                    model=getattr(self.llm, "spec", None)))
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
            if self._stop.is_set():
                self._record_skipped(call, "not run: the turn was interrupted")
                continue
            yield from self._run_cell(call, i)
            if self._final is not None:
                for rest in calls[i + 1:]:
                    self._record_skipped(rest, "not run: final() was called")
                answer, kind = self._final
                yield FinalAnswer(answer, kind)
                return ("final", answer)
        return None

    def _answer_without_code(self, content: str) -> Generator[Event, None, Outcome]:
        found = text_final(content)
        nudge = self._nudge(final=found is not None)
        if nudge is not None:
            # small models give up in prose after a failing cell, or answer before looking
            self._nudges += 1
            self.session.append(MessageEntry(message={"role": "user", "content": nudge}))
            why = {NUDGE_FAILED: "after a failed cell", NUDGE_LOOK: "before looking at its data",
                   NUDGE_EMPTY: "after a cell that printed nothing"}[nudge]
            yield Notice(f"the model answered without code {why}; asked it to use a cell first")
            return None
        if found is None:
            answer = content.strip()
            yield FinalAnswer(answer, "reply")
            return ("no_code", answer)
        kind, value = found
        if kind == "var":
            value = self._read_var(value)
        yield FinalAnswer(value, "text")
        return ("final", value)

    def _nudge(self, *, final: bool) -> str | None:
        """For fenced-code models answering without code: a nudge when the last cell of this
        run failed (prose only), printed nothing (even with FINAL: nothing was seen), or
        when data was attached and no cell has run yet (prose only)."""
        if getattr(self.llm, "native_tools", True) or self._nudges >= MAX_NUDGES:
            return None
        # newest first, skipping the reply just appended (islice: no copy of a long branch)
        for e in itertools.islice(reversed(self.session.branch()), 1, None):
            if isinstance(e, MessageEntry) and e.role == "tool":
                status = (e.cell or {}).get("status")
                if status == "ok" and (e.cell or {}).get("shaped", "").strip() == "":
                    return NUDGE_EMPTY
                return NUDGE_FAILED if status not in (None, "ok") and not final else None
            if isinstance(e, MessageEntry) and e.role == "user":
                return NUDGE_LOOK if self._run_has_data and not final else None
        return None

    def _read_var(self, name: str) -> str:
        res = self.executor.execute(f"print(str({name}), end='')", timeout=30)
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
            yield CellFinished("", "error", why, 0.0, None)
            return
        if clobbered := overwritten_inputs(code, self.input_names()):
            names = ", ".join(f"`{n}`" for n in clobbered)
            why = (f"Not run: this cell assigns a literal to {names}, which already holds your "
                   f"input (the preview you saw is only its start). Use the variable as it is: "
                   f"search it or slice it.")
            self._record_skipped(call, why, status="error")
            yield CellFinished(code, "error", why, 0.0, None)
            return
        yield CellStarted(code, index)
        pre_notice = ""
        if hasattr(self.executor, "is_alive") and not self.executor.is_alive():
            report = self.executor.restart("the kernel was not running")
            pre_notice = notices.restarted("was found dead before this cell", report)
        result: CellResult = yield from self._execute(code)
        content = pre_notice + notices.cell_content(result)
        if result.status == "error" and self._last_failed_code == code:
            content += REPEATED  # small models at temperature 0 can loop on one failing cell
        self._last_failed_code = code if result.status == "error" else None
        self.session.append(MessageEntry(
            message={"role": "tool", "tool_call_id": call.id, "name": "python", "content": content},
            cell=result.to_dict()))
        yield CellFinished(code, result.status, content, result.duration_s, result)
        if result.restart is not None:
            from rlm.events import KernelRestarted

            yield KernelRestarted(result.died_cause or result.status, list(result.restart.restored),
                                  [f["name"] for f in result.restart.failed + result.restart.skipped])

    def _execute(self, code: str) -> Generator[Event, None, CellResult]:
        timeout = self.config.cell_timeout
        if getattr(self.executor, "run_in_caller_thread", False):
            return self.executor.execute(code, timeout=timeout, on_output=self.on_cell_output)
            yield  # pragma: no cover - makes this a generator
        return (yield from self._in_thread(
            lambda emit: self.executor.execute(code, timeout=timeout, on_output=self.on_cell_output),
            cell=True))

    def _record_skipped(self, call: ToolCall, why: str, status: str = "interrupted") -> None:
        self.session.append(MessageEntry(
            message={"role": "tool", "tool_call_id": call.id, "name": "python", "content": why},
            cell=CellResult(status=status, shaped=why).to_dict()))

    # ------------------------------------------------------------------ helpers
    def _in_thread(self, fn: Callable[[Callable[[Event], None]], Any], *,
                   cell: bool = False) -> Generator[Event, None, Any]:
        """Run fn on a worker thread, yielding the events it emits; Ctrl-C stays responsive.

        After a second Ctrl-C the turn ends: a model call is abandoned (its thread's result
        is ignored); a cell that survives the interrupt past the grace period has its
        kernel killed, which the execute loop reports as a death, restarting the kernel
        and restoring its snapshot.
        """
        q: queue.Queue[tuple[str, Any]] = queue.Queue()

        def work() -> None:
            try:
                q.put(("done", fn(lambda ev: q.put(("event", ev)))))
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller
                q.put(("error", e))

        threading.Thread(target=work, name="rlm-turn", daemon=True).start()
        stop_seen: float | None = None
        while True:
            try:
                kind, value = q.get(timeout=0.1)
            except queue.Empty:
                if self._stop.is_set():
                    stop_seen = stop_seen or time.monotonic()
                    if not cell:
                        return None
                    if time.monotonic() - stop_seen > self.config.interrupt_grace_s:
                        self._kill_kernel()
                        stop_seen = float("inf")  # once
                continue
            except KeyboardInterrupt:
                self.interrupt()
                continue
            if kind == "event":
                yield value
            elif kind == "done":
                return value
            else:
                raise value

    def _kill_kernel(self) -> None:
        pid = getattr(self.executor, "pid", None)
        if pid and pid != os.getpid():  # never the notebook's own kernel
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


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


def run_task(
    task: str,
    *,
    model: str | None = None,
    config: Config | None = None,
    context_files: list[Any] | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> Any:
    """Run one task in a fresh session and return a `RunResult` (for scripts and tests)."""
    from rlm.agent.session_run import RunResult, new_session_agent

    cfg = (config or Config()).with_overrides(model=model)
    agent, session = new_session_agent(task, cfg)
    events: list[Event] = []
    with agent:
        if context_files:
            from rlm.agent.context_files import load_context_files

            load_context_files(agent, context_files)
        for ev in agent.run(task):
            events.append(ev)
            if on_event:
                on_event(ev)
    return RunResult.from_events(session, events)
