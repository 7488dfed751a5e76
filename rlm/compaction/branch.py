"""Branch summary: when the user moves to another branch of the session tree, the work on
the abandoned branch (from the deepest common ancestor) is summarised, newest first within
a token budget, and appended at the new position as a `branch_summary` entry.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlm.compaction.plan import entry_tokens, serialize_entries
from rlm.compaction.summarize import call_summarizer, load_prompt
from rlm.llm.types import LLM
from rlm.protocols import SessionLog
from rlm.session.entries import BranchSummaryEntry, CompactionEntry, Entry


def abandoned_entries(old_path: Sequence[Entry], new_path: Sequence[Entry]) -> list[Entry]:
    """Entries of `old_path` after the deepest ancestor it shares with `new_path`."""
    common = 0
    for a, b in zip(old_path, new_path, strict=False):
        if a.id != b.id:
            break
        common += 1
    return list(old_path[common:])


def select_within_budget(entries: list[Entry], budget_tokens: int) -> list[Entry]:
    """The newest entries whose tokens fit `budget_tokens`, in chronological order."""
    picked: list[Entry] = []
    total = 0
    for e in reversed(entries):
        if isinstance(e, CompactionEntry):
            continue
        n = entry_tokens(e)
        if picked and total + n > budget_tokens:
            break
        total += n
        picked.append(e)
    picked.reverse()
    return picked


def branch_prompt(conversation: str) -> str:
    return f"<conversation>\n{conversation}\n</conversation>\n\n{load_prompt('branch')}"


def summarize_branch(
    session: SessionLog,
    old_leaf: str,
    new_leaf: str,
    llm: LLM,
    budget_tokens: int,
    *,
    max_tokens: int = 4096,
) -> BranchSummaryEntry | None:
    """Summarise the branch ending at `old_leaf` and append the summary after `new_leaf`.

    `budget_tokens` is the caller's window - reserve. None when the old branch adds
    nothing (e.g. `old_leaf` is an ancestor of `new_leaf`).
    """
    old_path = session.branch(old_leaf)
    new_path = session.branch(new_leaf)
    entries = select_within_budget(abandoned_entries(old_path, new_path), budget_tokens)
    conversation = serialize_entries(entries)
    if not conversation:
        return None
    summary = call_summarizer(llm, branch_prompt(conversation), max_tokens)
    session.set_leaf(new_leaf)
    entry = BranchSummaryEntry(summary=summary, from_id=old_leaf)
    session.append(entry)
    return entry
