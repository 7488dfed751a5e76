"""A run's lines on a console that shows no colour and wraps nothing (a pipe, a log file):
the characters rich would write, written directly.

On such a console rich spends 50-200 us a line on styles it then drops; a step draws six
or seven lines while the next step waits for the GIL (bench/RESULTS.md, issue 32). Each
writer here returns False for what it does not draw exactly as rich would (a tab, a line
wider than its box, a console that records or is quiet), and the caller asks rich then.
tests/test_render_plain.py holds the two to the same bytes."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console


def plain_console(console: Console) -> bool:
    """Lines reach the file as they are: no colour, no wrapping, no recording, UTF-8."""
    return (console.color_system is None and console.soft_wrap and not console.record
            and not console.quiet and not console.is_terminal
            and console.encoding.lower().replace("-", "").startswith("utf"))


def _title(title: str) -> bool:
    """A title rich draws as it is: no markup (rich reads a title's brackets), one line."""
    return bool(title.strip()) and not any(c in title for c in "[\t\n")


class PlainLines:
    """Writes lines, rules and boxes to `console.file` as rich draws them without colour."""

    def __init__(self, console: Console):
        self.console = console

    def _write(self, text: str) -> None:
        f = self.console.file
        f.write(text)
        f.flush()  # as rich does after each print: `tail -f` of a log sees the line now

    def line(self, text: str) -> bool:
        """One line of text, never wrapped."""
        if "\t" in text or "\n" in text:
            return False
        self._write(text + "\n")
        return True

    def rule(self, title: str) -> bool:
        """A rule across the console with `title` in its middle."""
        width = self.console.width
        label = f" {title} "
        if not _title(title) or cell_len(label) + 2 > width:
            return False
        left = (width - cell_len(label)) // 2
        self._write("─" * left + label + "─" * (width - left - cell_len(label)) + "\n")
        return True

    def box(self, text: str, title: str) -> bool:
        """`text` in a rounded box as wide as the console, `title` on its top left; only
        when every line fits inside without wrapping."""
        width = self.console.width
        inner = width - 4
        rows = text.split("\n")
        if not _title(title) or "\t" in text or cell_len(title) + 6 > width:
            return False
        cells = [cell_len(r) for r in rows]
        if max(cells) > inner:
            return False
        top = "╭─ " + title + " " + "─" * (width - 5 - cell_len(title)) + "╮"
        body = ["│ " + r + " " * (inner - n) + " │" for r, n in zip(rows, cells, strict=True)]
        self._write("\n".join([top, *body, "╰" + "─" * (width - 2) + "╯"]) + "\n")
        return True
