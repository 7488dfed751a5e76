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
that cell and answered. When the chain ends with a later line of the corrected cell still
failing, its longest run of first statements that runs (past the line that failed first,
where the changes are) is offered with the value it binds printed and the error the next
line met: one mistake mended at a time.

What an offer rests on is checked in its trial, not assumed: a Series grouped by a
table's column must have that table's labels (`assert s.index.equals(t.index)`, or labels
among the table's when the cell computed it from that table alone), a join
must not repeat rows (`validate='many_to_one'`). A rewrite that fails its trial is not
offered; a cell that cannot be parsed as Python (magics) or that ran long before failing
is not tried again. Side effects outside the process (files a trial writes) are not
undone: a trial is a cell run, as with candidates.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass

from rlm.agent.codeparse import failed_line
from rlm.agent.rewrites import Rewrite, Scope, applies, for_error
from rlm.protocols import Trials

__all__ = ["Repair", "Scope", "applies", "note", "repaired", "tried"]

MAX_STEPS = 3  # changes chained on one cell
MAX_CODE_CHARS = 4000  # a longer cell is not offered again whole
MAX_FAILED_S = 20.0  # a cell that ran longer than this before failing is not tried again
TRIAL_TIMEOUT_S = 15.0  # one trial, at most (and never past the cell timeout)
BUDGET_S = 30.0  # every step's trials together, at most
MAX_PREFIXES = 4  # first-lines offers tried for a corrected cell whose later line fails


@dataclass(frozen=True)
class Repair:
    code: str  # the corrected cell, whole (or its first lines: `stopped`)
    changes: list[str]  # what changed, in order
    stopped: str = ""  # the error the next line of the corrected cell failed with


def repaired(code: str, error: str, scope: Scope, trials: Trials,
             timeout: float) -> Repair | None:
    """The failing cell corrected until it runs in a trial, or None."""
    changes: list[str] = []
    guards: list[str] = []
    seen = {error.strip().splitlines()[-1] if error.strip() else ""}
    failed_at = failed_line(error) or 1
    end = time.monotonic() + BUDGET_S
    for _ in range(MAX_STEPS):
        todo = [r for r in for_error(code, error, scope) if len(r.code) <= MAX_CODE_CHARS]
        left = end - time.monotonic()
        if not todo or left < 2.0:
            break
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
            break
        rewrite, error = step
        seen.add(error)
        code = rewrite.code
        changes.append(rewrite.change)
        guards += [rewrite.guard] if rewrite.guard else []
    if not changes:
        return None
    return _first_lines(code, changes, guards, error, failed_at, trials,
                        min(timeout, end - time.monotonic()))


def _first_lines(code: str, changes: list[str], guards: list[str], error: str,
                 failed_at: int, trials: Trials, timeout: float) -> Repair | None:
    """A corrected cell whose later line still fails: its longest run of first statements
    that runs in a trial and reaches past the line that failed first (where the changes
    are), with the value its last statement binds printed; offered with the error the
    next line met. The 1.5B model writes a cell with two mistakes: mended one at a time,
    the first offer gets it past the first (the task suite's groupby family: a Series
    grouped by a column, then `counts['units']` after `reset_index`)."""
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return None
    lines = code.splitlines(keepends=True)
    prefixes = []
    for k in range(len(body) - 1, 0, -1):
        last = body[k - 1]
        end = last.end_lineno or last.lineno
        if end < failed_at:
            break
        text = "".join(lines[:end]).rstrip("\n") + "\n"
        if isinstance(last, ast.Assign) and len(last.targets) == 1 \
                and isinstance(last.targets[0], ast.Name):
            text += f"print({last.targets[0].id})\n"
        prefixes.append(text)
    prefixes = prefixes[:MAX_PREFIXES]
    if not prefixes or timeout < 2.0:
        return None
    try:
        runs = trials.trial([_trial_code(Rewrite(t, ""), guards) for t in prefixes],
                            timeout=timeout / -(-len(prefixes) // 2), cap=1000)
    except Exception:  # noqa: BLE001 - a busy or dead kernel: no offer
        return None
    return next((Repair(t.rstrip("\n"), changes, error.strip().splitlines()[-1][:200])
                 for t, run in zip(prefixes, runs, strict=False)
                 if run.get("status") == "ok"), None)


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


def probed(code: str, trials: object, timeout: float) -> str | None:
    """What `code` prints when run on a fork of the kernel (a question the host asks of
    the data, never run in the kernel itself), or None: it failed, the executor cannot
    fork, or the kernel was busy or dead."""
    if not isinstance(trials, Trials):
        return None
    try:
        runs = trials.trial([code], timeout=timeout, cap=4000)
    except Exception:  # noqa: BLE001 - a busy or dead kernel: no answer
        return None
    run = runs[0] if runs else {}
    return str(run.get("output") or "") if run.get("status") == "ok" else None


def _trial_code(rewrite: Rewrite, guards: list[str]) -> str:
    """The rewrite with the checks it and the earlier steps rest on, run after it."""
    return "\n".join([rewrite.code, *guards, *([rewrite.guard] if rewrite.guard else [])])


def note(repair: Repair) -> str:
    """What the model reads under the error: the corrected cell, whole, or its first
    lines and the error the next one met."""
    if repair.stopped:
        return (f"\n[The first lines of your cell, corrected, ran without an error on a copy "
                f"of your variables ({'; '.join(repair.changes)}); the line after them then "
                f"failed with `{repair.stopped}`. Send these lines as your next cell, read "
                f"what they print, then mend the rest:\n```python\n{repair.code.rstrip()}"
                f"\n```]")
    return (f"\n[A corrected cell ran without an error on a copy of your variables "
            f"({'; '.join(repair.changes)}). Send it as your next cell:\n```python\n"
            f"{repair.code.rstrip()}\n```]")
