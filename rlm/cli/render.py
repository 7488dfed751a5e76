"""Terminal rendering of agent events with rich. The loop never prints; this does."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.spinner import Spinner
from rich.syntax import Syntax
from rich.text import Text

from rlm import events as ev
from rlm.cli.plain import PlainLines, plain_console
from rlm.config import config_warnings, files_read
from rlm.ledger import Totals, of_replies
from rlm.llm.providers import in_process
from rlm.protocols import SessionLog

if TYPE_CHECKING:
    from rlm.agent.loop import Agent

MAX_SHOWN_OUTPUT = 4000

# Whole escape sequences (CSI, OSC up to BEL/ST, DCS/APC/PM/SOS strings, two-byte ESC x),
# then any control character left but newline and tab, C1 controls (U+0080-U+009F: 0x9B is
# a one-character CSI for some terminals) included, and the bidirectional overrides and
# isolates (U+202A-U+202E, U+2066-U+2069, U+200E/U+200F, U+061C): they reorder what
# the terminal shows, so a file name or an answer could read as something it is not.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]PX^_].*?(?:\x07|\x1b\\|$)|\x1b[ -~]?",
                      re.DOTALL)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


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


def _console(quiet: bool) -> Console:
    """On a terminal, lines wrap at its width (boxes drawn to fit); into a pipe or a log
    file, a line of text stays one line (a path, the config line: what grep and a test
    look for), boxes are still drawn at 80 columns."""
    console = Console(stderr=quiet, highlight=False)
    console.soft_wrap = not console.is_terminal
    return console


class Renderer:
    """Renders events as they arrive. `quiet` (for --json) sends progress to stderr."""

    def __init__(self, *, quiet: bool = False, console: Console | None = None,
                 animate: bool | None = None, clock: Callable[[], float] | None = None):
        self.console = console or _console(quiet)
        # what durations are measured on: `rlm attach` replays a worker's records on
        # their own timestamps (a 60 s run replayed in 0.1 s is still 60 s)
        self.clock: Callable[[], float] = clock or time.monotonic
        self._streaming = False
        # a spinner line only on a real terminal that takes control codes; elsewhere (a
        # pipe, a log file, TERM=dumb) plain lines
        c = self.console
        self.animate = (c.is_terminal and not c.is_dumb_terminal and c.color_system is not None
                        ) if animate is None else animate
        self._live: Live | None = None
        self._status = _Status(lambda: self.clock())
        self._draft = _Draft()
        self._code_index: int | None = None  # the native call being drafted (ModelCode)
        self._kids = _Children()  # a live line per running child (ChildProgress)
        self._base: Path | None = None  # the session dir: image paths are shown absolute
        self._model = ""
        self._text = _ProseFilter()
        self._cell_pending: str | None = None  # None: nothing streamed for this cell
        self._cell_shown = ""  # what this cell streamed so far
        self._run = _RunTotals(lambda: self.clock())
        self.turns_before = 0  # the session's turns before this run (numbers continue)
        # a pipe or a log file: lines written as rich would draw them, without rich
        self.plain = PlainLines(c) if plain_console(c) and not self.animate else None

    def _say(self, text: str, style: str = "") -> None:
        """One line of text (never wrapped on a console that wraps nothing)."""
        if self.plain is None or not self.plain.line(text):
            self.console.print(Text(text, style=style))

    def _box(self, body: str, title: str, border: str, code: bool = False) -> None:
        """`body` in a box titled `title` (a cell's code drawn as code where colour shows)."""
        if self.plain is None or not self.plain.box(body, title):
            self.console.print(Panel(self._code(body) if code else Text(body), title=title,
                                     title_align="left", border_style=border))

    # ------------------------------------------------------------ header / status
    def header(self, model: str, session: SessionLog, inputs: list[str] | None = None,
               task: str | None = None) -> None:
        """The first lines of a run: model, session id, the task, the inputs loaded."""
        self._model = model
        where = getattr(session, "dir", None)
        self._base = Path(where) if where else None
        self.console.print(Text(terminal_safe(f"rlm · model {model} · session {session.id}")),
                           style="bold")
        if task and task.strip():  # wrapped, never cut: what the run was asked
            self.console.print(Text("task: " + terminal_safe(task.strip())))
        read = files_read()  # which config files this run read (rlm.config)
        self.console.print(Text(terminal_safe("config: " + ("; ".join(read) if read else
                                              "no file (defaults, environment, flags)"))),
                           style="dim")
        for line in config_warnings():  # what an untrusted project file may not set
            self.console.print(Text(terminal_safe("warning: " + line)), style="yellow")
        if inputs:
            self.console.print(Text(terminal_safe("inputs: " + "; ".join(inputs))), style="dim")

    def phase(self, text: str) -> None:
        """A slow phase about to start (the kernel, its snapshot): said before it runs."""
        self.console.print(Text(terminal_safe(text) + "...", style="dim"))

    def restored(self, report: Any) -> None:
        """After a resume: which names came back from the snapshot and which did not."""
        from rlm.app.phases import restored_line

        line = restored_line(report)
        if line:
            self.console.print(Text(terminal_safe(line), style="dim"))

    def inputs_phase(self, files: list[str]) -> None:
        """`loading 2 input file(s): sales.csv, regions.json...` before they load."""
        if files:
            self.phase(f"loading {len(files)} input file(s): {', '.join(files)}")

    def _start_status(self, label: str) -> None:
        self._status.start(label)
        self._spin()

    def _spin(self) -> None:
        if self.animate and self._live is None:
            # above the spinner: the code the model is writing, as it is written (a
            # transient draft; the cell's box shows it once when it runs)
            self._live = Live(Group(self._draft, self._kids,
                                    Spinner("dots", text=self._status, style="cyan")),
                              console=self.console, transient=True, refresh_per_second=8)
            self._live.start()

    def close(self) -> None:
        """Stop the spinner (also at the end of every run); idempotent."""
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()

    def __call__(self, event: ev.Event) -> None:
        handler = getattr(self, "_" + type(event).__name__, None)
        if handler is not None:
            handler(event)

    def session_line(self, session: SessionLog) -> None:
        """Where the session lives, printed when a run or a chat ends."""
        self.console.print(terminal_safe(f"session {session.id}: {session.path}"), style="dim",
                           markup=False)

    def _end_stream(self) -> None:
        self._draft.lines = []
        if self._streaming:  # a reply cut off (an error mid-stream): show what came
            self.close()
            for line in self._text.finish([]):
                self.console.print(Text(line, style="dim"))
            self._streaming = False

    def continue_turns(self, session: SessionLog) -> None:
        """Turn numbers continue the session's (a resume, a chat's next prompt)."""
        from rlm.session.branch import reply_count

        self.turns_before = reply_count(session.branch(), failed=True)  # no entry read

    def _TurnStarted(self, e: ev.TurnStarted) -> None:
        self._end_stream()
        self._run.begin()
        title = f"turn {self.turns_before + e.turn}"
        if self.plain is None or not self.plain.rule(title):
            self.console.rule(title, style="dim")

    def _ModelCallStarted(self, e: ev.ModelCallStarted) -> None:
        self._run.begin()
        self._code_index = None
        self._model = self._model or e.model
        self._text = _ProseFilter()
        self._status.prompt_tokens = e.prompt_tokens
        self._status.generated = 0
        size = f" ({e.prompt_tokens:,} prompt tokens)" if e.prompt_tokens is not None else ""
        if not self.animate:
            self._say(terminal_safe(f"calling {e.model}{size}..."), "dim")
        self._start_status(f"{e.model}: reading the prompt{size}")

    def _ModelText(self, e: ev.ModelText) -> None:
        self._streaming = True
        self._status.generated += 1
        self._status.label = f"{self._model or 'model'}: writing"
        for line in self._text.feed(terminal_safe(e.delta)):
            self.console.print(Text(line, style="dim"))
        self._draft.lines = self._text.draft()

    def _ModelCode(self, e: ev.ModelCode) -> None:
        """A native tool call's code as it is written: drafted live above the spinner like
        a fenced cell's (its box shows it once when it runs)."""
        if e.index != self._code_index:
            self._code_index, self._draft.lines = e.index, []
        self._status.label = f"{self._model or 'model'}: writing a cell"
        self._draft.lines.extend(terminal_safe(x) for x in e.lines)

    def _ModelReply(self, e: ev.ModelReply) -> None:
        self._draft.lines = []
        self.close()
        if not self._streaming and e.content.strip():
            self._text.feed(terminal_safe(e.content.strip()))
        # code blocks are shown once, in their cell panels: only prose is printed here
        for line in self._text.finish(e.code_cells):
            self._say(line, "dim")
        self._streaming = False
        self._run.add(e.usage)
        took = self._status.elapsed()
        u = e.usage or {}
        tokens = (f" · {u.get('input_tokens', 0):,} prompt + {u.get('output_tokens', 0):,} "
                  "generated tokens" if u.get("input_tokens") or u.get("output_tokens") else "")
        self._say(f"model {took:.1f}s{tokens}", "dim")

    def _CellStarted(self, e: ev.CellStarted) -> None:
        self._end_stream()
        self.close()
        # long lines wrap inside the box: every character of the code that runs is shown
        self._box(terminal_safe(e.code.rstrip()), "cell", "blue", code=True)
        self._cell_pending, self._cell_shown = None, ""
        self._status.generated = 0
        self._start_status("running the cell")

    def _code(self, code: str) -> Syntax | Text:
        """A cell's code: highlighted where colour shows; on a console without colour (a
        pipe, a log file, NO_COLOR) plain, the same characters in a quarter of the time."""
        if self.console.color_system is None:
            return Text(code, tab_size=4)  # Syntax's tab size
        return Syntax(code, "python", theme="ansi_dark", word_wrap=True)

    def _CellOutput(self, e: ev.CellOutput) -> None:
        text = (self._cell_pending or "") + terminal_safe(e.text)
        self._cell_shown += terminal_safe(e.text)
        *lines, self._cell_pending = text.split("\n")
        style = {"stderr": "yellow", "error": "red"}.get(e.name, "")
        for line in lines:
            self._say(line, style)

    def _CellFinished(self, e: ev.CellFinished) -> None:
        self.close()
        style = "green" if e.status == "ok" else "red"
        if e.result is not None:
            self._run.images += [str(self._base / p) if self._base else p
                                 for o in e.result.outputs for mime, p in (o.refs or {}).items()
                                 if mime.startswith("image/")]
        streamed, self._cell_pending = self._cell_pending, None
        shown, self._cell_shown = self._cell_shown, ""
        if streamed is not None:
            if streamed:
                self._say(streamed)
            # the output was shown as it was printed: only what it did not hold (why an
            # interrupted or timed-out cell ended; the host's note on a failed one, such as
            # the sandbox's missing network), then the outcome; never the output twice
            if e.status != "ok":
                seen = set(shown.splitlines())
                for line in terminal_safe(e.shaped).splitlines():
                    if line.strip() and line not in seen and (
                            e.status != "error" or line.startswith("[rlm: ")):
                        self._say(line, "dim")
            self._say(f"{'✓' if e.status == 'ok' else '✗'} {e.status} · {e.duration_s:.2f}s",
                      style)
            return
        text = e.shaped if len(e.shaped) <= MAX_SHOWN_OUTPUT else (
            e.shaped[: MAX_SHOWN_OUTPUT // 2] + "\n[...]\n" + e.shaped[-MAX_SHOWN_OUTPUT // 2:])
        self._box(terminal_safe(text.rstrip()) or "(no output)",
                  f"{e.status} · {e.duration_s:.2f}s", style)

    def _ChildProgress(self, e: ev.ChildProgress) -> None:
        """A running child keeps one live line above the spinner (a plain terminal or a
        pipe: one line when it starts); its end is printed once, with what it spent."""
        line = terminal_safe(f"child {e.name}: {e.state} · {e.turns} turn(s) · "
                             f"{e.tokens:,} tokens · {e.seconds:.1f}s")
        if e.state in ("queued", "running"):
            new = e.name not in self._kids.lines
            self._kids.lines[e.name] = line
            if new and not self.animate:
                self.console.print(Text(line, style="dim"))
            return
        self._kids.lines.pop(e.name, None)
        why = f": {terminal_safe(e.error)[:200]}" if e.error else ""
        self.console.print(Text(line + why, style="green" if e.state == "done" else "red"))
        if e.note:
            self.console.print(Text(terminal_safe(e.note), style="yellow"))

    def _KernelRestarted(self, e: ev.KernelRestarted) -> None:
        self.console.print(f"[yellow]kernel restarted ({escape(terminal_safe(e.cause))}); restored "
                           f"{len(e.restored)} name(s), lost {len(e.lost)}[/yellow]")

    def _Phase(self, e: ev.Phase) -> None:
        """A step between turns named as it runs (a gate, a compaction's summary)."""
        self._end_stream()
        if e.done:
            self.close()
            return
        text = terminal_safe(e.text)
        if not self.animate:
            self._say(text + "...", "dim")
        self.close()
        self._status.generated = 0
        self._start_status(text)

    def _Compacted(self, e: ev.Compacted) -> None:
        self.console.print(f"[magenta]compacted ({e.trigger}, {e.tokens_before:,} tokens before)"
                           "[/magenta]")

    def _Notice(self, e: ev.Notice) -> None:
        self._end_stream()
        spinning = self._live is not None
        self.close()  # the spinner goes below the notice, not into the scrollback
        color = "yellow" if e.level == "warning" else "cyan"
        self.console.print(Text(terminal_safe(e.text), style=color))
        if spinning:
            self._spin()

    def _FinalAnswer(self, e: ev.FinalAnswer) -> None:
        self._end_stream()
        answer = terminal_safe(e.answer) or "(empty answer)"
        body = Markdown(answer) if len(answer) <= MARKDOWN_CAP else Text(answer)
        self.console.print(Panel(body, title="answer", title_align="left",
                                 border_style="bold green"))

    def _RunEnded(self, e: ev.RunEnded) -> None:
        self._end_stream()
        self.close()
        detail = f": {escape(terminal_safe(e.detail))}" if e.detail else ""
        self.console.print(f"[dim]run ended ({e.reason}{detail}) after {e.turns} turn(s)[/dim]")
        self.turns_before += e.turns
        outcome = e.result  # decided once (rlm.outcome): the line says what it says
        if outcome.status == "answered":
            self.console.print(Text(outcome.headline, style="bold green"))
        else:  # a limit or a stop already said why, on the line above
            said = outcome.answered or outcome.status == "unmet"
            self.console.print(Text(terminal_safe(outcome.headline if said else "not answered"),
                                    style="yellow"))
        self._footer(e.turns, Totals.from_dict(e.tokens))

    def _footer(self, turns: int, spent: Totals | None) -> None:
        """Turns, every token the run spent (by role, as its end recorded them; the
        replies' usage for an older worker's run), time, the cost of them all where the
        model's price is known, and where the run's images are."""
        r, self._run = self._run, _RunTotals(lambda: self.clock())
        spent = spent or of_replies(r.usages)
        parts = [f"{turns} turn(s)", spent.line(), f"{r.elapsed():.1f}s"]
        cost = _cost(self._model, spent.prompt, spent.completion)
        if cost is not None:
            parts.append(f"${cost:.4f}")
        self.console.print(Text(" · ".join(parts), style="dim"))
        for path in r.images:
            self.console.print(Text(terminal_safe(f"image: {path}"), style="dim"), soft_wrap=True)


_SIZE = re.compile(r"^([\d,]+) rows x (\d+) columns$")


def input_summaries(agent: Agent) -> list[str]:
    """`orders: DataFrame 3,000×7` for each input variable the run was given."""
    names = sorted(agent.input_names())
    if not names or agent.executor is None:
        return []
    try:
        items = agent.executor.describe(names, timeout=10.0)
    except Exception:  # noqa: BLE001 - the header is best effort
        return names
    out = []
    for item in items:
        kind = str(item.get("type") or "").rsplit(".", 1)[-1]
        size = str(item.get("size") or "")
        m = _SIZE.match(size)
        short = f"{kind} {m.group(1)}×{m.group(2)}" if m else f"{kind} {size}".strip()
        out.append(f"{item.get('name')}: {short}")
    return out


class _Status:
    """The spinner's text, computed at each refresh: elapsed time and token counts."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.label = ""
        self.started = clock()
        self.prompt_tokens: int | None = None
        self.generated = 0

    def start(self, label: str) -> None:
        self.label, self.started = label, self.clock()

    def elapsed(self) -> float:
        return max(0.0, self.clock() - self.started)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        gen = f" · {self.generated:,} tokens generated" if self.generated else ""
        yield Text(f"{terminal_safe(self.label)} · {self.elapsed():.0f}s{gen}", style="cyan")


class _Children:
    """One line per running child, shown live above the spinner."""

    def __init__(self) -> None:
        self.lines: dict[str, str] = {}

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in list(self.lines.values()):
            yield Text(line, style="cyan")


class _Draft:
    """The code the model is writing (a fence, or a native call's), shown live above the
    spinner (last lines)."""

    MAX_LINES = 12

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.lines:
            shown = self.lines[-self.MAX_LINES:]
            if len(self.lines) > len(shown):
                shown = [f"... {len(self.lines) - len(shown)} line(s) above", *shown]
            yield Text("\n".join(shown), style="dim")


class _RunTotals:
    """What one run cost, for the footer."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started: float | None = None
        self.usages: list[dict[str, int] | None] = []  # the replies'
        self.images: list[str] = []

    def begin(self) -> None:
        if self.started is None:
            self.started = self.clock()

    def add(self, usage: dict[str, int] | None) -> None:
        self.usages.append(usage)

    def elapsed(self) -> float:
        return max(0.0, self.clock() - self.started) if self.started is not None else 0.0


_FENCE_LINE = re.compile(r"^\s*```")
_FINAL_LINE = re.compile(r"^\s*FINAL(?:_VAR)?\(")


# Model prose echoed per reply, at most: a reply that is the answer is shown again in the
# answer panel, and a runaway reply must not flood the terminal twice.
ECHO_CAP = 8_000
# Answers longer than this are printed as plain text (rich's Markdown of 512 KB takes
# seconds and the markup of such an answer is not the point).
MARKDOWN_CAP = 50_000


class _ProseFilter:
    """Streamed model text, line by line, with fenced code held back: code is shown once,
    in its cell panel. A fence that did not become a cell is printed when the reply ends."""

    def __init__(self) -> None:
        self.pending = ""
        self.fence: list[str] | None = None  # lines of the fence being read
        self.fences: list[list[str]] = []
        self.shown = self.hidden = 0  # prose characters echoed / held back (ECHO_CAP)

    def _prose(self, line: str) -> list[str]:
        room = ECHO_CAP - self.shown
        if len(line) >= room:
            self.hidden += len(line) + 1 - max(room, 0)
            self.shown = ECHO_CAP
            return [line[:room]] if room > 0 else []
        self.shown += len(line) + 1
        return [line]

    def _line(self, line: str) -> list[str]:
        if _FENCE_LINE.match(line):
            if self.fence is None:
                self.fence = [line]
            else:
                self.fences.append(self.fence + [line])
                self.fence = None
            return []
        if self.fence is not None:
            self.fence.append(line)
            return []
        if _FINAL_LINE.match(line):  # the answer: shown once, in its own panel
            return []
        return self._prose(line)

    def feed(self, text: str) -> list[str]:
        if self.shown >= ECHO_CAP and self.fence is None and "```" not in text:
            self.hidden += len(text)  # past the cap: counted, not kept
            return []
        out: list[str] = []
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            out += self._line(line)
        if len(self.pending) > ECHO_CAP and self.fence is None:  # one endless line
            out += self._prose(self.pending)
            self.pending = ""
        return out

    def draft(self) -> list[str]:
        """The code of the fence being written so far (its opening line left out)."""
        if self.fence is None:
            return []
        return self.fence[1:] + ([self.pending] if self.pending else [])

    def finish(self, code_cells: list[str]) -> list[str]:
        out = self._line(self.pending) if self.pending else []
        self.pending = ""
        if self.fence is not None:
            self.fences.append(self.fence)
            self.fence = None
        cells = {c.strip() for c in code_cells}
        for f in self.fences:
            body = "\n".join(x for x in f if not _FENCE_LINE.match(x)).strip()
            if body and body not in cells and not body.startswith(("FINAL", "Final")):
                out += f
        self.fences = []
        while out and not out[-1].strip():
            out.pop()
        while out and not out[0].strip():
            out.pop(0)
        if self.hidden:
            out.append(f"... {self.hidden:,} more characters of this reply not echoed (the "
                       "answer below and the session log hold all of it)")
            self.hidden = 0
        return out


def _cost(model: str, input_tokens: int, output_tokens: int) -> float | None:
    """The run's cost from litellm's bundled price table, every token at the run model's
    price (a child or sub-call on another model is priced as this one); None for local and scripted
    models (they cost nothing to call) and for models litellm has no price for."""
    if not model or in_process(model):
        return None
    try:
        from rlm.llm.seam import usage_cost

        return usage_cost(model, input_tokens, output_tokens)
    except Exception:  # noqa: BLE001 - a footer never fails a run
        return None


def print_json(obj: Any) -> None:
    import json

    sys.stdout.write(json.dumps(obj, indent=None, default=str) + "\n")
    sys.stdout.flush()
