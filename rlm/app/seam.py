"""The feature seam: every feature is one object the composition root loops over
(rlm.app.lifecycle.ROOT_FEATURES), and plugs in only through the `Wiring` it is handed.

A `Feature` has a `name`, the contract features whose bridge methods it answers
(`answers`: kernel_ext.contract.Method.feature), the features that must attach before it
(`after`: the root refuses a list that breaks it, so order never matters silently), and
`attach(agent, wiring)`. Through the wiring it registers:

- policies on the agent's chain, by stage (`wiring.chain`, rlm.chain.Chain);
- bridge handlers, by contract method name (`wiring.handle`, or `wiring.handlers` for code
  that fills a table): an undeclared method, or one of another feature, is refused;
- context providers (`wiring.chain.context`) and relief-note providers (`wiring.relief_note`,
  rlm.compaction.notes: written after every relief);
- background tasks (`wiring.task`: anything with `close()`), owned by the run
  (rlm.app.SessionRun closes them; an agent built without one closes them itself);
- the objects the entry points reach (`wiring.expose`: `agent.parts.get(Kind)`), so the
  Agent holds no feature's object by name.

A new feature is one module with one such object, and one line in the root's list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from kernel_ext import contract
from rlm.chain import Background, Chain, Closeable
from rlm.compaction.notes import ReliefNote, ReliefNotes, default_notes
from rlm.errors import RlmError
from rlm.protocols import Handler

if TYPE_CHECKING:
    from rlm.agent.loop import Agent
    from rlm.app.options import RunOptions
    from rlm.longrun.clock import Clock

T = TypeVar("T", bound=Closeable)


class Feature(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def answers(self) -> tuple[str, ...]: ...  # contract features whose methods it answers

    @property
    def after(self) -> tuple[str, ...]: ...  # the features that attach before it

    def attach(self, agent: Agent, wiring: Wiring) -> None: ...


@dataclass(frozen=True)
class Plain:
    """A feature that is one function `attach(agent, wiring)`."""

    name: str
    attach_fn: Callable[[Agent, Wiring], None]
    answers: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    def attach(self, agent: Agent, wiring: Wiring) -> None:
        self.attach_fn(agent, wiring)


class Handlers(MutableMapping[str, Handler]):
    """The agent's bridge handlers as one feature may fill them: only the methods of the
    contract features it answers (kernel_ext.contract.METHODS)."""

    def __init__(self, table: dict[str, Handler], feature: Feature):
        self.table, self.feature = table, feature

    def __setitem__(self, method: str, handler: Handler) -> None:
        declared = contract.BY_NAME.get(method)
        if declared is None:
            raise RlmError(f"the feature {self.feature.name!r} registers a handler for "
                           f"{method!r}, which kernel_ext.contract.METHODS does not declare: "
                           "declare it there, with the feature it belongs to")
        if declared.feature not in self.feature.answers:
            raise RlmError(f"the feature {self.feature.name!r} registers a handler for "
                           f"{method!r}, a method of the {declared.feature!r} feature; it "
                           f"answers only {', '.join(self.feature.answers) or 'none'}")
        self.table[method] = handler

    def __getitem__(self, method: str) -> Handler:
        return self.table[method]

    def __delitem__(self, method: str) -> None:
        self[method] = self.table[method]  # the same check: only its own methods go
        del self.table[method]

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)


@dataclass
class Wiring:
    """What one agent's features are given: the entry point, the run's options and clock,
    and the places they register in. `for_feature` makes the one a feature sees."""

    agent: Agent
    entry: str
    options: RunOptions
    clock: Clock | None = None
    notes: ReliefNotes = field(default_factory=default_notes)
    feature: Feature | None = None

    def for_feature(self, feature: Feature) -> Wiring:
        return Wiring(self.agent, self.entry, self.options, self.clock, self.notes, feature)

    @property
    def chain(self) -> Chain:
        return self.agent.chain

    @property
    def handlers(self) -> Handlers:
        assert self.feature is not None, "a feature's wiring (Wiring.for_feature)"
        return Handlers(self.agent.handlers, self.feature)

    def handle(self, method: str, handler: Handler) -> None:
        self.handlers[method] = handler

    def relief_note(self, provider: ReliefNote) -> None:
        """A note written after every relief (after the ones registered before it)."""
        self.notes.add(provider)

    def expose(self, part: object) -> None:
        """An object of the feature's that the entry points reach by its type
        (`agent.parts.get(Kind)`: `/compact` the controller, the run's report the advisor)."""
        self.agent.parts.add(part)

    def task(self, task: T) -> T:
        """Background work, closed when the run ends (rlm.chain.Background)."""
        background: Background = self.agent.background
        background.add(task)
        return task


def check_order(features: Sequence[Feature]) -> None:
    """Each feature's `after` names features earlier in the list; raises naming the one
    that breaks it."""
    seen: set[str] = set()
    for f in features:
        missing = [name for name in f.after if name not in seen]
        if missing:
            raise RlmError(f"the feature {f.name!r} must attach after {', '.join(missing)}: "
                           "put it later in the root's list (rlm.app.lifecycle.ROOT_FEATURES)")
        if f.name in seen:
            raise RlmError(f"the feature {f.name!r} is listed twice")
        seen.add(f.name)


def attach_features(features: Sequence[Feature], wiring: Wiring) -> None:
    """Each feature attached in order, through its own wiring."""
    check_order(features)
    for f in features:
        f.attach(wiring.agent, wiring.for_feature(f))
