"""The work behind `rlm run|chat|resume|sessions|log|tree|state|export|compact|demo`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.markup import escape

from rlm.cli.render import Renderer, print_json
from rlm.config import Config, load_config
from rlm.errors import SessionError
from rlm.session.entries import call_code

_CONFIG_FLAGS = (
    "model", "sub_model", "compaction_model", "max_turns", "max_tokens", "max_wall_s",
    "cell_timeout", "memory_cap_bytes", "temperature", "max_depth", "token_budget",
    "context_window", "reserve_tokens", "keep_recent_tokens", "compaction_enabled",
)


def config_from_args(args: argparse.Namespace) -> Config:
    flags = {k: getattr(args, k, None) for k in _CONFIG_FLAGS}
    cfg = load_config(**{k: v for k, v in flags.items() if v is not None and v != -1})
    if flags.get("max_turns") == -1:
        cfg = replace(cfg, max_turns=None)
    if flags.get("max_tokens") == -1:
        cfg = replace(cfg, max_tokens=None)
    return cfg


# ------------------------------------------------------------------ running
def _drive(agent: Any, session: Any, prompt: str | None, args: argparse.Namespace,
           setup: Any = None) -> int:
    """Run one prompt with rendering; print the --json summary; return the exit code."""
    from rlm.agent.attach import attach_all
    from rlm.agent.session_run import RunResult

    render = Renderer(quiet=bool(getattr(args, "json", False)))
    events = []
    with agent:
        attach_all(agent, args)
        if setup is not None:
            setup(agent)
        for ev in agent.run(prompt):
            events.append(ev)
            render(ev)
    result = RunResult.from_events(session, events)
    if getattr(args, "json", False):
        print_json(result.to_json())
    else:
        render.session_line(session)
    return 0 if result.reason in ("final", "no_code") else 3


def cmd_run(args: argparse.Namespace) -> int:
    from rlm.agent.session_run import new_session_agent

    cfg = config_from_args(args)
    if args.detach:
        from rlm.cli.longrun_cli import run_detached

        return run_detached(args, cfg)
    agent, session = new_session_agent(args.task, cfg)
    return _drive(agent, session, args.task, args, _inputs(args.notebook, args.context))


def _inputs(notebook: str | None, context: list[Any]) -> Any:
    """Setup for a new run: execute a notebook first, load --context files."""

    def setup(agent: Any) -> None:
        if notebook:
            from rlm.notebook.from_notebook import import_notebook

            import_notebook(Path(notebook), agent.executor, agent.session)
        if context:
            from rlm.agent.context_files import load_context_files

            load_context_files(agent, context)

    return setup


def cmd_resume(args: argparse.Namespace) -> int:
    from rlm.agent.session_run import open_session_agent

    agent, session = open_session_agent(args.session, config_from_args(args), leaf=args.from_entry)
    prompt = args.task
    if prompt is None and getattr(args, "from_entry", None) is None:
        last = session.branch()[-1:] if session.branch() else []
        if last and getattr(last[0], "role", "") == "user":
            prompt = None  # the last prompt was never answered: continue it
        else:
            prompt = "Continue."
    return _drive(agent, session, prompt, args)


def cmd_chat(args: argparse.Namespace) -> int:
    from rlm.agent.session_run import new_session_agent, open_session_agent
    from rlm.cli.chat import chat_loop

    cfg = config_from_args(args)
    if args.session:
        agent, session = open_session_agent(args.session, cfg)
    else:
        agent, session = new_session_agent(None, cfg)
    return chat_loop(agent, session, args)


def cmd_demo(args: argparse.Namespace) -> int:
    from rlm.agent.session_run import new_session_agent
    from rlm.demo import DEMO_TASK, demo_setup, make_demo_data, notebook_path

    cfg = load_config(model=args.model or None, max_turns=args.max_turns)
    if not cfg.model:
        cfg = replace(cfg, model="local")
    agent, session = new_session_agent(DEMO_TASK, cfg)
    data = make_demo_data(session.dir, seed=args.seed, rows=args.rows)
    render = Renderer(quiet=args.json)
    render.console.print(f"[bold]rlm demo[/bold] · model {escape(str(cfg.model))} · data {escape(str(data))}")
    code = _drive(agent, session, DEMO_TASK, args, demo_setup(data))
    try:
        from rlm.notebook.export import export_session

        nb = export_session(session.path, notebook_path(session, args.output))
        render.console.print(f"notebook: {nb}")
    except Exception as e:  # noqa: BLE001 - the demo's answer matters more than its export
        render.console.print(f"notebook export failed: {e}", style="yellow", markup=False)
    return code


# ---------------------------------------------------------------- inspecting
def open_session(session_id: str, *, readonly: bool = False) -> Any:
    from rlm.session.store import SessionStore

    try:
        return SessionStore.open(session_id, load_config().home, readonly=readonly)
    except FileNotFoundError as e:
        raise SessionError(f"no session {session_id!r} ({e}); `rlm sessions` lists them") from e


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
    s = open_session(args.session, readonly=True)
    branch = s.branch()
    if args.json:
        print_json([e.to_dict() for e in branch])
        return 0
    for e in branch:
        if e.type == "custom" and not e.display and not args.all:
            continue
        print(f"--- {e.id} {e.timestamp[11:19]}")
        print(_entry_text(e))
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    s = open_session(args.session, readonly=True)
    children: dict[str | None, list[Any]] = {}
    for e in s.entries:
        children.setdefault(e.parent_id, []).append(e)
    if args.json:
        print_json({k or "root": [c.id for c in v] for k, v in children.items()})
        return 0
    on_branch = {e.id for e in s.branch()}

    def walk(pid: str | None, depth: int) -> None:
        kids = children.get(pid, [])
        for c in kids:
            mark = "*" if c.id in on_branch else " "
            label = _entry_text(c).replace("\n", " ")[:70]
            fork = " (branch)" if len(kids) > 1 else ""
            print(f"{mark} {'  ' * depth}{c.id} {label}{fork}")
            walk(c.id, depth + (1 if len(kids) > 1 else 0))

    walk(None, 0)
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    from rlm.kernel.state import session_state

    s = open_session(args.session, readonly=True)
    state = session_state(s.dir)
    if args.json:
        print_json(state)
        return 0
    print(f"source: {state['source']} ({state.get('detail', '')})")
    for n in state["names"]:
        mark = "" if n.get("restorable", True) else f"  [not restorable: {n.get('reason')}]"
        print(f"  {n['name']:<24} {n.get('type', ''):<28} {n.get('bytes') or 0:>12,} B{mark}")
    if not state["names"]:
        print("  (no names)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from rlm.notebook.export import export_session

    s = open_session(args.session, readonly=True)
    out = export_session(s, Path(args.output) if args.output else None, leaf=args.branch)
    print(out)
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from rlm.compaction.cli import compact_session

    s = open_session(args.session)
    cfg = load_config(model=args.model)
    entry = compact_session(s, cfg, instructions=args.instructions)
    if entry is None:
        print("nothing to compact", file=sys.stderr)
        return 1
    print(f"compacted: {entry.tokens_before} tokens summarised; first kept entry {entry.first_kept_entry_id}")
    return 0
