"""Session log lines: one entry per JSON line, parsed strictly (the file is a trust boundary).

`read_records` parses a whole file (offsets kept, so a branch can later be read back line
by line); `parse_entry` builds one entry from one line; `dumps` is the one writer's form.
Moved out of `rlm.session.store` so the lazy open (`rlm.session.index`) shares them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm.errors import SessionCorrupt, SessionError
from rlm.session.entries import (
    ENTRY_TYPES,
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    Entry,
    MessageEntry,
    entry_from_dict,
)
from rlm.trust import open_regular

TAIL_HASHED = 4096  # bytes before a covered size whose hash says "this prefix is unchanged"


def tail_hash(data: bytes | memoryview, size: int) -> str:
    """sha256 of the TAIL_HASHED bytes of `data` before `size`."""
    return hashlib.sha256(data[max(0, size - TAIL_HASHED):size]).hexdigest()


# field -> accepted types, checked on load (the file is a trust boundary)
_FIELD_TYPES: dict[type, dict[str, tuple[type, ...]]] = {
    MessageEntry: {
        "message": (dict,),
        "usage": (dict, type(None)),
        "cell": (dict, type(None)),
        "error": (str, type(None)),
        "model": (str, type(None)),
    },
    CompactionEntry: {
        "summary": (str,),
        "first_kept_entry_id": (str, type(None)),
        "details": (dict,),
        "tokens_before": (int,),
    },
    BranchSummaryEntry: {"summary": (str,)},
    CustomEntry: {"custom_type": (str,), "content": (str, type(None)), "display": (bool,)},
}



def dumps(entry: Entry) -> bytes:
    try:
        text = json.dumps(entry.to_dict(), ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise SessionError(f"cannot record {entry.type} entry {entry.id}: {e}") from e
    return (text + "\n").encode()




_FIELD_NAMES: dict[str, tuple[type[Entry], frozenset[str]]] = {
    name: (cls, frozenset(cls.__dataclass_fields__) | {"type"}) for name, cls in ENTRY_TYPES.items()
}
_CHECKS: dict[type, tuple[tuple[str, tuple[type, ...]], ...]] = {
    cls: tuple(checks.items()) for cls, checks in _FIELD_TYPES.items()
}


def build(path: Path, line_no: int, d: dict[str, Any]) -> Entry:
    """An entry from a dict read from disk (consumed); SessionCorrupt on a bad shape.

    Same rules as `entry_from_dict` plus field type checks. Fast path for lines as
    `append` writes them (every field, nothing else): no __init__, no dataclasses.fields()
    per line -- those were most of the load time at 100k entries."""
    kind = d.get("type")
    known = _FIELD_NAMES.get(kind) if isinstance(kind, str) else None
    if known is None:
        return build_slow(path, line_no, d)
    cls, names = known
    for name, types in _CHECKS.get(cls, ()):
        value = d.get(name)
        if name in d and (
            not isinstance(value, types) or (isinstance(value, bool) and bool not in types)
        ):
            raise SessionCorrupt(str(path), line_no, f"{name} has the wrong type")
    if cls is MessageEntry and "origin" not in d:
        d["origin"] = None  # written only when set (MessageEntry.to_dict)
    if d.keys() == names:
        eid, parent, ts = d["id"], d["parent_id"], d["timestamp"]
        if eid and isinstance(eid, str) and isinstance(ts, str):
            if parent is None or isinstance(parent, str):
                del d["type"]  # the class attribute stays the source of truth
                entry = cls.__new__(cls)
                entry.__dict__ = d
                return entry
    return build_slow(path, line_no, d)


def build_slow(path: Path, line_no: int, d: dict[str, Any]) -> Entry:
    try:
        entry = entry_from_dict(d)
    except (TypeError, ValueError) as e:
        raise SessionCorrupt(str(path), line_no, str(e)) from None
    if not isinstance(entry.timestamp, str):
        raise SessionCorrupt(str(path), line_no, "timestamp is not a string")
    return entry


_DECODER = json.JSONDecoder()
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]


def parse_line(raw: str) -> Any:
    """One JSON value filling the whole line. ValueError/RecursionError otherwise."""
    try:
        obj, end = _SCAN(raw, 0)
    except StopIteration:
        return json.loads(raw)  # leading whitespace or garbage: let json say what is wrong
    if end != len(raw) and raw[end:].strip():
        return json.loads(raw)  # raises "Extra data"
    return obj


@dataclass
class Parsed:
    """A whole file read: its records, where each line starts, and what is torn."""

    records: list[tuple[int, dict[str, Any]]]  # (line number, dict), header first
    offsets: list[int]  # byte offset of each record's line
    cut: int | None  # where a torn tail starts
    unterminated: int | None  # offset of a whole last record that lacks its newline
    size: int  # bytes read
    mtime_ns: int  # the file's mtime when read (0 when it changed while read)
    hash: str  # tail_hash of what was read


def read_records(path: Path, *, keep_unterminated: bool = True) -> Parsed:
    """Parse every line. Raises SessionCorrupt; never writes.

    Torn: bytes after the last newline that are not a whole JSON object, or an invalid-JSON
    (or non-UTF-8) last line. A last entry that parses whole but lost only its newline (a
    crash between the two writes of an editor or another tool) is kept, not moved aside."""
    try:
        with os.fdopen(open_regular(path), "rb") as f:  # no symlink, FIFO or device
            before = os.fstat(f.fileno())
            data = f.read()
    except OSError as e:
        raise SessionError(f"cannot read {path}: {e}") from e
    size = len(data)
    mtime = before.st_mtime_ns if before.st_size == size else 0
    digest = tail_hash(data, size)
    end = data.rfind(b"\n") + 1  # 0 when there is no newline at all
    unterminated = end if (keep_unterminated and end < len(data)
                           and _whole_object(data[end:])) else None
    if unterminated is not None:
        data, end = data + b"\n", len(data) + 1
    cut: int | None = end if end < len(data) else None
    raw_lines = data[:end].split(b"\n")[:-1]
    records: list[tuple[int, dict[str, Any]]] = []
    offsets: list[int] = []
    at = 0
    last = len(raw_lines) - 1
    for i, raw in enumerate(raw_lines):
        try:
            obj = parse_line(raw.decode())
        except (ValueError, RecursionError) as e:
            if i == last and cut is None:
                cut = end - len(raw) - 1  # invalid last line: a torn write
                break
            raise SessionCorrupt(str(path), i + 1, reason(e)) from None
        if not isinstance(obj, dict):
            raise SessionCorrupt(str(path), i + 1, f"a JSON {type(obj).__name__}, not an object")
        records.append((i + 1, obj))
        offsets.append(at)
        at += len(raw) + 1
    return Parsed(records, offsets, cut, unterminated, size, mtime, digest)


def _whole_object(tail: bytes) -> bool:
    try:
        return isinstance(parse_line(tail.decode()), dict)
    except (ValueError, RecursionError):
        return False




def reason(e: Exception) -> str:
    if isinstance(e, RecursionError):
        return "JSON nested too deeply"
    if isinstance(e, UnicodeDecodeError):
        return "not UTF-8"
    return f"invalid JSON: {e}"




def parse_entry(path: Path, line_no: int, raw: bytes) -> Entry:
    """One entry from one line read back by offset (no newline); SessionCorrupt if bad."""
    try:
        obj = parse_line(raw.decode())
    except (ValueError, RecursionError) as e:
        raise SessionCorrupt(str(path), line_no, reason(e)) from None
    if not isinstance(obj, dict):
        raise SessionCorrupt(str(path), line_no, f"a JSON {type(obj).__name__}, not an object")
    return build(path, line_no, obj)
