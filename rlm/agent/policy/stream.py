"""Stream rules as answer-policy decisions: which rules watch the next reply, what a match
leads to, and the rule text every context carries. Pure: every count is read from the
session branch (the `rule_injection` entries), so a resumed session, a compaction or an
export sees the same limits as the live run.

  watch(branch)        -> ReplyScanner | None   the rules that may still fire now
  hit(match, branch)   -> Abort                 drop the reply, inject, retry the turn
  note(match)          -> CustomEntry           a non-interrupting match: a note only
  context_note(branch) -> str                   always-rules, demoted rules, the listing

Limits are per rule, never global (the tsforge lesson): a rule that fired twice in this
turn is silenced for the rest of it; one that fired DEMOTE_AFTER times in the session is
reported to the user once and demoted to a context note (it stops interrupting). `once`
rules fire once per session, `gap: N` rules not again within N replies. Many rules stopping
one turn in turns (each within its own limit) end at TURN_STOPS: the turn's next reply is let
through, its matches only noted, so a turn always ends and an abort never becomes an error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rlm.agent.steer.files import RuleSet
from rlm.agent.steer.match import CATCH_ALL, Match, ReplyScanner, StreamRule
from rlm.session.branch import reply_count, with_replies_before
from rlm.session.entries import CustomEntry, Entry

RULE_INJECTION = "rule_injection"
PER_TURN = 2  # a rule that fired this often in one turn is silent for the rest of it
TURN_STOPS = 6  # stops in one turn, all rules together: the next reply is let through
DEMOTE_AFTER = 3  # fired this often in a session: reported once, demoted to a context note
ALWAYS_BUDGET = 4_000  # characters of always-rules in every context; the rest are listed


@dataclass(frozen=True)
class Abort:
    """Drop the streamed reply (never logged, no cell runs), append `entry`, retry the turn."""

    entry: CustomEntry
    notice: str
    demoted: str | None = None  # told the user once: the rule now only sits in the context


def what_matched(match: Match) -> str:
    """`matched 'read_csv(' in the reply's code`, or for a file rule `applies to
    'report.py', which the reply's code writes (*.py)`."""
    rule, where = match.rule, "prose" if match.where == "text" else "code"
    if rule.file_glob is not None and rule.conditions == (CATCH_ALL,):
        return (f"applies to {match.found[:60]!r}, which the reply's code writes "
                f"({rule.file_glob})")
    return f"matched {match.found[:60]!r} in the reply's {where}"


def injection_text(match: Match) -> str:
    rule = match.rule
    return (f'<system-reminder rule="{rule.name}">\nYour reply was stopped before it ran: the '
            f"rule {rule.name!r} {what_matched(match)}.\n{rule.reminder}\n"
            "Write the reply again following this rule.\n</system-reminder>")


def fired(branch: Sequence[Entry]) -> list[tuple[str, int]]:
    """(rule, how many assistant replies preceded it) for each injection on the branch;
    O(injections) reads on a long log."""
    return [(str(e.data.get("rule")), replies)
            for e, replies in with_replies_before(branch, RULE_INJECTION)
            if isinstance(e.data, dict)]


INPUT_LITERAL = "input-literal"


def input_literal_rule(inputs: Sequence[str]) -> StreamRule | None:
    """The host's own stream rule: a cell that starts assigning a string literal to a
    name holding the run's input (`audit = "2025-01-01 ...`) is stopped as it streams.
    The cell would not run (rlm.agent.cells: a literal over an input), but the 1.5B model
    spent the task suite's whole 240 s typing a million-character log into one; stopped
    at its first quote, the turn is retried with the reminder."""
    names = sorted(n for n in set(inputs) if n.isidentifier())
    if not names:
        return None
    listed = ", ".join(f"`{n}`" for n in names[:6])
    return StreamRule(
        name=INPUT_LITERAL,
        conditions=(rf"(?m)^[ \t]*(?:{'|'.join(names)})[ \t]*=[ \t]*[rRbBuUfF]{{0,2}}[\"']",),
        reminder=(f"{listed} already hold{'s' * (len(names) == 1)} your input, in full: the "
                  "preview you saw is only its start. Never assign a literal to it: search it "
                  "or slice it (`i = name.find('word')`, then `print(name[i - 300:i + 300])`)."),
        source="rlm (built in)")


class StreamRules:
    def __init__(self, rules: RuleSet | None = None):
        self.rules = rules or RuleSet()
        # the host's own rules for this run (input_literal_rule), beside the files' rules
        self.builtin: tuple[StreamRule, ...] = ()
        self.turn_hits: Counter[str] = Counter()
        self.slow: set[str] = set()  # rules whose condition ran out of time: off for the run

    def start_turn(self) -> None:
        self.turn_hits.clear()

    def active(self, branch: Sequence[Entry]) -> list[StreamRule]:
        """The rules that may fire on the next reply."""
        if sum(self.turn_hits.values()) >= TURN_STOPS:
            return []
        history = fired(branch)
        counts = Counter(name for name, _ in history)
        replies = reply_count(branch)
        last = {name: at for name, at in history}
        out = []
        for rule in self.stream_rules:
            n = counts[rule.name]
            if rule.name in self.slow:
                continue
            if self.turn_hits[rule.name] >= PER_TURN or n >= DEMOTE_AFTER:
                continue
            if rule.repeat == "once" and n:
                continue
            if isinstance(rule.repeat, int) and n and replies - last[rule.name] < rule.repeat:
                continue
            out.append(rule)
        return out

    @property
    def stream_rules(self) -> list[StreamRule]:
        return [*self.rules.stream, *self.builtin]

    def watch(self, branch: Sequence[Entry]) -> ReplyScanner | None:
        rules = self.active(branch)
        return ReplyScanner(rules, slow=self.slow) if rules else None

    def hit(self, match: Match, branch: Sequence[Entry]) -> Abort:
        rule = match.rule
        self.turn_hits[rule.name] += 1
        n = sum(1 for name, _ in fired(branch) if name == rule.name) + 1
        entry = self._entry(match, interrupted=True, count=n)
        notice = (f"rule {rule.name!r} {what_matched(match)}: stopped it and retrying the "
                  "turn with the reminder")
        demoted = None
        if n >= DEMOTE_AFTER:
            demoted = (f"rule {rule.name!r} fired {n} times in this session without the model "
                       "complying: it no longer interrupts; its reminder stays in the context")
        return Abort(entry, notice, demoted)

    def note(self, match: Match, branch: Sequence[Entry]) -> CustomEntry:
        n = sum(1 for name, _ in fired(branch) if name == match.rule.name) + 1
        return self._entry(match, interrupted=False, count=n)

    def _entry(self, match: Match, *, interrupted: bool, count: int) -> CustomEntry:
        rule = match.rule
        return CustomEntry(custom_type=RULE_INJECTION, display=True,
                           content=injection_text(match) if interrupted else
                           f'<system-reminder rule="{rule.name}">\n{rule.reminder}\n'
                           "</system-reminder>",
                           data={"rule": rule.name, "where": match.where,
                                 "found": match.found[:200], "interrupted": interrupted,
                                 "count": count, "source": rule.source})

    def context_note(self, branch: Sequence[Entry]) -> str:
        """The rules' block for the system prompt ("" without rules)."""
        counts = Counter(name for name, _ in fired(branch))
        parts, listed, used = [], list(self.rules.listed), 0
        for item in self.rules.always:
            if used + len(item.text) > ALWAYS_BUDGET:
                listed.append(item)
                continue
            used += len(item.text)
            parts.append(f"## Rule: {item.name}\n{item.text}")
        for rule in self.stream_rules:
            if counts[rule.name] >= DEMOTE_AFTER:
                parts.append(f"## Rule: {rule.name} (you broke it {counts[rule.name]} times)\n"
                             f"{rule.reminder}")
        if listed:
            parts.append("## More rules (read a file with a cell when it applies)\n" + "\n".join(
                f"- {x.name}: {x.text.splitlines()[0][:160]} ({x.source})" for x in listed))
        return ("\n\n# Project rules\n\n" + "\n\n".join(parts)) if parts else ""
