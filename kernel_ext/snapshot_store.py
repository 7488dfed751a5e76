"""On-disk layout of a snapshot dir, written so a kill at any point leaves the previous
complete snapshot restorable.

    <dir>/manifest.json            {"version", "generation", "python", "created", "entries",
                                    "groups"}
    <dir>/g<GEN>-small.bin         pickles under SMALL_LIMIT of one generation, concatenated
    <dir>/g<GEN>-v<I>.bin          one large pickle (main pickle + out-of-band buffers)

Version 2. An entry (one per name): {"kind", "type", "bytes", "reason", "module",
"qualname", "group", "summary"} (keys absent when not relevant). A pickle|dill entry names
its "group"; a group holds the data of the names stored together (co-variables, see
kernel_ext.snapshot_codec): {"kind", "members": [names], "single": bool, "bytes", "file",
"offset", "length", "parts": [[rel_offset, length], ...]}. "single": the data is the one
member's value; else a tuple of the members' values in `members` order. A name is restored
from group G only while its entry still says "group": G (a member rebound later points at
its new group; the old group's data stays until no entry refers to it). Parts are 64-byte
aligned inside the group's segment; part 0 is the pickle stream, the rest are its
out-of-band buffers. Dir 0700, files 0600.

Version 1 manifests (entries carried their own data location) are migrated on read: each
data entry becomes a single-member group (`migrate_v1`).

Write order: data files under generation-unique names, each fsynced; the directory
fsynced; the manifest written to a temp file, fsynced, `os.replace`d over manifest.json;
the directory fsynced; only then are files no longer referenced deleted.

Fault injection (tests, soak runs): env RLM_SNAPSHOT_CRASH_AFTER_FILES=N makes the kernel
`os._exit(3)` right after the N-th data file of a snapshot was written, before the
manifest swap. It is read at every snapshot, so a cell may set it.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import sys
import time
from typing import Any

from kernel_ext.wire import MANIFEST_NAME, MANIFEST_VERSION

SMALL_LIMIT = 1024 * 1024
MAX_SMALL_FILES = 8
ALIGN = 64
CRASH_ENV = "RLM_SNAPSHOT_CRASH_AFTER_FILES"
FILE_RE = re.compile(r"g(\d{8})-(small|v\d+)\.bin$")
_TMP_RE = re.compile(r"\.manifest\.\d+\.tmp$")


def ensure_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(manifest, None) | (None, None) when absent | (None, reason) when unreadable."""
    try:
        with open(os.path.join(path, MANIFEST_NAME), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read manifest: {exc}"
    try:
        m = json.loads(raw)
    except ValueError as exc:
        return None, f"corrupt manifest ({MANIFEST_NAME}): {exc}"
    if not isinstance(m, dict) or not isinstance(m.get("entries"), dict) or not isinstance(m.get("generation"), int):
        return None, f"corrupt manifest ({MANIFEST_NAME}): missing entries or generation"
    if m.get("version") == 1:
        return migrate_v1(m), None
    if m.get("version") != MANIFEST_VERSION or not isinstance(m.get("groups"), dict):
        return None, f"unsupported manifest version {m.get('version')!r} (expected {MANIFEST_VERSION})"
    return m, None


_LOCATION = ("file", "offset", "length", "parts")


def migrate_v1(m: dict[str, Any]) -> dict[str, Any]:
    """A version-1 manifest as version 2: each data entry becomes a one-member group."""
    entries: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for name, e in m["entries"].items():
        e = dict(e)
        if e.get("kind") in ("pickle", "dill") and "file" in e:
            gid = f"v1.{name}"
            groups[gid] = {"kind": e["kind"], "members": [name], "single": True,
                           "bytes": e.get("bytes", 0), **{k: e.pop(k) for k in _LOCATION if k in e}}
            e["group"] = gid
        entries[name] = e
    return {**m, "version": MANIFEST_VERSION, "entries": entries, "groups": groups}


def max_generation(path: str) -> int:
    best = 0
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return 0
    for name in names:
        m = FILE_RE.match(name)
        if m:
            best = max(best, int(m.group(1)))
    return best


def file_generation(name: str) -> int:
    m = FILE_RE.match(name)
    return int(m.group(1)) if m else -1


def _open_new(path: str) -> Any:
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
    """Writes the data files of one generation; counts them for the fault-injection hook."""

    def __init__(self, path: str, generation: int) -> None:
        self.path, self.gen = path, generation
        self.files_written, self.bytes_written = 0, 0
        self._small: list[tuple[str, list[Any]]] = []
        self._large_index = 0
        env = os.environ.get(CRASH_ENV, "")
        self._crash_after = int(env) if env.strip().isdigit() else None

    def _file_done(self, f: Any) -> None:
        os.fsync(f.fileno())
        f.close()
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
        f = _open_new(os.path.join(self.path, fname))
        try:
            layout, length = _write_parts(f, parts, 0)
        except BaseException:
            f.close()
            raise
        self.bytes_written += length
        self._file_done(f)
        return {"file": fname, "offset": 0, "length": length, "parts": layout}

    def finish_small(self) -> dict[str, dict[str, Any]]:
        if not self._small:
            return {}
        fname = f"g{self.gen:08d}-small.bin"
        out: dict[str, dict[str, Any]] = {}
        f = _open_new(os.path.join(self.path, fname))
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
            f.close()
            raise
        self.bytes_written += pos
        self._file_done(f)
        return out


def write_manifest(path: str, generation: int, entries: dict[str, dict[str, Any]],
                   groups: dict[str, dict[str, Any]]) -> None:
    _fsync_dir(path)  # data file names are durable before the manifest points at them
    manifest = {
        "version": MANIFEST_VERSION,
        "generation": generation,
        "python": ".".join(map(str, sys.version_info[:3])),
        "created": time.time(),
        "entries": entries,
        "groups": groups,
    }
    tmp = os.path.join(path, f".manifest.{generation}.tmp")
    f = _open_new(tmp)
    try:
        f.write(json.dumps(manifest, separators=(",", ":")).encode())
        os.fsync(f.fileno())
    finally:
        f.close()
    os.replace(tmp, os.path.join(path, MANIFEST_NAME))
    _fsync_dir(path)


def collect_garbage(path: str, referenced: set[str], min_generation: int) -> None:
    """Delete data files not referenced by the current manifest, of generation >=
    min_generation (older ones are kept when their manifest could not be read)."""
    for name in os.listdir(path):
        if _TMP_RE.match(name) or (
            FILE_RE.match(name) and name not in referenced and file_generation(name) >= min_generation
        ):
            try:
                os.unlink(os.path.join(path, name))
            except FileNotFoundError:
                pass


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
        if fname.endswith("-small.bin"):
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
