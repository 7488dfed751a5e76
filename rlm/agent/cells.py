"""Running the cells of a reply, in order, and each cell: checks before it runs, execution on a worker thread, the
result the model reads (notices, the policy's note), and the session entry.

Used by the loop (rlm.agent.loop) through `CellHost`, the part of the Agent a cell needs.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Generator
from typing import Any, Protocol

from rlm.agent import notices, repair, searched
from rlm.agent.children import Watchers
from rlm.agent.codeparse import overwritten_inputs
from rlm.agent.context_files import input_previews_of, question_names
from rlm.agent.policy import AnswerPolicy
from rlm.agent.policy.partial import filters_of, is_empty
from rlm.agent.progress import OutputStream
from rlm.agent.recursion import Recursion
from rlm.agent.runner import Work
from rlm.agent.runstate import RunState
from rlm.config import Config
from rlm.events import CellFinished, CellStarted, Event, KernelRestarted, Notice
from rlm.kernel.types import CellResult
from rlm.llm.types import ToolCall
from rlm.protocols import Executor, SessionLog, Trials, ValueLookup, started
from rlm.session.branch import user_questions
from rlm.session.entries import MessageEntry, new_id

NOT_RUN_UNSEEN = ("Not run: this block comes after a block whose output you had not seen when "
                  "you wrote it (that output is above). Write your next cell from that output.")


class ChildWatch(Protocol):
    """The part of the children registry (rlm.agent.children.Children) a running cell
    uses: who is shown the children's progress."""

    watchers: Watchers


class CellHost(Protocol):
    session: SessionLog
    config: Config
    executor: Executor | None
    answers: AnswerPolicy
    state: RunState
    on_cell_output: Callable[[Any], None] | None
    recursion: Recursion  # an interrupted cell's batched prompts are dropped

    @property
    def children(self) -> ChildWatch: ...  # their progress is shown while a cell runs

    def input_names(self) -> set[str]: ...

    def in_thread(self, fn: Work, *, cell: bool = False) -> Generator[Event, None, Any]: ...


def run_cells(host: CellHost, calls: list[ToolCall], reply: str) -> Generator[Event, None, None]:
    """Run the cells of the reply logged as `reply` (its entry id) in order until one calls
    final() (`host.state.final`) or the run is stopped; the rest are recorded as not run,
    with the reason."""
    blocked = 0  # cells the advisor's blocker kept from running: said once, after
    for i, call in enumerate(calls):
        if host.state.stopping:
            record_skipped(host, call, "not run: the turn was interrupted")
            continue
        if reply in host.state.blockers:  # a blocker about this reply (rlm.app.advising)
            record_skipped(host, call, "not run: the advisor stopped this reply (its "
                           "advisory follows)")
            blocked += 1
            if i == len(calls) - 1:
                yield Notice(f"{blocked} more cell(s) of this reply not run: the advisor's "
                             "blocker stopped the reply", "warning")
            continue
        showed = yield from run_cell(host, call, i, reply)
        if host.state.final is not None:
            for rest in calls[i + 1:]:
                record_skipped(host, rest, "not run: final() was called")
            return
        if call.synthetic and i + 1 < len(calls) and showed:
            # the later fences were written before this output was seen (small models
            # add "if that fails, try ..." blocks): they wait for the model's next reply
            # the reason once: a degenerate reply can hold dozens of fences
            for k, rest in enumerate(calls[i + 1:]):
                record_skipped(host, rest, NOT_RUN_UNSEEN if k == 0 else "Not run.")
            yield Notice(f"{len(calls) - i - 1} more code block(s) in the reply not run: "
                         "written before the output above was seen")
            return


def executor_of(host: CellHost) -> Executor:
    return started(host.executor)


def run_cell(host: CellHost, call: ToolCall, index: int,
             reply: str) -> Generator[Event, None, bool]:
    """Run `call`'s code, a cell of the reply logged as `reply`, (or record why not) and
    log its result. Returns whether the model saw something new: the cell failed or
    printed."""
    code = call.arguments.get("code")
    if not isinstance(code, str):
        # a garbled tool call is the model's mistake: tell it, run nothing
        raw = call.arguments.get("_invalid_arguments", call.arguments)
        why = (f"Your python tool call could not be run: its arguments must be JSON "
               f'{{"code": "<python source>"}}; got {str(raw)[:300]!r}.')
        record_skipped(host, call, why, status="error")
        host.answers.cell_not_run()
        yield CellFinished("", "error", why, 0.0, None)
        return True
    clobbered = overwritten_inputs(code, host.input_names())
    if clobbered:  # not an input retyped exactly as its whole preview (the same value)
        clobbered = overwritten_inputs(code, set(clobbered),
                                       input_previews_of(host.session.branch()))
    if clobbered:
        names = ", ".join(f"`{n}`" for n in clobbered)
        why = (f"Not run: this cell assigns a literal to {names}, which already holds your "
               f"input (the preview you saw is only its start). Use the variable as it is: "
               f"search it or slice it.")
        record_skipped(host, call, why, status="error")
        host.answers.cell_not_run(code)
        yield CellFinished(code, "error", why, 0.0, None)
        return True
    yield CellStarted(code, index)
    pre_notice = ""
    ex = executor_of(host)
    if not ex.is_alive():
        report = ex.restart("the kernel was not running")
        pre_notice = notices.restarted("was found dead before this cell", report)
    result: CellResult = yield from _execute(host, code)
    entry_id = new_id()
    verdict = host.answers.cell(code, result, entry_id)
    content = pre_notice + notices.cell_content(result) + _error_note(host, result, code) \
        + _shrunk_input_note(host, result) + verdict.note + (
            _empty_filter_note(host, result, code) or _missed_search_note(host, result, code))
    # a blocker's interrupt is the advisor's, not a bare KeyboardInterrupt (rlm.app.advising)
    stopped_by = host.state.blockers.get(reply) if result.status == "interrupted" else None
    if stopped_by is not None:
        content += f"\n[This cell was stopped by the advisor (blocker): {stopped_by.strip()}]"
    host.session.append(MessageEntry(
        id=entry_id, cell=result.to_dict(),
        message={"role": "tool", "tool_call_id": call.id, "name": "python", "content": content}),
        durable=False)
    host.session.sync_soon()  # on disk before the next model request (rlm.durability)
    yield CellFinished(code, result.status, content, result.duration_s, result)
    if stopped_by is not None:
        yield Notice(f"the advisor stopped this cell (blocker): {stopped_by.strip()[:400]}",
                     "warning")
    if result.restart is not None:
        yield KernelRestarted(result.died_cause or result.status, list(result.restart.restored),
                              [f["name"] for f in result.restart.failed + result.restart.skipped])
    return not result.ok or bool(result.shaped.strip())


def _error_note(host: CellHost, result: CellResult, code: str) -> str:
    """After an error a small model misreads, what it means here (rlm.agent.notices): a
    NameError, the names that exist, inputs first; a KeyError, where that column is or the
    columns that exist; a reduction over text columns, which columns are numbers; an input
    file's name written as an attribute of its variable (`app.log`), that the variable is
    the file; `KeyError: 0` from `[0]`, that pandas read a label, not a position. Then,
    where the data explains the error, the cell corrected and tried (rlm.agent.repair)."""
    if result.status != "error":
        return ""
    plain = notices.file_attribute_note(result.shaped, code, host.input_names()) \
        or notices.position_note(result.shaped)
    if plain or host.executor is None:
        return plain
    missing = notices.missing_name(result.shaped)
    key = None if missing is not None else notices.missing_key(result.shaped)
    op = None if missing is not None or key is not None else notices.text_reduction(result.shaped)
    if missing is None and key is None and op is None and not repair.applies(result.shaped):
        return ""
    try:
        rows = host.executor.list_namespace(timeout=5.0).get("names", [])
    except Exception:  # noqa: BLE001 - a busy or dead kernel: the error alone still helps
        return ""
    inputs = host.input_names()
    ex = host.executor
    where = (lambda k: ex.where_value(k)) if isinstance(ex, ValueLookup) else None
    if missing is not None:
        note = notices.existing_names(missing, rows, inputs)
    elif key is not None:
        note = notices.key_note(str(key), rows, inputs, result.shaped, where)
    elif op is not None:
        note = notices.reduction_note(str(op), rows, inputs)
    else:
        note = ""
    return note + _repair_note(host, result, code, repair.Scope.of(
        notices.frame_pairs(rows, inputs), [str(r.get("name") or "") for r in rows], inputs,
        where))


def _repair_note(host: CellHost, result: CellResult, code: str, scope: repair.Scope) -> str:
    """The failing cell corrected from the data and run on a forked copy of the namespace
    (rlm.agent.repair), offered whole: the 1.5B model ignores "group the DataFrame" and
    copies a cell it is given."""
    ex = host.executor
    if not isinstance(ex, Trials) or result.duration_s > repair.MAX_FAILED_S:
        return ""
    timeout = min(repair.TRIAL_TIMEOUT_S, host.config.cell_timeout)
    found = repair.repaired(code, result.shaped, scope, ex, timeout)
    return repair.note(found) if found is not None else ""


def _shrunk_input_note(host: CellHost, result: CellResult) -> str:
    """After a cell that read a file and rebound an input table to fewer rows than it was
    loaded with (`pd.read_csv('airports.csv', nrows=10)` into `airports`): how many rows it
    holds now and held then. The 1.5B model re-read a loaded table with nrows=10 and
    answered "the highest airport" from those ten rows."""
    rebound = set(result.binds or ()) & host.input_names() if result.ok else set()
    if not rebound or not result.files_read or host.executor is None:
        return ""
    loaded = notices.loaded_rows(host.session.branch())
    if not rebound & set(loaded):
        return ""
    try:
        rows = host.executor.list_namespace(timeout=5.0).get("names", [])
    except Exception:  # noqa: BLE001 - a busy or dead kernel: no note
        return ""
    shrunk = notices.shrunk_inputs(rebound, loaded, rows)
    host.answers.inputs_read(rebound & set(loaded), shrunk)  # an answer on them is refused once
    return notices.shrunk_note(shrunk)


def _missed_search_note(host: CellHost, result: CellResult, code: str) -> str:
    """After a cell whose search of a text found nothing (rlm.agent.searched): the lines
    of the kernel's texts that hold the names the question gives, as written."""
    ex = host.executor
    if not isinstance(ex, ValueLookup) or result.status not in ("ok", "error") \
            or not searched.missed(code, result.ok, result.shaped):
        return ""
    asked = user_questions(host.session.branch())
    terms = question_names(asked[-1]) if asked else []
    if not terms:
        return ""
    try:
        return searched.note(ex.where_text(terms))
    except Exception:  # noqa: BLE001 - a busy or dead kernel: the output alone stands
        return ""


def _empty_filter_note(host: CellHost, result: CellResult, code: str) -> str:
    """After a cell whose filter selected nothing (an empty result, rlm.agent.policy.
    partial) on a text column compared with a literal: how that column is written and
    which values hold the literal. The 1.5B model filtered `date.str.startswith('2009')`
    on dates written 'Jan 1 2009', was told to look at the values, printed them, and
    answered with the printout."""
    ex = host.executor
    if not result.ok or not isinstance(ex, ValueLookup) or not is_empty(result.shaped):
        return ""
    filters = filters_of(code)
    if not filters:
        return ""
    try:
        found = ex.how_written([(t, c, lit) for t, c, lit, _ in filters])
    except Exception:  # noqa: BLE001 - a busy or dead kernel: the empty-result note stands
        return ""
    return notices.written_note(found, {(t, c, lit): op for t, c, lit, op in filters})


def _execute(host: CellHost, code: str) -> Generator[Event, None, CellResult]:
    timeout = host.config.cell_timeout
    ex = executor_of(host)
    if getattr(ex, "run_in_caller_thread", False):  # optional Executor flag (notebook)
        return ex.execute(code, timeout=timeout, on_output=host.on_cell_output)
        yield  # pragma: no cover - makes this a generator

    def run(emit: Callable[[Event], None]) -> CellResult:
        with OutputStream(emit, host.session.dir, host.on_cell_output) as stream, \
                host.children.watchers.watching(emit):
            result = ex.execute(code, timeout=timeout, on_output=stream)
        if result.status in ("interrupted", "timeout", "died"):
            host.recursion.abandon()  # its batched prompts still queued leave the pool
        return result

    return (yield from host.in_thread(run, cell=True))


def read_var(host: CellHost, name: str) -> str:
    """FINAL_VAR(name): the variable's value as text (not logged as a cell)."""
    res = executor_of(host).execute(f"print(str({name}), end='')", timeout=30)
    return res.shaped if res.ok else f"[FINAL_VAR: {name} is not defined]"


def record_skipped(host: CellHost, call: ToolCall, why: str, status: str = "interrupted") -> None:
    host.session.append(MessageEntry(
        message={"role": "tool", "tool_call_id": call.id, "name": "python", "content": why},
        cell=CellResult(status=status, shaped=why).to_dict()))


def kill_kernel(executor: Executor | None) -> None:
    """SIGKILL the kernel process (never the notebook's own: the host's pid)."""
    pid = executor.pid if executor is not None else None
    if pid and pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
