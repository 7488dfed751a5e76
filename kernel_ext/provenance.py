"""Which line of the running cell read data, and what each line said.

The host's "verified" rule (rlm.agent.policy.dataflow) counts a figure only when a line of
a cell that depends on the task's data printed it. The host knows what each line reads
(names, by the cell's tree); only the kernel knows, as the cell runs, which line opened a
file and which line wrote which output. This module records both, per cell:

  read   the line numbers (of the cell's own code, as IPython ran it) that opened a file
         for reading (kernel_ext.fileops calls `note_read` from its audit hook);
  said   per line, the figures and words it wrote to stdout/stderr (kernel_ext.streams
         calls `note_output`), displayed (`display(...)`) or returned as the cell's value;
  partial the lines whose output was not all read for tokens (past PER_WRITE characters of
         one write or MAX_TOKENS of the cell): the host does not rule on what it cannot see.

A line is the cell's own: the outermost frame running in the user's namespace as a module
(an `exec` of a string inside the cell is the line that called it). Output written by a
thread (an earlier cell's, or this one's) belongs to no line. The record goes back in the
cell's execute_reply metadata (`wire.CELL_PROVENANCE`), as the files read do.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Any

from kernel_ext import wire

PER_WRITE = 1 << 16  # characters of one write read for tokens
MAX_TOKENS = 20_000  # tokens kept per cell
_TOKEN = re.compile(r"-?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?|[^\W_](?:[\w'-]*[^\W_])?")

_ns: dict[str, Any] | None = None
_active = False
_read: set[int] = set()
_said: dict[int, set[str]] = {}
_partial: set[int] = set()
_count = 0


def cell_line() -> int | None:
    """The line of the running cell the current call comes from, or None (no cell runs,
    or another thread)."""
    if not _active or _ns is None or threading.current_thread() is not threading.main_thread():
        return None
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is _ns and frame.f_code.co_name == "<module>":
            back = frame.f_back  # an exec() of a string inside the cell runs below it
            if back is None or back.f_globals is not _ns:
                return int(frame.f_lineno)
        frame = frame.f_back
    return None


def note_read() -> None:
    line = cell_line()
    if line is not None:
        _read.add(line)


def note_output(text: str) -> None:
    """Record the tokens of `text`, written now, against the line writing it."""
    global _count
    if not text or not _active:
        return
    line = cell_line()
    if line is None:
        return
    if len(text) > PER_WRITE:
        _partial.add(line)
        text = text[:PER_WRITE]
    got = _said.setdefault(line, set())
    for m in _TOKEN.finditer(text):
        if _count >= MAX_TOKENS:
            _partial.add(line)
            return
        token = m.group(0).lower()
        if token not in got:
            got.add(token)
            _count += 1


def note_data(data: Any) -> None:
    """Record the text/plain of a displayed or returned value against its line."""
    _data_text(data)


def _data_text(data: Any) -> None:
    if isinstance(data, dict):
        text = data.get("text/plain")
        if isinstance(text, str):
            note_output(text)


def _started(*_: Any) -> None:
    global _active, _count
    _read.clear()
    _said.clear()
    _partial.clear()
    _count = 0
    _active = True


def _ended(*_: Any) -> None:
    global _active
    _active = False


def record() -> dict[str, Any]:
    return {"read": sorted(_read), "said": {str(k): sorted(v) for k, v in _said.items()},
            "partial": sorted(_partial)}


_undo: list[Any] = []
_outer: list[tuple[Any, bool]] = []


def begin(ns: dict[str, Any]) -> None:
    """A cell starts in a namespace this module was not installed on (`%%rlm` runs the
    agent's cells in the user's own kernel: rlm.notebook.inprocess); `end` gives its
    record and puts back what was there."""
    _outer.append((_ns, _active))
    _set_ns(ns)
    _started()


def end() -> dict[str, Any]:
    global _active
    out = record()
    ns, _active = _outer.pop() if _outer else (None, False)
    _set_ns(ns)
    return out


def _set_ns(ns: Any) -> None:
    global _ns
    _ns = ns


def install(ip: Any) -> None:
    global _ns
    _ns = getattr(ip, "user_ns", None)
    if hasattr(ip, "events"):
        ip.events.register("pre_run_cell", _started)
        ip.events.register("post_run_cell", _ended)
    pub = getattr(ip, "display_pub", None)
    if pub is not None and "publish" not in vars(pub):
        own = pub.publish

        def publish(data: Any = None, *a: Any, **kw: Any) -> Any:
            _data_text(data)
            return own(data, *a, **kw)

        pub.publish = publish
        _undo.append(lambda: vars(pub).pop("publish", None))
    hook = getattr(ip, "displayhook", None)
    if hook is not None and "write_format_data" not in vars(hook):
        own_write = hook.write_format_data

        def write_format_data(format_dict: Any, *a: Any, **kw: Any) -> Any:
            _data_text(format_dict)
            return own_write(format_dict, *a, **kw)

        hook.write_format_data = write_format_data
        _undo.append(lambda: vars(hook).pop("write_format_data", None))
    kernel = getattr(ip, "kernel", None)
    own_finish = getattr(kernel, "finish_metadata", None)
    if kernel is not None and own_finish is not None:

        def finish_metadata(parent: Any, metadata: Any, reply_content: Any) -> Any:
            metadata = own_finish(parent, metadata, reply_content)
            content = parent.get("content") if isinstance(parent, dict) else None
            if isinstance(metadata, dict) and isinstance(content, dict) \
                    and not content.get("silent"):
                metadata[wire.CELL_PROVENANCE] = record()
            return metadata

        kernel.finish_metadata = finish_metadata
        _undo.append(lambda: setattr(kernel, "finish_metadata", own_finish))


def uninstall(ip: Any) -> None:
    global _ns, _active
    if hasattr(ip, "events"):
        for event, fn in (("pre_run_cell", _started), ("post_run_cell", _ended)):
            try:
                ip.events.unregister(event, fn)
            except ValueError:
                pass
    while _undo:
        _undo.pop()()
    _ns, _active = None, False
