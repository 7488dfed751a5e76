"""A failing cell corrected from the data (issue 60).

After an error the data explains (a column that lives elsewhere or is spelled otherwise, a
name that does not exist, a reduction over text columns, a resample without a datetime
index, a literal the error says to replace), the host writes the failing cell again with
the change the namespace supports (rlm.agent.rewrites), runs each rewrite against a forked
copy of the namespace (`Trials.trial`: nothing a trial binds reaches the real kernel) and
offers the first that runs, whole, as the model's next cell. A rewrite that fails with a
different error is rewritten again for that error, up to MAX_STEPS changes (a resample
needs its date column parsed, then `numeric_only`, then the new spelling of 'M'). The
1.5B default model read "`'category'` is a column of the DataFrame `sales`... group the
DataFrame" and sent the failing cell five more times; given the corrected cell, it sent
that cell and answered.

What an offer rests on is checked in its trial, not assumed: a Series grouped by a
table's column must have that table's labels (`assert s.index.equals(t.index)`, or labels
among the table's when the cell computed it from that table alone), a join
must not repeat rows (`validate='many_to_one'`). A rewrite that fails its trial is not
offered; a cell that cannot be parsed as Python (magics) or that ran long before failing
is not tried again. Side effects outside the process (files a trial writes) are not
undone: a trial is a cell run, as with candidates.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rlm.agent.rewrites import Rewrite, Scope, applies, for_error
from rlm.protocols import Trials

__all__ = ["Repair", "Scope", "applies", "note", "repaired", "tried"]

MAX_STEPS = 3  # changes chained on one cell
MAX_CODE_CHARS = 4000  # a longer cell is not offered again whole
MAX_FAILED_S = 20.0  # a cell that ran longer than this before failing is not tried again
TRIAL_TIMEOUT_S = 15.0  # one trial, at most (and never past the cell timeout)
BUDGET_S = 30.0  # every step's trials together, at most


@dataclass(frozen=True)
class Repair:
    code: str  # the corrected cell, whole
    changes: list[str]  # what changed, in order


def repaired(code: str, error: str, scope: Scope, trials: Trials,
             timeout: float) -> Repair | None:
    """The failing cell corrected until it runs in a trial, or None."""
    changes: list[str] = []
    guards: list[str] = []
    seen = {error.strip().splitlines()[-1] if error.strip() else ""}
    end = time.monotonic() + BUDGET_S
    for _ in range(MAX_STEPS):
        todo = [r for r in for_error(code, error, scope) if len(r.code) <= MAX_CODE_CHARS]
        left = end - time.monotonic()
        if not todo or left < 2.0:
            return None
        rounds = -(-len(todo) // 2)  # two trials run at once (kernel_ext.trial.PARALLEL)
        try:
            runs = trials.trial([_trial_code(r, guards) for r in todo],
                                timeout=min(timeout, left / rounds), cap=1000)
        except Exception:  # noqa: BLE001 - a busy or dead kernel: no offer, the note stands
            return None
        step = None
        for rewrite, run in zip(todo, runs, strict=False):
            if run.get("status") == "ok":
                return Repair(rewrite.code, [*changes, rewrite.change])
            err = str(run.get("error") or "")
            if step is None and run.get("status") == "error" and err not in seen \
                    and not err.startswith("AssertionError"):  # a failed check ends it
                step = (rewrite, err)
        if step is None:
            return None
        rewrite, error = step
        seen.add(error)
        code = rewrite.code
        changes.append(rewrite.change)
        guards += [rewrite.guard] if rewrite.guard else []
    return None


def tried(rewrites: list[Rewrite], trials: object, timeout: float) -> Repair | None:
    """The first of `rewrites` that runs whole, its guard included, in one round of trials
    (a cell recast for the question it answers: rlm.agent.policy.recast), or None: no
    rewrite ran, the executor cannot fork (`%%rlm`), or the kernel was busy or dead."""
    todo = [r for r in rewrites if len(r.code) <= MAX_CODE_CHARS]
    if not todo or not isinstance(trials, Trials):
        return None
    try:
        runs = trials.trial([_trial_code(r, []) for r in todo], timeout=timeout, cap=1000)
    except Exception:  # noqa: BLE001 - a busy or dead kernel: no offer
        return None
    return next((Repair(r.code, [r.change]) for r, run in zip(todo, runs, strict=False)
                 if run.get("status") == "ok"), None)


def _trial_code(rewrite: Rewrite, guards: list[str]) -> str:
    """The rewrite with the checks it and the earlier steps rest on, run after it."""
    return "\n".join([rewrite.code, *guards, *([rewrite.guard] if rewrite.guard else [])])


def note(repair: Repair) -> str:
    """What the model reads under the error: the corrected cell, whole."""
    return (f"\n[A corrected cell ran without an error on a copy of your variables "
            f"({'; '.join(repair.changes)}). Send it as your next cell:\n```python\n"
            f"{repair.code.rstrip()}\n```]")
