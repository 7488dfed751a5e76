"""`%%rlm` and `%rlm_state`: the agent inside the user's own notebook kernel.

    %load_ext rlm
    %%rlm --model script:replies.json --max-turns 5 [--goal "keep going until ..."]
    Which column of df has the most missing values?

The agent's cells run in-process through the live shell (see `inprocess.py`), so they see
the user's variables and leave theirs behind. One on-disk session per kernel, reused by
every `%%rlm` cell (`rlm log` / `rlm export` work on it). Rendering: each agent cell's code
appears as it starts, its real outputs stream into this cell's output area as it runs, a
status line follows a cell that failed, and the final answer is shown as Markdown.
Ctrl-C / the stop button ends the run cleanly (the interrupted cell is recorded).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from rlm.agent.loop import Agent
from rlm.app import GAPS, RunOptions, SessionRun
from rlm.config import Config, load_config
from rlm.errors import RlmError
from rlm.events import (
    CellFinished,
    CellStarted,
    Compacted,
    Event,
    FinalAnswer,
    ModelReply,
    Notice,
    Phase,
    RunEnded,
)
from rlm.protocols import SessionLog

if TYPE_CHECKING:
    from rlm.notebook.inprocess import InProcessExecutor

_FENCE = re.compile(r"```[^\n]*\n.*?```", re.DOTALL)


class NotebookAgent:
    """Plain class behind the magics: one session per shell, held (with its writer lock)
    for as long as the kernel lives. Each `%%rlm` cell is one run of an agent assembled by
    the composition root (entry "notebook") over the notebook's own kernel."""

    def __init__(self, shell: Any):
        self.shell = shell
        self.current: SessionRun | None = None
        self.executor: InProcessExecutor | None = None

    def _executor(self, session: SessionLog, config: Config) -> InProcessExecutor:
        from rlm.notebook.inprocess import InProcessExecutor

        assert session.dir is not None  # created on disk
        self.executor = InProcessExecutor(self.shell, session.dir, config)
        return self.executor

    def agent(self, options: RunOptions, task: str) -> Agent:
        """The first `%%rlm` enters the kernel's SessionRun (session, lock, agent); later
        cells rebuild the agent for their flags over the same session and executor."""
        if self.current is None:
            run = SessionRun.new("notebook", task, options, executor_factory=self._executor)
            # this kernel is the session's one writer for as long as it lives (released by
            # the OS when the kernel exits): `rlm goal`/`rlm resume` on it are refused
            run.__enter__()
            self.current = run
            assert run.agent is not None
            return run.agent
        return self.current.rebuild(options)  # its notes: filtered as the first run's

    def run(self, task: str, *, model: str | None = None, max_turns: int | None = None,
            goal: str | None = None, verbose: bool = False) -> None:
        try:
            flags = {"model": model, "max_turns": max_turns}
            options = RunOptions(overrides={k: v for k, v in flags.items() if v is not None},
                                 goal=goal)
            agent = self.agent(options, task)
            if not verbose:  # what every %%rlm session does differently: said on request
                same_every_time = {g.message for g in GAPS.get("notebook", {}).values()}
                agent.notices = [n for n in agent.notices if n.text not in same_every_time]
        except RlmError as e:
            _show(f"**rlm:** {e}")
            return
        executor = self.executor
        assert executor is not None and self.current is not None
        executor.on_user_interrupt = agent.stop
        _describe_user_data(agent)
        from kernel_ext import api

        try:
            with api.scoped(self.shell):  # final, goal, ... only while the run goes
                self.current.drive(task.strip(), render)
        except KeyboardInterrupt:
            _show("*Interrupted.*")
        except RlmError as e:
            _show(f"**rlm:** {e}")
        finally:
            executor.on_user_interrupt = None
            executor.set_bridge_handler(None)

    def state(self) -> None:
        from rlm.notebook.inprocess import InProcessExecutor

        ex = self.executor or InProcessExecutor(self.shell, ".", load_config())
        names = ex.list_namespace().get("names", [])
        session = self.current.session if self.current else None
        head = f"Session `{session.id}`" if session else "No %%rlm session yet"
        _show(head + "\n\n" + state_table(names))


def _describe_user_data(agent: Agent) -> None:
    """Tell the model what the notebook holds (its data are the user's variables)."""
    from rlm.agent.context_files import format_description
    from rlm.session.entries import CustomEntry

    assert agent.executor is not None  # the user's own kernel, started by the magic
    items = agent.executor.describe(None)
    text = format_description(items, origin="the user's notebook namespace")
    # the names are the run's inputs: the task's data an answer may be verified from
    names = [d["name"] for d in items if not d.get("alias") and isinstance(d.get("name"), str)]
    agent.attach_context(CustomEntry(custom_type="context_vars",
                                     data={"source": "notebook", "names": names},
                                     display=False, content=text))


def state_table(names: list[dict[str, Any]]) -> str:
    """Markdown table of a namespace listing (names, types, sizes, restorable or why not)."""
    if not names:
        return "*The namespace holds no user variables.*"
    unsnapshotted = all(str(n.get("reason") or "").startswith("snapshots disabled") for n in names)
    if unsnapshotted:  # the user's own kernel: rlm does not snapshot it, so say only that
        rows = ["| name | type | size |", "|---|---|---:|"]
        rows += [f"| `{n.get('name')}` | {n.get('type', '')} | {_size(n.get('bytes'))} |"
                 for n in names]
        return "\n".join(rows) + (
            "\n\n*This is your notebook's own kernel: rlm does not snapshot it (restarting "
            "it is yours to do), so nothing here is restored after a kernel restart.*")
    rows = ["| name | type | size | restorable |", "|---|---|---:|---|"]
    for n in names:
        ok = "yes" if n.get("restorable") else f"no ({n.get('reason') or 'unknown'})"
        rows.append(f"| `{n.get('name')}` | {n.get('type', '')} | "
                    f"{_size(n.get('bytes'))} | {ok} |")
    return "\n".join(rows)


def _size(n: Any) -> str:
    if not isinstance(n, int | float):
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return "?"


def _show(markdown: str) -> None:
    """Markdown for a notebook, the same text for terminal IPython (which shows no
    Markdown: a bare `display(Markdown(...))` printed `<IPython.core.display.Markdown
    object>` there)."""
    display({"text/markdown": markdown, "text/plain": markdown}, raw=True)


def render(ev: Event) -> None:
    """Show one loop event in the magic's output area (the cells' outputs show themselves)."""
    if isinstance(ev, ModelReply):
        prose = _FENCE.sub("", ev.content or "").strip()
        if prose:
            _show(f"*{prose}*" if "\n" not in prose else prose)
    elif isinstance(ev, CellStarted):
        _show(f"```python\n{ev.code.rstrip()}\n```")
    elif isinstance(ev, CellFinished) and ev.status != "ok":
        _show(f"*cell {ev.status} after {ev.duration_s:.2f} s*")
    elif isinstance(ev, Notice):
        _show(f"> {ev.text}")
    elif isinstance(ev, Phase) and not ev.done:
        _show(f"*{ev.text}...*")
    elif isinstance(ev, Compacted):
        _show(f"*Compacted the conversation ({ev.trigger}, "
                         f"{ev.tokens_before:,} tokens before); the kernel is untouched.*")
    elif isinstance(ev, FinalAnswer):
        _show(f"**Final answer:**\n\n{ev.answer}")
    elif isinstance(ev, RunEnded):  # the outcome decided once (rlm.outcome)
        _show(f"*Run ended after {ev.turns} turn(s): {ev.result.headline}*")


@magics_class
class RlmMagics(Magics):
    def __init__(self, shell: Any):
        super().__init__(shell)
        self.agent = NotebookAgent(shell)

    @magic_arguments()
    @argument("--model", default=None, help="litellm model string, local, or script:PATH")
    @argument("--max-turns", type=int, default=None, help="stop after this many model turns")
    @argument("--goal", default=None,
              help="set the session's goal first: the run continues until it is complete")
    @argument("--verbose", action="store_true",
              help="also show the notes on what %%%%rlm does differently from `rlm run`")
    @cell_magic
    def rlm(self, line: str, cell: str) -> None:
        """Run the agent on the task in the cell body, inside this kernel."""
        args = parse_argstring(self.rlm, line)
        if not cell.strip():
            _show("**rlm:** write the task in the cell body, below `%%rlm`.")
            return
        goal = args.goal.strip("'\"") if args.goal else None
        self.agent.run(cell, model=args.model, max_turns=args.max_turns, goal=goal,
                       verbose=args.verbose)

    @line_magic
    def rlm_state(self, line: str = "") -> None:
        """What the session knows of the namespace: names, types, sizes, restorable."""
        self.agent.state()


def load(ip: Any) -> None:
    ip.register_magics(RlmMagics)


def unload(ip: Any) -> None:
    for kind in ("cell", "line"):
        for name in ("rlm", "rlm_state"):
            ip.magics_manager.magics[kind].pop(name, None)
