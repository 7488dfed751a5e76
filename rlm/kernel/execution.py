"""One execute_request, from send to idle: the wait loop and the output collector.

The wait loop runs on the caller's thread, which alone uses the shell socket. IOPub
messages arrive through the queue the listener routes to; every tick (`TICK_S`) the loop
also polls the kernel process, so a dead kernel ends the wait within ~100 ms instead of
at the timeout.

`CellCollector` turns IOPub messages into nbformat-shaped `Output`s. Everything the model
would read is rendered as text and streamed through a bounded head+tail accumulator and
a spool: in memory while small, a file in `artifacts/` once it outgrows the budget, so a
100 MB print costs the host ~budget characters of memory. Images and mime payloads over
`INLINE_LIMIT` go to `artifacts/` and are referenced from `Output.refs`.

What one cell leaves is bounded whatever the kernel sends (it is untrusted: a cell can
publish on IOPub in any shape): on disk, the spool and the cell's artifacts together at
most `Config.output_disk_cap` bytes (`DiskBudget`; past it the spool stops); at most
`MAX_ARTIFACTS` artifact files; in memory, at most `MAX_OUTPUTS` outputs and
`INLINE_TOTAL` bytes of inline payloads (more goes to artifacts, or is cut). Messages the
listener cut (`rlm_cut`, rlm/kernel/listener.py) count too. Whatever was cut, the model
and the user read one line saying what and where the kept part is (`CellCollector.finish`).
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kernel_ext.wire import APPEND_ONLY_FILES
from rlm import safeio
from rlm.kernel.kinds import Runtime
from rlm.kernel.shaping import HeadTail, split_budget, strip_ansi, trim_traceback
from rlm.kernel.types import Output
from rlm.secrets import StreamRedactor, known_secrets, redact_text, scrub_session

TICK_S = 0.05
INLINE_LIMIT = 64 * 1024
INLINE_TOTAL = 1024 * 1024  # inline payload bytes kept in memory (and the log) per cell
MAX_OUTPUTS = 500  # Output objects per cell; later ones are rendered to text only
MAX_ARTIFACTS = 100  # artifact files per cell
DEFAULT_DISK_CAP = 256 * 2**20  # Config.output_disk_cap
LOST_IOPUB_GRACE_S = 1.0  # reply in, but IOPub never saw this request: stop waiting for idle
# idle on IOPub, but no reply: ipykernel dropped the request (a KeyboardInterrupt that landed
# in its own code around the cell's is "caught in kernel", and no execute_reply is sent)
NO_REPLY_GRACE_S = 2.0

_EXT = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/svg+xml": "svg",
    "text/html": "html",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/latex": "tex",
    "application/json": "json",
    "application/javascript": "js",
}


@dataclass
class WaitOutcome:
    msg_id: str = ""
    q: Any = None  # the listener's queue for msg_id
    reply: dict[str, Any] | None = None
    idle: bool = False
    busy: bool = False
    died_rc: int | None = None
    timed_out: bool = False
    no_reply: bool = False  # the kernel went idle and never replied (NO_REPLY_GRACE_S)

    @property
    def done(self) -> bool:
        return (self.reply is not None or self.no_reply) and self.idle


def wait_for(
    rt: Runtime,
    msg_id: str,
    q: queue.SimpleQueue[dict[str, Any]],
    out: WaitOutcome,
    deadline: float,
    on_msg: Callable[[dict[str, Any]], None] | None,
) -> WaitOutcome:
    """Wait until reply + idle, death, or the deadline; `out` accumulates across calls."""
    next_check = time.monotonic() + TICK_S
    reply_at = idle_at = None
    while not out.done:
        if not out.idle:
            _take(q, out, on_msg, TICK_S)
        if out.reply is None:
            out.reply = _recv_reply(rt, msg_id, 0.0 if not out.idle else TICK_S)
            if out.reply is not None:
                reply_at = time.monotonic()
        now = time.monotonic()
        if out.reply is not None and not out.busy and now - (reply_at or now) > LOST_IOPUB_GRACE_S:
            out.idle = True  # IOPub missed this request entirely (subscription race)
        if out.idle and out.busy and out.reply is None:
            idle_at = idle_at or now
            out.no_reply = now - idle_at > NO_REPLY_GRACE_S
        if now >= next_check and not out.done:
            next_check = now + TICK_S
            rc = rt.poll()
            if rc is not None:
                _drain(q, out, on_msg)
                out.died_rc = rc
                return out
            if now >= deadline:
                out.timed_out = True
                return out
    _drain(q, out, on_msg, wait=0.0)
    return out


def _take(
    q: queue.SimpleQueue[dict[str, Any]],
    out: WaitOutcome,
    on_msg: Callable[[dict[str, Any]], None] | None,
    timeout: float,
) -> None:
    try:
        msg = q.get(timeout=timeout)
    except queue.Empty:
        return
    while True:
        if msg["header"]["msg_type"] == "status":
            state = msg["content"].get("execution_state")
            out.busy = out.busy or state == "busy"
            out.idle = out.idle or state == "idle"
        elif on_msg is not None:
            on_msg(msg)
        try:
            msg = q.get_nowait()
        except queue.Empty:
            return


def _drain(q: Any, out: WaitOutcome, on_msg: Any, wait: float = 0.1) -> None:
    """Take what the listener still has (output printed just before a crash)."""
    end = time.monotonic() + wait
    while True:
        _take(q, out, on_msg, max(end - time.monotonic(), 0.0) if wait else 0.0)
        if q.empty() and time.monotonic() >= end:
            return


def _recv_reply(rt: Runtime, msg_id: str, timeout_s: float) -> dict[str, Any] | None:
    """The execute_reply for msg_id; stale replies (from abandoned requests) are dropped."""
    end = time.monotonic() + timeout_s
    while True:
        msg = rt.recv_shell(max(end - time.monotonic(), 0.0))
        if msg is None:
            return None
        if msg.get("parent_header", {}).get("msg_id") == msg_id:
            return msg


def _new_host_file(session_dir: Path, rel: Path) -> int:
    """A new file of the host's in the session (artifacts/): whatever is at the name is
    removed, never written through (a link a kernel planted there), and the file is
    created exclusively, every directory below the session dir opened without following
    a link (rlm.safeio)."""
    safeio.unlink(session_dir, rel)
    return safeio.create_new(session_dir, rel, create_dirs=True)


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MB" if n >= 2**20 else f"{n:,} bytes"


class CellTags:
    """The name each cell's spooled output and artifacts go under: `cell-00001`, then the
    next, in the session's `artifacts/` — the same for the same run, so two runs of one
    task send the model the same bytes (a time and a random id made them differ from the
    first spooled output on: issue 60). Numbered on from the highest in the folder when a
    session is resumed (read once, then counted: one kernel per session)."""

    _NUMBERED = re.compile(r"cell-(\d{1,6})(?=[.-])")

    def __init__(self, artifacts: Path):
        self._artifacts = artifacts
        self._last: int | None = None

    def next(self) -> str:
        if self._last is None:
            try:
                names = [e.name for e in os.scandir(self._artifacts)]
            except OSError:
                names = []
            self._last = max((int(m.group(1)) for n in names
                              if (m := self._NUMBERED.match(n))), default=0)
        self._last += 1
        return f"cell-{self._last:05d}"


class DiskBudget:
    """Bytes one cell may still put on disk (spool and artifacts together)."""

    def __init__(self, cap: int):
        self.cap, self.left = cap, cap

    def take(self, n: int) -> int:
        """How many of `n` bytes may be written (all or what is left)."""
        got = min(n, self.left)
        self.left -= got
        return got


class _Spool:
    """Rendered output: in memory while small, then a private file in artifacts/. What
    reaches the file is redacted as it is written (a key split across chunks too:
    `StreamRedactor`), so a host killed mid-cell leaves no key in clear for a later open
    to find, whether or not that open knows the key. The file stops at the cell's disk
    budget; `cut` counts the bytes that did not fit."""

    def __init__(self, artifacts: Path, name: str, threshold: int, budget: DiskBudget):
        self._artifacts, self._name, self._threshold = artifacts, name, threshold
        self._budget = budget
        self._buf: list[str] = []
        self._size = 0
        self._file: IO[bytes] | None = None
        self._redactor = StreamRedactor()
        self.rel_path: str | None = None
        self.cut = 0

    def write(self, text: str) -> None:
        if self._file is not None:
            self._put(self._redactor.feed(text))
            return
        self._buf.append(text)
        self._size += len(text)
        if self._size > self._threshold:
            fd = _new_host_file(self._artifacts.parent, Path("artifacts", self._name))
            self._file = open(fd, "wb")  # noqa: SIM115
            self._put(self._redactor.feed("".join(self._buf)))
            self._buf = []
            self.rel_path = f"artifacts/{self._name}"

    def _put(self, text: str) -> None:
        if self.cut:  # full: count what is not kept, no encoding needed for that
            self.cut += len(text)
            return
        data = text.encode("utf-8", errors="replace")
        room = self._budget.take(len(data))
        assert self._file is not None
        self._file.write(data[:room])
        self.cut += len(data) - room

    def close(self, last_line: str = "") -> None:
        if self._file is not None:
            tail = self._redactor.close()
            self._put(tail)
            if last_line:
                self._file.write(last_line.encode("utf-8", errors="replace"))
            self._file.close()


class CellCollector:
    """Builds the ordered outputs and the model-facing text of one cell."""

    def __init__(
        self,
        session_dir: Path,
        budget: int,
        tag: str,
        on_output: Callable[[Output], None] | None = None,
        disk_cap: int = DEFAULT_DISK_CAP,
    ):
        self.session_dir = session_dir
        self.outputs: list[Output] = []
        self.execution_count: int | None = None
        self._tag = tag
        self._caps = split_budget(budget)
        self._shaped = HeadTail(*self._caps)
        self._stream_text: dict[int, HeadTail] = {}  # index in outputs -> its text
        self._disk = DiskBudget(disk_cap)
        self._spool = _Spool(session_dir / "artifacts", f"{tag}.txt", sum(self._caps),
                             self._disk)
        self._on_output = on_output
        self._n_artifacts = 0
        self._inline = 0  # inline payload bytes kept
        self._cut: dict[str, int] = {}  # what was cut -> how many (messages, outputs, ...)
        self._started_ns = time.time_ns()

    # -- IOPub messages -------------------------------------------------------------
    def handle(self, msg: dict[str, Any]) -> None:
        msg_type, content = msg["header"]["msg_type"], msg["content"]
        if content.get("rlm_cut"):  # the listener did not decode it whole
            self._count("over-size messages", 1)
            self._count("bytes of them", int(content["rlm_cut"]))
        if msg_type == "stream":
            self._stream(content.get("name", "stdout"), content.get("text", ""))
        elif msg_type in ("execute_result", "display_data"):
            self._rich(msg_type, content)
        elif msg_type == "error":
            self._error(content)
        elif msg_type == "execute_input":
            self.execution_count = content.get("execution_count")

    def _render(self, text: str) -> None:
        text = strip_ansi(text)
        self._shaped.add(text)
        self._spool.write(text)

    def _stream(self, name: str, text: str) -> None:
        last = self.outputs[-1] if self.outputs else None
        if (last is None or last.kind != "stream" or last.name != name) and not self._full():
            self.outputs.append(Output(kind="stream", name=name, text=""))
            self._stream_text[len(self.outputs) - 1] = HeadTail(*self._caps)
        if self.outputs and self.outputs[-1].kind == "stream":
            self._stream_text[len(self.outputs) - 1].add(text)
        self._render(text)
        if self._on_output is not None:
            self._on_output(Output(kind="stream", name=name, text=text))

    def _rich(self, kind: str, content: dict[str, Any]) -> None:
        raw = content.get("data")
        data, refs = self._externalize(raw if isinstance(raw, dict) else {})
        out = Output(
            kind=kind, data=data, metadata=content.get("metadata") or None, refs=refs or None
        )
        if kind == "execute_result":
            self.execution_count = content.get("execution_count", self.execution_count)
        if content.get("rlm_cut"):
            self._render(f"[{kind}: a {_mb(int(content['rlm_cut']))} message, not kept]\n")
        if not self._full():
            self.outputs.append(out)
        images = [path for mime, path in (refs or {}).items() if mime.startswith("image/")]
        for path in images:  # absolute: the user opens it from wherever they are (issue 14.6)
            self._render(f"[image: {(self.session_dir / path).absolute()}]\n")
        if not images and "text/plain" in data:
            text = data["text/plain"]
            text = text if isinstance(text, str) else json.dumps(text)
            self._render(text if text.endswith("\n") else text + "\n")
        if self._on_output is not None:
            self._on_output(out)

    def _error(self, content: dict[str, Any]) -> None:
        out = Output(
            kind="error",
            ename=content.get("ename"),
            evalue=content.get("evalue"),
            traceback=list(content.get("traceback", [])),
        )
        self.outputs.append(out)
        # the user and the model read the user's own frames plus the error line; the full
        # traceback stays in the session log (this Output) and in an artifact file
        text, hidden = trim_traceback(out.traceback or [f"{out.ename}: {out.evalue}"])
        if hidden:
            full = "\n".join(strip_ansi(b) for b in out.traceback or [])
            path = self._write_artifact("text/plain", full)
            where = f"full traceback: {path}" if path else "full traceback in the log"
            text += f"\n[{hidden} library frame(s) hidden; {where}]"
        self._render(text + "\n")
        if self._on_output is not None:
            self._on_output(out)

    # -- artifacts ------------------------------------------------------------------
    def _externalize(self, data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """Images and payloads over INLINE_LIMIT go to files; small text/plain stays."""
        inline: dict[str, Any] = {}
        refs: dict[str, str] = {}
        for mime, value in data.items():
            is_text = isinstance(value, str)
            size = len(value) if is_text else len(json.dumps(value))
            if (not mime.startswith("image/") and size <= INLINE_LIMIT
                    and self._inline + size <= INLINE_TOTAL):
                self._inline += size
                inline[mime] = value
                continue
            path = self._write_artifact(mime, value)
            if path is not None:
                refs[mime] = path
            if mime == "text/plain":
                head = HeadTail(*self._caps)
                head.add(value if isinstance(value, str) else json.dumps(value))
                inline[mime] = head.text(path)
        return inline, refs

    def _full(self) -> bool:
        """No more Output objects this cell (their text is still rendered)."""
        if len(self.outputs) < MAX_OUTPUTS:
            return False
        self._count("outputs over the limit", 1)
        return True

    def _count(self, what: str, n: int) -> None:
        self._cut[what] = self._cut.get(what, 0) + n

    def _write_artifact(self, mime: str, value: Any) -> str | None:
        """The file's path under the session, or None when the cell's artifacts are at
        their limit (count or bytes): not written, counted."""
        if self._n_artifacts >= MAX_ARTIFACTS:
            self._count("artifacts over the limit", 1)
            return None
        self._n_artifacts += 1
        name = f"{self._tag}-{self._n_artifacts}.{_EXT.get(mime, 'bin')}"
        payload: bytes | None = None
        if mime.startswith("image/") and mime != "image/svg+xml" and isinstance(value, str):
            try:
                payload = base64.b64decode(value)
            except ValueError:  # binascii.Error or non-ASCII: kernel data, keep it as text
                payload = None
        if payload is None and isinstance(value, str):  # never a known key in clear
            payload = redact_text(value, known_secrets(), patterns=False).encode(
                "utf-8", errors="replace")
        elif payload is None:
            payload = json.dumps(value).encode()
        if self._disk.take(len(payload)) < len(payload):
            self._count("artifacts over the limit", 1)
            self._n_artifacts -= 1
            return None
        fd = _new_host_file(self.session_dir, Path("artifacts", name))
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        return f"artifacts/{name}"

    # -- the end --------------------------------------------------------------------
    def finish(self) -> tuple[str, str | None, int, int]:
        """(shaped text, full output path or None, total chars, elided chars)."""
        note = self._cut_note()
        self._spool.close(note)
        # the spool, artifacts, snapshot data the kernel wrote since the last scrub (a
        # thread may write between cells): no secret stays on disk
        scrub_session(self.session_dir, self._started_ns, append_only=APPEND_ONLY_FILES.match)
        full = self._spool.rel_path if self._shaped.elided else None
        for index, acc in self._stream_text.items():
            out = self.outputs[index]
            out.text = acc.text(full)
            if acc.elided and full:
                out.refs = {"text/plain": full}
        shaped = self._shaped.text(full)
        if note:
            shaped += ("" if shaped.endswith("\n") or not shaped else "\n") + note
            if self._on_output is not None:
                self._on_output(Output(kind="stream", name="stderr", text=note))
        return shaped, full, self._shaped.total, self._shaped.elided

    def _cut_note(self) -> str:
        """The one line about what this cell's output lost to the host's bounds, or ""."""
        parts = []
        if self._spool.cut:
            parts.append(f"{_mb(self._spool.cut)} of text past the "
                         f"{_mb(self._disk.cap)} kept on disk (output_disk_cap)")
        labels = {"over-size messages": "message(s) over the host's size limit cut",
                  "artifacts over the limit": "payload(s) not saved (artifact limit)",
                  "outputs over the limit": "output(s) past the count limit kept as text only"}
        for key, label in labels.items():
            if self._cut.get(key):
                parts.append(f"{self._cut[key]:,} {label}")
        if not parts:
            return ""
        kept = self._spool.rel_path or "the text above"
        return f"[rlm: output cut: {'; '.join(parts)}; the kept part: {kept}]\n"
