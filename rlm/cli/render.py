"""Terminal rendering of agent events with rich. The loop never prints; this does."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from rlm import events as ev

MAX_SHOWN_OUTPUT = 4000


class Renderer:
    """Renders events as they arrive. `quiet` (for --json) sends progress to stderr."""

    def __init__(self, *, quiet: bool = False, console: Console | None = None):
        self.console = console or Console(stderr=quiet, highlight=False)
        self._streaming = False

    def __call__(self, event: ev.Event) -> None:
        handler = getattr(self, "_" + type(event).__name__, None)
        if handler is not None:
            handler(event)

    def session_line(self, session: Any) -> None:
        """Where the session lives, printed when a run or a chat ends."""
        self.console.print(f"session {session.id}: {session.path}", style="dim", markup=False)

    def _end_stream(self) -> None:
        if self._streaming:
            self.console.print()
            self._streaming = False

    def _TurnStarted(self, e: ev.TurnStarted) -> None:
        self._end_stream()
        self.console.rule(f"turn {e.turn}", style="dim")

    def _ModelText(self, e: ev.ModelText) -> None:
        self._streaming = True
        self.console.print(Text(e.delta, style="dim"), end="")

    def _ModelReply(self, e: ev.ModelReply) -> None:
        if not self._streaming and e.content.strip() and not e.code_cells:
            self.console.print(Text(e.content.strip(), style="dim"))
        self._end_stream()

    def _CellStarted(self, e: ev.CellStarted) -> None:
        self._end_stream()
        self.console.print(Panel(Syntax(e.code.rstrip(), "python", theme="ansi_dark"),
                                 title="cell", title_align="left", border_style="blue"))

    def _CellFinished(self, e: ev.CellFinished) -> None:
        style = "green" if e.status == "ok" else "red"
        text = e.shaped if len(e.shaped) <= MAX_SHOWN_OUTPUT else (
            e.shaped[: MAX_SHOWN_OUTPUT // 2] + "\n[...]\n" + e.shaped[-MAX_SHOWN_OUTPUT // 2:])
        self.console.print(Panel(Text(text.rstrip() or "(no output)"),
                                 title=f"{e.status} · {e.duration_s:.2f}s",
                                 title_align="left", border_style=style))

    def _KernelRestarted(self, e: ev.KernelRestarted) -> None:
        self.console.print(f"[yellow]kernel restarted ({escape(e.cause)}); restored "
                           f"{len(e.restored)} name(s), lost {len(e.lost)}[/yellow]")

    def _Compacted(self, e: ev.Compacted) -> None:
        self.console.print(f"[magenta]compacted ({e.trigger}, {e.tokens_before:,} tokens before)"
                           "[/magenta]")

    def _Notice(self, e: ev.Notice) -> None:
        self._end_stream()
        color = "yellow" if e.level == "warning" else "cyan"
        self.console.print(f"[{color}]{escape(e.text)}[/{color}]")

    def _FinalAnswer(self, e: ev.FinalAnswer) -> None:
        self._end_stream()
        self.console.print(Panel(Markdown(e.answer or "(empty answer)"), title="answer",
                                 title_align="left", border_style="bold green"))

    def _RunEnded(self, e: ev.RunEnded) -> None:
        self._end_stream()
        detail = f": {escape(e.detail)}" if e.detail else ""
        self.console.print(f"[dim]run ended ({e.reason}{detail}) after {e.turns} turn(s)[/dim]")


def print_json(obj: Any) -> None:
    import json

    sys.stdout.write(json.dumps(obj, indent=None, default=str) + "\n")
    sys.stdout.flush()
