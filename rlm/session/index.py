"""`session.index`: a cache beside session.jsonl so a long session opens at once.

session.jsonl stays the only source of truth (append-only JSONL that every rlm opens).
The index records, for the file prefix it covers, what a full parse would find: the entry
count, the current leaf, the byte offset of every entry on the current branch and the
positions of its custom entries by type. Opening with it reads the header line, the
index, and only the lines appended after it; the branch's entries are read back by offset
when first touched (`rlm.session.branch.Branch`), so a turn after opening reads the tail
the projection needs (from the latest compaction on), not the file.

Valid when the file still holds the covered prefix: its size is at least the covered
size, the sha256 of the 4 KiB before that size matches, and (same size) the mtime is the
one recorded. Anything else -- missing, unreadable, a symlink, another format, a stale or
rewritten file, a tail that is torn, corrupt, or not a plain continuation -- makes `load`
return None and the caller parses the whole file as before (torn tails, corrupt lines
and migrations keep their behaviour), then writes a fresh index.

Format: one JSON line (meta), then the branch offsets as little-endian int64. Written
atomically (temp + rename, no fsync: a lost index is only rebuilt).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm import safeio
from rlm.errors import SessionCorrupt
from rlm.session.branch import Branch, Reader
from rlm.session.entries import SESSION_VERSION, Entry, SessionHeader
from rlm.session.lines import TAIL_HASHED, build, parse_entry, parse_line, tail_hash
from rlm.trust import open_regular

INDEX_NAME = "session.index"
FORMAT = 2  # 2: prompts and replies are indexed beside the custom types
MAX_META = 1 << 24  # the meta line holds custom positions: generous, but bounded


def index_path(log: Path) -> Path:
    return log.with_name(INDEX_NAME)


@dataclass
class Covered:
    """What a writer knows about the log it covers."""

    size: int
    mtime_ns: int
    hash: str
    count: int  # entries (header excluded)
    leaf: str | None
    branch: Branch


def save(log: Path, c: Covered) -> None:
    """Write the index for `c` (best effort: a cache that cannot be written is skipped)."""
    offsets = array("q", c.branch.offsets)  # a copy: byteswapped on big-endian hosts
    if sys.byteorder != "little":
        offsets.byteswap()
    body = offsets.tobytes()
    meta = {"format": FORMAT, "size": c.size, "mtime_ns": c.mtime_ns, "hash": c.hash,
            "count": c.count, "leaf": c.leaf, "n": len(offsets), "crc": zlib.crc32(body),
            "customs": c.branch.customs_index()}
    data = json.dumps(meta, separators=(",", ":")).encode() + b"\n" + body
    path = index_path(log)
    with contextlib.suppress(OSError):  # a cache: not fsynced (rebuilt when it does not match)
        safeio.write_atomic(path.parent, path.name, data, durable=False)


def covered_now(log: Path, count: int, leaf: str | None, branch: Branch) -> Covered | None:
    """The index state of a log this process has just written (it holds the writer lock)."""
    try:
        fd = open_regular(log)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        start = max(0, st.st_size - TAIL_HASHED)
        tail = os.pread(fd, st.st_size - start, start)
    finally:
        os.close(fd)
    return Covered(st.st_size, st.st_mtime_ns, tail_hash(tail, len(tail)), count, leaf, branch)


@dataclass
class Loaded:
    header: SessionHeader
    count: int
    leaf: str | None
    branch: Branch
    known: dict[str, Entry]  # entries read (the tail appended after the index)
    size: int  # bytes of the log accounted for


def _read_meta(log: Path) -> tuple[dict[str, Any], bytes] | None:
    try:
        with os.fdopen(open_regular(index_path(log)), "rb") as f:
            line = f.readline(MAX_META)
            body = f.read()
        meta = json.loads(line)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    n = meta.get("n")
    if not isinstance(n, int) or len(body) != 8 * n or zlib.crc32(body) != meta.get("crc"):
        return None
    return meta, body


def load(log: Path, reader_for: Any) -> Loaded | None:
    """The session through its index, or None when the index cannot be trusted (the
    caller then parses the whole file). `reader_for(path)` makes the branch's Reader."""
    got = _read_meta(log)
    if got is None:
        return None
    meta, body = got
    try:
        size, count, leaf = int(meta["size"]), int(meta["count"]), meta["leaf"]
        customs = {str(k): [int(i) for i in v] for k, v in dict(meta["customs"]).items()}
    except (KeyError, TypeError, ValueError):
        return None
    try:
        with os.fdopen(open_regular(log), "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size < size or (st.st_size == size and st.st_mtime_ns != meta["mtime_ns"]):
                return None
            start = max(0, size - TAIL_HASHED)
            f.seek(start)
            if tail_hash(f.read(size - start), size - start) != meta["hash"]:
                return None
            tail = f.read(st.st_size - size)
            f.seek(0)
            head_line = f.readline(1 << 20)
    except OSError:
        return None
    header = _header(log, head_line)
    if header is None:
        return None
    offsets = array("q")
    offsets.frombytes(body)
    if sys.byteorder != "little":
        offsets.byteswap()
    items: list[Entry | None] = [None] * len(offsets)
    branch = Branch(items, offsets, reader_for(log), customs)
    return _extend(log, header, branch, count, leaf, size, tail)


def _header(log: Path, raw: bytes) -> SessionHeader | None:
    try:
        d = parse_line(raw.decode())
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict) or d.get("type") != "session" or d.get("version") != SESSION_VERSION:
        return None  # migrations go through the full parse
    try:
        header = build(log, 1, d)
    except Exception:  # noqa: BLE001 - anything odd: the full parse reports it properly
        return None
    return header if isinstance(header, SessionHeader) else None


def _extend(log: Path, header: SessionHeader, branch: Branch, count: int, leaf: str | None,
            size: int, tail: bytes) -> Loaded | None:
    """Add the lines appended after the index; None unless they continue it plainly."""
    known: dict[str, Entry] = {}
    if tail and not tail.endswith(b"\n"):
        return None  # a torn or unterminated tail: the full parse handles it
    at = size
    for raw in tail.split(b"\n")[:-1]:
        try:
            e = parse_entry(log, 0, raw)
        except Exception:  # noqa: BLE001 - the full parse reports it with its line number
            return None
        if isinstance(e, SessionHeader) or e.id in known or e.id == header.id:
            return None
        if e.parent_id != leaf:
            return None  # a branch made after the index: rare, the full parse walks it
        branch.append(e, at)
        known[e.id] = e
        leaf = e.id
        count += 1
        at += len(raw) + 1
    return Loaded(header, count, leaf, branch, known, at)


def line_reader(log: Path) -> Reader:
    """Reads branch entries back by offset (one read of the span they lie in)."""

    def read(offsets: list[int]) -> list[Entry]:
        with os.fdopen(open_regular(log), "rb") as f:
            f.seek(offsets[-1])
            last = f.readline()
            end = offsets[-1] + len(last)
            f.seek(offsets[0])
            span = f.read(end - offsets[0])
        out = []
        for off in offsets:
            a = off - offsets[0]
            b = span.find(b"\n", a)
            raw = span[a:] if b < 0 else span[a:b]
            try:
                out.append(parse_entry(log, 0, raw))
            except SessionCorrupt as e:  # changed under the index: name the line
                raise SessionCorrupt(str(log), _line_no(log, off), e.reason) from None
        return out

    return read


def _line_no(log: Path, offset: int) -> int:
    with os.fdopen(open_regular(log), "rb") as f:
        return f.read(offset).count(b"\n") + 1


__all__ = ["INDEX_NAME", "Covered", "Loaded", "covered_now", "index_path", "line_reader",
           "load", "save"]
