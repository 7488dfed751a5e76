"""The loop's one policy chain, and the background work a run owns (issue 59, the feature
seam).

Features plug into the agent loop (rlm.agent.loop) at named stages of a run; each stage is
a typed list the loop calls in registration order, and each policy returns what the loop
carries out (events to yield, a run decision, an unmet promise):

  start      before the run, after its state is reset           (agent) -> None
  prompt     before the first model call of a run               (agent) -> events
  context    while a prompt is assembled: a message placed right after the system prompt
             (project memory's head)                            () -> message | None
  choose     the turn's reply, before it is acted on: a policy may put another in its
             place (candidates voted by what they compute)  (agent, reply) -> steps -> reply
  reply      a reply with cells is logged, before its cells run (agent) -> None
  account    after a turn, before the continuation is chosen    (agent) -> events
  would_end  the run would end: the first decision wins         (agent, reason) -> decision
  turn       after a turn, after a continuation is queued       (agent) -> events
  end        the run ends, with its reason and detail           (agent, reason, detail)
  unmet      the run ends, after `end`: a promise it did not keep (agent, reason) -> Unmet
  ended      the run has ended, with its RunEnded, before it is yielded
  overflow   a context overflow: the first policy decides (Compact: retry once; End)

`Background` owns what runs beside the loop (a checkpoint writer, the advisor's thread,
children): whoever owns the run (rlm.app.SessionRun, else the Agent) closes it once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from rlm.events import Event, RunEnded
from rlm.llm.types import Completion
from rlm.outcome import Unmet
from rlm.protocols import Compact, Continue, End, Handler, SessionLog
from rlm.session.entries import MessageEntry

# each stage's policies, given the agent they were registered on (what a policy below the
# agent may read of it: `LoopHost`; a feature's own closure holds the rest)
StartHook = Callable[["LoopHost"], None]  # before the run; before a reply's cells run
TurnHook = Callable[["LoopHost"], "list[Event] | None"]  # events for the caller to yield
# asked in turn when a run would end (agent, reason): a decision, or None for no opinion
Continuation = Callable[["LoopHost", str], "Continue | End | None"]
EndHook = Callable[["LoopHost", str, "str | None"], None]  # (agent, reason, detail)
EndCondition = Callable[["LoopHost", str], "Unmet | None"]  # a promise left unmet
EndedHook = Callable[["LoopHost", RunEnded], None]  # the run has ended
OverflowHook = Callable[["LoopHost", MessageEntry], "Compact | End"]  # retry once, or end
ContextProvider = Callable[[], "dict[str, Any] | None"]  # a message after the system prompt
# the turn's reply -> the reply acted on; a generator (its events are yielded: model calls
# and trials run on the loop's worker thread through `agent.in_thread`)
ChooseHook = Callable[["LoopHost", Completion], "Generator[Event, None, Completion]"]


@dataclass
class Chain:
    """One agent's policies, by stage (see the module doc), each in registration order."""

    start: list[StartHook] = field(default_factory=list)
    prompt: list[TurnHook] = field(default_factory=list)
    context: list[ContextProvider] = field(default_factory=list)
    choose: list[ChooseHook] = field(default_factory=list)
    reply: list[StartHook] = field(default_factory=list)
    account: list[TurnHook] = field(default_factory=list)
    would_end: list[Continuation] = field(default_factory=list)
    turn: list[TurnHook] = field(default_factory=list)
    end: list[EndHook] = field(default_factory=list)
    unmet: list[EndCondition] = field(default_factory=list)
    ended: list[EndedHook] = field(default_factory=list)
    overflow: list[OverflowHook] = field(default_factory=list)

    def call(self, stage: list[StartHook], agent: LoopHost) -> None:
        """Each policy of a stage that returns nothing (start, reply), given `agent` (the
        agent they were registered on: they read it; the chain does not)."""
        for policy in stage:
            policy(agent)

    def events(self, stage: list[TurnHook], agent: LoopHost) -> Iterator[Event]:
        """The events of each policy of a stage, in order (prompt, account)."""
        for policy in stage:
            yield from policy(agent) or []

    def chosen(self, agent: LoopHost, reply: Completion) -> Generator[Event, None, Completion]:
        """The reply the turn acts on: each `choose` policy in turn may put another in its
        place."""
        for policy in self.choose:
            reply = yield from policy(agent, reply)
        return reply

    def decide(self, agent: LoopHost, reason: str) -> Continue | End | None:
        """The first decision about a run that would end as `reason`; None: none has one."""
        for policy in self.would_end:
            decision = policy(agent, reason)
            if decision is not None:
                return decision
        return None

    def ending(self, agent: LoopHost, reason: str, detail: str | None) -> list[Unmet]:
        """The run ends: the end policies are told, then the promises left unmet."""
        for policy in self.end:  # first: a stuck run blocks its goal before it is judged
            policy(agent, reason, detail)
        return [u for check in self.unmet if (u := check(agent, reason)) is not None]

    def on_overflow(self, agent: LoopHost, entry: MessageEntry) -> Compact | End:
        """A context overflow (`entry`: the error logged): the first overflow policy
        decides, given `agent` as `call` gives it; with none, the run ends."""
        return self.overflow[0](agent, entry) if self.overflow else End("error")

    def messages_after_system(self) -> list[dict[str, Any]]:
        """The context providers' messages, in order (the ones with nothing left out)."""
        return [m for provider in self.context if (m := provider()) is not None]


T = TypeVar("T")


class Parts:
    """What the features expose for the entry points to reach, by type (compaction's
    controller for `/compact`, the advisor for the run's report): the Agent holds no
    feature's object by name. `get(Kind)` is the one registered, or None."""

    def __init__(self) -> None:
        self._by_type: dict[type, object] = {}

    def add(self, part: object) -> None:
        self._by_type[type(part)] = part

    def get(self, kind: type[T]) -> T | None:
        return next((p for p in self._by_type.values() if isinstance(p, kind)), None)


class Closeable(Protocol):
    def close(self) -> None: ...


class Background:
    """What runs beside the loop, closed once, the last registered first (an ExitStack): a
    close that raises does not keep the others running."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.tasks: list[Closeable] = []

    def add(self, task: Closeable) -> Closeable:
        self.tasks.append(task)
        self._stack.callback(task.close)
        return task

    def close(self) -> None:
        self.tasks.clear()
        self._stack.close()


class RunView(Protocol):
    """What a policy below the agent reads of the current run (rlm.agent.runstate.RunState,
    a layer above): the answer it would end with, while the continuations are asked."""

    answer: str | None


class LoopHost(Protocol):
    """What the layers below the agent (compaction, longrun) plug into: bridge handlers and
    the policy chain (rlm.chain.Chain: its stages), plus the counters a policy reads."""

    handlers: dict[str, Handler]
    chain: Chain
    turns: int

    @property
    def state(self) -> RunView: ...  # the current run's

    @property
    def tokens_used(self) -> int: ...  # what --max-tokens counts (rlm.ledger)

    @property
    def session(self) -> SessionLog: ...
