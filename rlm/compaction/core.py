"""`perform_compaction`: the one core every trigger calls.

It plans, summarises, appends the `compaction` entry and then, when a live kernel was
given, a hidden `ipython_state` notice built from a fresh namespace listing. It never
restarts, clears or otherwise touches the kernel: the listing and the file-ops query are
read-only. When the listing fails for any reason (dead kernel, busy past the timeout, a
malformed reply, a bug in the listing) nothing is said about names: silence rather than
something false, and the compaction itself stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernel_ext.describe import listing_lines
from rlm.compaction.plan import (
    CompactionSettings,
    Preparation,
    Projection,
    Skip,
    context_tokens,
    format_file_lists,
    plan_compaction,
)
from rlm.compaction.summarize import summarize
from rlm.errors import Cancelled, RlmError
from rlm.llm.types import LLM
from rlm.session.branch import custom_entries
from rlm.session.entries import CompactionEntry, CustomEntry, Entry

LISTING_TIMEOUT_S = 5.0


def perform_compaction(
    session: Any,
    llm: LLM,
    settings: CompactionSettings,
    *,
    trigger: str,
    instructions: str | None = None,
    kernel: Any = None,
    projection: Projection | None = None,
) -> CompactionEntry | None:
    """Compact the current branch of `session`; None (and a hidden outcome entry) if skipped.

    A failed summary call is also recorded as a skipped outcome, and so is a summary that
    would not make the projected context smaller; nothing else is written then.
    `projection` is the loop's (see context_tokens), for an exact `tokens_before`.
    """
    branch = session.branch()
    plan = plan_compaction(
        branch,
        settings,
        file_ops=_file_ops(kernel),
        tokens_before=context_tokens(branch, projection),
    )
    if isinstance(plan, Skip):
        _outcome(session, trigger, plan.reason)
        return None
    try:
        summary = summarize(plan, llm, settings, instructions)
    except Cancelled:
        _outcome(session, trigger, "stopped by the user (Ctrl-C); the context is as it was")
        return None
    except RlmError as e:
        _outcome(session, trigger, f"summarization failed: {e}")
        return None
    entry = _compaction_entry(plan, summary, trigger, instructions)
    after = context_tokens([*branch, entry], projection)
    if after >= plan.tokens_before:  # a summary that grows the context (omp #10023)
        _outcome(session, trigger, f"summary rejected: the context would not shrink "
                                   f"({plan.tokens_before} -> {after} tokens)")
        return None
    session.append(entry)
    append_ipython_state(session, branch, kernel)
    return entry


def append_ipython_state(session: Any, branch: Sequence[Entry], kernel: Any) -> None:
    """After any compaction (a summary, a rebuild): the live kernel's names, when it
    answers; `branch` is the one before it (for the names removed since)."""
    if kernel is not None:
        state = ipython_state_entry(kernel, _previous_names(branch))
        if state is not None:
            session.append(state)


def _compaction_entry(
    plan: Preparation, summary: str, trigger: str, instructions: str | None
) -> CompactionEntry:
    return CompactionEntry(
        summary=summary + format_file_lists(plan.read_files, plan.modified_files),
        first_kept_entry_id=plan.first_kept_entry_id,
        tokens_before=plan.tokens_before,
        details={"read_files": plan.read_files, "modified_files": plan.modified_files},
        trigger=trigger,
        instructions=instructions,
    )


def _outcome(session: Any, trigger: str, reason: str) -> None:
    session.append(
        CustomEntry(
            custom_type="compaction_outcome",
            data={"trigger": trigger, "compacted": False, "reason": reason},
            display=True,
            content=None,  # a notice for the user, never sent to the model
        )
    )


def _file_ops(kernel: Any) -> dict[str, Any] | None:
    if kernel is None or not hasattr(kernel, "file_ops"):
        return None
    try:
        ops = kernel.file_ops()
    except Exception:  # noqa: BLE001 - file lists are optional: never abort a compaction
        return None
    return ops if isinstance(ops, dict) else None


def _previous_names(branch: Sequence[Entry]) -> set[str] | None:
    for e in reversed(custom_entries(branch, "ipython_state")):  # no scan of a long log
        data = e.data if isinstance(e.data, dict) else {}
        return {n["name"] for n in data.get("names", []) if isinstance(n, dict)}
    return None


# ---------------------------------------------------------------- <ipython_state>


def ipython_state_entry(kernel: Any, previous_names: set[str] | None) -> CustomEntry | None:
    """The hidden notice from a live listing; None when the kernel cannot answer."""
    try:
        listing = kernel.list_namespace(timeout=LISTING_TIMEOUT_S)
        raw = listing.get("names", []) if isinstance(listing, dict) else None
        if not isinstance(raw, list):
            return None  # a malformed reply says nothing true about the names
    except Exception:  # noqa: BLE001 - any failure: no notice, the compaction stands
        return None
    names = [n for n in raw if isinstance(n, dict) and "name" in n]
    note = listing.get("note")  # a busy kernel's names from its last snapshot (Kernel.list_namespace)
    removed = sorted(previous_names - {n["name"] for n in names}) if previous_names and not note else []
    data: dict[str, Any] = {"persisted": True, "names": names, "removed": removed}
    if isinstance(note, str):
        data["note"] = note
    return CustomEntry(
        custom_type="ipython_state",
        data=data,
        display=False,
        content=format_ipython_state(names, removed, note if isinstance(note, str) else None),
    )


def format_ipython_state(names: list[dict[str, Any]], removed: list[str],
                         note: str | None = None) -> str:
    """The `<ipython_state>` text the model sees after a compaction."""
    lines = [
        "<ipython_state>",
        "The IPython kernel persisted through this compaction (it was not restarted): "
        "every name below is still defined with its current value. Reuse them; do not "
        "recompute or redefine them. Outputs no longer shown are in `history.cell(N)` "
        "and `history.search(pattern)`.",
    ]
    if note:
        lines.append(f"Note: {note}; names the running cell defined or changed since then "
                     "are missing or out of date below.")
    if names:
        lines.append(f"Defined names ({len(names)}):")
        lines += listing_lines(names)  # kernel_ext.describe: summaries, order, token budget
    else:
        lines.append("No user-defined names.")
    fragile = [n for n in names if n.get("restorable") is False]
    if fragile:
        lines.append(
            "These would NOT survive a kernel restart (not snapshotted); keep how to rebuild them:"
        )
        lines += [f"- {n['name']}: {n.get('reason') or 'not snapshotted'}" for n in fragile]
    if removed:
        lines.append("Removed since the previous state notice: " + ", ".join(removed))
    lines.append("</ipython_state>")
    return "\n".join(lines)
