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
