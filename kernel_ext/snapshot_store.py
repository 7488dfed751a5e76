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
import json
import os
import re
import time
from typing import Any

from kernel_ext import snapshot_log, store_protocol
from kernel_ext.lineage import RECORDS_NAME
from kernel_ext.store_protocol import FILE_RE, EntryReader, GenerationWriter, new_manifest
from kernel_ext.wire import MANIFEST_NAME, MANIFEST_VERSION

_TMP_RE = re.compile(r"\.manifest\.\d+\.tmp$")


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


def write_manifest(path: str, generation: int, entries: dict[str, dict[str, Any]],
                   groups: dict[str, dict[str, Any]]) -> None:
    _fsync_dir(path)  # data file names are durable before the manifest points at them
    manifest = new_manifest(generation, entries, groups)
    tmp = os.path.join(path, f".manifest.{generation}.tmp")
    f = store_protocol.open_new(tmp)  # one name to patch (tests: a full disk)
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


class LocalStore:
    """A snapshot dir on a POSIX file system (a `SnapshotStore`, kernel_ext.store_protocol):
    the module-level functions above, with the manifest's journal (kernel_ext.snapshot_log)
    once a manifest was read or written."""

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
