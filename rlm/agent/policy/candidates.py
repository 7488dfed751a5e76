"""Candidate programs chosen by what they compute (issue 60): the decisions.

At the steps that decide an answer the host draws more replies beside the turn's own and
runs each one's cells against an isolated copy of the kernel's namespace (a forked trial,
kernel_ext.trial); the reply whose result most others agree with is the one that runs.
This module decides; rlm.app.candidates draws, runs and carries the decision out.

  point(facts, reply)    -> str | None   whether this reply is one to vote on, and why:
                                         "first" (the run's first cell), "repair" (the
                                         reply after a failed cell), "final" (a reply that
                                         gives the answer); None: run it as it is
  outcome(trial | text)  -> Outcome      what a candidate computed, as a vote reads it
  vote(outcomes)         -> Vote         which candidate runs (0: the turn's own reply)
  settled(outcomes, n)   -> bool         no n more candidates could change the vote: draw
                                         no more (the turn's own reply ran without output,
                                         or enough agree with it already)

What counts as agreeing is data, not wording: two results agree when they show the same
numbers (each to 4 significant digits, in order), or, with no number, the same words.
A candidate that failed never wins over one that ran; an output with nothing in it (an
assignment) is no evidence either way. The turn's own reply (greedy, candidate 0) keeps
its place unless a larger group agrees on another result, so `k = 1` and every tie are
today's behaviour, byte for byte.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rlm.agent.policy.decisions import Facts

# the temperature candidates beside the greedy reply are drawn at, each with its own seed
CANDIDATE_TEMPERATURE = 0.7
SEED_BASE = 1000  # candidate i is drawn with seed SEED_BASE + i: the same inputs, the same draws
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w])")
_WORD = re.compile(r"[^\W_]+")
# a cell that calls the final-answer functions
_FINAL_CALL = re.compile(r"\b(?:final|final_var|FINAL|FINAL_VAR)\s*\(")


@dataclass(frozen=True)
class Outcome:
    """What one candidate computed: `ran` (no error, no timeout), and `key`, the result
    the vote compares ("" when there is nothing to compare: no output)."""

    ran: bool
    key: str = ""
    shown: str = ""  # a short form for the log (what the key was read from)


@dataclass
class Vote:
    winner: int  # the candidate that runs (0: the turn's own reply)
    agreeing: int  # candidates whose result is the winner's (the winner included)
    groups: list[int] = field(default_factory=list)  # each candidate's group (-1: none)
    why: str = ""


def point(facts: Facts, codes: list[str], final_text: bool) -> str | None:
    """Whether a reply with cells `codes` (or a text answer: `final_text`) decides an
    answer: the run's first cell, the reply after a failed cell, or one that answers."""
    if final_text or any(_FINAL_CALL.search(c) for c in codes):
        return "final"
    if not codes:
        return None
    if facts.cells == 0:
        return "first"
    if facts.last_cell_ok is False:
        return "repair"
    return None


def _number(text: str) -> str:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return text
    return f"{value:.4g}"


def key_of(text: str) -> str:
    """The result `text` shows, as the vote compares it: its numbers, else its words."""
    text = text.strip()
    numbers = [_number(m) for m in _NUMBER.findall(text)]
    if numbers:
        return " ".join(numbers)
    return " ".join(w.lower() for w in _WORD.findall(text))


def outcome(trial: dict[str, Any] | None = None, *, answer: str | None = None) -> Outcome:
    """A candidate's outcome: a forked trial of its cells (kernel_ext.trial's dict), or the
    text answer it gives without code (`answer`)."""
    if answer is not None:
        return Outcome(True, key_of(answer), answer[:200])
    assert trial is not None
    if trial.get("status") != "ok":
        return Outcome(False, "", str(trial.get("error") or trial.get("status"))[:200])
    shown = trial.get("final")
    text = str(shown if shown is not None else trial.get("output") or "")
    return Outcome(True, key_of(text), text[:200])


def vote(outcomes: list[Outcome]) -> Vote:
    """The candidate that runs: the largest group of candidates that ran and agree on a
    result wins over the turn's own reply (candidate 0) only when it is larger than
    candidate 0's group (one that ran without output is no evidence: it stands); a failed candidate 0 gives way to any that ran (a result first,
    then one without output)."""
    keyed = [o.key if o.ran and o.key else None for o in outcomes]
    sizes = Counter(k for k in keyed if k is not None)
    order = {k: i for i, k in reversed(list(enumerate(keyed))) if k is not None}
    names = {k: n for n, k in enumerate(sorted(sizes, key=lambda k: order[k]))}
    groups = [names[k] if k is not None else -1 for k in keyed]
    best = max(sizes, key=lambda k: (sizes[k], -order[k])) if sizes else None
    own = keyed[0]
    if outcomes[0].ran:
        if own is None or best is None or own == best or sizes[best] <= sizes[own] \
                or sizes[best] < 2:
            return Vote(0, sizes[own] if own else 1, groups, "the turn's own reply stands")
        return Vote(order[best], sizes[best], groups,
                    f"{sizes[best]} of {len(outcomes)} candidates agree on another result")
    if best is not None:
        return Vote(order[best], sizes[best], groups,
                    "the turn's own reply failed; another candidate ran")
    ran = next((i for i, o in enumerate(outcomes) if o.ran), None)
    if ran is not None:
        return Vote(ran, 1, groups, "the turn's own reply failed; another candidate ran")
    return Vote(0, 1, groups, "every candidate failed: the turn's own reply stands")


def settled(outcomes: list[Outcome], remaining: int) -> bool:
    """Whether `remaining` more candidates could not change the vote's winner, whatever
    they compute: each group (and a new result) is given 1..remaining more members."""
    now = vote(outcomes).winner
    keys = {o.key for o in outcomes if o.ran and o.key} | {"\0another result"}
    return not any(vote([*outcomes, *[Outcome(True, key)] * r]).winner != now
                   for key in keys for r in range(1, remaining + 1))
