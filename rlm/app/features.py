"""Entry point x feature: what each entry point offers, decided in ONE place (`GAPS`).

A feature an entry point lacks is refused (`Gap.refused`: its kernel calls fail with the
message, and the user gets it as a Notice at the start of the run) or offered in part
(the user is told the limit). `feature_table()` prints the table for docs and tests.
`answer_every_method` gives the refused ones their bridge handlers (by the feature each
kernel_ext.contract method belongs to) and refuses to build an agent that would leave a
declared method unanswered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel_ext import contract
from rlm.errors import RlmError

ENTRY_POINTS = ("run", "chat", "resume", "worker", "notebook", "run_task", "child", "compact")
FEATURES = ("compaction", "goals", "schedules", "autonomous", "snapshot", "advisor", "checkpoint")


@dataclass(frozen=True)
class Gap:
    """A feature an entry point lacks (`refused`: its kernel calls fail with `message`) or
    offers only in part (`refused=False`: the user is told the limit)."""

    message: str
    refused: bool = True


# Every feature is offered at every entry point except these. The one place to look.
GAPS: dict[str, dict[str, Gap]] = {
    "notebook": {
        "snapshot": Gap(
            "%%rlm runs in your notebook's own kernel: rlm does not snapshot it, so nothing is "
            "restored after a kernel restart (restart it from JupyterLab and rerun your cells)",
            refused=True),
        "schedules": Gap(
            "heartbeats and cron jobs of a %%rlm session fire only while a %%rlm cell runs "
            "(the notebook has no worker)", refused=False),
    },
    "child": {
        "goals": Gap("goals belong to the top-level session: an rlm_query child cannot read "
                     "or change them; report back to the parent instead"),
        "schedules": Gap("heartbeats and cron jobs belong to the top-level session: an "
                         "rlm_query child cannot create them"),
        "advisor": Gap("the advisor watches the top-level run: a child's cells are its "
                       "parent's to judge", refused=False),
        "checkpoint": Gap("a child's run is short: its parent's checkpoint covers its answer "
                          "(history.checkpoint() reads the parent's)", refused=False),
    },
    # `rlm compact SESSION`: the session's own model and window, summarising only
    "compact": {
        feature: Gap(f"rlm compact only summarises the log: no turn runs, so no {what}")
        for feature, what in (("goals", "goal continues"), ("schedules", "job fires"),
                              ("autonomous", "continuation"),
                              ("snapshot", "kernel starts (the next run restores it)"),
                              ("advisor", "run to watch"))
    },
}


# the entry points with nobody to tell at start: a child's user is its parent's model (it
# reads the child's answer), and `rlm compact` runs no turn
SILENT_ENTRIES = ("child", "compact")


def tells_user(entry: str) -> bool:
    """Whether notices at the start of a run (gaps, rule-file problems, a window guessed)
    reach anyone at `entry`."""
    return entry not in SILENT_ENTRIES


def gap(entry: str, feature: str) -> Gap | None:
    if entry not in ENTRY_POINTS or feature not in FEATURES:
        raise ValueError(f"unknown entry point/feature {entry!r}/{feature!r}")
    return GAPS.get(entry, {}).get(feature)


def feature_table() -> dict[str, dict[str, str]]:
    """entry point -> feature -> "yes" | "partial: ..." | "no: ..." (docs and tests)."""
    out: dict[str, dict[str, str]] = {}
    for e in ENTRY_POINTS:
        row = {}
        for f in FEATURES:
            g = gap(e, f)
            row[f] = "yes" if g is None else ("no: " if g.refused else "partial: ") + g.message
        out[e] = row
    return out


def refuse(g: Gap | None) -> Callable[[dict[str, Any]], Any]:
    """A bridge handler that fails with the gap's message."""
    message = g.message if g is not None else "not available here"

    def refused(params: dict[str, Any]) -> Any:
        raise RlmError(message)

    return refused


Handler = Callable[[dict[str, Any]], Any]


def answer_every_method(handlers: dict[str, Handler], entry: str) -> None:
    """Each bridge method kernel_ext.contract declares answered for `entry`: a method of a
    feature `entry` lacks (a refused gap) fails with the gap's message; any other declared
    method without a handler, or a handler for an undeclared one, is a wiring error, raised
    here (at build time) naming it, before any kernel starts."""
    for method in contract.METHODS:
        g = GAPS.get(entry, {}).get(method.feature)
        if g is not None and g.refused:
            handlers[method.name] = refuse(g)
    missing = [m.name for m in contract.METHODS if m.name not in handlers]
    if missing:
        raise RlmError(f"cannot start {entry!r}: no handler for the bridge method(s) "
                       f"{', '.join(missing)} (declared in kernel_ext.contract.METHODS)")
    undeclared = sorted(set(handlers) - set(contract.BY_NAME))
    if undeclared:
        raise RlmError(f"cannot start {entry!r}: a handler for {', '.join(undeclared)}, "
                       "which kernel_ext.contract.METHODS does not declare")
