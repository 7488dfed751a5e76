"""One persistent goal per session thread, kept outside the message list.

Every change appends a `thread_goal_state` custom entry (display False, content None: the
goal reaches the model only through continuation messages). The current goal is the data of
the last such entry on the branch, so branching and compaction need no special cases: a
compaction appends entries, it never removes the goal's.

Who may do what:
- the user (CLI, slash commands): set, pause, resume, clear, raise_budget;
- the host loop: account (tokens and time at each normal assistant message), continuation,
  and, with a judge (rlm.agent.policy.goal_evidence): complete a goal whose completion claim
  holds up (`complete_by_host`), block a goal whose run got stuck (`block_by_host`);
- the model (kernel bridge, `handle`): goal.get, goal.complete, goal.block(reason) — never
  the budget, never pause/resume.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import asdict, dataclass, fields
from html import escape
from typing import Any, Protocol

from rlm.chain import LoopHost
from rlm.errors import RlmError
from rlm.longrun.clock import Clock, SystemClock, iso
from rlm.longrun.gates import GoalGate
from rlm.outcome import Unmet
from rlm.protocols import Continue, Handler
from rlm.session.branch import custom_entries
from rlm.session.entries import CustomEntry, Entry, MessageEntry

GOAL_ENTRY = "thread_goal_state"
MAX_OBJECTIVE = 4000
STATUSES = ("active", "paused", "blocked", "budget_limited", "complete")
FINISH_HINT = (
    "Continue working toward the goal; when it is done, call goal.complete(summary) with one "
    "line that states what your outputs show (the host checks it), or goal.block(reason) if "
    "you cannot proceed."
)
# a fenced-code model (the small local one) is taught FINAL(...), not the goal API: two ways
# to finish in one message gave the 1.5B model answers that quoted the instructions
FENCED_FINISH_HINT = ("Continue working toward the goal; when it is done, finish with "
                      "FINAL(one line that states what your outputs show).")


@dataclass(frozen=True)
class ClaimVerdict:
    """How the host judged a completion claim (rlm.agent.policy.goal_evidence)."""

    holds: bool
    message: str = ""  # what is missing: the model reads it when the claim does not hold
    summary: str = ""  # the claim, kept as the goal's last reason when it holds
    evidence: dict[str, Any] | None = None
    work: bool = True  # what is missing takes a cell (not: a file shown to be checked)


# judge(agent, reason, claim): reason is the run's ("final", "no_code") or "goal.complete";
# claim the answer or the summary. None: this is not a completion claim (the goal goes on).
CompletionJudge = Callable[[Any, str, "str | None"], "ClaimVerdict | None"]


class GoalError(RlmError):
    """A goal operation that is not allowed in the goal's current state, or bad input."""


class SessionLike(Protocol):
    def append(self, entry: Entry) -> Any: ...

    def branch(self, leaf: str | None = None) -> Sequence[Entry]: ...


@dataclass
class GoalState:
    goal_id: str
    objective: str
    status: str = "active"
    token_budget: int | None = None
    tokens_used: int = 0
    time_used_s: float = 0.0
    continuations: int = 0
    created_at: str = ""
    updated_at: str = ""
    last_reason: str | None = None

    @property
    def remaining_tokens(self) -> int | None:
        if self.token_budget is None:
            return None
        return max(0, self.token_budget - self.tokens_used)

    @property
    def budget_exhausted(self) -> bool:
        return self.token_budget is not None and self.tokens_used >= self.token_budget

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GoalState:
        if not isinstance(d, dict) or not isinstance(d.get("goal_id"), str):
            raise ValueError("goal state has no goal_id")
        if d.get("status") not in STATUSES:
            raise ValueError(f"unknown goal status {d.get('status')!r}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def check_objective(objective: Any) -> str:
    if not isinstance(objective, str) or not objective.strip():
        raise GoalError("a goal needs a non-empty objective, e.g. rlm goal SESSION set 'ship v1'")
    text = objective.strip()
    if len(text) > MAX_OBJECTIVE:
        raise GoalError(f"the objective is {len(text)} characters; the limit is {MAX_OBJECTIVE}")
    return text


def check_budget(budget: Any) -> int | None:
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise GoalError(f"a token budget must be a positive integer, not {budget!r}")
    return budget


def current_goal(branch: Sequence[Entry]) -> GoalState | None:
    """The goal in force at the end of `branch` (root -> leaf): the last goal entry wins."""
    for entry in reversed(custom_entries(branch, GOAL_ENTRY)):  # O(1) reads on a long log
        data = entry.data or {}
        goal = data.get("goal") if isinstance(data, dict) else None
        return GoalState.from_dict(goal) if goal is not None else None
    return None


def _usage_tokens(usage: Any) -> int:
    """input + output tokens (cache tokens are part of input, never added twice)."""
    if usage is None:
        return 0
    if isinstance(usage, dict):
        return int(usage.get("input_tokens", 0) or 0) + int(usage.get("output_tokens", 0) or 0)
    return int(getattr(usage, "input_tokens", 0) or 0) + int(
        getattr(usage, "output_tokens", 0) or 0
    )


class GoalManager:
    """Reads and changes the session's goal. Stateless apart from the session itself."""

    def __init__(self, session: SessionLike, clock: Clock | None = None):
        self.session = session
        self.clock = clock or SystemClock()
        self.finish_hint = FINISH_HINT  # the last line of <goal_context> (attach_goals)
        self.gate: GoalGate | None = None  # --gate checks before complete()

    # -- reading ---------------------------------------------------------------------------

    def get(self) -> GoalState | None:
        return current_goal(self.session.branch())

    def _require(self, *allowed: str) -> GoalState:
        goal = self.get()
        if goal is None:
            raise GoalError("there is no goal in this session; set one with `rlm goal SESSION set`")
        if allowed and goal.status not in allowed:
            raise GoalError(f"the goal is {goal.status}; this needs it {' or '.join(allowed)}")
        return goal

    def _save(self, goal: GoalState | None, event: str) -> GoalState | None:
        if goal is not None:
            goal.updated_at = iso(self.clock.now())
        data = {"version": 1, "event": event, "goal": goal.to_dict() if goal else None}
        self.session.append(
            CustomEntry(custom_type=GOAL_ENTRY, data=data, display=False, content=None)
        )
        return goal

    # -- user --------------------------------------------------------------------------------

    def set(self, objective: str, token_budget: int | None = None) -> GoalState:
        """Start a new goal (replacing any current one)."""
        now = iso(self.clock.now())
        goal = GoalState(
            goal_id=uuid.uuid4().hex[:12],
            objective=check_objective(objective),
            token_budget=check_budget(token_budget),
            created_at=now,
            updated_at=now,
            last_reason="set by the user",
        )
        self._save(goal, "set")
        return goal

    def pause(self) -> GoalState:
        goal = self._require("active")
        goal.status, goal.last_reason = "paused", "paused by the user"
        self._save(goal, "pause")
        return goal

    def resume(self) -> GoalState:
        """paused/blocked -> active; a goal whose budget is spent stays budget_limited."""
        goal = self._require("paused", "blocked", "budget_limited")
        if goal.budget_exhausted:
            goal.status = "budget_limited"
            goal.last_reason = "resume refused: token budget spent; raise it first"
        else:
            goal.status, goal.last_reason = "active", "resumed by the user"
        self._save(goal, "resume")
        return goal

    def clear(self) -> None:
        self._require()
        self._save(None, "clear")

    def raise_budget(self, token_budget: int) -> GoalState:
        """User only. A budget_limited goal with room left becomes active again."""
        goal = self._require()
        budget = check_budget(token_budget)
        assert budget is not None
        if budget <= goal.tokens_used:
            raise GoalError(
                f"the new budget ({budget}) must exceed the tokens already used "
                f"({goal.tokens_used})"
            )
        goal.token_budget = budget
        goal.last_reason = f"budget raised to {budget} by the user"
        if goal.status == "budget_limited":
            goal.status = "active"
        self._save(goal, "raise_budget")
        return goal

    # -- host loop ---------------------------------------------------------------------------

    def account(self, usage: Any, elapsed_s: float = 0.0) -> GoalState | None:
        """Charge one normal assistant message. No-op unless the goal is active."""
        goal = self.get()
        if goal is None or goal.status != "active":
            return goal
        goal.tokens_used += _usage_tokens(usage)
        goal.time_used_s = round(goal.time_used_s + max(0.0, elapsed_s), 3)
        if goal.budget_exhausted:
            goal.status = "budget_limited"
            goal.last_reason = (
                f"token budget of {goal.token_budget} reached ({goal.tokens_used} used)"
            )
        self._save(goal, "account")
        return goal

    def continuation_message(self, record: bool = True) -> str | None:
        """The `<goal_context>` to present after an assistant turn, or None if not active.

        With `record` (the default) the continuation is counted and persisted.
        """
        goal = self.get()
        if goal is None or goal.status != "active":
            return None
        if record:
            goal.continuations += 1
            self._save(goal, "continue")
        return render_goal_context(goal, self.finish_hint)

    # -- model (kernel bridge) ---------------------------------------------------------------

    def handle(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """goal.get / goal.complete / goal.block(reason). Raises GoalError otherwise."""
        params = dict(params or {})
        name = method.removeprefix("goal.")
        allowed = {"get": set(), "complete": {"summary"}, "block": {"reason"}}.get(name)
        if allowed is None:
            raise GoalError(
                f"goal.{name} is not available from the kernel; the model can only call "
                "goal.get(), goal.complete() and goal.block(reason)"
            )
        extra = sorted(set(params) - allowed)
        if extra:
            hint = " (only the user can change the budget)" if "token_budget" in extra else ""
            raise GoalError(f"goal.{name}() does not accept {', '.join(extra)}{hint}")
        if name == "get":
            return self._reply(self.get())
        if name == "complete":
            goal = self._require("active", "paused", "blocked", "budget_limited")
            self._check_gates(goal)
            goal.status = "complete"
            goal.last_reason = str(params.get("summary") or "completed by the model")[:1000]
            self._save(goal, "complete")
            return self._reply(goal)
        reason = params.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise GoalError("goal.block(reason) needs a non-empty reason")
        goal = self._require("active")
        goal.status, goal.last_reason = "blocked", reason.strip()[:1000]
        self._save(goal, "block")
        return self._reply(goal)

    def _check_gates(self, goal: GoalState) -> None:
        """Every gate must pass before a goal is complete (rlm.longrun.gates): a failing
        one's output is the error the model reads; too many failures block the goal."""
        gate = self.gate
        refusal = gate.refusal() if gate is not None else None
        if gate is None or refusal is None:
            return
        if gate.exhausted:
            goal.status, goal.last_reason = "blocked", gate.blocked_reason()
            self._save(goal, "block")
            refusal += f"\nThe goal is now blocked: {goal.last_reason}."
        raise GoalError(refusal)

    def complete_by_host(self, summary: str, evidence: dict[str, Any] | None = None
                         ) -> GoalState | None:
        """The model's completion claim held (gates pass, claims verified): complete."""
        goal = self.get()
        if goal is None or goal.status != "active":
            return goal
        goal.status = "complete"
        goal.last_reason = (summary.strip() or "completed")[:1000]
        data_goal = self._save(goal, "complete")
        if evidence:
            self.session.append(CustomEntry(custom_type="goal_evidence", display=False,
                                            content=None, data={"goal_id": goal.goal_id,
                                                                "evidence": evidence}))
        return data_goal

    def block_by_host(self, reason: str) -> GoalState | None:
        """The host stopped the goal's run (it was stuck): blocked, with a one-line reason
        the user sees in `rlm goal SESSION`; `rlm goal SESSION resume` continues it."""
        goal = self.get()
        if goal is None or goal.status != "active":
            return goal
        goal.status = "blocked"
        goal.last_reason = "blocked by the host: " + " ".join(reason.split())[:300]
        self._save(goal, "block")
        return goal

    @staticmethod
    def _reply(goal: GoalState | None) -> dict[str, Any]:
        return {
            "goal": goal.to_dict() if goal else None,
            "remaining_tokens": goal.remaining_tokens if goal else None,
        }


def render_goal_context(goal: GoalState, hint: str = FINISH_HINT) -> str:
    if goal.token_budget is None:
        budget = f"no token budget ({goal.tokens_used} tokens used)"
    else:
        budget = (
            f"{goal.remaining_tokens} of {goal.token_budget} tokens remaining "
            f"({goal.tokens_used} used)"
        )
    return (
        "<goal_context>\n"
        # only <, > and & would break the tags: quotes stay as typed (the user reads this
        # text in the transcript; `region&#x27;s` was a leak)
        f"<objective>{escape(goal.objective, quote=False)}</objective>\n"
        f"<status>{goal.status}</status>\n"
        f"<budget>{budget}</budget>\n"
        f"<continuation>{goal.continuations}</continuation>\n"
        f"{hint}\n"
        "</goal_context>"
    )


# -- wiring into the agent loop (rlm.protocols.LoopHost) ------------------------------------


def attach_goals(agent: LoopHost, goals: GoalManager, judge: CompletionJudge | None = None,
                 handlers: MutableMapping[str, Handler] | None = None) -> None:
    """Bridge handlers goal.get/complete/block, per-turn accounting, goal continuation.

    With a `judge`, a completion claim (`goal.complete(summary)`, or the answer a run would
    end with, as the judge decides) completes the goal only when the judge says it holds;
    otherwise the model is told what is missing (an exception from goal.complete, or the
    continuation message). A run that ends `stuck` blocks the goal with its detail.

    Accounting charges the newest assistant message once (input + output tokens, skipping
    failed model calls); its time is the span of that turn in the log (entry timestamps), so
    idle time between runs is never charged. The continuation hook comes first so a goal
    beats autonomous mode.
    """
    if not getattr(getattr(agent, "llm", None), "native_tools", True):
        goals.finish_hint = FENCED_FINISH_HINT
    table = agent.handlers if handlers is None else handlers
    for verb in ("get", "complete", "block"):
        table[f"goal.{verb}"] = _goal_handler(goals, f"goal.{verb}")
    if judge is not None:
        table["goal.complete"] = _judged_complete(agent, goals, judge)
    seen: dict[str, str | None] = {"id": None}

    def account_turn(_agent: LoopHost) -> None:
        branch = goals.session.branch()
        for i in range(len(branch) - 1, -1, -1):
            e = branch[i]
            if isinstance(e, MessageEntry) and e.message.get("role") == "assistant":
                if e.id != seen["id"] and not getattr(e, "error", None):
                    seen["id"] = e.id
                    start = branch[i - 1].timestamp if i else e.timestamp
                    before = goals.get()
                    after = goals.account(e.usage or {}, _span(start, branch[-1].timestamp))
                    if (before is not None and before.status == "active" and after is not None
                            and after.status == "budget_limited"):
                        _tell_budget_reached(goals, after)
                return None
        return None

    # accounting runs before the continuation is chosen: the turn that exhausts the budget
    # gets no goal continuation (rlm.chain.Chain.account)
    agent.chain.account.append(account_turn)

    def continuation(agent: LoopHost, reason: str) -> Continue | None:
        """An active goal keeps the run going (`Continue` with its context); None when
        there is none, or the host judged it complete."""
        goal = goals.get()
        if goal is None or goal.status != "active" or judge is None:
            return _go_on(goals.continuation_message())
        verdict = judge(agent, reason, getattr(getattr(agent, "state", None), "answer", None))
        if verdict is None:
            return _go_on(goals.continuation_message())
        if verdict.holds:
            goals.complete_by_host(verdict.summary, verdict.evidence)
            return None
        context = goals.continuation_message()
        return None if context is None else Continue(f"{verdict.message}\n{context}",
                                                      work=verdict.work)

    def on_end(_agent: LoopHost, reason: str, detail: str | None) -> None:
        if reason == "stuck":
            goals.block_by_host("stuck: " + (detail or "no progress"))

    pursued: dict[str, str | None] = {"goal": None}  # the goal this run works toward

    def at_start(_agent: LoopHost) -> None:
        goal = goals.get()
        pursued["goal"] = goal.goal_id if goal is not None and goal.status == "active" else None

    def unmet(_agent: LoopHost, reason: str) -> Unmet | None:
        """A run that worked toward a goal answers only when the goal is complete: one
        left blocked, out of budget, paused or still open is what the run ends with."""
        goal = goals.get()
        if pursued["goal"] is None or goal is None or goal.goal_id != pursued["goal"]:
            return None
        if goal.status == "complete":
            return None
        why = f"the goal is {goal.status}" + (f": {goal.last_reason}" if goal.last_reason
                                               and goal.status != "active" else "")
        return Unmet("goal", why[:400])

    agent.chain.would_end.insert(0, continuation)
    agent.chain.end.append(on_end)
    agent.chain.start.append(at_start)
    agent.chain.unmet.append(unmet)


def _go_on(prompt: str | None) -> Continue | None:
    return Continue(prompt) if prompt else None


def _goal_handler(goals: GoalManager, method: str) -> Callable[[dict[str, Any]], Any]:
    return lambda p: goals.handle(method, p)


def _judged_complete(agent: LoopHost, goals: GoalManager,
                     judge: CompletionJudge) -> Callable[[dict[str, Any]], Any]:
    """goal.complete(summary) from the kernel: the claim is judged first; a claim that does
    not hold raises, and its message (what is missing) is what the cell shows."""

    def handle(params: dict[str, Any]) -> Any:
        goal = goals.get()
        if goal is not None and goal.status != "complete":  # blocked, paused: judged alike
            summary = params.get("summary") if isinstance(params, dict) else None
            verdict = judge(agent, "goal.complete", summary if isinstance(summary, str) else None)
            if verdict is not None and not verdict.holds:
                raise GoalError("the goal is not complete yet: " + verdict.message)
        return goals.handle("goal.complete", params)

    return handle


def _tell_budget_reached(goals: GoalManager, goal: GoalState) -> None:
    text = (f"<goal_budget_reached>The goal's token budget of {goal.token_budget} is used up "
            f"({goal.tokens_used} tokens). Stop working on the goal: summarise where it stands "
            "and what is left; the user can raise the budget.</goal_budget_reached>")
    goals.session.append(CustomEntry(custom_type="goal_budget_reached",
                                     data={"goal_id": goal.goal_id}, display=True, content=text))


def _span(start: str, end: str) -> float:
    from datetime import datetime

    try:
        return max(
            0.0, (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
        )
    except ValueError:
        return 0.0
