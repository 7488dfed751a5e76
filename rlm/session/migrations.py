"""Session file migrations, run on load, keyed by the header's `version`.

A migration takes the raw dicts of a file (header first) at version N and returns them at
version N + 1; `migrate` chains them up to `SESSION_VERSION`. Migrations work on plain
dicts, before the dataclasses see them, so an entry class can change shape freely.

Version 0 is the pre-release shape (fabricated to exercise the mechanism, and kept so the
mechanism stays tested): message entries kept `role` / `content` / `tool_calls` /
`tool_call_id` at the top level instead of inside `message`, and the header had no
`version` key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlm.session.entries import SESSION_VERSION

Records = list[dict[str, Any]]

_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _v0_to_v1(records: Records) -> Records:
    out: Records = []
    for rec in records:
        rec = dict(rec)
        if rec.get("type") == "message" and "message" not in rec:
            rec["message"] = {k: rec.pop(k) for k in _MESSAGE_KEYS if k in rec}
        out.append(rec)
    return out


MIGRATIONS: dict[int, Callable[[Records], Records]] = {0: _v0_to_v1}


def header_version(header: dict[str, Any]) -> int:
    """The header's version; a header without one is version 0."""
    v = header.get("version", 0)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"header version {v!r} is not a non-negative integer")
    return v


def migrate(records: Records) -> Records:
    """Bring `records` (header first) to SESSION_VERSION. ValueError if it cannot."""
    version = header_version(records[0])
    if version > SESSION_VERSION:
        raise ValueError(
            f"session version {version} is newer than this rlm understands "
            f"({SESSION_VERSION}); upgrade rlm"
        )
    while version < SESSION_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise ValueError(f"no migration from session version {version}")
        records = step(records)
        version += 1
        records[0] = {**records[0], "version": version}
    return records
