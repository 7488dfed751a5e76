"""The tree's budget: the tokens and turns a run tree (parent + children) may spend, and
what it has promised (issue 58). Thread-safe; one per agent.

The root's limits are `--token-budget` and `--turn-budget`. A child starts with a
*promise*: `child_budget_share` of what its parent can lend when it starts, which is

    the parent's limit - what its tree has used - what it promised its running children
                       - its reserve

so at every moment `used + promised to running children <= limit`: the tree never promises
what it does not have. The reserve (`budget_reserve` of the limit, config, default 0.1; at
least `MIN_TURN_RESERVE` turns) is never lent: it is what the agent that owns the budget
keeps to read its children's results and answer. A child's promise is its own budget (it
keeps a reserve of it in turn for its own children); every token and turn it spends is
charged up the tree as it spends, and when it ends the part it did not spend is free
again (`release`). When less than a useful promise (`MIN_PROMISE`) can be lent, the spawn
is refused with the figures (`BudgetRefused`), never started on a sliver.

A model call's tokens are known only when it returns, so a call can pass the limit it
started under; what is left is then 0 and `exhausted` says the overrun and why.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from rlm.errors import LimitReached, RlmError
from rlm.llm.types import Usage

MIN_TURN_RESERVE = 2  # turns an agent keeps from its children: one to read, one to answer
MIN_PROMISE = {"tokens": 1000, "turns": 1}  # less than this is refused, not promised
FLAG = {"tokens": "--token-budget", "turns": "--turn-budget"}
LIMIT_NAME = {"tokens": "token_budget", "turns": "turn_budget"}


class BudgetRefused(RlmError):
    """A child that cannot be promised a useful budget: the tree has no more to lend."""


@dataclass
class TokenBudget:
    """Tokens and turns of one agent of a run tree (see the module docstring)."""

    limit: int | None = None
    spent: int = 0
    parent: TokenBudget | None = None
    turn_limit: int | None = None
    turns: int = 0
    reserve_share: float = 0.1
    _promised: list[TokenBudget] = field(default_factory=list, repr=False)  # running children
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    # ------------------------------------------------------------------ spending
    def charge(self, usage: Usage) -> None:
        with self._lock:
            self.spent += usage.total
        if self.parent is not None:
            self.parent.charge(usage)

    def charge_turn(self) -> None:
        with self._lock:
            self.turns += 1
        if self.parent is not None:
            self.parent.charge_turn()

    # ------------------------------------------------------------------ figures
    def _limit(self, unit: str) -> int | None:
        return self.limit if unit == "tokens" else self.turn_limit

    def _used(self, unit: str) -> int:
        return self.spent if unit == "tokens" else self.turns

    def lent(self, unit: str) -> int:
        """What this budget promised its running children and they have not spent yet."""
        with self._lock:
            kids = list(self._promised)
        return sum(max(0, (k._limit(unit) or 0) - k._used(unit)) for k in kids)

    def reserve(self, unit: str) -> int:
        """What this budget never lends (its owner reads its children and answers with it)."""
        limit = self._limit(unit)
        if limit is None:
            return 0
        kept = math.ceil(limit * self.reserve_share)
        return max(kept, MIN_TURN_RESERVE) if unit == "turns" else kept

    def _own(self, unit: str) -> int | None:
        """What this agent itself may still spend (its promises to children are theirs)."""
        limit = self._limit(unit)
        return None if limit is None else max(0, limit - self._used(unit) - self.lent(unit))

    def _headroom(self, unit: str) -> int | None:
        """What the limits of this budget and every ancestor leave (nothing lent subtracted)."""
        limit = self._limit(unit)
        own = None if limit is None else max(0, limit - self._used(unit))
        up = self.parent._headroom(unit) if self.parent is not None else None
        return _tighter(own, up)

    def _left(self, unit: str) -> int | None:
        up = self.parent._headroom(unit) if self.parent is not None else None
        return _tighter(self._own(unit), up)

    @property
    def remaining(self) -> int | None:
        """Tokens this agent may still spend (None: no limit)."""
        return self._left("tokens")

    @property
    def turns_remaining(self) -> int | None:
        return self._left("turns")

    def root(self) -> TokenBudget:
        return self if self.parent is None else self.parent.root()

    # ------------------------------------------------------------------ limits
    def exhausted(self) -> tuple[str, str] | None:
        """(limit name, the true reason) when this agent has nothing left to spend."""
        for unit in ("tokens", "turns"):
            if self._left(unit) == 0:
                return LIMIT_NAME[unit], self._why(unit)
        return None

    def _why(self, unit: str) -> str:
        word = "tokens" if unit == "tokens" else "turns"
        root = self.root()
        tree = f"the tree's {FLAG[unit]} {root._limit(unit):,}"
        if self._own(unit) != 0:  # an ancestor's limit, not this agent's own
            return (f"{tree} is spent: {root._used(unit):,} {word} used by the whole tree"
                    + _over(root._used(unit), root._limit(unit), unit))
        used, limit = self._used(unit), self._limit(unit) or 0
        lent = self.lent(unit)
        head = (f"{used:,} of the {limit:,} {word} {tree} promised this child used"
                if self.parent is not None else f"{used:,} of {tree} {word} used")
        return head + (f", {lent:,} more promised to its running children" if lent else "") \
            + _over(used + lent, limit, unit)

    def check(self, what: str) -> None:
        """Raise LimitReached when nothing is left for `what` (an llm_query, a spawn)."""
        hit = self.exhausted()
        if hit is not None:
            raise LimitReached(hit[0].replace("_", " "), f"{hit[1]}; before {what}")

    # ------------------------------------------------------------------ promises
    def promise(self, share: float, what: str = "rlm_spawn") -> TokenBudget:
        """The budget of a child starting now: `share` of what this budget can lend, kept
        as promised until the child `release`s it. This budget itself when the tree has no
        limit. BudgetRefused when less than a useful promise can be lent."""
        with self._lock:
            grant: dict[str, int | None] = {}
            for unit in ("tokens", "turns"):
                can = self._lendable(unit)
                if can is not None and can < MIN_PROMISE[unit]:
                    raise BudgetRefused(self._refusal(unit, can, what))
                grant[unit] = None if can is None else max(MIN_PROMISE[unit], int(can * share))
            if grant["tokens"] is None and grant["turns"] is None:
                return self
            child = TokenBudget(limit=grant["tokens"], turn_limit=grant["turns"], parent=self,
                                reserve_share=self.reserve_share)
            self._promised.append(child)
            return child

    def can_promise(self, what: str) -> None:
        """Raise BudgetRefused now when a child could not be promised a useful budget."""
        with self._lock:
            for unit in ("tokens", "turns"):
                can = self._lendable(unit)
                if can is not None and can < MIN_PROMISE[unit]:
                    raise BudgetRefused(self._refusal(unit, can, what))

    def release(self) -> None:
        """This child ended: what it did not spend of its promise is its parent's again."""
        if self.parent is not None:
            with self.parent._lock:
                if self in self.parent._promised:
                    self.parent._promised.remove(self)

    def _lendable(self, unit: str) -> int | None:
        own = self._own(unit)
        if own is None and self.parent is None:
            return None
        up = self.parent._headroom(unit) if self.parent is not None else None
        left = _tighter(own, up)
        return None if left is None else max(0, left - self.reserve(unit))

    def _refusal(self, unit: str, can: int, what: str) -> str:
        word = "tokens" if unit == "tokens" else "turns"
        root = self.root()
        with self._lock:
            running = sum(1 for k in self._promised if k._limit(unit) is not None)
        whose = "this agent's promise" if self.parent is not None else "the tree's budget"
        return (f"{what} refused: {FLAG[unit]} {root._limit(unit):,} cannot promise a new "
                f"child the {MIN_PROMISE[unit]:,} {word} it needs ({can:,} free to lend): of "
                f"{whose} of {self._limit(unit) or 0:,} {word}, {self._used(unit):,} are used, "
                f"{self.lent(unit):,} promised to {running} running children and "
                f"{self.reserve(unit):,} kept for this agent to read their results and "
                "answer. Wait for a child to end (rlm_wait) and spawn again, or do the work "
                "in this agent's own cells")


def _over(used: int, limit: int | None, unit: str) -> str:
    if limit is None or used <= limit:
        return ""
    why = ("a model call's tokens are known only when it returns" if unit == "tokens"
           else "turns already under way when it was reached")
    return f" ({used - limit:,} over: {why})"


def _tighter(own: int | None, up: int | None) -> int | None:
    """What is left under both limits (None: no limit)."""
    return own if up is None else up if own is None else min(own, up)
