"""Rebuild from the checkpoint: the context starts again at a boundary, with no model call.

When the ladder's cheap tiers left the context over its limit (or the model overflowed) and
a confirmed checkpoint exists (rlm.compaction.checkpoint), `rebuild` appends a `compaction`
entry of kind "rebuild". Its text is the boundary: the task as the user gave it, the
checkpoint, the user's latest words verbatim. Its first kept entry is the cut point at or
before the first entry the checkpoint does not cover, so nothing uncovered leaves the
context. The projection starts there as after any compaction (the goal, pinned entries and
`<ipython_state>` are added as after a summary); the old entries stay in the log, where
`rlm log`, an export and `history.*` read them.

No boundary (None) when there is no confirmed checkpoint, when it predates the latest
compaction (that summary covers more), or when the rebuilt context would not be smaller
or would still be over the limit: the summary runs instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlm.compaction.checkpoint import read
from rlm.compaction.plan import Projection, context_tokens, latest_compaction_index
from rlm.session.entries import CompactionEntry, Entry, MessageEntry

RECENT_USER = 3  # the user's latest messages, verbatim
USER_CHARS = 2000  # each, head kept
KIND = "rebuild"

HEAD = ("This context was rebuilt from the session's checkpoint, which was written while the "
        "work went on; the messages it covers are no longer shown. The IPython kernel kept "
        "running: every name is still defined. `history.messages()` and `history.cell(N)` "
        "return what was said and computed before, `history.checkpoint()` this checkpoint.")


def _clip(text: str) -> str:
    return text if len(text) <= USER_CHARS else text[:USER_CHARS] + " [...]"


def _user_texts(entries: Sequence[Entry]) -> list[str]:
    out = []
    for e in entries:
        if isinstance(e, MessageEntry) and e.role == "user" and not e.error:
            content = e.message.get("content")
            if isinstance(content, str) and content.strip():
                out.append(content.strip())
    return out


def boundary(covered: Sequence[Entry], checkpoint_text: str) -> str:
    """The boundary's text from the entries the checkpoint covers."""
    users = _user_texts(covered)
    parts = [HEAD]
    if users:
        parts.append(f"<task>\n{_clip(users[0])}\n</task>")
    parts.append(f"<checkpoint>\n{checkpoint_text.strip()}\n</checkpoint>")
    recent = users[1:][-RECENT_USER:]
    if recent:
        parts.append("<recent-user-messages>\n" + "\n---\n".join(_clip(u) for u in recent)
                     + "\n</recent-user-messages>")
    return "\n\n".join(parts)


def _cut_at_or_before(branch: Sequence[Entry], index: int) -> int:
    """The nearest entry at or before `index` a projection may start at (a user or an
    assistant message: never a cell result without its call)."""
    for i in range(min(index, len(branch) - 1), -1, -1):
        e = branch[i]
        if isinstance(e, MessageEntry) and not e.error and e.role in ("user", "assistant"):
            return i
    return -1


def rebuild(session: Any, trigger: str, *, limit: int | None,
            projection: Projection | None = None) -> CompactionEntry | None:
    """Append the boundary when it brings the context under `limit`; else None."""
    found = read(session)
    if found is None:
        return None
    text, data = found
    branch = session.branch()
    ids = [e.id for e in branch]
    mark = data.get("watermark")
    if mark not in ids or ids.index(mark) < latest_compaction_index(branch):
        return None  # not on this branch, or older than the latest summary
    cut = _cut_at_or_before(branch, ids.index(mark) + 1)
    if cut <= 0:
        return None
    before = context_tokens(branch, projection)
    entry = CompactionEntry(summary=boundary(branch[:cut], text), first_kept_entry_id=ids[cut],
                            tokens_before=before, trigger=trigger,
                            details={"kind": KIND, "watermark": mark,
                                     "checkpoint_sha256": data.get("sha256")})
    after = context_tokens([*branch, entry], projection)
    if after >= before or (limit is not None and after > limit):
        return None
    session.append(entry)
    return entry


def is_rebuild(entry: Entry | None) -> bool:
    return isinstance(entry, CompactionEntry) and (entry.details or {}).get("kind") == KIND
