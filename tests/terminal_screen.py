"""A real terminal for CLI tests: `rlm ...` run inside tmux at 80x50, what the screen
showed captured (scrollback included) as the user would have read it. Waits poll the
captured screen for a marker (no sleeps as synchronisation); each test has its own tmux
server (`-L`), killed at the end.

    with Screen(["run", "t", "--model", m], cwd=tmp_path) as scr:
        scr.wait_for("rlm> ")
        scr.keys("C-c")
        text = scr.wait_exit()
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal as signal_
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

WIDTH, HEIGHT = 80, 50


def need_tmux() -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")


class Screen:
    def __init__(self, argv: list[str], *, cwd: Path, env: dict[str, str] | None = None,
                 width: int = WIDTH, timeout: float = 420.0):
        need_tmux()
        self.sock = f"rlm-test-{uuid.uuid4().hex[:10]}"
        self.deadline = time.monotonic() + timeout
        base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        base.pop("COLUMNS", None)
        base.pop("LINES", None)
        base.update(env or {})
        conf = cwd / f".{self.sock}.conf"
        conf.write_text("set -g remain-on-exit on\nset -g history-limit 100000\n"
                        "set -g status off\n")
        cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-P", "-m", "rlm", *argv])
        # the server takes the environment of the client that starts it
        subprocess.run(["tmux", "-L", self.sock, "-f", str(conf), "new-session", "-d",
                        "-x", str(width), "-y", str(HEIGHT), "-c", str(cwd), cmd],
                       env=base, check=True, timeout=30)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True,
                              text=True, timeout=30).stdout

    def text(self, *, joined: bool = True) -> str:
        """The screen and its scrollback, one terminal line per line (trailing blanks cut);
        `joined` (the default): lines the terminal wrapped are joined back, so a line wider
        than the screen is longer than WIDTH; `joined=False`: the rows as the screen has them."""
        out = self._tmux("capture-pane", "-p", "-S", "-", "-E", "-", *(["-J"] if joined else []))
        lines = [line.rstrip() for line in out.splitlines()
                 if not line.startswith("Pane is dead (")]  # tmux's remain-on-exit line
        return "\n".join(lines).rstrip("\n")

    def dead(self) -> int | None:
        """The command's exit status once it has exited, else None."""
        dead, status, signal, server = (self._tmux(
            "display-message", "-p",
            "#{pane_dead}|#{pane_dead_status}|#{pane_dead_signal}|#{pid}")
            .strip().split("|") + ["", "", ""])[:4]
        if dead != "1" or not (status or signal):  # tmux sets the status just after
            if dead == "1" and server.isdigit():
                # tmux 3.3a, loaded machine: the pane's process is a zombie tmux never
                # reaped (its SIGCHLD was lost; seen in CI, the screen complete, "still
                # running" for 420 s). Another SIGCHLD makes it reap and record the status.
                with contextlib.suppress(OSError):
                    os.kill(int(server), signal_.SIGCHLD)
            return None
        return int(status) if status else 128 + int(signal)

    def wait_for(self, marker: str, *, after: int = 0) -> str:
        """The screen once `marker` is on it (searched from character `after`)."""
        while True:
            text = self.text()
            if marker in text[after:]:
                return text
            if self.dead() is not None:
                raise AssertionError(f"{marker!r} never appeared; the command exited:\n{text}")
            if time.monotonic() > self.deadline:
                raise AssertionError(f"{marker!r} never appeared:\n{text}")
            time.sleep(0.05)  # polling the screen, not waiting for time to pass

    def wait_exit(self) -> tuple[int, str]:
        """The exit status and the final screen."""
        while (code := self.dead()) is None:
            if time.monotonic() > self.deadline:
                raise AssertionError(f"still running:\n{self.text()}")
            time.sleep(0.05)
        return code, self.text()

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", *keys)

    def ctrl_c_at(self, *markers: str) -> None:
        """Ctrl-C once each marker is on the screen, in order (each after the one before)."""
        for marker in markers:
            self.wait_for(marker)
            self.keys("C-c")

    def type(self, line: str) -> None:
        self._tmux("send-keys", "-l", line)
        self._tmux("send-keys", "Enter")

    def __enter__(self) -> Screen:
        return self

    def __exit__(self, *exc: object) -> None:
        self._tmux("kill-server")


def fits(text: str, width: int = WIDTH) -> list[str]:
    """The lines of `text` wider than `width` (none, on a screen that fits)."""
    return [line for line in text.splitlines() if len(line) > width]


def boxes(screen: str, title: str) -> list[str]:
    """The contents of each box titled `title` ("cell", "answer") on the screen, its
    wrapped rows joined."""
    found, rows = [], None
    for line in screen.splitlines():
        if line.startswith(f"╭─ {title}"):
            rows = []
        elif rows is not None and line.startswith("╰"):
            found.append(" ".join(rows))
            rows = None
        elif rows is not None:
            rows.append(line.strip("│ "))
    return found
