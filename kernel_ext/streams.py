"""Bounded IOPub stream messages.

ipykernel's OutStream batches everything written within its flush interval into one IOPub
message, so `print('x' * 10**8)` (or a loop of large prints) reaches the host as a single
100 MB message that the host must hold whole. This module wraps `sys.stdout.write` /
`sys.stderr.write` so that at most about CHUNK characters are pending between flushes:
big writes are split and flushed chunk by chunk. Every byte still arrives, in order; the
host spools it to disk and shapes what the model sees.

The wrapper is an instance attribute on the stream objects; uninstall removes it.
"""

from __future__ import annotations

import sys
from typing import Any

CHUNK = 1 << 20  # characters pending before a forced flush

_wrapped: list[Any] = []


class _Bounded:
    def __init__(self, stream: Any):
        self.stream = stream
        self.write_orig = stream.write
        self.pending = 0

    def __call__(self, text: Any) -> Any:
        if not isinstance(text, str):
            return self.write_orig(text)
        n = len(text)
        if self.pending + n < CHUNK:
            self.pending += n
            return self.write_orig(text)
        for i in range(0, n, CHUNK):
            self.write_orig(text[i:i + CHUNK])
            self.stream.flush()
        self.pending = 0
        return n


def install(ip: Any) -> None:
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
    while _wrapped:
        stream = _wrapped.pop()
        try:
            del stream.write
        except AttributeError:
            pass
