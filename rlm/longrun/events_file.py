"""`worker-events.jsonl`: one JSON object per line ({"ts", "event", ...fields}), written by
the worker and by foreground runs alike, read by `rlm attach` (`tail_events`).

A line is redacted before it is written: the secret values known when the file was opened
(as `SessionStore` takes them), and each long field is bounded after it is redacted. The
file stays open between lines (a step writes six or seven); a session directory removed
under it is noticed at the next line (`SessionGone`), as the session log notices it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rlm.errors import SessionGone
from rlm.events import Event
from rlm.secrets import known_secrets, redact_text
from rlm.trust import open_regular

MAX_FIELD_CHARS = 4000


def event_record(ev: Event) -> dict[str, Any]:
    """An event as a JSON-able dict (`Event.to_dict`); long text is bounded, after it is
    redacted (a cut must not leave the start of a key behind)."""
    out = ev.to_dict()
    for k, value in out.items():
        if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
            value = redact_text(value, known_secrets(), patterns=False)
            out[k] = value if len(value) <= MAX_FIELD_CHARS else (
                value[:MAX_FIELD_CHARS] + f"... [{len(value) - MAX_FIELD_CHARS} more]")
    return out


class EventsFile:
    """One session's `worker-events.jsonl`, appended a line at a time (O_APPEND, so the
    worker and a foreground run never interleave within a line)."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None
        self._secrets = known_secrets()  # cell output, a final answer: no key reaches it

    def append(self, record: dict[str, Any], now: float) -> str:
        """Write one record stamped `now`; returns the line as written (redacted)."""
        line = json.dumps({"ts": round(now, 3), **record}, default=str) + "\n"
        line = redact_text(line, self._secrets, patterns=False)
        fd = self._open()
        os.write(fd, line.encode())
        return line

    def _open(self) -> int:
        if self._fd is not None:
            if os.fstat(self._fd).st_nlink:
                return self._fd
            self.close()  # unlinked under us: a line written now would vanish
            raise SessionGone(self.path.parent)
        try:
            self._fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except FileNotFoundError:
            if self.path.parent.is_dir():
                raise
            raise SessionGone(self.path.parent) from None
        return self._fd

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

