"""`rlm chat`: an interactive session. Lines are prompts; slash commands steer.

/goal [--budget N] OBJECTIVE | /goal status|pause|resume|clear|budget N
/compact [instructions]     summarise now
/shake                      replace old cell outputs by placeholders now (no model call)
/rebuild                    write the checkpoint now, then restart the context from it
/max-children N             children at once in this session tree from now on (0: unlimited)
/rule WHAT WENT WRONG       the model writes a stream rule from it; saved once it matches
/load FILE [FILE ...]       load files into kernel variables (like --context)
/heartbeat every 10m PROMPT | /heartbeat off
/state                      names in the kernel
/exit                       leave (the session stays on disk; `rlm resume` continues it)

Due heartbeats and scheduled jobs fire while chat holds the session: into a prompt's run,
after it, and (on a terminal) while chat waits at its prompt. A slash command that fails
prints one line and chat goes on. `--json`: one JSON object per prompt's run on stdout.
"""

from __future__ import annotations

import argparse
import select
import shlex
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from rlm import app
from rlm.agent.context_files import load_context_files
from rlm.agent.loop import Agent
from rlm.agent.result import RunResult
from rlm.app.steering import rule_from_chat
from rlm.cli.common import both, live_view
from rlm.cli.longrun_cli import goal_command, heartbeat_command
from rlm.cli.render import Renderer, input_summaries, print_json
from rlm.compaction.controller import CompactionController
from rlm.compaction.rebuild import rebuilt_line
from rlm.compaction.tiers import relief_line
from rlm.errors import RlmError
from rlm.events import first_run
from rlm.protocols import SessionLog


def chat_loop(run: app.SessionRun, args: argparse.Namespace) -> int:
    """The interactive loop over an entered run. With --json each prompt's run ends with
    one JSON object on stdout (as `rlm run --json` prints it); rendering goes to stderr."""
    agent, session = run.agent, run.session
    assert agent is not None and session is not None
    quiet = bool(getattr(args, "json", False))
    render = Renderer(quiet=quiet)
    render.restored(run.restored)
    render.inputs_phase(app.pending_inputs(agent, run.options))
    for loaded in run.prepare():
        render.console.print(loaded, style="dim", markup=False)
    render.header(agent.llm.spec, session, input_summaries(agent))  # as `rlm run` shows it
    render.continue_turns(session)
    render.console.print("rlm chat · /help for commands · /exit to leave · Ctrl-C once "
                         "interrupts the cell, twice stops the run", style="dim", markup=False)
    schedules = app.ForegroundSchedules(agent)
    live = live_view(args, run)
    try:
        _prompts(agent, session, schedules, render if live is None else both(render, live),
                 render, quiet)
    finally:
        if live is not None:
            live.close()
    render.session_line(session)
    note = app.schedules_note(session)
    if note:
        render.console.print(note, style="yellow", markup=False)
    return 0


def _prompts(agent: Agent, session: SessionLog, schedules: app.ForegroundSchedules,
             show: Callable[[Any], None], render: Renderer, quiet: bool) -> None:
    """Read and run prompts until /exit or end of input; `show` gets every event."""
    while True:
        try:
            line = read_line("rlm> ", schedules, lambda: schedules.run_due(show),
                             out=sys.stderr if quiet else sys.stdout).strip()
        except EOFError:
            render.console.print()
            break
        except KeyboardInterrupt:  # at the prompt it clears the line; it never leaves chat
            render.console.print()  # (a quick double press on a run landed here and quit)
            render.console.print(LEAVE, style="dim", markup=False)
            continue
        if not line:
            continue
        try:
            if line.startswith("/"):
                if not _slash(agent, line, render):
                    break
                continue
            _one_run(agent, session, line, render, show, schedules, quiet)
        except KeyboardInterrupt:  # a press between the run's end and the prompt
            render.close()
            render.console.print()


LEAVE = "Ctrl-C: nothing is running (/exit or Ctrl-D leaves chat)"


def _one_run(agent: Agent, session: SessionLog, line: str, render: Renderer,
             show: Callable[[Any], None], schedules: app.ForegroundSchedules,
             quiet: bool) -> None:
    """One prompt's run: its named files attached, its events shown, --json's object."""
    for loaded in app.attach_named_files(agent, line):
        render.console.print(loaded, style="dim", markup=False)
    started = time.monotonic()
    events = schedules.run(line, show)
    render.close()
    if quiet:
        print_json(RunResult.from_events(session, first_run(events), model=agent.llm.spec,
                                         duration_s=time.monotonic() - started)
                   .describe_agent(agent).to_json())


SLASH_COMMANDS = ("goal", "compact", "rebuild", "shake", "rule", "max-children", "load", "heartbeat", "state",
                  "exit", "quit", "help")
POLL_S = 1.0  # how often chat, waiting at its prompt, looks at the jobs file


def read_line(prompt: str, schedules: app.ForegroundSchedules, on_due: Callable[[], object],
              *, out: TextIO | None = None, poll_s: float = POLL_S) -> str:
    """`input(prompt)`, except that on a terminal the due heartbeats and jobs fire while it
    waits: stdin is watched with select, the jobs file every `poll_s` (a job added by
    `rlm schedule` from another terminal is seen too); a due tick runs, then the prompt
    is shown again. A pipe is read as it is: its lines are there already. The prompt goes
    to `out` (stderr with --json: stdout carries only the JSON objects)."""
    out = out or sys.stdout
    out.write(prompt)
    out.flush()
    if not sys.stdin.isatty() or not schedules.active:
        return input()
    while True:
        wait = schedules.seconds_to_next_due()
        if wait == 0:
            out.write("\n")  # off the prompt line
            on_due()
            out.write(prompt)
            out.flush()
            continue
        # a terminal in canonical mode makes stdin readable only once a line is entered
        timeout = poll_s if wait is None else min(wait, poll_s)
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        if ready:
            return _line(sys.stdin.readline())


def _line(raw: str) -> str:
    if raw == "":
        raise EOFError
    return raw.rstrip("\n")


def _rebuild(agent: Agent) -> str:
    entry = app.rebuild_now(agent)
    ctl = agent.parts.get(CompactionController)
    writer = ctl.checkpoint if ctl is not None else None
    problem = writer.take_problem() if writer is not None else None
    why = f" (the checkpoint was not written: {problem})" if problem else ""
    if entry is None:
        if writer is None:
            return "nothing to rebuild: this session keeps no checkpoint"
        return "not rebuilt: no checkpoint makes the context smaller; /compact summarises" + why
    return rebuilt_line(entry) + why


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
        elif cmd == "rebuild":
            render.console.print(_rebuild(agent), markup=False)
        elif cmd == "shake":
            shaken = app.shake_now(agent)
            render.console.print("; ".join(relief_line(e) for e in shaken) or "nothing to shake",
                                 markup=False)
        elif cmd == "max-children":
            if len(rest) != 1 or not rest[0].isdigit():
                raise RlmError("/max-children N: how many children may run at once in this "
                               "session tree (0: unlimited)")
            agent.slots.allow(int(rest[0]))  # the ceiling a cell's rlm_max_children sees
            render.console.print(f"children at once: {int(rest[0]) or 'unlimited'}",
                                 markup=False)
        elif cmd == "rule":
            authored = rule_from_chat(agent, " ".join(rest))
            render.console.print(f"saved rule {authored.rule.name!r} to {authored.path}",
                                 markup=False)
        elif cmd == "goal":
            render.console.print(goal_command(agent, rest), markup=False)
        elif cmd == "heartbeat":
            render.console.print(heartbeat_command(agent.session, rest), markup=False)
        else:
            from rlm.spelling import did_you_mean

            hint = did_you_mean(f"/{cmd}", [f"/{c}" for c in SLASH_COMMANDS])
            render.console.print(f"unknown command /{cmd}; {hint or '/help lists them'}",
                                 markup=False)
    except (RlmError, ValueError, KeyError, TypeError) as e:
        render.console.print(f"/{cmd}: {e}", style="red", markup=False)
    return True
