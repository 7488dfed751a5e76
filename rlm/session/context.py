"""Context projection: the messages sent to the model, a pure function of the branch.

`build_messages(branch, system_prompt=..., native_tools=...)`:

- system prompt first;
- if the branch holds a compaction, the latest one's summary comes next as a user message,
  then the entries from its `first_kept_entry_id` up to the compaction, then everything
  after the compaction (earlier compactions inside the kept range are skipped);
- `rule_injection` entries (stream rules) outlive compactions: the ones before the kept
  range are projected right after the summary, which does not contain them;
- only the newest `ipython_state` notice is shown: an older one inside the kept range
  lists names that may be gone, and the newest supersedes it;
- message entries with `error` set (failed model calls), model_change entries and custom
  entries without `content` are skipped; custom entries with content (display true or
  false) and branch summaries become user messages;
- native_tools=True: messages as stored (assistant `tool_calls`, `tool` results). A call
  without a result (an interrupted turn) gets a placeholder result before the next
  non-tool message, because providers reject dangling tool calls; a result without its
  call (cut away) is shown as a user message;
- native_tools=False (models writing fenced code): assistant messages are text only (native
  calls become fenced ```python blocks) and consecutive tool results merge into one user
  message `Output of cell [k]:\\n...`. An assistant message a shake rewrote (its fenced
  code replaced by a placeholder) is shown as rewritten; with native tools it is shown as
  stored (its code is in its calls, which a shake never touches).

Byte stability: appending entries only appends messages, with one exception, the merge of
consecutive tool results in fenced mode, which replaces the *last* message (a new dict; the
old one is never mutated). Tool results of a turn are all appended before the next model
call, so the prefix the provider caches is stable between calls. A new compaction
rebuilds the list (the prefix changes then, by design); so does a `context_relief` record
(rlm.compaction.tiers: cell results replaced by one-line notices, every record on the
branch applies), whose planner keeps its changes in the tail unless the cache is cold.

`Projector` is the incremental form the store keeps: `extend(entries)` costs O(new
entries), so a turn at 100k entries stays well under a millisecond of projection.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rlm.session.branch import Branch, pinned_before
from rlm.session.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    Entry,
    MessageEntry,
    call_code,
)

SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
)
# custom entries of which only the newest one is projected
SUPERSEDED_CUSTOM = frozenset({"ipython_state", "children_state"})
# a tier's record (rlm.compaction.tiers): cell results it replaced by one-line notices
RELIEF_CUSTOM = "context_relief"
# custom entries a compaction never drops: projected after the summary (which skips them)
PINNED_CUSTOM = frozenset({"rule_injection"})
BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:"
)
MISSING_RESULT = "[no result: the cell was interrupted or never ran]"
_KEEP_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def summary_message(summary: str) -> dict[str, Any]:
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n\n<summary>\n{summary}\n</summary>"}


def relief_replacements(entries: list[Entry]) -> dict[str, str]:
    """entry id -> the text shown instead of that cell result, over every relief record."""
    out: dict[str, str] = {}
    for e in entries:
        if isinstance(e, CustomEntry) and e.custom_type == RELIEF_CUSTOM and isinstance(e.data, dict):
            for r in e.data.get("replaced", []):
                if isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("text"), str):
                    out[r["id"]] = r["text"]
    return out


def _code_of(call: dict[str, Any]) -> str:
    """The call's code, or what the model actually sent when it was not {"code": str}."""
    code = call_code(call)
    if code is not None:
        return code
    args = (call.get("function") or {}).get("arguments", "")
    return args if isinstance(args, str) else json.dumps(args)


class Projector:
    """Incremental `build_messages`: feed branch entries in order, read `messages()`."""

    def __init__(self, *, system_prompt: str, native_tools: bool) -> None:
        self.system = {"role": "system", "content": system_prompt}
        self.native = native_tools
        self.entries: list[Entry] = []  # the branch consumed so far, from `base` on
        # branch position of entries[0]: a store starts a projector at the latest
        # compaction's first kept entry, since nothing before it is ever shown
        self.base = 0
        self.pinned: list[Entry] = []  # PINNED_CUSTOM entries before `base` (still shown)
        self.msgs: list[dict[str, Any]] = []
        self._pending: list[str] = []  # native: tool_call ids still waiting for results
        # native: what was said while calls wait for results (a note a handler logged
        # mid-cell, a message typed then); shown once they are answered, since a provider
        # takes nothing between a call and its result
        self._held: list[dict[str, Any]] = []
        # branch length -> how many of `msgs` are that prefix's projection, where they are
        # (nothing held, no tool output that a later one merges into): a prefix of the
        # branch is projected without a rebuild (`prefix`). Cleared when msgs change shape.
        self.marks: dict[int, int] = {}
        self._merge_tool = False  # fenced: last message is a merged tool-output message
        self._cells = 0
        self._superseded: dict[str, dict[str, Any]] = {}  # custom_type -> its shown message
        self._replaced: dict[str, str] = {}  # cell result id -> its relief notice

    @property
    def consumed(self) -> int:
        return self.base + len(self.entries)

    def prefix(self, n: int) -> list[dict[str, Any]] | None:
        """What `build_messages(branch[:n])` gives, when this projector knows it (`n` is
        all it has consumed, or a marked prefix); None: project that branch afresh."""
        if n == self.consumed:
            return self.messages()
        cut = self.marks.get(n)
        return None if cut is None else [self.system, *self.msgs[:cut]]

    def messages(self) -> list[dict[str, Any]]:
        if not self._held:
            return [self.system, *self.msgs]
        return [self.system, *self.msgs, *self._placeholders(), *self._held]

    def extend(self, entries: list[Entry]) -> None:
        for e in entries:
            self.entries.append(e)
            if isinstance(e, CompactionEntry):
                self._rebuild()
            elif isinstance(e, CustomEntry) and e.custom_type == RELIEF_CUSTOM:
                self._replaced.update(relief_replacements([e]))
                self._rebuild()  # like a compaction: the prefix changes from the first one
            else:
                self._emit(e)
                if not self._held and not self._merge_tool:
                    self.marks[self.consumed] = len(self.msgs)

    def load(self, branch: Sequence[Entry]) -> None:
        """Consume a whole branch, starting from its latest compaction (what comes before
        its first kept entry is never shown, so it is not even read; a relief record there
        can only name results before it, which are not shown either)."""
        from rlm.session.branch import pinned_before, projection_start

        self.base = projection_start(branch)
        self.pinned = pinned_before(branch, PINNED_CUSTOM, self.base)
        self.entries = list(branch[self.base:])
        self._replaced = relief_replacements(self.entries)
        self._rebuild()

    # -- internals ----------------------------------------------------------------------

    def _reset(self) -> None:
        self.msgs, self._pending, self._merge_tool, self._cells = [], [], False, 0
        self._held = []
        self.marks = {}
        self._superseded = {}

    def _rebuild(self) -> None:
        self._reset()
        entries = self.entries
        at = next(
            (i for i in range(len(entries) - 1, -1, -1) if isinstance(entries[i], CompactionEntry)),
            None,
        )
        if at is None:
            for e in entries:
                self._emit(e)
            return
        comp = entries[at]
        assert isinstance(comp, CompactionEntry)
        self.msgs.append(summary_message(comp.summary))
        start = at + 1
        if comp.first_kept_entry_id is not None:
            for i in range(at - 1, -1, -1):
                if entries[i].id == comp.first_kept_entry_id:
                    start = i
                    break
        before = [e for e in entries[:start]
                  if isinstance(e, CustomEntry) and e.custom_type in PINNED_CUSTOM]
        for e in [*self.pinned, *before]:
            self._emit(e)
        for e in entries[start:]:
            if not isinstance(e, CompactionEntry):
                self._emit(e)
        if start:  # what comes before is not shown again but the pinned: drop the rest
            self.pinned += before
            self.base += start
            self.entries = entries[start:]

    def _emit(self, e: Entry) -> None:
        if isinstance(e, MessageEntry):
            if e.error is None:
                self._emit_message(e)
        elif isinstance(e, CompactionEntry):
            return
        elif isinstance(e, BranchSummaryEntry):
            self._user(
                f"{BRANCH_SUMMARY_PREFIX}\n\n<branch_summary>\n{e.summary}\n</branch_summary>"
            )
        elif isinstance(e, CustomEntry):
            if e.content is None:
                return
            if e.custom_type in SUPERSEDED_CUSTOM:
                self._supersede(e.custom_type)
            shown = self._user(e.content)
            if e.custom_type in SUPERSEDED_CUSTOM:
                self._superseded[e.custom_type] = shown

    def _supersede(self, custom_type: str) -> None:
        """Drop the older notice of this kind (a new list: messages are never mutated).

        Notices of these kinds follow a compaction, which rebuilds the list anyway, so the
        byte-stable prefix between turns is not disturbed."""
        old = self._superseded.pop(custom_type, None)
        if old is not None:
            self.msgs = [m for m in self.msgs if m is not old]
            self.marks = {}
            self._held = [m for m in self._held if m is not old]

    def _user(self, content: str) -> dict[str, Any]:
        return self._say({"role": "user", "content": content})

    def _say(self, message: dict[str, Any]) -> dict[str, Any]:
        """A user-side message: held while native calls wait for their results."""
        if self._pending:
            self._held.append(message)
            return message
        self._merge_tool = False
        self.msgs.append(message)
        return message

    def _emit_message(self, e: MessageEntry) -> None:
        m = e.message
        role = m.get("role")
        if role == "tool":
            self._emit_tool(e)
            return
        if role != "assistant":
            self._user_like(m)
            return
        self._close_pending()
        self._merge_tool = False
        calls = m.get("tool_calls") or []
        if self.native:
            out = {k: m[k] for k in _KEEP_KEYS if k in m}
            self._pending = [c.get("id", "") for c in calls if isinstance(c, dict)]
        elif e.id in self._replaced:  # its fenced code shaken out (rlm.compaction.tiers)
            out = {"role": "assistant", "content": self._replaced[e.id]}
        else:
            text = m.get("content") or ""
            blocks = [f"```python\n{_code_of(c)}\n```" for c in calls if isinstance(c, dict)]
            if blocks and not any(b in text for b in blocks):
                text = "\n\n".join([t for t in (text,) if t] + blocks)
            out = {"role": "assistant", "content": text}
        self.msgs.append(out)

    def _user_like(self, m: dict[str, Any]) -> None:
        self._say({k: m[k] for k in _KEEP_KEYS if k in m})

    def _emit_tool(self, e: MessageEntry) -> None:
        m = e.message
        if e.id in self._replaced:
            m = {**m, "content": self._replaced[e.id]}
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        call_id = m.get("tool_call_id")
        if self.native and call_id in self._pending:
            self._pending.remove(call_id)
            self.msgs.append({k: m[k] for k in _KEEP_KEYS if k in m})
            if not self._pending:
                self._release()
            return
        self._close_pending()
        self._cells += 1
        k = (e.cell or {}).get("execution_count") or self._cells
        block = f"Output of cell [{k}]:\n{text}"
        if self._merge_tool and self.msgs:
            prev = self.msgs[-1]
            self.msgs[-1] = {"role": "user", "content": f"{prev['content']}\n\n{block}"}
        else:
            self.msgs.append({"role": "user", "content": block})
        self._merge_tool = True

    def _placeholders(self) -> list[dict[str, Any]]:
        return [{"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT}
                for call_id in self._pending]

    def _close_pending(self) -> None:
        """Native mode: give every dangling tool call a placeholder result, then show
        what was held while they waited."""
        self.msgs.extend(self._placeholders())
        self._pending = []
        self._release()

    def _release(self) -> None:
        if self._held:
            self.msgs.extend(self._held)
            self._held = []
            self._merge_tool = False


class Projections:
    """A session's incremental projections: one `Projector` per (system prompt, tool mode)
    over its live branch, started afresh when the branch is replaced (another leaf), so a
    turn costs O(new entries). The returned dicts are shared: treat them as read-only."""

    def __init__(self) -> None:
        # key -> (the live branch's entry list it follows, its projector)
        self._by_key: dict[tuple[str, bool], tuple[list[Any], Projector]] = {}

    def of(self, live: Branch, system_prompt: str, native_tools: bool) -> Projector:
        """The projector for `live`, brought up to its end."""
        key = (system_prompt, native_tools)
        cached = self._by_key.get(key)
        if cached is None or not live.same_entries_as(cached[0]):
            proj = Projector(system_prompt=system_prompt, native_tools=native_tools)
            proj.base = live.projection_start()  # before it only pinned entries show
            proj.pinned = pinned_before(live, PINNED_CUSTOM, proj.base)
            self._by_key[key] = (live.entry_list, proj)
        else:
            proj = cached[1]
        proj.extend(live[proj.consumed:])
        return proj

    def project(self, live: Branch, branch: Sequence[Entry], *, system_prompt: str,
                native_tools: bool) -> list[dict[str, Any]]:
        """`build_messages(branch, ...)`: from the projector when `branch` is `live` or a
        prefix of it (`branch()[:n]`, as the compaction's counts take), else afresh."""
        if isinstance(branch, Branch) and branch.same_entries(live):
            known = self.of(live, system_prompt, native_tools).prefix(len(branch))
            if known is not None:
                return known
        return build_messages(branch, system_prompt=system_prompt, native_tools=native_tools)


def build_messages(
    branch: Sequence[Entry], *, system_prompt: str, native_tools: bool
) -> list[dict[str, Any]]:
    """The model's messages for `branch` (root -> leaf, header excluded). Pure."""
    proj = Projector(system_prompt=system_prompt, native_tools=native_tools)
    proj.load(branch)
    return proj.messages()


def projected_entries(branch: Sequence[Entry]) -> list[Entry]:
    """The entries the projection of `branch` shows, in its order: the latest compaction
    (its summary) first, the pinned entries before its kept range, then the kept range and
    what follows it (older compactions left out). For a reader that renders the context its
    own way: the advisor's seed (rlm.agent.advisor)."""
    from rlm.session.branch import latest_compaction, pinned_before, projection_start

    at = latest_compaction(branch)
    if at < 0:
        return list(branch)
    start = projection_start(branch)
    kept = [e for e in branch[start:] if not isinstance(e, CompactionEntry)]
    return [branch[at], *pinned_before(branch, PINNED_CUSTOM, start), *kept]


__all__ = ["Projections", "Projector", "build_messages", "projected_entries", "summary_message",
           "SUMMARY_PREFIX"]
