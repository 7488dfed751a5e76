"""`perform_compaction`: the one core every trigger calls.

It plans, summarises, appends the `compaction` entry and then the relief notes
(rlm.compaction.notes: a hidden `ipython_state` notice from a fresh namespace listing when
a live kernel was given, and the controller's other providers). It never restarts, clears
or otherwise touches the kernel: the listing and the file-ops query are read-only.
"""

from __future__ import annotations

from typing import Any

from rlm.compaction.notes import ReliefNotes, default_notes
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
from rlm.protocols import Executor, SessionLog
from rlm.session.entries import CompactionEntry, CustomEntry


def perform_compaction(
    session: SessionLog,
    llm: LLM,
    settings: CompactionSettings,
    *,
    trigger: str,
    instructions: str | None = None,
    kernel: Executor | None = None,
    projection: Projection | None = None,
    notes: ReliefNotes | None = None,
) -> CompactionEntry | None:
    """Compact the current branch of `session`; None (and a hidden outcome entry) if skipped.

    A failed summary call is also recorded as a skipped outcome, and so is a summary that
    would not make the projected context smaller; nothing else is written then.
    `projection` is the loop's (see context_tokens), for an exact `tokens_before`;
    `notes`: the notes written after it (default: `<ipython_state>` only).
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
    return (notes or default_notes()).after(session, entry, branch, kernel)


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


def _outcome(session: SessionLog, trigger: str, reason: str) -> None:
    session.append(
        CustomEntry(
            custom_type="compaction_outcome",
            data={"trigger": trigger, "compacted": False, "reason": reason},
            display=True,
            content=None,  # a notice for the user, never sent to the model
        )
    )


def _file_ops(kernel: Executor | None) -> dict[str, Any] | None:
    if kernel is None or not hasattr(kernel, "file_ops"):
        return None
    try:
        ops = kernel.file_ops()
    except Exception:  # noqa: BLE001 - file lists are optional: never abort a compaction
        return None
    return ops if isinstance(ops, dict) else None
