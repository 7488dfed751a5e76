"""Every token spent on the user's behalf, by role: one ledger per agent (issue 58).

Each kind of model call is paid for in one place, and charges its usage here with its
role (`Agent.charge(usage, role=...)`):

  turns       the replies the loop acted on (rlm.agent.acting)
  resampled   replies sampled again instead of run (rlm.agent.modelcall.resample)
  candidates  replies drawn beside the turn's and not acted on (rlm.app.candidates)
  stopped     replies a stream rule stopped (the host's estimate: the stream was closed)
  subcalls    llm_query / llm_query_batched from a cell (rlm.agent.recursion)
  children    rlm_spawn / rlm_query children, all their roles (`Ledger.add_child`; the
              child's own split is kept under `children`'s `by_role`)
  advisor     the advisor model (rlm.app.advising)
  compaction  compaction and branch summaries (rlm.compaction.summarize)
  checkpoint  the checkpoint writer (rlm.compaction.checkpoint)

A run's totals are the ledger's change over the run (`Totals.minus`): recorded in its
`final` / `run_end` entry and on `RunEnded.tokens`, and every surface (`--json`, the
footer, `rlm sessions`) reads them. What is spent outside any run (a chat's `/compact` or
`/rebuild`, `rlm compact`, the advisor or the checkpoint writer finishing after a run
ended) is logged as a hidden `spent` entry when the next run starts or the agent closes
(`SPENT_ENTRY`), so a session's totals — every run's plus these — are every token.
`--max-tokens` and `--token-budget` count what they counted before: every role but
compaction and the checkpoint writer (`BUDGETED`).
`Totals` is pure and round-trips `to_dict` / `from_dict`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlm.llm.types import LLM, Completion, Usage

SPENT_ENTRY = "spent"  # a custom entry: tokens spent outside any run, by role
ROLES = ("turns", "resampled", "candidates", "stopped", "subcalls", "children", "advisor", "compaction",
         "checkpoint")
# what the token limits count (as before the ledger): not the context's upkeep
BUDGETED = tuple(r for r in ROLES if r not in ("compaction", "checkpoint"))
# how the footer names a role's share ("3,491 in turns + 16,485 by children")
ROLE_WORDS = {"turns": "in turns", "resampled": "on resampled replies",
              "candidates": "on candidate replies",
              "stopped": "on replies a stream rule stopped", "subcalls": "by llm_query",
              "children": "by children", "advisor": "by the advisor",
              "compaction": "by compaction", "checkpoint": "by the checkpoint writer"}

Pair = tuple[int, int]  # (prompt, completion)


def _add(into: dict[str, Pair], role: str, prompt: int, completion: int) -> None:
    p, c = into.get(role, (0, 0))
    into[role] = (p + prompt, c + completion)


@dataclass(frozen=True)
class Totals:
    """Tokens by role (prompt, completion); `children` is the children's own split."""

    roles: dict[str, Pair] = field(default_factory=dict)
    children: dict[str, Pair] = field(default_factory=dict)

    @property
    def prompt(self) -> int:
        return sum(p for p, _ in self.roles.values())

    @property
    def completion(self) -> int:
        return sum(c for _, c in self.roles.values())

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def of(self, role: str) -> int:
        return sum(self.roles.get(role, (0, 0)))

    @property
    def budgeted(self) -> int:
        """What `--max-tokens` and `--token-budget` count: the children's share without
        their own compaction and checkpoint writer either, as the tree's budget counts it."""
        upkeep = sum(sum(self.children.get(r, (0, 0))) for r in ROLES if r not in BUDGETED)
        return sum(self.of(r) for r in BUDGETED) - upkeep

    def minus(self, before: Totals) -> Totals:
        """What was spent since `before` (the ledger's change over a run)."""
        def diff(now: dict[str, Pair], then: dict[str, Pair]) -> dict[str, Pair]:
            out = {r: (p - then.get(r, (0, 0))[0], c - then.get(r, (0, 0))[1])
                   for r, (p, c) in now.items()}
            return {r: v for r, v in out.items() if v != (0, 0)}
        return Totals(diff(self.roles, before.roles), diff(self.children, before.children))

    def plus(self, other: Totals) -> Totals:
        roles, children = dict(self.roles), dict(self.children)
        for r, (p, c) in other.roles.items():
            _add(roles, r, p, c)
        for r, (p, c) in other.children.items():
            _add(children, r, p, c)
        return Totals(roles, children)

    def line(self) -> str:
        """`19,976 tokens (3,491 in turns + 16,485 by children; 18,000 prompt + 1,976
        generated)`: the total, each role that spent, the two counts."""
        shares = [f"{self.of(r):,} {ROLE_WORDS[r]}" for r in ROLES if self.of(r)]
        named = " + ".join(shares) + "; " if len(shares) > 1 or (
            shares and not self.of("turns")) else ""
        return (f"{self.total:,} tokens ({named}{self.prompt:,} prompt + "
                f"{self.completion:,} generated)")

    def to_dict(self) -> dict[str, Any]:
        """`prompt`, `completion`, `total`, and `by_role`: every role's three counts (the
        children's own split under `by_role.children.by_role`)."""
        by_role: dict[str, Any] = {r: _counts(self.roles.get(r, (0, 0))) for r in ROLES}
        if self.children:
            by_role["children"]["by_role"] = {r: _counts(v) for r, v in self.children.items()}
        return {"prompt": self.prompt, "completion": self.completion, "total": self.total,
                "by_role": by_role}

    @classmethod
    def from_dict(cls, d: Any) -> Totals | None:
        """The totals a log entry or an event recorded; None when it recorded none (an
        older log) or the record is not one (a session file is never trusted)."""
        if not isinstance(d, dict) or not isinstance(d.get("by_role"), dict):
            return None
        by_role = d["by_role"]
        roles = {r: _pair(v) for r, v in by_role.items() if r in ROLES}
        kids = by_role.get("children")
        inner = kids.get("by_role") if isinstance(kids, dict) else None
        children = {r: _pair(v) for r, v in inner.items() if r in ROLES} \
            if isinstance(inner, dict) else {}
        return cls({r: v for r, v in roles.items() if v != (0, 0)},
                   {r: v for r, v in children.items() if v != (0, 0)})


def of_replies(usages: list[dict[str, int] | None]) -> Totals:
    """The replies' usage (`ModelReply.usage`), as turns: the totals of a run whose end
    recorded none (an older worker's events)."""
    turns = (sum(int((u or {}).get("input_tokens", 0) or 0) for u in usages),
             sum(int((u or {}).get("output_tokens", 0) or 0) for u in usages))
    return Totals({"turns": turns} if turns != (0, 0) else {})


def spent_line(data: Any) -> str:
    """"\nspent: <the run's totals>" for a run's end entry that recorded them, else ""
    (`rlm log`, the notebook export)."""
    spent = Totals.from_dict(data.get("tokens")) if isinstance(data, dict) else None
    return f"\nspent: {spent.line()}" if spent is not None else ""


def _counts(pair: Pair) -> dict[str, int]:
    return {"prompt": pair[0], "completion": pair[1], "total": pair[0] + pair[1]}


def _pair(v: Any) -> Pair:
    def n(x: Any) -> int:
        return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else 0
    return (n(v.get("prompt")), n(v.get("completion"))) if isinstance(v, dict) else (0, 0)


class Ledger:
    """One agent's spent tokens by role. Thread-safe: bridge handlers, the advisor and the
    checkpoint writer charge from their own threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roles: dict[str, Pair] = {}
        self._children: dict[str, Pair] = {}
        self._logged = Totals()  # what the log holds already: runs' totals, `spent` entries

    def charge(self, role: str, usage: Usage) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown ledger role {role!r}; one of {', '.join(ROLES)}")
        with self._lock:
            _add(self._roles, role, usage.input_tokens, usage.output_tokens)

    def add_child(self, spent: Totals) -> None:
        """A child's whole ledger: its total under `children`, its split kept beside."""
        with self._lock:
            _add(self._roles, "children", spent.prompt, spent.completion)
            for r, (p, c) in spent.roles.items():
                _add(self._children, r, p, c)

    def totals(self) -> Totals:
        with self._lock:
            return Totals(dict(self._roles), dict(self._children))

    @property
    def logged_upto(self) -> Totals:
        """What the log holds already (spent since: outside any run, rlm.agent.result)."""
        return self._logged

    def logged(self, upto: Totals) -> None:
        """The log now holds every token up to `upto` (a run's end, a `spent` entry)."""
        self._logged = upto


class ChargedLLM:
    """A model whose every completion is charged under one role: compaction's summaries
    and the checkpoint writer call the model outside the loop, through this."""

    def __init__(self, llm: LLM, charge: Callable[[Usage], None]):
        self.inner, self._charge = llm, charge

    def complete(self, messages: list[dict[str, Any]], **kw: Any) -> Completion:
        done = self.inner.complete(messages, **kw)
        self._charge(done.usage)
        return done

    def __getattr__(self, name: str) -> Any:  # spec, native_tools, context_window, ...
        return getattr(self.inner, name)


def charged(llm: LLM, charge: Callable[..., None], role: str) -> LLM:
    """`llm` (unwrapped if charged already) with its completions charged as `role`
    through `charge(usage, role=...)` (`Agent.charge`)."""
    inner = llm.inner if isinstance(llm, ChargedLLM) else llm
    return ChargedLLM(inner, lambda usage: charge(usage, role=role))  # type: ignore[return-value]
