"""Waiting for a cell's save, which the kernel runs after the cell's reply (kernel_ext.settle).

`Kernel.execute` learns from the reply (`user_expressions`, contract.SAVE_DUE) that the
cell's save is still running and keeps the cell's IOPub route open; `Unsettled.wait`
takes the kernel's `wire.SAVED` message from it. The agent does its own work for the
step meanwhile and settles before its next model call (rlm.agent.cells.settle); every
other use of the kernel settles first, so nothing reads or kills a kernel mid-save.

What the kernel says is untrusted: the problems are cut to a few short lines of text
and known secrets are masked before they reach the model.
"""

from __future__ import annotations

import json
import queue
import time
from dataclasses import dataclass
from typing import Any

from kernel_ext import wire
from kernel_ext.wire import APPEND_ONLY_FILES
from rlm.kernel.execution import TICK_S
from rlm.kernel.kinds import Runtime
from rlm.kernel.state import expression_value
from rlm.secrets import known_secrets, redact_text, scrub_session

MAX_PROBLEMS, MAX_PROBLEM_CHARS = 5, 500


def save_due(reply: dict[str, Any] | None) -> bool:
    """Whether the cell's save runs after this execute_reply (an older kernel_ext, a
    failed cell or a kernel without snapshots: no)."""
    if reply is None or reply.get("content", {}).get("status") != "ok":
        return False
    try:
        return json.loads(expression_value(reply, "save due", "saving")) is True
    except (RuntimeError, ValueError, SyntaxError):
        return False


@dataclass
class Unsettled:
    """A cell whose save the kernel runs after its reply."""

    rt: Runtime
    msg_id: str
    q: queue.SimpleQueue[dict[str, Any]]
    started_ns: int  # the cell's start: what the scrub reads from
    saved: Any = None  # SAVED's content when it came with the cell's last messages

    def wait(self, deadline: float) -> list[str] | None:
        """The problems the save met ([]: all saved), or None at the deadline (still
        saving). A kernel that died meanwhile is a problem said here; the next cell
        finds it dead and restores."""
        while self.saved is None:
            try:
                msg = self.q.get(timeout=TICK_S)
            except queue.Empty:
                rc = self.rt.poll()
                if rc is not None:
                    return [f"[rlm] the kernel exited (code {rc}) while it saved the snapshot "
                            f"after the last cell: what that cell changed may be lost"]
                if time.monotonic() >= deadline:
                    return None
                continue
            if msg.get("header", {}).get("msg_type") == wire.SAVED:
                self.saved = msg.get("content")
        return _problems(self.saved)

    def done(self, session_dir: Any) -> None:
        """After the save: no route left, and no secret in what the cell and its save
        wrote (the scrub at the cell's end ran before the save)."""
        self.rt.listener.unroute(self.msg_id)
        scrub_session(session_dir, self.started_ns, append_only=APPEND_ONLY_FILES.match)


def _problems(content: Any) -> list[str]:
    raw = content.get("problems") if isinstance(content, dict) else None
    if not isinstance(raw, list):
        return ["[rlm] the kernel's report of its snapshot could not be read"]
    secrets = known_secrets()
    return [redact_text(str(p)[:MAX_PROBLEM_CHARS], secrets) for p in raw[:MAX_PROBLEMS]]


class Saves:
    """A kernel's cell saves: the one still running, and the problems of those that
    ended, until said. Used under the kernel's shell lock."""

    def __init__(self, session_dir: Any, timeout: float):
        self._dir, self._timeout = session_dir, timeout
        self._pending: Unsettled | None = None
        self._said: list[str] = []

    def begin(self, pending: Unsettled) -> None:
        self.wait()  # never two at once: the kernel ran this cell after the last save
        self._pending = pending

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running save (at most `timeout`, default the cell timeout) and
        keep its problems; False: it still runs."""
        pending = self._pending
        if pending is None:
            return True
        problems = pending.wait(time.monotonic() + (self._timeout if timeout is None else timeout))
        if problems is None:
            return False
        self._pending = None
        pending.done(self._dir)
        self._said.extend(problems)
        return True

    def take(self) -> list[str]:
        """The problems not said yet, once the running save ended (or ran a whole cell
        timeout: then that is said, and the kernel runs what comes next after it anyway)."""
        if not self.wait() and self._pending is not None:
            self._pending.rt.listener.unroute(self._pending.msg_id)
            self._pending = None
            self._said.append("[rlm] the snapshot after the last cell was still being written "
                              "after the cell timeout")
        said, self._said = self._said, []
        return said
