"""`rlm chat`: an interactive session. Lines are prompts; slash commands steer.

/goal [--budget N] OBJECTIVE | /goal status|pause|resume|clear|budget N
/compact [instructions]     summarise now
/load FILE [FILE ...]       load files into kernel variables (like --context)
/heartbeat every 10m PROMPT | /heartbeat off
/state                      names in the kernel
/exit                       leave (the session stays on disk; `rlm resume` continues it)

Due heartbeats and scheduled jobs fire while chat holds the session (after each prompt's
run); a slash command that fails prints one line and chat goes on.
"""

from __future__ import annotations

import argparse
import shlex

from rlm import app
from rlm.agent.context_files import load_context_files
from rlm.agent.loop import Agent
from rlm.cli.longrun_cli import goal_command, heartbeat_command
from rlm.cli.render import Renderer, input_summaries
from rlm.errors import RlmError
from rlm.protocols import SessionLog


def chat_loop(agent: Agent, session: SessionLog, args: argparse.Namespace,
              options: app.RunOptions) -> int:
    render = Renderer()
    with agent:
        app.prepare_inputs(agent, options)
        render.header(agent.llm.spec, session, input_summaries(agent))  # as `rlm run` shows it
        render.console.print("rlm chat · /help for commands · /exit to leave", style="dim",
                             markup=False)
        while True:
            try:
                line = input("rlm> ").strip()
            except (EOFError, KeyboardInterrupt):
                render.console.print()
                break
            if not line:
                continue
            if line.startswith("/"):
                if not _slash(agent, line, render):
                    break
                continue
            for loaded in app.attach_named_files(agent, line):
                render.console.print(loaded, style="dim", markup=False)
            app.drive(agent, line, render)
    render.session_line(session)
    note = app.schedules_note(session)
    if note:
        render.console.print(note, style="yellow", markup=False)
    return 0


def _slash(agent: Agent, line: str, render: Renderer) -> bool:
    """One slash command; any error it raises is one line and chat goes on."""
    try:
        words = shlex.split(line[1:])
    except ValueError:  # an unbalanced quote (`/goal don't stop`): take the words as typed
        words = line[1:].split()
    cmd, rest = (words[0], words[1:]) if words else ("help", [])
    try:
        if cmd in ("exit", "quit"):
            return False
        if cmd == "help":
            render.console.print(__doc__.split("\n\n", 1)[1], markup=False)
        elif cmd == "state":
            if agent.executor is None:
                raise RlmError("the kernel is not running")
            listing = agent.executor.list_namespace(timeout=5.0)
            for n in listing["names"]:
                render.console.print(f"  {n['name']:<24} {n.get('type', '')}", markup=False)
        elif cmd == "load":
            if not rest:
                raise RlmError("/load FILE [FILE ...]: the files to load into kernel variables")
            names = load_context_files(agent, rest)
            render.console.print(f"loaded {', '.join(names)}", markup=False)
        elif cmd == "compact":
            entry = app.compact_now(agent, " ".join(rest) or None)
            render.console.print("compacted" if entry else "nothing to compact")
        elif cmd == "goal":
            render.console.print(goal_command(agent, rest), markup=False)
        elif cmd == "heartbeat":
            render.console.print(heartbeat_command(agent.session, rest), markup=False)
        else:
            render.console.print(f"unknown command /{cmd}; /help lists them", markup=False)
    except (RlmError, ValueError, KeyError, TypeError) as e:
        render.console.print(f"/{cmd}: {e}", style="red", markup=False)
    return True
