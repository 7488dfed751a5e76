"""The session's history as the kernel's `history` object reads it (through the bridge).

Read-only and bounded. It reads the current branch of the session log, which keeps every
entry: what the tiers pruned or shook out and what a summary replaced are still there, so
`history.cell(N)` returns the original output of cell N. It returns only what the model
or the user saw: user, assistant and cell-result messages, never failed calls, hidden
notices or the host's own records; a cell's full output file (when the shaped text was
cut) is read from the session directory. The log is redacted when appended; known secret
values are masked again in anything returned.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, MutableMapping
from pathlib import Path
from typing import Any

from rlm import safeio
from rlm.protocols import SessionLog
from rlm.secrets import known_secrets
from rlm.session.entries import Entry, MessageEntry, call_code

MAX_CHARS = 50_000  # per returned text
MAX_ITEMS = 50  # per search or messages() answer
SNIPPET = 200


def _mask(text: str) -> str:
    for s in known_secrets():
        text = text.replace(s, "[REDACTED]")
    return text


def _clip(text: str, limit: int = MAX_CHARS) -> str:
    text = _mask(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters: history is bounded]"


def _visible(e: Entry) -> bool:
    return (isinstance(e, MessageEntry) and e.error is None
            and e.role in ("user", "assistant", "tool"))


def executed(branch: Iterable[Entry]) -> list[tuple[str, MessageEntry]]:
    """(code, result entry) of every cell on `branch`, in order."""
    codes: dict[str, str] = {}
    out = []
    for e in branch:
        if not _visible(e):
            continue
        assert isinstance(e, MessageEntry)
        if e.role == "assistant":
            for c in e.message.get("tool_calls") or []:
                if isinstance(c, dict):
                    codes[str(c.get("id", ""))] = call_code(c) or ""
        elif e.role == "tool":
            out.append((codes.get(str(e.message.get("tool_call_id", "")), ""), e))
    return out


class History:
    """Answers `history.cell/search/messages` for one session (`session.branch()`)."""

    def __init__(self, session: SessionLog):
        self.session = session

    def _messages(self) -> list[MessageEntry]:
        return [e for e in self.session.branch() if _visible(e)]  # type: ignore[misc]

    def _cells(self) -> list[tuple[int | None, str, MessageEntry]]:
        """(cell number, code, result entry) in order."""
        return [((e.cell or {}).get("execution_count"), code, e)
                for code, e in executed(self._messages())]

    def _full_output(self, e: MessageEntry) -> str:
        text = str(e.message.get("content") or "")
        rel = (e.cell or {}).get("full_output_path")
        root = getattr(self.session, "dir", None)
        if isinstance(rel, str) and root is not None:
            with contextlib.suppress(OSError, ValueError):  # never through a link (rlm.safeio)
                return safeio.read_text(Path(root), rel, errors="replace")
        return text

    def cell(self, n: int) -> dict[str, Any]:
        """Cell N's code and its full original output."""
        for k, code, e in self._cells():
            if k == n:
                return {"cell": n, "code": _clip(code), "status": (e.cell or {}).get("status"),
                        "output": _clip(self._full_output(e)), "entry": e.id}
        known = [k for k, _, _ in self._cells() if k is not None]
        raise LookupError(f"no cell {n} in this session's history; cells are "
                          f"{known[0]}..{known[-1]}" if known else "no cells in this session yet")

    def search(self, pattern: str, limit: int = MAX_ITEMS) -> list[dict[str, Any]]:
        """Messages and cell outputs matching `pattern` (a regex; plain text works too)."""
        try:
            rx = re.compile(pattern)
        except re.error:
            rx = re.compile(re.escape(pattern))
        hits: list[dict[str, Any]] = []
        cells = {e.id: (k, code) for k, code, e in self._cells()}
        for e in self._messages():
            if len(hits) >= min(limit, MAX_ITEMS):
                break
            text = self._full_output(e) if e.role == "tool" else _message_text(e)
            m = rx.search(text)
            if m is None:
                continue
            a, b = max(0, m.start() - SNIPPET // 2), m.end() + SNIPPET // 2
            hit: dict[str, Any] = {"role": e.role, "entry": e.id, "timestamp": e.timestamp,
                                   "match": _mask(text[a:b])}
            if e.id in cells:
                hit["cell"] = cells[e.id][0]
            hits.append(hit)
        return hits

    def messages(self, since: int = 0, role: str | None = None,
                 limit: int = MAX_ITEMS) -> list[dict[str, Any]]:
        """Messages from position `since` (0: the first), optionally of one role."""
        out = []
        for i, e in enumerate(self._messages()):
            if i < since or (role and e.role != role):
                continue
            out.append({"index": i, "role": e.role, "timestamp": e.timestamp,
                        "content": _clip(_message_text(e), MAX_CHARS // 10)})
            if len(out) >= min(limit, MAX_ITEMS):
                break
        return out


def _message_text(e: MessageEntry) -> str:
    text = e.message.get("content")
    text = text if isinstance(text, str) else ("" if text is None else str(text))
    for c in e.message.get("tool_calls") or []:
        if isinstance(c, dict):
            text += "\n[python]\n" + (call_code(c) or "")
    return text


def install_handlers(handlers: MutableMapping[str, Any], session: SessionLog) -> None:
    """The bridge methods `history.*` the kernel's `history` object calls."""
    h = History(session)
    handlers["history.cell"] = lambda p: h.cell(int(p.get("n", 0)))
    handlers["history.search"] = lambda p: h.search(str(p.get("pattern", "")),
                                                    int(p.get("limit", MAX_ITEMS)))
    handlers["history.messages"] = lambda p: h.messages(int(p.get("since", 0)), p.get("role"),
                                                        int(p.get("limit", MAX_ITEMS)))
