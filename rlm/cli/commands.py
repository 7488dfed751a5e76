"""The work behind `rlm run|chat|resume|sessions|log|tree|state|export|compact|demo`."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from rlm import app
from rlm.agent.child_report import cancelled_line, cancelled_record
from rlm.agent.result import RunResult
from rlm.cli.common import both, live_view, open_readonly, options_from_args, reading_config
from rlm.cli.render import Renderer, input_summaries, print_json, terminal_safe
from rlm.compaction.tiers import RELIEF_CUSTOM, relief_line
from rlm.config import load_config
from rlm.errors import RlmError
from rlm.events import first_run
from rlm.ledger import spent_line
from rlm.outcome import RunOutcome
from rlm.protocols import SessionLog
from rlm.session.entries import CustomEntry, call_code
from rlm.session.store import SessionStore

if TYPE_CHECKING:
    from rlm.agent.loop import Agent

# ------------------------------------------------------------------ running
Prompt = str | None | Callable[[SessionLog], str | None]


def run_cli(run: app.SessionRun, args: argparse.Namespace, prompt: Prompt) -> int:
    """Enter the run, load its inputs, drive one prompt with rendering (schedules fire
    meanwhile), leave it; print the --json summary or the end-of-run line; return the exit
    code. `prompt` may be computed from the opened session (`rlm resume`). With --json a
    failure still prints its JSON object (`"reason": "error"`) before the error line."""
    quiet = bool(getattr(args, "json", False))
    render = Renderer(quiet=quiet)
    started = time.monotonic()
    run.on_phase = render.phase  # never a silent start: the kernel, its snapshot's size
    try:
        with run:
            session, agent = run.session, run.agent
            assert session is not None and agent is not None
            render.restored(run.restored)
            text = prompt(session) if callable(prompt) else prompt
            render.inputs_phase(app.pending_inputs(agent, run.options))
            for line in run.prepare(text):
                print(f"rlm: {line}", file=sys.stderr)
            render.header(agent.llm.spec, session, input_summaries(agent),
                          task=text or "(continue where it stopped)")
            render.continue_turns(session)
            live = live_view(args, run)
            with terminate_ends_the_run(agent), contextlib.ExitStack() as done:
                on_event: Callable[[Any], None] = render
                if live is not None:
                    done.callback(live.close)
                    on_event = both(render, live)
                events = run.drive(text, on_event)
            note = app.schedules_note(session)
    except RlmError as e:
        render.close()
        if quiet:  # a --json run prints its object whatever happened
            kept = run.kept()
            print_json(RunResult(
                session_id=run.session.id if kept and run.session else None,
                session_path=str(run.session.path) if kept and run.session else None,
                final=None, turns=0, reason="error", model=run.model_spec,
                duration_s=round(time.monotonic() - started, 3), error=str(e)).to_json())
        raise
    render.close()
    result = RunResult.from_events(session, first_run(events), model=agent.llm.spec,
                                   duration_s=time.monotonic() - started).describe_agent(agent)
    cancelled = agent.children.cancelled  # with the run: cancelled as the agent closed
    if quiet:
        out = result.to_json()
        if note:
            out["schedules"] = note
        if cancelled:
            out["cancelled_children"] = [cancelled_record(r) for r in cancelled]
        print_json(out)
    else:
        render.session_line(session)
        if note:
            render.console.print(note, style="yellow", markup=False)
        for r in cancelled:
            render.console.print(terminal_safe(cancelled_line(r)), style="yellow",
                                 markup=False)
    return result.exit_code


# `rlm run` exit codes: the run's outcome (rlm.outcome: 0 a verified answer, 3 no answer
# or an unmet goal, 5 an answer that no successful cell supports); 4 the session is busy
# (SessionBusy)


@contextlib.contextmanager
def terminate_ends_the_run(agent: Agent) -> Iterator[None]:
    """SIGTERM (`timeout`, a CI runner, a pod being stopped) ends the run as the stop
    button does: the running cell is interrupted, the run ends `interrupted`, the kernel is
    stopped with its snapshot and a --json run still prints its object (before, the default
    action killed the process on the spot, with nothing printed). Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_run(args: argparse.Namespace) -> int:
    options, notes = app.with_named_files(args.task, options_from_args(args))
    for note in notes:
        print(f"rlm: {note}", file=sys.stderr)
    if args.detach:
        if args.live:
            raise RlmError("--live shows a run this process drives; for a detached one: "
                           "`rlm run ... --detach`, then `rlm attach SESSION --follow --live "
                           "NB.ipynb`")
        session, pid = app.start_detached(args.task, options)
        if args.json:
            print_json({"session_id": session.id, "session_path": str(session.path),
                        "worker_pid": pid})
        else:
            print(f"session {session.id} running in worker {pid}; `rlm attach {session.id}` "
                  "to follow")
        return 0
    return run_cli(app.SessionRun.new("run", args.task, options), args, args.task)


def cmd_resume(args: argparse.Namespace) -> int:
    if getattr(args, "detach", False):
        return _resume_detached(args)
    run = app.SessionRun.open("resume", args.session, options_from_args(args),
                              leaf=args.from_entry)
    return run_cli(run, args, lambda s: app.resume_prompt(s, args.task, args.from_entry))


def _resume_detached(args: argparse.Namespace) -> int:
    """`rlm resume SESSION [TASK] --detach`: the worker runs with the session's recorded
    options, so run flags given here would be silently dropped: refused instead."""
    given = options_from_args(args)
    if given.overrides or args.from_entry or given.gate or given.goal or args.live:
        raise RlmError("`rlm resume --detach` continues with the session's recorded options; "
                       "leave out the run flags (or resume in the foreground to change them)")
    sid, pid = app.resume_detached(args.session, args.task)
    if args.json:
        print_json({"session_id": sid, "worker_pid": pid})
    elif pid is None:
        print(f"sent to the worker that holds session {sid}; `rlm attach {sid}` to follow")
    else:
        print(f"session {sid} continues in worker {pid}; `rlm attach {sid}` to follow")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from rlm.cli.chat import chat_loop

    options = options_from_args(args)
    run = (app.SessionRun.open("chat", args.session, options) if args.session
           else app.SessionRun.new("chat", None, options))
    run.on_phase = Renderer(quiet=bool(args.json)).phase
    with run:
        code = chat_loop(run, args)
    if run.agent is not None:  # children still at work when chat ended were cancelled
        for r in run.agent.children.cancelled:
            print(f"rlm: {terminal_safe(cancelled_line(r))}", file=sys.stderr)
    return code


def cmd_demo(args: argparse.Namespace) -> int:
    from rlm.demo import DEMO_TASK, make_demo_data, notebook_path

    render = Renderer(quiet=args.json)

    def with_data(session: SessionStore, options: app.RunOptions) -> app.RunOptions:
        assert session.dir is not None  # created on disk
        data = make_demo_data(session.dir, seed=args.seed, rows=args.rows)
        # the model is named once, in the run's header that follows
        render.console.print(f"[bold]rlm demo[/bold] · data {escape(str(data))}")
        # the kernel works in the data's folder, so `pd.read_csv('sales.csv')` (what a small
        # model tries first) reads the same data as the loaded `sales`
        return replace(options, context=[str(data)], workdir=str(data.parent))

    options = app.RunOptions(overrides={"model": args.model or "local",
                                        "max_turns": args.max_turns})
    run = app.SessionRun.new("run", DEMO_TASK, options, on_session=with_data)
    code = run_cli(run, args, DEMO_TASK)
    assert run.session is not None
    try:
        from rlm.notebook.export import export_session

        nb = export_session(run.session.path, notebook_path(run.session, args.output))
        render.console.print(f"notebook: {nb}")
    except Exception as e:  # noqa: BLE001 - the demo's answer matters more than its export
        render.console.print(f"notebook export failed: {e}", style="yellow", markup=False)
    return code


# ---------------------------------------------------------------- inspecting
def cmd_sessions(args: argparse.Namespace) -> int:
    import os

    from rlm.cli import listings
    from rlm.session.store import list_sessions

    found = list_sessions(reading_config().home)
    if args.here:
        here = os.path.realpath(os.getcwd())
        found = [s for s in found if s.cwd and os.path.realpath(s.cwd) == here]
    if args.n and args.n > 0:
        found = found[-args.n:]
    rows: list[dict[str, Any]] = []
    for s in found:
        st = (listings.session_status(s.path) if s.problem is None else
              {"status": "corrupt", "turns": 0, "answer": s.problem})
        rows.append({"id": s.id, "path": str(s.path), "model": s.model,
                     # a chat session's task is its first message
                     "task": s.task or st.get("first_prompt"),
                     "created": s.created, "parent_session": s.parent_session, "cwd": s.cwd,
                     "status": st["status"], "turns": st["turns"], "answer": st.get("answer"),
                     "verified": st.get("verified"), "reason": st.get("reason"),
                     # the session's: every run's recorded totals, summed (rlm.ledger)
                     "tokens": st.get("tokens")})
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no sessions here: rlm run \"your task\"" if args.here
              else "no sessions yet: rlm run \"your task\"")
        return 0
    for line in listings.session_lines(rows, listings.width()):
        print(line)
    return 0


def _entry_text(e: Any) -> str:
    if e.type == "message":
        m = e.message
        text = m.get("content") or ""
        for tc in m.get("tool_calls") or []:
            code = call_code(tc)
            if code is not None and code.strip() and code.strip() in text:
                continue  # a fenced block the reply holds already: each cell once
            text += f"\n[python]\n{code if code is not None else tc}"
        return f"{m.get('role')}: {text}" + (f" [error: {e.error}]" if e.error else "")
    if e.type == "custom" and e.custom_type in ("final", "run_end") and isinstance(e.data, dict):
        d = e.data
        outcome = RunOutcome.from_dict(d.get("outcome"))
        if e.custom_type == "run_end":
            detail = f": {d['detail']}" if d.get("detail") else ""
            return f"run ended ({d.get('reason')}{detail})" + spent_line(d)
        verdict = (outcome.headline if outcome is not None else
                   "✓ verified" if d.get("verified") is True else
                   f"unverified: {d.get('why')}" if d.get("verified") is False else "")
        return f"final: {d.get('answer')}" + (f"\n({verdict})" if verdict else "") + spent_line(d)
    if e.type == "compaction":
        return f"compaction ({e.trigger}, {e.tokens_before} tokens): {e.summary}"
    if e.type == "custom" and e.custom_type == RELIEF_CUSTOM:
        return relief_line(e) + "".join(
            f"\n  cell {r.get('cell')}: "
            + (f"its code ({r.get('tokens_saved')} tokens; history.cell({r.get('cell')}))"
               if r.get("reason") == "code shaken" else str(r.get("text")))
            for r in e.data.get("replaced", []))
    if e.type == "custom":
        return f"{e.custom_type}: {e.content if e.content is not None else json.dumps(e.data)}"
    if e.type == "branch_summary":
        return f"branch summary: {e.summary}"
    return f"{e.type}: {getattr(e, 'model', '')}"


def cmd_log(args: argparse.Namespace) -> int:
    s = open_readonly(args.session)
    branch: Sequence[Any] = s.branch()
    last = getattr(args, "last", None)
    if last is not None:
        if last < 0:
            raise RlmError(f"-n {last}: give a number of entries, 0 or more")
        branch = branch[max(0, len(branch) - last):] if last else []  # only these are read
    if args.json:
        print_json([e.to_dict() for e in branch])
        return 0
    for e in branch:
        if isinstance(e, CustomEntry) and not e.display and not args.all:
            continue
        print(f"--- {e.id} {e.timestamp[11:19]}")
        print(terminal_safe(_entry_text(e)))  # log text can hold hostile escapes
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    s = open_readonly(args.session)
    if args.json:
        print_json({k or "root": v for k, v in s.tree().items()})
        return 0
    from rlm.session.treetext import format_tree

    print(terminal_safe(format_tree(s)))
    from rlm.agent.children import registry_lines

    for line in registry_lines(s.branch()):  # rlm_spawn / rlm_query children
        print(terminal_safe(line))
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """The confirmed checkpoint.md and what it covers; the last failed writing, if any."""
    from rlm.compaction.checkpoint import WRITER_DIR, read

    s = open_readonly(args.session)
    found = read(s)
    last = next((e for e in reversed(s.branch()) if isinstance(e, CustomEntry)
                 and e.custom_type in ("checkpoint", "checkpoint_outcome")), None)
    why = (last.data.get("reason") if last is not None and isinstance(last.data, dict)
           and last.custom_type == "checkpoint_outcome" else None)  # after the last success
    if found is None:
        raise RlmError(f"session {s.id} has no checkpoint yet: one is written in the background "
                       "when the context crosses its rungs (config checkpoint_rungs)"
                       + (f"; the last writing failed: {why}" if why else ""))
    text, data = found
    if args.json:
        print_json({"session_id": s.id, "text": text, **data, "last_failure": why})
        return 0
    print(terminal_safe(text.rstrip()))
    print(terminal_safe(f"-- covers the log up to entry {data.get('watermark')} "
                        f"({data.get('entries')} entries since the previous one); "
                        f"{data.get('tokens')} tokens"), file=sys.stderr)
    writer = s.dir / WRITER_DIR if s.dir is not None else None
    if writer is not None and (writer / "session.jsonl").is_file():
        print(terminal_safe(f"-- what the writer was asked and answered: rlm log {writer}"),
              file=sys.stderr)
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    from rlm.kernel.state import session_state

    s = open_readonly(args.session)
    assert s.dir is not None  # opened from disk
    # the URL the run's kernel wrote its snapshots to (a child's: its root's)
    mine = load_config()  # open_readonly said what it ignored
    url, refused = app.recorded_snapshot_url(s, mine)
    for line in refused:  # a forged snapshot_url: the host never reads from there
        print(terminal_safe(f"rlm: warning: {line}"), file=sys.stderr)
    url = url or mine.snapshot_url
    state = session_state(s.dir, snapshot_url=url)
    if args.json:
        print_json(state)
        return 0
    from rlm.cli import listings

    for line in listings.state_lines(state, listings.width()):
        print(line)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from rlm.notebook.export import export_session

    s = open_readonly(args.session)
    out = export_session(s, Path(args.output) if args.output else None, leaf=args.branch,
                         force=getattr(args, "force", False))
    if getattr(args, "json", False):
        print_json({"session_id": s.id, "notebook": str(out)})
    else:
        print(out)
    return 0


def cmd_rule(args: argparse.Namespace) -> int:
    """`rlm rule add SESSION "complaint"`: reads the session (no lock), saves a validated rule."""
    from rlm.app.steering import add_rule

    session = open_readonly(args.session)
    config = load_config()
    if args.model:
        config = replace(config, model=args.model)
    authored = add_rule(session, args.complaint, config)
    if args.json:
        print_json({"rule": authored.rule.name, "path": str(authored.path),
                    "condition": list(authored.rule.conditions), "scope": authored.rule.scope,
                    "matched": len(authored.matched), "attempts": authored.attempts})
        return 0
    print(f"saved rule {authored.rule.name!r} to {authored.path} (it matches "
          f"{len(authored.matched)} of the session's outputs; {authored.attempts} attempt(s))")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    """The session's recorded options (window, reserve, keep-recent, compaction model) and
    its model's own window; `--model` names the summary model for this compaction only."""
    extra = {"compaction_model": args.model} if args.model else {}
    with app.SessionRun.open("compact", args.session, extra=extra, start=False) as run:
        assert run.agent is not None and run.session is not None
        entry = app.compact_now(run.agent, args.instructions)
        session = run.session
    if args.json:
        print_json(None if entry is None else {
            "session_id": session.id, "tokens_before": entry.tokens_before,
            "first_kept_entry_id": entry.first_kept_entry_id, "summary": entry.summary})
        return 0 if entry is not None else 1
    if entry is None:
        print("nothing to compact", file=sys.stderr)
        return 1
    print(f"compacted: {entry.tokens_before} tokens summarised; first kept entry {entry.first_kept_entry_id}")
    return 0
