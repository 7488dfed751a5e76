"""What the parent and its user are told about its children (issue 58, item 9).

- `<children_state>`: one live note for the model (a hidden `children_state` entry; only
  the newest is projected, rlm.session.context.SUPERSEDED_CUSTOM, the older ones stay in
  the log). Each note states the whole picture: every child still at work, every ended
  child whose outcome the model has not been given.
- Read marks: `child_read` entries record which children's results the parent's kernel
  was given (a handle's `.result()`, `rlm_gather`, `rlm_query`), or whose cancellation it
  was told, so a session opened again lists only the ones truly unread.
- Cancellations: a child still at work when its parent's run ends (the agent closes) or
  when the user presses Ctrl-C is cancelled; the user is shown each one (name, task, turns
  and tokens spent, whether its partial work is kept) and the model is told in the next
  `<children_state>` note, once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from rlm.agent.recursion import Recursion
from rlm.compaction.notes import RELIEF
from rlm.protocols import Executor, SessionLog
from rlm.session.branch import custom_entries
from rlm.session.entries import CustomEntry

STATE_ENTRY = "children_state"
READ_ENTRY = "child_read"
ENDED = ("done", "failed", "cancelled")
AT_CLOSE = "its parent's run ended while it was at work"
AT_CTRL_C = "the user pressed Ctrl-C while it was at work"
AT_STOP = "its parent's run was stopped while it was at work"


class ChildView(Protocol):
    """What is told of one child (rlm.agent.children.ChildRun, whose module imports this
    one): who it is, how it ended, its working copy, and its read marks."""

    id: str
    name: str
    task: str
    state: str
    error: str | None
    cancel_why: str | None
    isolation: str | None
    isolated: dict[str, Any] | None
    read: bool
    told: bool
    done: threading.Event

    def view(self, *, result: bool = True) -> dict[str, Any]: ...


class NoteOwner(Protocol):
    """The agent whose model is told (rlm.agent.loop.Agent): its notes go to its log
    through its handlers' append lock."""

    recursion: Recursion


class Registry(Protocol):
    """What the notes read of one agent's registry (rlm.agent.children.Children)."""

    ended: threading.Condition  # guards the flags (read, told)

    @property
    def runs(self) -> Mapping[str, ChildView]: ...

    @property
    def agent(self) -> NoteOwner: ...

    def after_compaction(self) -> None: ...


def read_ids(branch: Sequence[Any]) -> set[str]:
    """The children whose outcome the parent was given, as the log records it."""
    out: set[str] = set()
    for e in custom_entries(branch, READ_ENTRY):
        ids = e.data.get("ids") if isinstance(e.data, dict) else None
        out.update(i for i in ids or () if isinstance(i, str))
    return out


def read_entry(ids: Iterable[str]) -> CustomEntry:
    return CustomEntry(custom_type=READ_ENTRY, data={"ids": sorted(ids)}, display=False,
                       content=None)


def spent(view: dict[str, Any]) -> str:
    return f"{int(view.get('turns') or 0)} turns, {int(view.get('tokens') or 0):,} tokens"


def partial_work(run: ChildView) -> str:
    """Whether a cancelled child's partial work is kept, and where."""
    where = f"children/{run.id}"
    iso = run.isolated or {}
    if run.isolation is None:
        return (f"partial work kept: files it wrote in the shared working directory stay; "
                f"its log and kernel snapshot are in {where}")
    if run.isolated is None:  # still stopping: an unfinished child's changes never apply
        return (f"partial work kept, not applied: its working copy's changes stay under "
                f"{where}")
    if iso.get("outcome") == "skipped":
        return "no partial work: it changed no file on its working copy"
    kept = iso.get("patch") or iso.get("copy")
    if kept:
        return f"partial work kept, not applied: {kept}"
    return (f"partial work not kept: its working copy ({run.isolation}) was not brought "
            "back")


def cancelled_line(run: ChildView) -> str:
    """One cancelled child, for the user."""
    v = run.view(result=False)
    return (f"child {run.name} cancelled ({run.cancel_why}): {run.task[:120]!r}; "
            f"{spent(v)}; {partial_work(run)}")


def refused_line(run: ChildView) -> str:
    """A child whose changes to the parent's memory were refused, for the user."""
    refused = (run.isolated or {}).get("refused") or []
    return (f"child {run.name}: {len(refused)} change(s) to the project memory refused "
            f"(a child never changes .agent/): {', '.join(refused[:10])}")


def cancelled_record(run: ChildView) -> dict[str, Any]:
    """One cancelled child, for `--json`."""
    v = run.view(result=False)
    return {"name": run.name, "id": run.id, "task": run.task, "why": run.cancel_why,
            "turns": v["turns"], "tokens": v["tokens"], "partial_work": partial_work(run)}


def state_note(runs: Sequence[ChildView], head: str) -> CustomEntry:
    """The `<children_state>` note about `runs`."""
    lines = ["<children_state>", head]
    for r in runs:
        v = r.view(result=False)
        if r.state == "cancelled" and r.cancel_why:
            what = f"cancelled: {r.cancel_why}; {spent(v)}; {partial_work(r)}"
        elif r.state in ("failed", "cancelled") and r.error:
            what = f"ended, {r.error}"
        elif r.state in ENDED:
            what = "ended, result not read yet: call .result() on its handle"
        else:
            what = f"{r.state}, {v['turns']} turns so far"
        lines.append(f"- {r.name} ({r.state}; {what}): {r.task[:160]}")
    lines.append("</children_state>")
    return CustomEntry(custom_type=STATE_ENTRY,
                       data={"children": [r.view(result=False) for r in runs]},
                       display=False, content="\n".join(lines))


class Notes:
    """What one agent's registry (rlm.agent.children.Children) tells its model: the live
    `<children_state>` note and the read marks. Thread-safe: handlers answer from a pool,
    and the registry's `ended` condition guards the flags."""

    def __init__(self, children: Registry) -> None:
        self.children = children

    def open_runs(self) -> list[ChildView]:
        """Every child at work, and every ended one whose outcome the model has not had."""
        return [r for r in self.children.runs.values() if r.state not in ENDED or not r.read]

    def tell(self, runs: Sequence[ChildView], head: str) -> None:
        """The live `<children_state>` note about `runs` (none: no note); it supersedes the
        previous one."""
        if runs:
            self.children.agent.recursion.append(state_note(runs, head))

    def tell_cancelled(self) -> None:
        """Children cancelled with the parent's run that have ended: the model is told
        once, in a note that also names the others still open; being told counts as
        reading their outcome."""
        with self.children.ended:
            news = [r for r in self.children.runs.values()
                    if r.cancel_why and not r.told and r.done.is_set()]
            for r in news:
                r.told = True
        if not news:
            return
        others = [r for r in self.open_runs() if r not in news]
        self.tell(news + others, "Children you spawned were cancelled (what each did, and "
                  "whether its partial work is kept); the others still open:")
        self.mark_read(news)

    def mark_read(self, runs: Sequence[ChildView]) -> None:
        """The parent was given these children's outcomes: logged (`child_read`), so a
        session opened again does not list them as unread."""
        news = []
        with self.children.ended:
            for r in runs:
                if r.done.is_set() and not r.read:
                    r.read = True
                    news.append(r.id)
        if news:
            self.children.agent.recursion.append(read_entry(news))


class ChildrenState:
    """The `<children_state>` relief note (rlm.compaction.notes): after any relief, the
    children still at work or ended unread are told again (the note they were told in may
    have been taken out); the newest note supersedes the previous one."""

    kind, supersedes, after = STATE_ENTRY, True, RELIEF

    def __init__(self, children: Registry) -> None:
        self.children = children

    def write(self, session: SessionLog, before: Sequence[Any], kernel: Executor | None) -> None:
        self.children.after_compaction()
