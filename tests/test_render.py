"""The terminal renderer shows model/kernel text verbatim: text with rich markup in it
(`[/bold]`, `[redacted]`) must neither crash the renderer nor be swallowed."""

import io

from rich.console import Console

from rlm import events as ev
from rlm.cli.render import Renderer

HOSTILE = "weird [/bold] text [redacted] [red]not red[/red]"


def test_hostile_text_is_shown_verbatim():
    buf = io.StringIO()
    r = Renderer(console=Console(file=buf, width=200, color_system=None))
    for e in (ev.Notice(HOSTILE), ev.KernelRestarted(cause=HOSTILE),
              ev.CellStarted(code=f"print({HOSTILE!r})", index=0),
              ev.CellFinished(code="x", status="ok", shaped=HOSTILE, duration_s=0.1),
              ev.ModelText(HOSTILE), ev.FinalAnswer(answer=HOSTILE, source="final"),
              ev.RunEnded(reason="error", turns=1, detail=HOSTILE)):
        r(e)
    out = buf.getvalue()
    assert out.count("[redacted]") >= 6 and out.count("[/bold]") >= 6


ESCAPES = ("\x1b]52;c;aGVsbG8=\x07"  # OSC 52: write the clipboard
           "\x1b]0;pwned\x1b\\"  # OSC 0: set the title
           "\x1b[2J\x1b[31m"  # CSI: clear the screen, colour
           "\x9b2J\x07\x08\x00")  # C1 CSI, bell, backspace, NUL


def test_escape_sequences_from_the_model_kernel_or_data_never_reach_the_terminal():
    """Model text (also split mid-sequence across streamed deltas), cell code and output,
    notices and the final answer (which can come from hostile data via final(var))."""
    buf = io.StringIO()
    r = Renderer(console=Console(file=buf, width=200, color_system=None, force_terminal=True))
    hostile = f"before {ESCAPES} after"
    half = len("before \x1b]5")
    for e in (ev.ModelText(hostile[:half]), ev.ModelText(hostile[half:]),
              ev.ModelReply(content=hostile, code_cells=[], usage={}),
              ev.Notice(hostile), ev.KernelRestarted(cause=hostile),
              ev.CellStarted(code=f"print({hostile!r})", index=0),
              ev.CellFinished(code="x", status="ok", shaped=hostile, duration_s=0.1),
              ev.FinalAnswer(answer=hostile, source="final"),
              ev.RunEnded(reason="error", turns=1, detail=hostile)):
        r(e)
    out = buf.getvalue()
    for bad in ("\x1b", "\x07", "\x9b", "\x00", "\x08"):
        assert bad not in out, (bad, out)
    assert out.count("before") >= 7 and out.count("after") >= 7


def test_rlm_log_tree_and_sessions_print_no_escape_sequences(tmp_path, _isolated_home):
    """The session log holds model text and cell output verbatim (hostile data included);
    printing it with `rlm log`, `rlm tree` or `rlm sessions` must not reach the terminal raw."""
    import os
    import subprocess
    import sys

    from rlm.session.entries import MessageEntry
    from rlm.session.store import SessionStore

    s = SessionStore.create(_isolated_home, model="script:x", task=f"task {ESCAPES}")
    s.append(MessageEntry(message={"role": "user", "content": f"question {ESCAPES}"}))
    s.append(MessageEntry(message={"role": "assistant", "content": f"answer {ESCAPES}"}))
    s.close()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    for args in (["log", s.id], ["log", s.id, "--all"], ["tree", s.id], ["sessions"]):
        out = subprocess.run([sys.executable, "-m", "rlm", *args], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        for bad in ("\x1b", "\x07", "\x9b"):
            assert bad not in out.stdout, (args, out.stdout)
        assert "answer" in out.stdout or "task" in out.stdout or args[0] == "tree", out.stdout


CELLS = ["x = [" + ", ".join(str(i * 7919) for i in range(60)) + "]",
         "def f():\n\treturn 1\n\n\n  # trailing   ", "é = 'ü' * 3\nprint('漢字' * 50)",
         f"print({HOSTILE!r})", ""]


def test_a_cell_on_a_console_without_colour_shows_what_highlighting_would():
    """Without colour (a pipe, a log file) a cell is drawn as plain text, not lexed: the
    same characters as the highlighted box (lexing was ~0.6 ms of a step's ~1 ms of
    drawing); with colour it is highlighted."""
    from rich.panel import Panel
    from rich.syntax import Syntax

    for code in CELLS:
        got, want = io.StringIO(), io.StringIO()
        Renderer(console=Console(file=got, width=100, color_system=None))(
            ev.CellStarted(code=code, index=0))
        Console(file=want, width=100, color_system=None).print(Panel(
            Syntax(code.rstrip(), "python", theme="ansi_dark", word_wrap=True),
            title="cell", title_align="left", border_style="blue"))
        assert got.getvalue() == want.getvalue()
    coloured = io.StringIO()
    Renderer(console=Console(file=coloured, width=100, color_system="256",
                             force_terminal=True))(ev.CellStarted(code="def f(): pass", index=0))
    before = coloured.getvalue().split("def")[0]
    assert before.endswith("m") and "\x1b[" in before[-12:]  # the keyword's own style
