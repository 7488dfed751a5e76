"""Bounded IOPub stream messages.

ipykernel's OutStream batches everything written within its flush interval into one IOPub
message, so `print('x' * 10**8)` (or a loop of large prints) reaches the host as a single
100 MB message that the host must hold whole. This module wraps `sys.stdout.write` /
`sys.stderr.write` so that at most about CHUNK characters are pending between flushes:
big writes are split and flushed chunk by chunk. Every byte still arrives, in order; the
host spools it to disk and shapes what the model sees.

The wrapper is an instance attribute on the stream objects; uninstall removes it.

Output written by a thread that an earlier cell started lands in whatever cell runs now;
each of its lines is labelled `[late: thread NAME from an earlier cell]` so neither the
model nor the user takes it for this cell's output.

After each cell the kernel's own streams are put back if the cell closed them
(`sys.stdout.close()` detaches ipykernel's OutStream from its IOPub thread, so every
later print raised) or left `sys.stdout`/`sys.stderr` rebound; a note in that cell's
output says so.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from kernel_ext import provenance

CHUNK = 1 << 20  # characters pending before a forced flush

_wrapped: list[Any] = []
# (name in sys, the kernel's stream object, its IOPub thread) as found at install
_originals: list[tuple[str, Any, Any]] = []


# idents of threads alive when the current cell started (the main thread excluded)
_earlier: set[int] = set()
_line_start: dict[int, bool] = {}


def _note_threads(*_: Any) -> None:
    """pre_run_cell: remember which threads existed before this cell."""
    main = threading.main_thread().ident
    _earlier.clear()
    _earlier.update(t.ident for t in threading.enumerate() if t.ident and t.ident != main)
    _line_start.clear()


def _label_late(text: str) -> str:
    """Prefix each line a thread from an earlier cell writes (cheap no-op otherwise)."""
    ident = threading.get_ident()
    if ident not in _earlier or not text:
        return text
    label = f"[late: thread {threading.current_thread().name!r} from an earlier cell] "
    lines = text.splitlines(keepends=True)
    out = [(label + line) if (i > 0 or _line_start.get(ident, True)) else line
           for i, line in enumerate(lines)]
    _line_start[ident] = text.endswith("\n")
    return "".join(out)


class _Bounded:
    def __init__(self, stream: Any):
        self.stream = stream
        self.write_orig = stream.write
        self.pending = 0

    def __call__(self, text: Any) -> Any:
        if not isinstance(text, str):
            return self.write_orig(text)
        written = len(text)  # what the caller wrote, whatever label is added
        provenance.note_output(text)
        if _earlier:
            text = _label_late(text)
        n = len(text)
        if self.pending + n < CHUNK:
            self.pending += n
            self.write_orig(text)
            return written
        for i in range(0, n, CHUNK):
            self.write_orig(text[i:i + CHUNK])
            self.stream.flush()
        self.pending = 0
        return written


def repair(*_: Any) -> list[str]:
    """Put the kernel's streams back after a cell closed or rebound them; returns what was
    repaired (post_run_cell hook)."""
    fixed = []
    for name, stream, pub_thread in _originals:
        now = getattr(sys, name)
        # a capture that writes through to the kernel's stream (`%%rlm`'s tee) is no harm
        if now is not stream and getattr(now, "writes_through_to", None) is not stream:
            setattr(sys, name, stream)
            fixed.append(f"sys.{name} was rebound")
        if pub_thread is not None and getattr(stream, "pub_thread", pub_thread) is None:
            stream.pub_thread = pub_thread  # close() only detached it; the thread runs on
            fixed.append(f"sys.{name} was closed")
    if fixed:
        print(f"[rlm: {'; '.join(fixed)} by this cell; the kernel's stream is restored "
              "so later output shows]", file=sys.stderr)
    return fixed


def install(ip: Any) -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None:
            _originals.append((name, stream, getattr(stream, "pub_thread", None)))
    if _originals and hasattr(ip, "events"):
        ip.events.register("post_run_cell", repair)
        ip.events.register("pre_run_cell", _note_threads)
    for stream in (sys.stdout, sys.stderr):
        if stream is None or "write" in vars(stream) or not hasattr(stream, "flush"):
            continue
        try:
            # an instance attribute shadowing TextIO.write on purpose (mypy cannot express it)
            stream.write = _Bounded(stream)  # type: ignore[method-assign]
        except (AttributeError, TypeError):  # a stream that refuses instance attributes
            continue
        _wrapped.append(stream)


def uninstall(ip: Any) -> None:
    if _originals and hasattr(ip, "events"):
        for event, fn in (("post_run_cell", repair), ("pre_run_cell", _note_threads)):
            try:
                ip.events.unregister(event, fn)
            except ValueError:
                pass
    _earlier.clear()
    _originals.clear()
    while _wrapped:
        stream = _wrapped.pop()
        try:
            del stream.write
        except AttributeError:
            pass
