"""On-disk layout of a snapshot dir, written so a kill at any point leaves the previous
complete snapshot restorable.

    <dir>/manifest.json            {"version", "generation", "python", "created", "entries",
                                    "groups"}
    <dir>/g<GEN>-small.bin         pickles under SMALL_LIMIT of one generation, concatenated
    <dir>/g<GEN>-v<I>.bin          one large pickle (main pickle + out-of-band buffers)
    <dir>/g<BASE>-log.bin          the manifest's journal: the generations after BASE, each
                                   with its small pickles (kernel_ext.snapshot_log)

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
the directory fsynced; only then are files no longer referenced deleted. Most generations
instead append one record to the log (its small pickles and what changed) and fsync it,
after the directory is fsynced when the generation wrote large files; every
`snapshot_log.MAX_RECORDS` records the whole manifest is written as above.

Fault injection (tests, soak runs): env RLM_SNAPSHOT_CRASH_AFTER_FILES=N makes the kernel
`os._exit(3)` right after the N-th data file of a snapshot was written, before the
manifest swap. It is read at every snapshot, so a cell may set it.
"""

from __future__ import annotations

import errno
import io
import json
import mmap
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from kernel_ext import contract, snapshot_log
from kernel_ext.lineage import RECORDS_NAME
from kernel_ext.wire import MANIFEST_NAME, MANIFEST_VERSION

if TYPE_CHECKING:
    from kernel_ext.object_store import ObjectStore

SMALL_LIMIT = 1024 * 1024
MAX_SMALL_FILES = 8
ALIGN = 64
CRASH_ENV = contract.SNAPSHOT_CRASH_AFTER_FILES
FILE_RE = re.compile(r"g(\d{8})-(small|v\d+|log)\.bin$")
_TMP_RE = re.compile(r"\.manifest\.\d+\.tmp$")
SMALL_SUFFIXES = ("-small.bin", "-log.bin")  # files of many small groups, read whole


def ensure_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


_fsync_dir = snapshot_log.fsync_dir


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
        return _open_new(os.path.join(self.path, fname))

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


def write_manifest(path: str, generation: int, entries: dict[str, dict[str, Any]],
                   groups: dict[str, dict[str, Any]]) -> None:
    _fsync_dir(path)  # data file names are durable before the manifest points at them
    manifest = new_manifest(generation, entries, groups)
    tmp = os.path.join(path, f".manifest.{generation}.tmp")
    f = _open_new(tmp)
    try:
        f.write(json.dumps(manifest, separators=(",", ":")).encode())
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, os.path.join(path, MANIFEST_NAME))
    except BaseException:
        f.close()
        _unlink(tmp)  # a full disk leaves no partial manifest behind
        raise
    _fsync_dir(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def discard_generation(path: str, generation: int) -> None:
    """A snapshot of `generation` failed (a full disk): delete its data files, so no
    partial file stays to hold the space; never when the manifest already names it."""
    manifest, _ = read_manifest(path)
    if manifest is not None and manifest["generation"] == generation:
        return
    for name in os.listdir(path):
        if file_generation(name) == generation:
            _unlink(os.path.join(path, name))


def collect_garbage(path: str, referenced: set[str], min_generation: int) -> None:
    """Delete data files not referenced by the current manifest, of generation >=
    min_generation (older ones are kept when their manifest could not be read)."""
    for name in os.listdir(path):
        if _TMP_RE.match(name) or (
            FILE_RE.match(name) and name not in referenced and file_generation(name) >= min_generation
        ):
            _unlink(os.path.join(path, name))


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


# ---------------------------------------------------------------------------- locations
# A snapshot location is a local directory (the session's `snapshot/`, or a `file://` URL:
# a POSIX file system, shared or not, gets the local layout above with its fsync +
# rename swap) or an fsspec URL of an object store (s3://, gs://, memory:// in tests),
# which gets the layout in kernel_ext.object_store. Both expose the same methods (`LocalStore`,
# `ObjectStore`).
#
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


def open_store(location: str) -> LocalStore | ObjectStore:
    """The store for a local path, a file:// URL or an fsspec URL (nothing is read yet)."""
    if not is_url(location):
        return LocalStore(location)
    if protocol(location) == "file":
        from urllib.parse import unquote, urlsplit

        return LocalStore(unquote(urlsplit(location).path))
    from kernel_ext.object_store import ObjectStore  # fsspec's backends, only for a URL

    return ObjectStore(location)


class LocalStore:
    """A snapshot dir on a POSIX file system: the module-level functions above, with the
    manifest's journal (kernel_ext.snapshot_log) once a manifest was read or written."""

    url = None

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.log: snapshot_log.Log | None = None  # None: the next write is a whole manifest
        self._written: tuple[dict[str, Any], dict[str, Any]] = ({}, {})  # what the log holds
        # a data file may have lost its last reference (or a crash left one): at the first
        # write, after a whole manifest (the old log), and when a dropped group pointed
        # outside the active log; otherwise the listing of the dir is skipped
        self._garbage = True
        self._records: Any = None  # cells.jsonl, open for appends once a cell is recorded

    def ensure(self) -> None:
        ensure_dir(self.path)

    def read_manifest(self) -> tuple[dict[str, Any] | None, str | None]:
        manifest, err = read_manifest(self.path)
        self.log = None
        if manifest is not None:
            manifest, self.log = snapshot_log.replay(self.path, manifest)
            self._written = (dict(manifest["entries"]), dict(manifest["groups"]))
        return manifest, err

    def max_generation(self) -> int:
        return max_generation(self.path)

    def _logging(self) -> bool:
        return self.log is not None and not self.log.full

    def writer(self, generation: int) -> GenerationWriter:
        log = self.log
        inline = (log.name, log.data_start()) if log is not None and self._logging() else None
        return GenerationWriter(self.path, generation, inline=inline)

    def write_manifest(self, generation: int, entries: dict[str, dict[str, Any]],
                       groups: dict[str, dict[str, Any]], writer: GenerationWriter | None = None,
                       changed: tuple[set[str], set[str]] | None = None) -> None:
        """`changed`: the entry names and group ids that may differ from the last write
        (the journal's record is then found in O(changed)); None: compare every one."""
        if self.log is not None and self._logging() and writer is not None:
            old_entries, old_groups = self._written
            entry_keys, group_keys = changed if changed is not None else (None, None)
            entry_delta = snapshot_log.delta(old_entries, entries, entry_keys)
            group_delta = snapshot_log.delta(old_groups, groups, group_keys)
            if writer.files_written:
                _fsync_dir(self.path)  # large files' names are durable before the log names them
            snapshot_log.append(self.log, generation, entry_delta, group_delta,
                                writer.inline_data, crash=writer.crash_due())
            active = self.log.name
            garbage = any(old_groups[g].get("file") not in (None, active)
                          for g in group_delta if g in old_groups)
        else:
            write_manifest(self.path, generation, entries, groups)
            self.log = snapshot_log.Log(self.path, generation, generation=generation)
            garbage = True
        self._written = (dict(entries), dict(groups))
        self._garbage = self._garbage or garbage

    def collect_garbage(self, groups: dict[str, dict[str, Any]], min_generation: int) -> None:
        """Delete the data files no group of `groups` (the manifest just written) names:
        only when one may have lost its last reference (see `_garbage`)."""
        if not self._garbage:
            return
        keep = {g["file"] for g in groups.values() if "file" in g}
        if self.log is not None:
            keep.add(self.log.name)
        collect_garbage(self.path, keep, min_generation)
        self._garbage = False

    def discard(self, generation: int) -> None:
        if self.log is not None and generation <= self.log.generation:
            return  # the log already holds it: its files stay
        discard_generation(self.path, generation)

    def reader(self) -> EntryReader:
        return EntryReader(self.path)

    def preserve_corrupt_manifest(self) -> None:
        src = os.path.join(self.path, MANIFEST_NAME)
        if os.path.exists(src):
            os.replace(src, os.path.join(self.path, f"manifest.corrupt-{int(time.time())}.json"))

    def append_cell(self, line: str) -> None:
        f = self._records
        if f is None or os.fstat(f.fileno()).st_nlink == 0:  # first, or the file was removed
            fd = os.open(os.path.join(self.path, RECORDS_NAME),
                         os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            f = self._records = os.fdopen(fd, "ab", buffering=0)  # closed with the store
        fd = f.fileno()
        size = os.fstat(fd).st_size
        data = (line + "\n").encode()
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), RECORDS_NAME)
        except OSError:
            os.ftruncate(fd, size)  # no partial record (a full disk)
            raise

    def cell_lines(self) -> list[str]:
        try:
            with open(os.path.join(self.path, RECORDS_NAME), encoding="utf-8") as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []
