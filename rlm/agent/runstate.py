"""What one `Agent.run` owns, reset in one place when the run starts.

Everything else on the Agent lives as long as the session (hooks, handlers, the total
token count); a value that must not leak from one run into the next belongs here. What
the answer policy knows of a run is its own (rlm.agent.policy.Facts).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from rlm.agent.budget import TokenBudget
from rlm.agent.interrupts import PressCount
from rlm.agent.policy.decisions import Accept
from rlm.config import Config
from rlm.events import FinalAnswer
from rlm.ledger import Totals


@dataclass
class RunState:
    started: float = field(default_factory=time.monotonic)
    turns: int = 0
    # the agent's ledger when the run started: the run's totals are its change (chat runs many)
    spent_at_start: Totals = field(default_factory=Totals)
    final: tuple[str, str] | None = None  # (answer, kind) from final()/final_var()
    accepted: Accept | None = None  # the answer that ends the run, judged
    answer: str | None = None  # that answer's text, while the continuations are asked
    # the answer as shown (FinalAnswer), yielded at the run's end only if it stands: a
    # gate or a goal may still refuse it (an answer panel for a refused answer misled)
    shown: FinalAnswer | None = None
    error_detail: str | None = None
    presses: PressCount = field(default_factory=PressCount)  # Ctrl-C, per piece of work
    # set by every Ctrl-C, cleared when a piece of work starts: what a running gate or a
    # compaction's summary watches to stop at once
    cancel: threading.Event = field(default_factory=threading.Event)
    # the advisor's blockers (their notes), by the id of the reply each judged: that
    # reply's cells not started are not run; another reply's cells never see it
    blockers: dict[str, str] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()


def limit_hit(config: Config, state: RunState, spent: Totals,
              budget: TokenBudget) -> tuple[str, str] | None:
    """(name, detail) of the run's limit that is reached, or None. `spent`: the run's
    totals so far (rlm.ledger); `--max-tokens` counts their budgeted roles, and the
    detail names the tokens it does not count, so it agrees with the run's shown total."""
    c = config
    if c.max_turns is not None and state.turns >= c.max_turns:
        return ("turns", f"{state.turns} of {c.max_turns} turns used")
    if c.max_tokens is not None and spent.budgeted >= c.max_tokens:
        rest = spent.total - spent.budgeted
        over = spent.budgeted - c.max_tokens
        return ("tokens", f"{spent.budgeted} of {c.max_tokens} tokens used in this run"
                + (f" ({over} over: a model call's tokens are known only when it returns)"
                   if over > 0 else "")
                + (f" (and {rest} by compaction and the checkpoint writer, which no token "
                   "limit counts)" if rest else ""))
    if c.max_wall_s is not None and time.monotonic() - state.started >= c.max_wall_s:
        return ("wall_clock", f"{c.max_wall_s:.0f} s elapsed")
    return budget.exhausted()  # the run's own promise, or the tree's budget (its reason)
