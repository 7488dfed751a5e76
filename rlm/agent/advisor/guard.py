"""The advisor's emission guard and its feed: pure, fixture-tested (tests/test_advisor.py).

The guard is code, not a prompt line (oh-my-pi #12126: an advisor told to stay quiet unless
it matters still said "LGTM" every turn). `EmissionGuard.admit` drops filler ("Stop.",
"LGTM", "no issues") after normalisation, passes the same advice once per session, and at
most one real advice per update; a suppressed call does not use that slot. The advisor is
never told: every call is answered "Recorded.".

`render_delta` turns new branch entries into the advisor's compact update: one line per
message, long texts cut, and text byte-identical to something already sent collapsed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from rlm.session.entries import CompactionEntry, CustomEntry, Entry, MessageEntry, call_code

SEVERITIES = ("nit", "concern", "blocker")
RECORDED = "Recorded."
ITEM_CHARS = 1_500
FILLER = frozenset({
    "stop", "lgtm", "no issues", "no issue", "looks good", "looks fine", "all good", "ok",
    "okay", "fine", "none", "nothing", "nothing to add", "no concerns", "no comment",
    "n a", "continue", "proceed", "keep going", "good", "great", "agreed", "noted",
})  # fmt: skip
ADVISE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "advise",
        "description": "Send one piece of advice to the agent you are watching.",
        "parameters": {
            "type": "object",
            "properties": {
                "note": {"type": "string", "description": "the advice, specific and short"},
                "severity": {"type": "string", "enum": list(SEVERITIES),
                             "description": "nit: next boundary; concern: before its next "
                                            "step; blocker: stops a running cell"},
            },
            "required": ["note", "severity"],
        },
    },
}


def normalise(note: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", note.lower()).split())


# A model without native tool calls (the local family) advises in text, one line each:
# ADVISE(concern): the note
TEXT_ADVICE = re.compile(r"^\s*ADVISE\s*\(\s*([A-Za-z]+)\s*\)\s*:\s*(.+?)\s*$", re.M | re.I)


def text_advice(content: str) -> list[tuple[str, str]]:
    """(note, severity) of every `ADVISE(severity): note` line of a text reply."""
    return [(note, severity.lower()) for severity, note in TEXT_ADVICE.findall(content or "")]


class EmissionGuard:
    def __init__(self) -> None:
        self.given: set[str] = set()
        self.suppressed = 0

    def admit(self, note: Any, severity: Any, *, slot_used: bool) -> bool:
        """Whether this advise(...) call reaches the agent."""
        text = normalise(note) if isinstance(note, str) else ""
        ok = (bool(text) and text not in FILLER and severity in SEVERITIES
              and text not in self.given and not slot_used)
        if ok:
            self.given.add(text)
        else:
            self.suppressed += 1
        return ok


ADVISORY = re.compile(r"<advisory [^>]*>(.*?)</advisory>", re.S)


def given_before(branch: Iterable[Entry]) -> set[str]:
    """The normalised notes of the advice already in the session (its `advisory` entries):
    a resumed or re-seeded advisor's guard does not pass them again."""
    return {normalise(m.group(1)) for e in branch
            if isinstance(e, CustomEntry) and e.custom_type == "advisory" and e.content
            for m in [ADVISORY.search(e.content)] if m is not None}


def advisory_text(note: str, severity: str) -> str:
    return (f'<advisory guidance="weigh, don\'t blindly obey" severity="{severity}">'
            f"{note.strip()}</advisory>")


def _cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= ITEM_CHARS else text[:ITEM_CHARS] + " [...]"


def entry_lines(e: Entry) -> list[str]:
    """How one branch entry reads in the advisor's feed (none: it does not reach it)."""
    if isinstance(e, MessageEntry) and e.error is None:
        m = e.message
        content = m.get("content")
        text = content if isinstance(content, str) else ""
        if e.role == "assistant":
            out = [f"[agent] {_cut(text)}"] if text.strip() else []
            for call in m.get("tool_calls") or []:
                out.append(f"[agent cell]\n{_cut(call_code(call) or '')}")
            return out
        if e.role == "tool":
            return [f"[cell output] {_cut(text)}"]
        return [f"[{'user' if e.role == 'user' else e.role}] {_cut(text)}"] if text else []
    if isinstance(e, CompactionEntry):
        return [f"[summary of earlier work] {_cut(e.summary)}"]
    if isinstance(e, CustomEntry) and e.content and e.custom_type != "advisory":
        return [f"[note] {_cut(e.content)}"]
    return []


def render_delta(entries: Iterable[Entry], sent: set[str]) -> str:
    """The update for `entries`; `sent` (digests of what was sent) is updated in place."""
    lines = []
    for e in entries:
        for line in entry_lines(e):
            digest = hashlib.sha256(line.encode()).hexdigest()
            if digest in sent:
                lines.append(line.split("]", 1)[0] + "] [same as before]")
                continue
            sent.add(digest)
            lines.append(line)
    return "\n\n".join(lines)


def running_reply(branch: Sequence[Entry]) -> str | None:
    """The id of the newest reply when its cells have not all returned (one of them runs or
    is about to); None: no reply's cells are running."""
    results = 0
    for e in reversed(branch):
        if not isinstance(e, MessageEntry):
            continue
        if e.role == "tool":
            results += 1
        elif e.role == "assistant":
            return e.id if len(e.message.get("tool_calls") or []) > results else None
        else:
            return None
    return None


def judged_reply(branch: Sequence[Entry]) -> str | None:
    """The id of the newest model reply on `branch`: the one an update ending there judges
    (its advice carries it: a blocker stops only that reply's cells)."""
    for e in reversed(branch):
        if isinstance(e, MessageEntry) and e.role == "assistant" and e.error is None:
            return e.id
    return None


def replied_with_cells(branch: list[Entry]) -> bool:
    """The newest model reply on `branch` had cells (the advisor read it before they ran)."""
    for e in reversed(branch):
        if isinstance(e, MessageEntry) and e.role == "assistant" and e.error is None:
            return bool(e.message.get("tool_calls"))
    return False
