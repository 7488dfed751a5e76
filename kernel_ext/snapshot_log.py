"""The manifest journal of a local snapshot dir: a generation's changes are appended to one
file and fsynced once, instead of the whole manifest rewritten and swapped in (issue 32:
at 200 names the swap cost a 45 KB JSON dump, a temp file and four fsyncs per cell).

    <dir>/g<BASE>-log.bin    the records that follow manifest.json of generation BASE

Record at a 64-aligned offset P (the file holds only whole records, zero padded to 64):
    P       16 bytes   b"RLMJ", u64 data length D, u32 header length H (little endian)
    P+64    D bytes    the generation's small pickles (groups point here: "file" is the
                       log's name, "offset" absolute), 64-byte aligned like a small file
    P+64+D  H bytes    JSON {"generation", "created", "entries": {name: entry | null},
                       "groups": {gid: group | null}}: what changed; null = removed
    then    16 bytes   the first 16 again: a record without them was torn by a crash
A reader takes manifest.json (generation BASE), then applies the records of g<BASE>-log.bin
in order while each is whole and its generation grows; the first torn or unreadable one
ends the log (that snapshot never completed; the one before it is whole). A journal is
never written over: after such a tail, and now and then (`Log.full`), the store writes the
whole manifest again as before, and the next records go to a new log named by its generation;
the old log stays while groups point into it (garbage collection keeps referenced files).
"""

from __future__ import annotations

import errno
import json
import os
import struct
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

MAGIC = b"RLMJ"
_PREFIX = struct.Struct("<4sQI")  # magic, data length, header length: 16 bytes
DATA_AT = 64  # the data starts this far into a record
ALIGN = 64
MAX_RECORDS = 512  # then the whole manifest is written again
MAX_BYTES = 1024 * 1024  # the host scans a changed file for secrets after each cell
INLINE_LIMIT = 256 * 1024  # a generation's small pickles above this get a file of their own


class JournalLost(OSError):
    """The active journal is gone (removed by hand): what its records held must be
    written again."""


def log_name(base: int) -> str:
    return f"g{base:08d}-log.bin"


def _align(n: int) -> int:
    return n + (-n) % ALIGN


@dataclass
class Log:
    """The active log of a snapshot dir: the generation of the manifest it follows, where
    its last whole record ends, how many records it holds, the last generation applied."""

    path: str
    base: int
    end: int = 0
    records: int = 0
    generation: int = 0
    # bytes past the last whole record (a kernel killed mid-append): never written over,
    # so a journal only ever grows (the host's secret scrub reads what it gained); the
    # next generation writes the whole manifest and begins a new journal instead
    torn: bool = False
    # the journal, open for appends once one was made (closed with this object)
    file: Any = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return log_name(self.base)

    @property
    def full(self) -> bool:
        return self.records >= MAX_RECORDS or self.end >= MAX_BYTES or self.torn

    def data_start(self) -> int:
        return self.end + DATA_AT


def _records(data: bytes) -> Any:
    """(header, end) of each whole record from the start, up to the first torn one."""
    pos = 0
    while pos + DATA_AT <= len(data):
        magic, dlen, hlen = _PREFIX.unpack_from(data, pos)
        if magic != MAGIC:
            return
        hstart = pos + DATA_AT + dlen
        end = hstart + hlen + _PREFIX.size
        if end > len(data) or data[end - _PREFIX.size:end] != data[pos:pos + _PREFIX.size]:
            return
        try:
            header = json.loads(data[hstart:hstart + hlen])
        except ValueError:
            return
        if not (isinstance(header, dict) and isinstance(header.get("generation"), int)
                and isinstance(header.get("entries"), dict) and isinstance(header.get("groups"), dict)):
            return
        yield header, end
        pos = _align(end)


def replay(path: str, manifest: dict[str, Any],
           read: Callable[[str], bytes] | None = None) -> tuple[dict[str, Any], Log]:
    """`manifest` (read from manifest.json) with the records of its log applied, and the
    log's state for the next append. `read(name)`: the log's bytes (the host reads the
    kernel's files through its one safe open: never through a link a cell planted)."""
    log = Log(path, manifest["generation"], generation=manifest["generation"])
    try:
        if read is not None:
            data = read(log.name)
        else:
            with open(os.path.join(path, log.name), "rb") as f:
                data = f.read()
    except FileNotFoundError:
        return manifest, log
    entries, groups = dict(manifest["entries"]), dict(manifest["groups"])
    created = manifest.get("created")
    for header, end in _records(data):
        if header["generation"] <= log.generation:
            break
        for table, delta in ((entries, header["entries"]), (groups, header["groups"])):
            for k, v in delta.items():
                if v is None:
                    table.pop(k, None)
                else:
                    table[k] = v
        log.generation, log.end, log.records = header["generation"], _align(end), log.records + 1
        created = header.get("created", created)
    log.torn = len(data) > log.end
    if not log.records:
        return manifest, log
    return {**manifest, "generation": log.generation, "created": created, "entries": entries,
            "groups": groups}, log


def delta(old: dict[str, Any], new: dict[str, Any], keys: Iterable[str] | None = None) -> dict[str, Any]:
    """What changed from `old` to `new`: values compared by identity (a manifest's entries
    and groups are replaced, never changed in place), removed keys as None. `keys`: the
    only ones that may differ (O(keys) instead of O(old + new))."""
    if keys is not None:
        return {k: v for k in keys if (v := new.get(k)) is not old.get(k)}
    out: dict[str, Any] = {k: v for k, v in new.items() if old.get(k) is not v}
    out.update((k, None) for k in old.keys() - new.keys())
    return out


def append(log: Log, generation: int, entries: dict[str, Any], groups: dict[str, Any],
           data: bytes, crash: bool = False) -> None:
    """Append one generation's record and fsync it. A failure (a full disk) cuts the file
    back to its last whole record, or removes it when this record would have been its
    first. `crash` (fault injection): write the record torn and exit the process."""
    header = json.dumps({"generation": generation, "created": time.time(),
                         "entries": entries, "groups": groups}, separators=(",", ":")).encode()
    prefix = _PREFIX.pack(MAGIC, len(data), len(header))
    record = b"".join((prefix, bytes(DATA_AT - len(prefix)), data, header))
    record += prefix + bytes((-(len(record) + len(prefix))) % ALIGN)
    full = os.path.join(log.path, log.name)
    if log.file is None:
        log.file = os.fdopen(os.open(full, os.O_RDWR | os.O_CREAT, 0o600), "r+b", buffering=0)
    fd = log.file.fileno()
    try:
        st = os.fstat(fd)
        size = st.st_size
        if size > log.end:  # a failed append whose cut failed too: see Log.torn
            log.torn = True
            raise OSError(errno.EIO, "bytes past the journal's last whole record", log.name)
        if st.st_nlink == 0:  # removed by hand: the next generation writes a whole manifest
            log.torn = True
            raise JournalLost(errno.ENOENT, "the journal was removed", log.name)
        created = size == 0 and log.end == 0
        try:
            body = record[:-ALIGN] if crash else record
            if os.pwrite(fd, body, log.end) != len(body):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), log.name)
            os.fsync(fd)
            if crash:
                sys.stderr.flush()
                os._exit(3)  # fault-injection point: see kernel_ext.snapshot_store
        except BaseException:
            if created:
                os.unlink(full)
                log.file.close()
                log.file = None
            else:
                os.ftruncate(fd, log.end)
            raise
    except BaseException:
        if log.file is not None and log.torn:
            log.file.close()  # never written again
            log.file = None
        raise
    if created:
        fsync_dir(log.path)
    log.end, log.records, log.generation = log.end + len(record), log.records + 1, generation


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
