"""The work behind `rlm run|chat|resume|sessions|log|tree|state|export|compact|demo`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.markup import escape

from rlm import app
from rlm.agent.result import RunResult
from rlm.cli.common import open_readonly, options_from_args
from rlm.cli.render import Renderer, input_summaries, print_json, terminal_safe
from rlm.config import load_config
from rlm.errors import RlmError
from rlm.events import first_run
from rlm.protocols import SessionLog
from rlm.session.entries import CustomEntry, call_code
from rlm.session.store import SessionStore

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
    try:
        with run:
            session, agent = run.session, run.agent
            assert session is not None and agent is not None
            text = prompt(session) if callable(prompt) else prompt
            for line in run.prepare(text):
                print(f"rlm: {line}", file=sys.stderr)
            render.header(agent.llm.spec, session, input_summaries(agent))
            events = run.drive(text, render)
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
                                   duration_s=time.monotonic() - started)
    if agent.compaction is not None:  # the window, threshold, reserve and keep-recent used
        result.compaction = agent.compaction.effective().to_dict()
    if quiet:
        out = result.to_json()
        if note:
            out["schedules"] = note
        print_json(out)
    else:
        render.session_line(session)
        if note:
            render.console.print(note, style="yellow", markup=False)
    return exit_code(result)


# `rlm run` exit codes: 0 a verified answer, 3 no answer (limit, error, interrupt),
# 4 the session is busy (SessionBusy), 5 an answer that no successful cell supports
EXIT_UNVERIFIED = 5


def exit_code(result: RunResult) -> int:
    if result.reason not in ("final", "no_code"):
        return 3
    return EXIT_UNVERIFIED if result.verified is False else 0


def cmd_run(args: argparse.Namespace) -> int:
    options, notes = app.with_named_files(args.task, options_from_args(args))
    for note in notes:
        print(f"rlm: {note}", file=sys.stderr)
    if args.detach:
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
    run = app.SessionRun.open("resume", args.session, options_from_args(args),
                              leaf=args.from_entry)
    return run_cli(run, args, lambda s: app.resume_prompt(s, args.task, args.from_entry))


def cmd_chat(args: argparse.Namespace) -> int:
    from rlm.cli.chat import chat_loop

    options = options_from_args(args)
    run = (app.SessionRun.open("chat", args.session, options) if args.session
           else app.SessionRun.new("chat", None, options))
    with run:
        return chat_loop(run, args)


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

    from rlm.session.store import list_sessions

    found = list_sessions(load_config().home)
    if args.here:
        here = os.path.realpath(os.getcwd())
        found = [s for s in found if s.cwd and os.path.realpath(s.cwd) == here]
    if args.n and args.n > 0:
        found = found[-args.n:]
    rows: list[dict[str, Any]] = []
    for s in found:
        status, turns, answer = _session_status(s.path) if s.problem is None else ("corrupt", 0, s.problem)
        rows.append({"id": s.id, "path": str(s.path), "model": s.model, "task": s.task,
                     "created": s.created, "parent_session": s.parent_session, "cwd": s.cwd,
                     "status": status, "turns": turns, "answer": answer})
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no sessions here: rlm run \"your task\"" if args.here
              else "no sessions yet: rlm run \"your task\"")
        return 0
    print(f"{'ID':<22}  {'CREATED':<16}  {'STATUS':<7}  {'TURNS':>5}  {'MODEL':<20}  "
          f"{'TASK':<32}  {'ANSWER':<32}  CWD")
    for r in rows:
        print(terminal_safe(
            f"{r['id']:<22}  {r['created'][:16].replace('T', ' '):<16}  {r['status']:<7}  "
            f"{r['turns']:>5}  {_cut(r['model'], 20):<20}  {_cut(r['task'], 32):<32}  "
            f"{_cut(r['answer'], 32):<32}  {r['cwd'] or '-'}"))
    return 0


def _cut(text: Any, width: int) -> str:
    line = str(text or "").strip().split("\n", 1)[0]
    line = terminal_safe(line)
    return line if len(line) <= width else line[: width - 1] + "…"


def _session_status(path: Path) -> tuple[str, int, str | None]:
    """(running | idle | ended, assistant turns, the last answer's first line) from the
    session's lock, its worker status file and its log (only candidate lines parsed)."""
    from rlm.longrun.lock import LOCK_NAME, holder

    who = holder(path.parent / LOCK_NAME)
    status = "ended"
    if who is not None:
        status = "running"
        if who.kind == "worker":
            try:
                state = json.loads((path.parent / "worker.json").read_text()).get("state")
            except (OSError, ValueError, AttributeError):
                state = None
            status = "idle" if state == "idle" else "running"
    turns, answer = 0, None
    try:
        with open(path, "rb") as f:
            for raw in f:
                if b'"assistant"' not in raw and b'"final"' not in raw:
                    continue
                try:
                    d = json.loads(raw)
                except ValueError:
                    continue
                if d.get("type") == "message" and (d.get("message") or {}).get("role") == "assistant":
                    turns += 1
                elif d.get("type") == "custom" and d.get("custom_type") == "final":
                    a = (d.get("data") or {}).get("answer")
                    answer = None if a is None else str(a).strip().split("\n", 1)[0]
    except OSError:
        pass
    return status, turns, answer


def _entry_text(e: Any) -> str:
    if e.type == "message":
        m = e.message
        text = m.get("content") or ""
        for tc in m.get("tool_calls") or []:
            code = call_code(tc)
            text += f"\n[python]\n{code if code is not None else tc}"
        return f"{m.get('role')}: {text}" + (f" [error: {e.error}]" if e.error else "")
    if e.type == "compaction":
        return f"compaction ({e.trigger}, {e.tokens_before} tokens): {e.summary}"
    if e.type == "custom":
        return f"{e.custom_type}: {e.content if e.content is not None else json.dumps(e.data)}"
    if e.type == "branch_summary":
        return f"branch summary: {e.summary}"
    return f"{e.type}: {getattr(e, 'model', '')}"


def cmd_log(args: argparse.Namespace) -> int:
    s = open_readonly(args.session)
    branch = s.branch()
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
    print(terminal_safe(s.format_tree()))  # iterative: a long session has a deep tree
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    from rlm.kernel.state import session_state

    s = open_readonly(args.session)
    assert s.dir is not None  # opened from disk
    recorded = app.recorded_options(s)  # the URL the run's kernel wrote its snapshots to
    url = (recorded.overrides.get("snapshot_url") if recorded else None) or load_config().snapshot_url
    state = session_state(s.dir, snapshot_url=url)
    if args.json:
        print_json(state)
        return 0
    print(f"source: {state['source']} ({state.get('detail', '')})")
    for n in state["names"]:
        mark = "" if n.get("restorable", True) else f"  [not restorable: {n.get('reason')}]"
        print(terminal_safe(f"  {n['name']:<24} {n.get('bytes') or 0:>12,} B  "
                            f"{n.get('summary') or n.get('type', '')}{mark}"))
    if not state["names"]:
        print("  (no names)")
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
