"""Terminal rendering of agent events with rich. The loop never prints; this does."""

from __future__ import annotations

import re
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

# Whole escape sequences (CSI, OSC up to BEL/ST, DCS/APC/PM/SOS strings, two-byte ESC x),
# then any control character left but newline and tab, C1 controls (U+0080-U+009F: 0x9B is
# a one-character CSI for some terminals) included.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]PX^_].*?(?:\x07|\x1b\\|$)|\x1b[ -~]?",
                      re.DOTALL)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """Text that came from the model, a cell or a file, made harmless for a terminal: no
    escape sequence (OSC 52 writes the clipboard, OSC 0 the title) and no control
    character survives; newlines and tabs do. Carriage returns become newlines."""
    if not text:
        return text
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\x1b" in text:
        text = _ESCAPES.sub("", text)
    return _CONTROLS.sub("", text)


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
        self.console.print(terminal_safe(f"session {session.id}: {session.path}"), style="dim",
                           markup=False)

    def _end_stream(self) -> None:
        if self._streaming:
            self.console.print()
            self._streaming = False

    def _TurnStarted(self, e: ev.TurnStarted) -> None:
        self._end_stream()
        self.console.rule(f"turn {e.turn}", style="dim")

    def _ModelText(self, e: ev.ModelText) -> None:
        self._streaming = True
        self.console.print(Text(terminal_safe(e.delta), style="dim"), end="")

    def _ModelReply(self, e: ev.ModelReply) -> None:
        if not self._streaming and e.content.strip() and not e.code_cells:
            self.console.print(Text(terminal_safe(e.content.strip()), style="dim"))
        self._end_stream()

    def _CellStarted(self, e: ev.CellStarted) -> None:
        self._end_stream()
        self.console.print(Panel(Syntax(terminal_safe(e.code.rstrip()), "python", theme="ansi_dark"),
                                 title="cell", title_align="left", border_style="blue"))

    def _CellFinished(self, e: ev.CellFinished) -> None:
        style = "green" if e.status == "ok" else "red"
        text = e.shaped if len(e.shaped) <= MAX_SHOWN_OUTPUT else (
            e.shaped[: MAX_SHOWN_OUTPUT // 2] + "\n[...]\n" + e.shaped[-MAX_SHOWN_OUTPUT // 2:])
        self.console.print(Panel(Text(terminal_safe(text.rstrip()) or "(no output)"),
                                 title=f"{e.status} · {e.duration_s:.2f}s",
                                 title_align="left", border_style=style))

    def _KernelRestarted(self, e: ev.KernelRestarted) -> None:
        self.console.print(f"[yellow]kernel restarted ({escape(terminal_safe(e.cause))}); restored "
                           f"{len(e.restored)} name(s), lost {len(e.lost)}[/yellow]")

    def _Compacted(self, e: ev.Compacted) -> None:
        self.console.print(f"[magenta]compacted ({e.trigger}, {e.tokens_before:,} tokens before)"
                           "[/magenta]")

    def _Notice(self, e: ev.Notice) -> None:
        self._end_stream()
        color = "yellow" if e.level == "warning" else "cyan"
        self.console.print(f"[{color}]{escape(terminal_safe(e.text))}[/{color}]")

    def _FinalAnswer(self, e: ev.FinalAnswer) -> None:
        self._end_stream()
        self.console.print(Panel(Markdown(terminal_safe(e.answer) or "(empty answer)"), title="answer",
                                 title_align="left", border_style="bold green"))

    def _RunEnded(self, e: ev.RunEnded) -> None:
        self._end_stream()
        detail = f": {escape(terminal_safe(e.detail))}" if e.detail else ""
        self.console.print(f"[dim]run ended ({e.reason}{detail}) after {e.turns} turn(s)[/dim]")
        if e.verified is False:
            self.console.print(f"[yellow]unverified answer: {escape(terminal_safe(e.why or ''))}"
                               "[/yellow]")


def print_json(obj: Any) -> None:
    import json

    sys.stdout.write(json.dumps(obj, indent=None, default=str) + "\n")
    sys.stdout.flush()
