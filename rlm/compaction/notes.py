"""The notes written after a relief (issue 59, S4), from providers behind one interface.

A relief (a summary, a rebuild from the checkpoint, a tier's prune or shake) takes entries
out of what the model is sent; some live state must then be told again. Each provider is
one `ReliefNote`: the custom type of its notes, whether its note supersedes its previous
one (only the newest of such a kind is projected: rlm.session.context.SUPERSEDED_CUSTOM,
which the projection, a pure function of the log, reads; `ReliefNotes.add` refuses a
provider that disagrees with it), after which reliefs it writes, and `write`, which
appends its note. `ReliefNotes.after` is the one place the notes are written; every
relief of the compaction controller and `perform_compaction` go through it.

- `<ipython_state>` (`IPythonState`, here): after a compaction (a summary or a rebuild),
  the live kernel's names from a fresh, read-only listing; supersedes. When the listing
  fails (dead kernel, busy past the timeout, a malformed reply) nothing is said about
  names: silence rather than something false, and the compaction stands.
- `<children_state>` (rlm.agent.child_report.ChildrenState): after any relief, the
  children at work or ended unread; supersedes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from kernel_ext.describe import listing_lines
from rlm.protocols import Executor, SessionLog
from rlm.session.branch import custom_entries
from rlm.session.context import SUPERSEDED_CUSTOM
from rlm.session.entries import CompactionEntry, CustomEntry, Entry

LISTING_TIMEOUT_S = 5.0
COMPACTION, RELIEF = "compaction", "relief"  # after a summary or rebuild / after any relief
E = TypeVar("E", bound=Entry)


class ReliefNote(Protocol):
    kind: str  # the custom_type of its notes
    supersedes: bool  # its newest note is the only one projected
    after: str  # COMPACTION or RELIEF

    def write(self, session: SessionLog, before: Sequence[Entry], kernel: Executor | None) -> None:
        """Append its note (or none); `before`: the branch before the relief."""


class ReliefNotes:
    """The providers of one session's relief notes, in the order their notes are written."""

    def __init__(self, providers: Sequence[ReliefNote] = ()) -> None:
        self.providers: list[ReliefNote] = []
        for p in providers:
            self.add(p)

    def add(self, provider: ReliefNote) -> None:
        if provider.supersedes != (provider.kind in SUPERSEDED_CUSTOM):
            raise ValueError(f"the {provider.kind!r} note says supersedes={provider.supersedes}"
                             " but the projection (rlm.session.context.SUPERSEDED_CUSTOM) "
                             "disagrees: declare it there")
        self.providers.append(provider)

    def after(self, session: SessionLog, entry: E | None, before: Sequence[Entry],
              kernel: Executor | None) -> E | None:
        """The notes that follow the relief `entry` (None: no relief, no note); `entry`."""
        if entry is not None:
            compaction = isinstance(entry, CompactionEntry)
            for p in self.providers:
                if compaction or p.after == RELIEF:
                    p.write(session, before, kernel)
        return entry


class IPythonState:
    """`<ipython_state>` after a compaction: the live kernel's names (when it answers)."""

    kind, supersedes, after = "ipython_state", True, COMPACTION

    def write(self, session: SessionLog, before: Sequence[Entry], kernel: Executor | None) -> None:
        if kernel is not None:
            state = ipython_state_entry(kernel, _previous_names(before))
            if state is not None:
                session.append(state)


def default_notes() -> ReliefNotes:
    """The notes a compaction writes with no controller (`rlm compact`, a test)."""
    return ReliefNotes([IPythonState()])


def _previous_names(branch: Sequence[Entry]) -> set[str] | None:
    for e in reversed(custom_entries(branch, "ipython_state")):  # no scan of a long log
        data = e.data if isinstance(e.data, dict) else {}
        return {n["name"] for n in data.get("names", []) if isinstance(n, dict)}
    return None



# ---------------------------------------------------------------- <ipython_state> text


def ipython_state_entry(kernel: Executor | None, previous_names: set[str] | None) -> CustomEntry | None:
    """The hidden notice from a live listing; None when the kernel cannot answer."""
    if kernel is None:
        return None
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
