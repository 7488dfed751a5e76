"""A console without colour (a pipe, a log file) gets its lines written directly
(rlm.cli.plain): byte for byte what rich draws, or rich draws it."""

import io
import random

import pytest
from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from rlm.cli.plain import PlainLines, plain_console
from rlm.cli.render import Renderer, _console

ALPHABET = list("abc xyz(){}=_.:'\"#\\[]/") + ["  ", "─", "✓", "日本", "😀", "é", "e\u0301", "[bold]",
                                               "[/]", "\u200b", "\t"]


def _pipe(width: int = 80) -> Console:
    c = Console(file=io.StringIO(), highlight=False, width=width)
    c.soft_wrap = True
    return c


def _rich(draw, width: int = 80) -> str:
    c = _pipe(width)
    draw(c)
    return c.file.getvalue()


def _plain(draw, width: int = 80) -> str | None:
    c = _pipe(width)
    return c.file.getvalue() if draw(PlainLines(c)) else None


def _text(rng: random.Random, lines: int, longest: int) -> str:
    return "\n".join("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, longest)))
                     for _ in range(lines))


@pytest.mark.parametrize("seed", range(4))
def test_lines_rules_and_boxes_are_what_rich_draws(seed):
    rng = random.Random(seed)
    drawn = {"line": 0, "rule": 0, "box": 0}
    for _ in range(1500):
        width = rng.choice([20, 40, 80, 81, 120])
        text, title = _text(rng, 1, 100), _text(rng, 1, 12).replace("\t", " ")
        cases = {
            "line": (lambda c, t=text: c.print(Text(t, style="dim")),
                     lambda p, t=text: p.line(t)),
            "rule": (lambda c, t=title: c.rule(t, style="dim"), lambda p, t=title: p.rule(t)),
        }
        code = _text(rng, rng.randint(1, 6), rng.choice([10, 40, 90]))
        cases["box"] = (lambda c, t=code, h=title: c.print(Panel(
            Text(t, tab_size=4), title=h, title_align="left", border_style="blue")),
            lambda p, t=code, h=title: p.box(t, h))
        for kind, (rich_draw, plain_draw) in cases.items():
            mine = _plain(plain_draw, width)
            if mine is not None:
                drawn[kind] += 1
                assert mine == _rich(rich_draw, width), (kind, width, text, title, code)
    assert min(drawn.values()) > 150, drawn  # each kind was drawn directly, often


def test_only_a_console_without_colour_that_wraps_nothing_is_written_directly(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert plain_console(_console(quiet=False))  # under pytest stdout is not a terminal
    assert not plain_console(Console(file=io.StringIO(), force_terminal=True))
    assert not plain_console(Console(file=io.StringIO(), record=True, soft_wrap=True))
    assert not plain_console(Console(file=io.StringIO()))  # wraps at its width


def test_a_steps_lines_into_a_pipe_are_rich_s_lines(tmp_path):
    """The renderer through a pipe: the same bytes with and without the direct writer."""
    from rlm import events as ev

    def draw(direct: bool) -> str:
        r = Renderer(console=_pipe(), animate=False)
        assert r.plain is not None
        if not direct:
            r.plain = None
        r(ev.TurnStarted(turn=3))
        r(ev.ModelCallStarted(model="script", prompt_tokens=1234))
        r(ev.ModelReply(content="Let me look.\n```python\nx = 1\n```", code_cells=["x = 1"],
                        usage={"input_tokens": 10, "output_tokens": 4}))
        r(ev.CellStarted(code="x = 1\nprint(x)\n" + "y" * 90, index=0))  # wraps: rich
        r(ev.CellFinished(code="", status="ok", shaped="1", duration_s=0.01))
        r(ev.CellStarted(code="x = 1\nprint(x)", index=1))
        r(ev.CellOutput(text="1\n2", name="stdout"))
        r(ev.CellFinished(code="", status="error", shaped="1\n2\n[rlm: why]", duration_s=0.5))
        r(ev.CellStarted(code="for i in x:\n\tpass", index=2))  # a tab: rich
        r(ev.CellFinished(code="", status="ok", shaped="", duration_s=0.01))
        assert "turn 3" in r.console.file.getvalue()
        return r.console.file.getvalue()

    assert draw(True) == draw(False)
