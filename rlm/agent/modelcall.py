"""One model call of the loop: the projected messages, streaming, retries told as notices,
one retry after a compaction on overflow, a resample the policy asked for, and stream
rules: the reply streams through the policy's scanner (rlm.agent.policy.stream); a match
stops it, the partial reply is dropped (never logged, no cell runs), the injection is
appended and the turn's call is made again (`sample`). A fenced-code reply is cut where
the rest could never run (rlm.agent.codeparse.reply_end): the stream stops there and the
reply is what came before it.

Used by the loop (rlm.agent.loop) through `ModelHost`, the part of the Agent a call needs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

from rlm.agent import notices
from rlm.agent.assembly import assemble
from rlm.agent.codeparse import reply_end
from rlm.agent.policy import Abort, AnswerPolicy, Resample
from rlm.agent.policy.retry import without_cell
from rlm.agent.policy.stream import what_matched
from rlm.agent.progress import ModelCodeStream, ModelTextStream, prompt_tokens
from rlm.agent.runner import Work
from rlm.agent.runstate import RunState
from rlm.agent.steer.match import CallArguments, Match, ReplyScanner
from rlm.chain import Chain, LoopHost
from rlm.config import Config
from rlm.errors import AuthError, ContextOverflow, RateLimited, RlmError, ScriptExhausted
from rlm.events import Event, ModelCallStarted, Notice
from rlm.llm.seam import retry_notices
from rlm.llm.tokens import count_text
from rlm.llm.types import LLM, PYTHON_TOOL, Completion, Usage, copy_message
from rlm.protocols import Compact, End, SessionLog
from rlm.session.entries import CustomEntry, Entry, MessageEntry


class ModelHost(LoopHost, Protocol):
    session: SessionLog
    config: Config
    llm: LLM
    state: RunState
    answers: AnswerPolicy
    chain: Chain  # its overflow stage decides about a context overflow; context: the memory
    role: str  # after the system prompt: a child's role ("" for a root agent)

    def charge(self, usage: Usage, *, role: str = "turns") -> None: ...

    def in_thread(self, fn: Work, *, cell: bool = False) -> Generator[Event, None, Any]: ...


# a reply is looked at for its end (reply_end) while shorter than this: a runaway reply
# full of backticks is not parsed again at each of its deltas
CUT_SCAN_CHARS = 32_768
RESAMPLE_SEED_BASE = 2000  # resample i of a turn draws with seed RESAMPLE_SEED_BASE + i


class RuleMatched(RlmError):
    """Raised from the stream callback: a stream rule matched; the stream stops here."""

    def __init__(self, match: Match, partial: str):
        super().__init__(f"stream rule {match.rule.name!r} matched")
        self.match, self.partial = match, partial


class ReplyEnded(RlmError):
    """Raised from the stream callback: the rest of a fenced-code reply could never run;
    the stream stops and `text` is the reply."""

    def __init__(self, text: str):
        super().__init__("the reply's useful part ended")
        self.text = text


class Stopped:
    """A reply a stream rule stopped, and what it cost so far (estimated)."""

    def __init__(self, match: Match, usage: Usage):
        self.match, self.usage = match, usage


def sample(host: ModelHost) -> Generator[Event, None, Completion | None]:
    """The turn's reply: a model call, resampled as the policy asks, made again after a
    stream rule stopped it. A retry only happens for the run and turn it was made for and
    not after the user asked to stop (the retry token); an abort is never an error."""
    token = (id(host.state), host.state.turns)
    completion = yield from call_model(host)
    while completion is not None:
        if isinstance(completion, Stopped):  # the policy bounds the stops of a turn
            decision = host.answers.rule_hit(completion.match, host.session.branch())
            yield from _carry_out(host, decision, completion.usage)
            if host.state.stopping or token != (id(host.state), host.state.turns):
                return None
            completion = yield from call_model(host)
            continue
        decision2 = host.answers.reply(completion.content, bool(completion.tool_calls))
        if not isinstance(decision2, Resample):
            return completion
        completion = yield from resample(host, completion, decision2)
    return None


def _carry_out(host: ModelHost, decision: Abort, usage: Usage) -> Generator[Event, None, None]:
    host.charge(usage, role="stopped")
    decision.entry.data["usage"] = usage.to_dict()  # what it was charged (the host's estimate)
    host.session.append(decision.entry)
    yield Notice(decision.notice)
    if decision.demoted:
        yield Notice(decision.demoted, "warning")


def call_model(host: ModelHost, temperature: float | None = None, seed: int | None = None,
               view: Callable[[Sequence[Entry]], Sequence[Entry] | None] | None = None
               ) -> Generator[Event, None, Completion | Stopped | None]:
    """One model call (a retry after a compaction on overflow); `temperature` overrides
    the policy's (`AnswerPolicy.temperature`), `seed` the provider's; `view`, the branch
    this call's context is assembled from (None from it: the whole branch). None when the
    call failed (said once, by RunEnded, or by a notice); `Stopped` when a stream rule
    matched."""
    for attempt in range(2):
        branch = host.session.branch()  # an O(1) view; read only where rules need it
        watch = host.answers.watch(branch)
        # what compaction counts (rlm.agent.assembly): the same dicts each turn (counted
        # by identity); copied per message for a provider that may change them, so the
        # store's cache never sees provider-side mutation
        shown = view(branch) if view is not None else None
        shared = assemble(host, shown).messages
        size = prompt_tokens(shared)
        messages = shared if getattr(host.llm, "shares_messages", False) \
            else [copy_message(m) for m in shared]
        temp = host.answers.temperature(host.config.temperature) if temperature is None \
            else temperature

        call = _watched_call(host.llm, messages, temp, watch, seed,
                             host.answers.tool_choice(host.state.turns))
        yield ModelCallStarted(host.llm.spec, size)
        try:
            completion: Completion = yield from host.in_thread(call)
            for note in watch.notes if watch is not None else ():
                host.session.append(host.answers.rule_note(note, host.session.branch()))
                yield Notice(f"rule {note.rule.name!r} {what_matched(note)}: its reminder "
                             "goes to the model with this reply's results")
            return completion
        except RuleMatched as e:
            return Stopped(e.match, Usage(prompt_tokens(messages) or 0, count_text(e.partial)))
        except (RateLimited, AuthError, ScriptExhausted) as e:
            host.session.append(MessageEntry(
                message={"role": "assistant", "content": ""}, error=f"{type(e).__name__}: {e}",
                model=host.llm.spec))
            host.state.error_detail = str(e)  # told once, by RunEnded
            return None
        except ContextOverflow as e:
            entry = MessageEntry(
                message={"role": "assistant", "content": ""}, error=f"context overflow: {e}",
                model=host.llm.spec)
            host.session.append(entry)
            decision = host.chain.on_overflow(host, entry)
            if isinstance(decision, Compact) and attempt == 0:
                yield Notice("context overflow: compacted, retrying once", "warning")
                continue
            report = decision.detail if isinstance(decision, End) else None
            yield Notice(report or notices.overflow_report(e), "warning")
            return None
    return None


def _watched_call(llm: LLM, messages: list[dict[str, Any]], temp: float | None,
                  watch: ReplyScanner | None, seed: int | None = None,
                  tool_choice: str | None = None) -> Work:
    """The call run on the worker thread: text streamed to the user and through `watch`,
    and a native call's code through it and to the user line by line as its arguments
    stream (ModelCode); a match
    raises RuleMatched (the stream stops there); the whole reply's native cells are checked
    again before it returns. A fenced-code reply stops at `reply_end` once text
    past it comes (a reply that just ends there keeps its exact usage)."""
    native = llm.native_tools

    def call(emit: Callable[[Event], None]) -> Completion:
        with retry_notices(lambda text: emit(Notice(text, "warning"))), \
                ModelTextStream(emit) as shown:
            seen: list[str] = []
            size = [0]  # characters in `seen`

            def slow_rules_said() -> None:
                """A rule whose condition ran out of time is off: said once, as it happens."""
                for line in watch.take_notices() if watch is not None else ():
                    emit(Notice(line, "warning"))
            end: list[int] = []  # where the reply's useful part ends, once known

            def on_text(delta: str) -> None:
                stop = False
                if not end and not native and "`" in delta and size[0] < CUT_SCAN_CHARS:
                    end.extend(i for i in [reply_end("".join(seen) + delta)] if i is not None)
                if end:  # only text past it is left: stop the stream when some comes
                    stop = bool(delta[max(0, end[0] - size[0]):].strip())
                    delta = delta[:max(0, end[0] - size[0])] if stop else delta
                seen.append(delta)
                size[0] += len(delta)
                hit = watch.feed(delta) if watch is not None else None
                slow_rules_said()
                if hit is not None:
                    raise RuleMatched(hit, "".join(seen))
                shown(delta)
                if stop:
                    raise ReplyEnded("".join(seen))

            cells: dict[int, CallArguments] = {}
            drafted = ModelCodeStream(emit)

            def on_call(index: int, fragment: str) -> None:
                args = cells.setdefault(index, CallArguments())
                code = args.feed(fragment)
                if code is None:
                    return
                hit = watch.cell(code) if watch is not None else None
                slow_rules_said()
                if hit is not None:
                    raise RuleMatched(hit, "".join(seen) + code)
                drafted(index, code, closed=args.closed)  # the user sees it being written

            more: dict[str, Any] = {"on_call": on_call} if native else {}
            if seed is not None:
                more["seed"] = seed
            if tool_choice is not None:  # the policy's: the reply must run a cell
                more["tool_choice"] = tool_choice
            try:
                # the python tool is offered to every model: a fenced-code model's provider
                # may read it as the reply's format (the local model's reply grammar)
                done = llm.complete(messages, tools=[PYTHON_TOOL], on_text=on_text,
                                    temperature=temp, **more)
            except ReplyEnded as e:  # the stream was closed: its usage never came (estimated)
                done = Completion(e.text, [], Usage(prompt_tokens(messages) or 0,
                                                    count_text(e.text)), llm.spec)
            if watch is not None:
                hit = watch.finish(str(c.arguments.get("code", "")) for c in done.tool_calls
                                   if c.name == "python")
                slow_rules_said()
                if hit is not None:
                    raise RuleMatched(hit, done.content)
            return done

    return call


def resample(host: ModelHost, rejected: Completion, decision: Resample
             ) -> Generator[Event, None, Completion | Stopped | None]:
    """Sample again instead of running a reply: the rejected reply is charged and logged as
    a hidden `resampled` entry (it never reaches the model)."""
    host.charge(rejected.usage, role="resampled")
    host.session.append(CustomEntry(
        custom_type="resampled", display=False, content=None,
        data={"why": decision.why, "content": rejected.content,
              "usage": rejected.usage.to_dict()}))
    yield Notice(decision.notice)
    # each resample of a turn draws with a seed of its own: with the provider's one seed
    # a second resample at the same temperature was the first one again, byte for byte
    # (the 1.5B model's failing cell came back three times a turn: bench/longrun.py)
    seed = RESAMPLE_SEED_BASE + host.answers.facts.resamples
    left = decision.leave_out
    view = (lambda branch: without_cell(branch, left)) if left is not None else None
    return (yield from call_model(host, temperature=decision.temperature, seed=seed, view=view))

