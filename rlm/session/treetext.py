"""A session's entry tree as text (`rlm tree`): one line per entry, indented at branch
points; `*` marks the current leaf's path. Iterative: a long session has a deep tree."""

from __future__ import annotations

from rlm.session.entries import CompactionEntry, CustomEntry, Entry, MessageEntry
from rlm.session.store import SessionStore


def format_tree(store: SessionStore, width: int = 72) -> str:
    children = store.tree()
    on_path = {e.id for e in store.branch()}
    lines: list[str] = []
    stack: list[tuple[str, int]] = [(c, 0) for c in reversed(children.get(None, []))]
    while stack:
        eid, depth = stack.pop()
        e = store.get(eid)
        mark = "*" if eid in on_path else " "
        label = f"{mark} {'  ' * depth}{e.id} {_label(e)}"
        lines.append(label[:width])
        kids = children.get(eid, [])
        step = 1 if len(kids) > 1 else 0
        stack.extend((k, depth + step) for k in reversed(kids))
    return "\n".join(lines)


def _label(e: Entry) -> str:
    if isinstance(e, MessageEntry):
        text = e.message.get("content") or ""
        if not text and e.message.get("tool_calls"):
            text = "[tool call]"
        return f"{e.role}: {' '.join(str(text).split())}"
    if isinstance(e, CompactionEntry):
        return f"compaction ({e.tokens_before} tokens before)"
    if isinstance(e, CustomEntry):
        return f"custom:{e.custom_type}"
    return e.type
