"""Rebuild from the checkpoint: the context starts again at a boundary, with no model call.

When the ladder's cheap tiers left the context over its limit (or the model overflowed) and
a confirmed checkpoint exists (rlm.compaction.checkpoint), `rebuild` appends a `compaction`
entry of kind "rebuild". Its text is the boundary: the task as the user gave it, the
checkpoint, the user's latest words verbatim. Its first kept entry is the cut point at or
before the first entry the checkpoint does not cover, so nothing uncovered leaves the
context, and further back to keep the newest `keep_recent` tokens verbatim (as after a
summary) when they fit. The projection starts there as after any compaction (the goal,
pinned entries and `<ipython_state>` are added as after a summary); the old entries stay
in the log, where `rlm log`, an export and `history.*` read them.

No boundary (None) when there is no confirmed checkpoint, when it predates the latest
compaction (that summary covers more), or when the rebuilt context would not be smaller
or would leave less than `keep_recent` tokens of room under the limit.

`from_checkpoint` is the ladder's use of it: it waits for a running writer, and with no
checkpoint that serves, writes one now when the writer is automatic (rungs set) or the
rebuild is manual (`/rebuild`), each wait bounded; else the summary runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlm.compaction.checkpoint import CheckpointWriter, read
from rlm.compaction.ladder import reject
from rlm.compaction.plan import (
    Projection,
    context_tokens,
    entry_message,
    find_cut_point,
    first_kept_index,
    latest_compaction_index,
)
from rlm.protocols import SessionLog
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


def rebuild(session: SessionLog, trigger: str, *, limit: int | None,
            projection: Projection | None = None, keep_recent: int = 0,
            written_now: bool = False) -> CompactionEntry | None:
    """Append the boundary when it leaves `keep_recent` tokens of room under `limit` (room
    for new work, as a summary leaves; a rebuild that leaves less would relieve again at
    the next turn); else None. The newest `keep_recent` tokens stay verbatim after it,
    covered or not, when that room is still there (else only what is not covered)."""
    found = read(session)
    if found is None:
        return None
    text, data = found
    branch = session.branch()
    ids = [e.id for e in branch]
    mark = data.get("watermark")
    last = latest_compaction_index(branch)
    if mark not in ids or ids.index(mark) < last:
        return None  # not on this branch, or older than the latest summary
    first = ids.index(mark) + 1  # the first entry the model sees that it does not cover
    while first < len(branch) and entry_message(branch[first]) is None:
        first += 1  # not a hidden one appended after (a watermark lands mid-turn)
    covered = _cut_at_or_before(branch, first)
    start = first_kept_index(branch, last)
    cuts = [covered]
    if keep_recent > 0:
        tail, _ = find_cut_point(branch, start, len(branch), keep_recent)
        if start < tail < covered:
            cuts.insert(0, tail)  # the recent tail first; without it if that does not fit
    before = context_tokens(branch, projection)
    for cut in cuts:
        if cut <= 0:
            continue
        entry = CompactionEntry(summary=boundary(branch[:cut], text),
                                first_kept_entry_id=ids[cut], tokens_before=before,
                                trigger=trigger,
                                details={"kind": KIND, "watermark": mark,
                                         "checkpoint_sha256": data.get("sha256"),
                                         "written_now": written_now})
        after = context_tokens([*branch, entry], projection)
        if after < before and (limit is None or after <= limit - keep_recent):
            session.append(entry)
            return entry
    return None


def from_checkpoint(writer: CheckpointWriter, session: SessionLog, trigger: str, *, limit: int | None,
                    projection: Projection | None = None, keep_recent: int = 0,
                    wait_s: float, start: bool, fresh: bool = False,
                    announce: Callable[[str], None] | None = None,
                    cancelled: Callable[[], bool] | None = None) -> CompactionEntry | None:
    """Tier 0 on the main path. A running writer is waited for (its checkpoint covers
    more). With no checkpoint that gives a boundary under `limit` (or `fresh`: a manual
    rebuild, whatever is there), `start` writes one now, covering the log to its leaf, and
    waits for it. Each wait is bounded by `wait_s`: past it, None (the summary runs; the
    writer finishes for the next time). A failed writing leaves the previous checkpoint,
    which is tried again."""
    late = f"no rebuild: the checkpoint writer did not finish within {wait_s:g} s"
    say = announce or (lambda text: None)

    def waited() -> bool:
        done = writer.wait(wait_s, cancelled)
        if not done:
            stopped = cancelled is not None and cancelled()
            reject(session, trigger, "no rebuild: stopped by the user (Ctrl-C)" if stopped
                   else late)
        return done

    if writer.running:
        say(f"waiting for the checkpoint writer (at most {wait_s:g} s) to rebuild the context")
        if not waited():
            return None
    if not fresh:
        entry = rebuild(session, trigger, limit=limit, projection=projection,
                        keep_recent=keep_recent)
        if entry is not None or not start:
            return entry
    written = len(writer.written)
    if not writer.start():
        return None  # closed with its run, or a log in memory
    say(f"writing a checkpoint of the context (at most {wait_s:g} s) to rebuild it from")
    if not waited():
        return None
    return rebuild(session, trigger, limit=limit, projection=projection, keep_recent=keep_recent,
                   written_now=len(writer.written) > written)


def is_rebuild(entry: Entry | None) -> bool:
    return isinstance(entry, CompactionEntry) and (entry.details or {}).get("kind") == KIND


def rebuilt_line(entry: CompactionEntry) -> str:
    """What the terminal says of a rebuild."""
    how = ("from a checkpoint written now (the writer's model call; no summary)"
           if (entry.details or {}).get("written_now") else "from the checkpoint, no model call")
    return (f"context rebuilt {how} ({entry.tokens_before:,} tokens before; "
            "`rlm checkpoint` shows it)")
