"""`rlm chat`: an interactive session. Lines are prompts; slash commands steer.

/goal [--budget N] OBJECTIVE | /goal status|pause|resume|clear
/compact [instructions]     summarise now
/heartbeat every 10m PROMPT | /heartbeat off
/state                      names in the kernel
/exit                       leave (the session stays on disk; `rlm resume` continues it)
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from rlm.cli.render import Renderer
from rlm.errors import RlmError


def chat_loop(agent: Any, session: Any, args: argparse.Namespace) -> int:
    from rlm.agent.attach import attach_all

    render = Renderer()
    render.console.print(f"[bold]rlm chat[/bold] · session {session.id} · /help for commands")
    with agent:
        attach_all(agent, args)
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
            for ev in agent.run(line):
                render(ev)
    render.session_line(session)
    return 0


def _slash(agent: Any, line: str, render: Renderer) -> bool:
    words = shlex.split(line[1:])
    cmd, rest = (words[0], words[1:]) if words else ("help", [])
    try:
        if cmd in ("exit", "quit"):
            return False
        if cmd == "help":
            render.console.print(__doc__.split("\n\n", 1)[1])
        elif cmd == "state":
            listing = agent.executor.list_namespace(timeout=5.0)
            for n in listing["names"]:
                render.console.print(f"  {n['name']:<24} {n.get('type', '')}", markup=False)
        elif cmd == "compact":
            from rlm.compaction.cli import compact_now

            entry = compact_now(agent, " ".join(rest) or None)
            render.console.print("compacted" if entry else "nothing to compact")
        elif cmd == "goal":
            from rlm.cli.longrun_cli import goal_command

            render.console.print(goal_command(agent, rest), markup=False)
        elif cmd == "heartbeat":
            from rlm.cli.longrun_cli import heartbeat_command

            render.console.print(heartbeat_command(agent, rest), markup=False)
        else:
            render.console.print(f"unknown command /{cmd}; /help lists them", markup=False)
    except RlmError as e:
        render.console.print(str(e), style="red", markup=False)
    return True
