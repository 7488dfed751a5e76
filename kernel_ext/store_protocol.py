"""What every snapshot store is: the `SnapshotStore` protocol the snapshotter
(kernel_ext.snapshot) and the host (`rlm state`, the secret scrub) call, and what both
stores share: the data-file layout (names, alignment, the small-pickle limit), the
generation writer and entry reader they hand out, the manifest they write, and locations.

Two stores implement it: `kernel_ext.snapshot_store.LocalStore` (a directory on a POSIX
file system, a path or a file:// URL) and `kernel_ext.object_store.ObjectStore` (an fsspec
URL: s3://, gs://, memory:// in tests). Neither imports the other; `kernel_ext.stores.open_store`
is the one place a location picks its store. A new backend implements `SnapshotStore` and
gets one branch there.
"""

from __future__ import annotations

import io
import mmap
import os
import re
import sys
import time
from typing import Any, Protocol, runtime_checkable

from kernel_ext import contract, snapshot_log
from kernel_ext.wire import MANIFEST_VERSION

# -- the data-file layout both stores share (kernel_ext.snapshot_store's docstring) -------
SMALL_LIMIT = 1024 * 1024
MAX_SMALL_FILES = 8
ALIGN = 64
FILE_RE = re.compile(r"g(\d{8})-(small|v\d+|log)\.bin$")
SMALL_SUFFIXES = ("-small.bin", "-log.bin")  # files of many small groups, read whole


class StoreError(Exception):
    """A snapshot location that cannot be used; the message is one line with the fix."""


def is_url(location: str) -> bool:
    return "://" in location


def public_url(location: str) -> str:
    """`location` without any user:password@ part (safe to print and to record)."""
    from urllib.parse import urlsplit, urlunsplit

    if not is_url(location):
        return location
    parts = urlsplit(location)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def protocol(location: str) -> str:
    return location.split("://", 1)[0].lower() if is_url(location) else "file"


@runtime_checkable
class SnapshotStore(Protocol):
    """A snapshot location: where the manifest, the data files of each generation and the
    cell records (kernel_ext.lineage) live. `url`: the public URL, None for a local dir;
    `path`: what messages name (the dir, or the URL)."""

    @property
    def url(self) -> str | None: ...

    @property
    def path(self) -> str: ...

    def ensure(self) -> None: ...

    def read_manifest(self) -> tuple[dict[str, Any] | None, str | None]: ...

    def max_generation(self) -> int: ...

    def writer(self, generation: int) -> GenerationWriter: ...

    def write_manifest(self, generation: int, entries: dict[str, dict[str, Any]],
                       groups: dict[str, dict[str, Any]], writer: GenerationWriter | None = None,
                       changed: tuple[set[str], set[str]] | None = None) -> None: ...

    def collect_garbage(self, groups: dict[str, dict[str, Any]], min_generation: int) -> None: ...

    def discard(self, generation: int) -> None: ...

    def reader(self) -> EntryReader: ...

    def preserve_corrupt_manifest(self) -> None: ...

    def append_cell(self, line: str) -> None: ...

    def cell_lines(self) -> list[str]: ...


def new_manifest(generation: int, entries: dict[str, dict[str, Any]],
                 groups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The manifest both stores write (an object store's adds `"complete": true`)."""
    return {
        "version": MANIFEST_VERSION,
        "generation": generation,
        "python": ".".join(map(str, sys.version_info[:3])),
        "created": time.time(),
        "entries": entries,
        "groups": groups,
    }


def open_new(path: str) -> Any:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    return os.fdopen(fd, "wb", buffering=0)


def _write_parts(f: Any, parts: list[Any], pos: int) -> tuple[list[list[int]], int]:
    """Write parts 64-byte aligned relative to `pos` (the segment start); returns layout, length."""
    layout, rel = [], 0
    for part in parts:
        pad = (-rel) % ALIGN
        if pad:
            f.write(b"\0" * pad)
            rel += pad
        view = memoryview(part).cast("B")
        n = view.nbytes
        written = 0
        while written < n:
            written += f.write(view[written:])
        layout.append([rel, n])
        rel += n
    return layout, rel


class GenerationWriter:
    """Writes the data files of one generation; counts them for the fault-injection hook.
    `opener(fname)` opens a new data file elsewhere (an object store); default: a local
    file under `path`, fsynced when done."""

    def __init__(self, path: str, generation: int, opener: Any = None,
                 inline: tuple[str, int] | None = None) -> None:
        self.path, self.gen = path, generation
        self._opener = opener
        # (log name, absolute offset): the small pickles go into the log's next record
        # (kernel_ext.snapshot_log) when they fit, held in `inline_data` until it is written
        self.inline, self.inline_data = inline, b""
        self.files_written, self.bytes_written = 0, 0
        self._small: list[tuple[str, list[Any]]] = []
        self._large_index = 0
        env = os.environ.get(contract.SNAPSHOT_CRASH_AFTER_FILES, "")
        self._crash_after = int(env) if env.strip().isdigit() else None

    def _open(self, fname: str) -> Any:
        if self._opener is not None:
            return self._opener(fname)
        return open_new(os.path.join(self.path, fname))

    def _abandon(self, f: Any) -> None:
        """A failed write: an object store's upload is aborted (closing would commit it)."""
        discard = getattr(f, "discard", None) if self._opener is not None else None
        if discard is not None:
            discard()
        else:
            f.close()

    def _file_done(self, f: Any) -> None:
        if self._opener is None:
            try:
                os.fsync(f.fileno())  # ENOSPC may show only here
            except BaseException:
                f.close()
                raise
        f.close()  # an object store commits the object here
        self.files_written += 1
        if self._crash_after is not None and self.files_written >= self._crash_after:
            sys.stderr.flush()
            os._exit(3)  # fault-injection point: see the module docstring

    def add(self, key: str, parts: list[Any], size: int) -> dict[str, Any] | None:
        """Large payloads are written now and their location returned; small ones later."""
        if size < SMALL_LIMIT:
            self._small.append((key, parts))
            return None
        self._large_index += 1
        fname = f"g{self.gen:08d}-v{self._large_index}.bin"
        f = self._open(fname)
        try:
            layout, length = _write_parts(f, parts, 0)
        except BaseException:
            self._abandon(f)
            raise
        self.bytes_written += length
        self._file_done(f)
        return {"file": fname, "offset": 0, "length": length, "parts": layout}

    def crash_due(self) -> bool:
        """Fault injection: the next file written is the one to die after."""
        return self._crash_after is not None and self.files_written + 1 >= self._crash_after

    def finish_small(self) -> dict[str, dict[str, Any]]:
        if not self._small:
            return {}
        size = sum(memoryview(p).nbytes + ALIGN for _, parts in self._small for p in parts)
        if self.inline is not None and size <= snapshot_log.INLINE_LIMIT:
            return self._small_inline(*self.inline)
        fname = f"g{self.gen:08d}-small.bin"
        out: dict[str, dict[str, Any]] = {}
        f = self._open(fname)
        pos = 0
        try:
            for name, parts in self._small:
                pad = (-pos) % ALIGN
                if pad:
                    f.write(b"\0" * pad)
                    pos += pad
                layout, length = _write_parts(f, parts, pos)
                out[name] = {"file": fname, "offset": pos, "length": length, "parts": layout}
                pos += length
        except BaseException:
            self._abandon(f)
            raise
        self.bytes_written += pos
        self._file_done(f)
        return out

    def _small_inline(self, fname: str, start: int) -> dict[str, dict[str, Any]]:
        buf = io.BytesIO()
        out: dict[str, dict[str, Any]] = {}
        for name, parts in self._small:
            pos = buf.tell()
            pad = (-pos) % ALIGN
            buf.write(b"\0" * pad)
            layout, length = _write_parts(buf, parts, pos + pad)
            out[name] = {"file": fname, "offset": start + pos + pad, "length": length, "parts": layout}
        self.inline_data = buf.getvalue()
        self.bytes_written += len(self.inline_data)
        return out


class EntryReader:
    """Reads entry segments; small-group files are read once and sliced."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._cache: dict[str, bytes] = {}

    def read(self, entry: dict[str, Any]) -> list[memoryview]:
        fname, offset, length = entry["file"], int(entry["offset"]), int(entry["length"])
        if os.path.basename(fname) != fname or not FILE_RE.match(fname):
            raise ValueError(f"bad data file name {fname!r}")
        full = os.path.join(self.path, fname)
        if fname.endswith(SMALL_SUFFIXES):
            if fname not in self._cache:
                with open(full, "rb") as f:
                    self._cache[fname] = f.read()
            view = memoryview(self._cache[fname])[offset : offset + length]
            if view.nbytes != length:
                raise ValueError(f"{fname} is truncated")
            view = memoryview(bytearray(view))  # writable: restored arrays must be too
        else:
            # a private copy-on-write map: writable, pages read when first touched, no
            # zero-filled buffer to allocate first. Safe because data files are never
            # modified or truncated after the manifest names them (only unlinked).
            with open(full, "rb") as f:
                if os.fstat(f.fileno()).st_size < offset + length:
                    raise ValueError(f"{fname} is truncated")
                if length == 0:
                    return [memoryview(bytearray(0)) for _ in entry["parts"]]
                mm = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE,
                               prot=mmap.PROT_READ | mmap.PROT_WRITE)
            view = memoryview(mm)[offset : offset + length]
        return [view[o : o + n] for o, n in entry["parts"]]

    def read_copy(self, entry: dict[str, Any]) -> list[bytes]:
        return [bytes(p) for p in self.read(entry)]
