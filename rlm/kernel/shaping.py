"""Output shaping for the model: pure functions, no I/O.

The model sees at most about `budget` characters of a cell's output: the head and the
tail, joined by an explicit marker that says how many characters were elided and where
the full output lives. ANSI escape sequences are stripped (tracebacks are colored).

`HeadTail` accumulates text chunk by chunk in bounded memory, so the caller can stream a
100 MB print through it while the bytes themselves go to a file.
"""

from __future__ import annotations

import re
from collections import deque

# CSI sequences (colors, cursor moves), OSC sequences (titles, hyperlinks), lone escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

MARKER_RESERVE = 160  # room kept for the marker inside the budget


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def marker(elided: int, full_path: str | None) -> str:
    where = f"; full output: {full_path}" if full_path else ""
    return f"\n[... {elided} characters elided{where}]\n"


def split_budget(budget: int) -> tuple[int, int]:
    """(head_cap, tail_cap) for a total budget, leaving room for the marker."""
    room = max(budget - MARKER_RESERVE, 2)
    head = room // 2
    return head, room - head


class HeadTail:
    """The first `head_cap` and last `tail_cap` characters of a stream of chunks."""

    def __init__(self, head_cap: int, tail_cap: int):
        self.head_cap, self.tail_cap = head_cap, tail_cap
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.total = 0

    def add(self, chunk: str) -> None:
        if not chunk:
            return
        self.total += len(chunk)
        if self._head_len < self.head_cap:
            take = chunk[: self.head_cap - self._head_len]
            self._head.append(take)
            self._head_len += len(take)
            chunk = chunk[len(take) :]
            if not chunk:
                return
        if len(chunk) > self.tail_cap:
            chunk = chunk[-self.tail_cap :]
            self._tail.clear()
            self._tail_len = 0
        self._tail.append(chunk)
        self._tail_len += len(chunk)
        while self._tail and self._tail_len - len(self._tail[0]) >= self.tail_cap:
            self._tail_len -= len(self._tail.popleft())

    @property
    def elided(self) -> int:
        return max(self.total - self._head_len - min(self._tail_len, self.tail_cap), 0)

    def text(self, full_path: str | None = None) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        if not self.elided:
            return head + tail
        return head + marker(self.elided, full_path) + tail[-self.tail_cap :]


def shape(text: str, budget: int, full_path: str | None = None) -> tuple[str, int]:
    """Shape one string: (shaped text, elided char count). ANSI is stripped first."""
    acc = HeadTail(*split_budget(budget))
    acc.add(strip_ansi(text))
    return acc.text(full_path), acc.elided


# ------------------------------------------------------------------ tracebacks
# A frame in code the user did not write: installed packages, the standard library,
# Cython sources (pandas/_libs/*.pyx), frozen modules, IPython and rlm's kernel extension.
_LIBRARY = re.compile(r"site-packages/|dist-packages/|/lib/python3[.\d]*/|\.pyx:|\.pxi:|<frozen |"
                      r"kernel_ext/|IPython/")
_CHAINED = ("The above exception was the direct cause", "During handling of the above exception")
_PACKAGE = re.compile(r"(?:site-packages|dist-packages)/([A-Za-z0-9_]+)|^File ([A-Za-z0-9_]+)/")
# IPython's legacy frame header, used for the whole traceback once any frame's line number
# passes 10,000 (ultratb's FAST_THRESHOLD; pandas' frame.py is 16k lines, so `merge` and
# `apply` errors come this way): `~/.../pandas/core/frame.py in ?(self, right, ...)`.
_LEGACY = re.compile(r"^(?:~|/|<|\.)\S* in [\w?<>.]+\(")


def _is_frame(block: str) -> bool:
    first = block.lstrip().split("\n", 1)[0]
    return first.startswith(("File ", "Cell ", "Input ")) or bool(_LEGACY.match(first))


def _is_library_frame(block: str) -> bool:
    first = block.lstrip().split("\n", 1)[0]
    return (first.startswith("File ") or bool(_LEGACY.match(first))) \
        and bool(_LIBRARY.search(first))


def _hidden_line(frames: list[str]) -> str:
    packages: list[str] = []
    for f in frames:
        m = _PACKAGE.search(f.lstrip().split("\n", 1)[0])
        name = (m.group(1) or m.group(2)) if m else None
        if name and name not in packages:
            packages.append(name)
    inside = f" inside {', '.join(packages)}" if packages else ""
    return f"[... {len(frames)} library frame{'s' if len(frames) != 1 else ''}{inside} hidden]\n"


def trim_traceback(blocks: list[str]) -> tuple[str, int]:
    """An IPython traceback (the `traceback` list of an error message: one block per
    frame, a header and the error line) cut to the user's own frames plus the error line.

    Runs of library frames become one `[... N library frames inside pandas hidden]` line;
    an earlier exception in a chain (`The above exception was the direct cause...`) with no
    user frame in it becomes one `[caused by: KeyError: 'x' (inside libraries)]` line.
    Returns (text, number of frames hidden); nothing hidden means the text is the whole
    traceback, ANSI stripped."""
    plain = [strip_ansi(b) for b in blocks]
    segments: list[list[str]] = [[]]
    for b in plain:
        if b.strip().startswith(_CHAINED):
            segments.append([])
        else:
            segments[-1].append(b)
    out: list[str] = []
    hidden = 0
    causes: list[str] = []
    for n, seg in enumerate(segments):
        if not seg:
            continue
        last = n == len(segments) - 1
        frames = [b for b in seg if _is_frame(b)]
        if not last and not any(not _is_library_frame(f) for f in frames):
            hidden += len(frames)
            causes.append(f"[caused by: {seg[-1].strip()} (inside libraries)]\n")
            continue
        run: list[str] = []
        for b in seg:
            if b in frames and _is_library_frame(b):
                run.append(b)
                continue
            if run:
                out.append(_hidden_line(run))
                hidden += len(run)
                run = []
            if b.strip().startswith("-" * 20):  # IPython's rule above the header
                continue
            out.append(b if b.endswith("\n") else b + "\n")
        if run:
            out.append(_hidden_line(run))
            hidden += len(run)
        if not last:
            out.append("\nThe above exception caused the following one:\n\n")
    if not hidden:
        return "\n".join(plain), 0
    if causes:  # the error line stays last, where the eye (and the model) looks
        out[-1:-1] = causes
    return "".join(out).rstrip("\n"), hidden
