"""The work behind `rlm run|chat|resume|sessions|log|tree|state|export|compact|demo`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from rlm import app
from rlm.agent.loop import Agent
from rlm.agent.session_run import RunResult
from rlm.cli.common import open_readonly, options_from_args
from rlm.cli.render import Renderer, input_summaries, print_json
from rlm.config import load_config
from rlm.events import Event, RunEnded
from rlm.longrun.lock import SessionLock
from rlm.session.entries import CustomEntry, call_code
from rlm.session.store import SessionStore


# ------------------------------------------------------------------ running
def drive_cli(agent: Agent, session: SessionStore, prompt: str | None, args: argparse.Namespace,
              options: app.RunOptions, lock: SessionLock) -> int:
    """Run one prompt with rendering (schedules fire meanwhile); print the --json summary
    or the end-of-run line; release the session; return the exit code."""
    render = Renderer(quiet=bool(getattr(args, "json", False)))
    try:
        with agent:
            app.prepare_inputs(agent, options)
            render.header(agent.llm.spec, session, input_summaries(agent))
            events = app.drive(agent, prompt, render)
        note = app.schedules_note(session)
    finally:
        render.close()
        session.close()
        lock.release()
    result = RunResult.from_events(session, _first_run(events))
    if agent.compaction is not None:  # the window, threshold, reserve and keep-recent used
        result.compaction = agent.compaction.effective().to_dict()
    if getattr(args, "json", False):
        out = result.to_json()
        if note:
            out["schedules"] = note
        print_json(out)
    else:
        render.session_line(session)
        if note:
            render.console.print(note, style="yellow", markup=False)
    return 0 if result.reason in ("final", "no_code") else 3


def _first_run(events: list[Event]) -> list[Event]:
    """The prompt's own run (ticks delivered after it are runs of their own)."""
    for i, ev in enumerate(events):
        if isinstance(ev, RunEnded):
            return events[: i + 1]
    return events


def cmd_run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    if args.detach:
        session, pid = app.start_detached(args.task, options)
        if args.json:
            print_json({"session_id": session.id, "session_path": str(session.path),
                        "worker_pid": pid})
        else:
            print(f"session {session.id} running in worker {pid}; `rlm attach {session.id}` "
                  "to follow")
        return 0
    session = app.new_session(args.task, options)
    lock = app.writer_lock(session, "run")
    agent = app.build_agent(session, options.config(session), entry="run", options=options)
    return drive_cli(agent, session, args.task, args, options, lock)


def cmd_resume(args: argparse.Namespace) -> int:
    session, options, lock = app.open_for_write(args.session, "resume", options_from_args(args))
    try:
        prompt = app.resume_prompt(session, args.task, args.from_entry)
        agent = app.build_agent(session, options.config(session), entry="resume",
                                options=options, leaf=args.from_entry)
    except BaseException:
        session.close()
        lock.release()
        raise
    return drive_cli(agent, session, prompt, args, options, lock)


def cmd_chat(args: argparse.Namespace) -> int:
    from rlm.cli.chat import chat_loop

    options = options_from_args(args)
    if args.session:
        session, options, lock = app.open_for_write(args.session, "chat", options)
    else:
        session = app.new_session(None, options)
        lock = app.writer_lock(session, "chat")
    try:
        agent = app.build_agent(session, options.config(session), entry="chat", options=options)
        return chat_loop(agent, session, args, options)
    finally:
        session.close()
        lock.release()


def cmd_demo(args: argparse.Namespace) -> int:
    from rlm.demo import DEMO_TASK, make_demo_data, notebook_path

    options = app.RunOptions(overrides={"model": args.model or "local",
                                        "max_turns": args.max_turns})
    session = app.new_session(DEMO_TASK, options)
    lock = app.writer_lock(session, "run")
    cfg = options.config(session)
    assert session.dir is not None  # created on disk
    data = make_demo_data(session.dir, seed=args.seed, rows=args.rows)
    # the kernel works in the data's folder, so `pd.read_csv('sales.csv')` (what a small
    # model tries first) reads the same data as the loaded `sales`
    options.context, options.workdir = [str(data)], str(data.parent)
    render = Renderer(quiet=args.json)
    render.console.print(f"[bold]rlm demo[/bold] · model {escape(str(cfg.model))} · data {escape(str(data))}")
    agent = app.build_agent(session, cfg, entry="run", options=options)
    code = drive_cli(agent, session, DEMO_TASK, args, options, lock)
    try:
        from rlm.notebook.export import export_session

        nb = export_session(session.path, notebook_path(session, args.output))
        render.console.print(f"notebook: {nb}")
    except Exception as e:  # noqa: BLE001 - the demo's answer matters more than its export
        render.console.print(f"notebook export failed: {e}", style="yellow", markup=False)
    return code


# ---------------------------------------------------------------- inspecting
def cmd_sessions(args: argparse.Namespace) -> int:
    from rlm.session.store import list_sessions

    rows: list[dict[str, Any]] = [
        {"id": s.id, "path": str(s.path), "model": s.model, "task": s.task,
         "created": s.created, "parent_session": s.parent_session}
        for s in list_sessions(load_config().home)]
    if args.json:
        print_json(rows)
        return 0
    for r in rows:
        task = str(r["task"] or "").replace("\n", " ")[:60]
        print(f"{r['id']}  {r['created'][:19]}  {r['model']:<28} {task}")
    if not rows:
        print("no sessions yet: rlm run \"your task\"")
    return 0


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
        print(_entry_text(e))
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    s = open_readonly(args.session)
    if args.json:
        print_json({k or "root": v for k, v in s.tree().items()})
        return 0
    print(s.format_tree())  # iterative: a long session has a deep tree
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    from rlm.kernel.state import session_state

    s = open_readonly(args.session)
    assert s.dir is not None  # opened from disk
    state = session_state(s.dir)
    if args.json:
        print_json(state)
        return 0
    print(f"source: {state['source']} ({state.get('detail', '')})")
    for n in state["names"]:
        mark = "" if n.get("restorable", True) else f"  [not restorable: {n.get('reason')}]"
        print(f"  {n['name']:<24} {n.get('bytes') or 0:>12,} B  {n.get('summary') or n.get('type', '')}{mark}")
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
    from rlm.compaction.cli import compact_session

    session, _, lock = app.open_for_write(args.session, "compact")
    try:
        cfg = load_config(model=args.model)
        entry = compact_session(session, cfg, instructions=args.instructions)
    finally:
        session.close()
        lock.release()
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
