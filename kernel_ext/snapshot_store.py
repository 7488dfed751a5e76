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
from typing import Any

from kernel_ext import contract, snapshot_log
from kernel_ext.lineage import RECORDS_NAME
from kernel_ext.wire import MANIFEST_NAME, MANIFEST_VERSION

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
# which gets the layout below. Both expose the same methods (`LocalStore`, `ObjectStore`).
#
# Object store layout, under <url>:
#     manifest-<GEN>.json    the manifest of generation GEN, with "complete": true; written
#                            in one PUT after every data object of GEN is committed
#     g<GEN>-small.bin, g<GEN>-v<I>.bin    data objects, as on disk
#     cells/c<N>.json        one lineage record per object (kernel_ext.lineage)
# A reader takes the newest manifest that parses and says complete; objects of a
# generation whose manifest never landed (a kill mid-snapshot) are ignored, then deleted.
# Garbage collection after writing GEN keeps the previous manifest and every object it
# names (a reader that listed just before the swap still finds its data); it deletes older
# manifests and unreferenced data objects of generations below GEN only.

MANIFEST_OBJ_RE = re.compile(r"manifest-(\d{8})\.json$")
CELLS_DIR = "cells"
_CELL_RE = re.compile(r"c(\d{8})\.json$")
# fsspec protocol -> what to install for it
BACKENDS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
            "abfs": "adlfs", "abfss": "adlfs"}
_CREDENTIALS = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment",
    "gs": "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file",
    "az": "set AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY in the environment",
}


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
    return ObjectStore(location)


def explain(exc: BaseException, location: str) -> str:
    """One line: what went wrong with `location` and what to install or set."""
    proto = protocol(location)
    where = public_url(location)
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, StoreError):
        return str(exc)
    if isinstance(exc, ImportError):
        pkg = BACKENDS.get(proto, f"the fsspec backend for {proto}://")
        extra = " (or pip install 'rlm[s3]')" if pkg == "s3fs" else ""
        return f"snapshot URL {where}: {pkg} is not installed where this runs: pip install {pkg}{extra}"
    kind = BACKENDS.get(proto, proto)
    creds = _CREDENTIALS.get({"s3fs": "s3", "gcsfs": "gs", "adlfs": "az"}.get(kind, ""), "")
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError") or (
            "credentials" in text.lower() and creds):
        return f"snapshot URL {where}: no credentials ({text}): {creds or 'set them in the environment'}"
    if isinstance(exc, PermissionError):
        return f"snapshot URL {where}: access denied ({text}): check the credentials' permissions"
    if isinstance(exc, FileNotFoundError):
        return f"snapshot URL {where}: the bucket or path does not exist ({text}): create it first"
    return f"snapshot URL {where}: {name}: {text}"


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


class ObjectStore:
    """A snapshot location in an object store, through fsspec (see the layout above).
    Credentials come from the environment of the process (the kernel's, or the host's
    for `rlm state`); the URL never carries them."""

    def __init__(self, url: str) -> None:
        self.url = public_url(url)
        self.path = self.url  # what messages name
        self._given = url
        self._fs: Any = None
        self.root = ""
        self.current: tuple[int, set[str]] | None = None  # newest complete manifest: gen, files
        self.previous: tuple[int, set[str]] | None = None
        self.unreadable: set[str] = set()  # manifest objects that did not parse: never deleted
        # objects at the root known to exist: listed once, then kept up to date by this
        # (the session's only) writer, so a snapshot costs no LIST request
        self.known: set[str] | None = None
        self._next_cell: int | None = None

    @property
    def fs(self) -> Any:
        if self._fs is None:
            try:
                from fsspec.core import url_to_fs

                # a fresh instance: credentials are read from the environment as it is now
                self._fs, self.root = url_to_fs(self._given, skip_instance_cache=True)
            except (ImportError, ValueError) as exc:
                raise StoreError(explain(exc, self._given)) from None
            self.root = self.root.rstrip("/")
        return self._fs

    def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - every backend raises its own kinds
            raise StoreError(explain(exc, self._given)) from None

    def _key(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _names(self, sub: str = "") -> list[str]:
        fs = self.fs
        where = self._key(sub) if sub else self.root
        try:
            fs.invalidate_cache(where)
            listed = fs.ls(where, detail=False)
        except FileNotFoundError:
            return []
        except Exception as exc:  # noqa: BLE001
            raise StoreError(explain(exc, self._given)) from None
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in listed]
        if not sub:
            self.known = set(names)
        return names

    def _root_names(self) -> set[str]:
        return set(self.known) if self.known is not None else set(self._names())

    def ensure(self) -> None:
        """Nothing to create: objects make their prefix; the bucket must exist already."""
        self.fs  # noqa: B018 - fails here, with the fix, when the backend is missing

    def check(self) -> None:
        """Raise StoreError (one line) when the backend, the credentials or the bucket is
        missing (a listing of an empty prefix, then: does the bucket exist)."""
        fs = self.fs
        probe = self._key(".rlm-check")  # never written: the listing is empty
        try:
            fs.invalidate_cache(probe)
            fs.ls(probe, detail=False)  # signed: fails without credentials
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001 - every backend raises its own kinds
            raise StoreError(explain(exc, self._given)) from None
        bucket = self.root.split("/", 1)[0]
        if not self._call(self.fs.exists, bucket):
            raise StoreError(f"snapshot URL {self.url}: the bucket {bucket!r} does not exist "
                             "(or these credentials cannot see it): create it first")

    def read_manifest(self) -> tuple[dict[str, Any] | None, str | None]:
        """The newest complete manifest (None, None when there is none; None, reason when
        none is readable). Raises StoreError when the store cannot be reached."""
        names = self._names()
        gens = sorted((int(m.group(1)), n) for n in names if (m := MANIFEST_OBJ_RE.match(n)))
        bad: list[str] = []
        for gen, name in reversed(gens):
            raw = self._call(self.fs.cat_file, self._key(name))
            try:
                m = json.loads(raw)
            except ValueError:
                m = None
            if (not isinstance(m, dict) or m.get("complete") is not True or m.get("generation") != gen
                    or m.get("version") != MANIFEST_VERSION or not isinstance(m.get("entries"), dict)
                    or not isinstance(m.get("groups"), dict)):
                bad.append(name)
                continue
            self.unreadable.update(bad)
            self.current = (gen, _files(m["groups"]))
            return m, None
        self.unreadable.update(bad)
        if bad:
            return None, f"no complete manifest in {self.url} ({', '.join(bad)} unreadable)"
        return None, None

    def max_generation(self) -> int:
        best = 0
        for n in self._root_names():
            m = FILE_RE.match(n) or MANIFEST_OBJ_RE.match(n)
            if m:
                best = max(best, int(m.group(1)))
        return best

    def writer(self, generation: int) -> GenerationWriter:
        fs = self.fs

        def opener(fname: str) -> Any:
            if self.known is not None:
                self.known.add(fname)
            return self._call(fs.open, self._key(fname), "wb")

        return GenerationWriter(self.url, generation, opener=opener)

    def write_manifest(self, generation: int, entries: dict[str, dict[str, Any]],
                       groups: dict[str, dict[str, Any]], writer: GenerationWriter | None = None,
                       changed: tuple[set[str], set[str]] | None = None) -> None:
        manifest = {**new_manifest(generation, entries, groups), "complete": True}
        data = json.dumps(manifest, separators=(",", ":")).encode()
        name = f"manifest-{generation:08d}.json"
        self._call(self.fs.pipe_file, self._key(name), data)
        if self.known is not None:
            self.known.add(name)
        self.previous, self.current = self.current, (generation, _files(groups))

    def collect_garbage(self, groups: dict[str, dict[str, Any]], min_generation: int) -> None:
        if self.current is None:
            return
        gen = self.current[0]
        keep = _files(groups) | (self.previous[1] if self.previous else set())
        keep_manifest = self.previous[0] if self.previous else gen
        doomed = []
        for n in sorted(self._root_names()):
            m = FILE_RE.match(n)
            if m and n not in keep and min_generation <= int(m.group(1)) < gen:
                doomed.append(n)
            m = MANIFEST_OBJ_RE.match(n)
            if m and n not in self.unreadable and min_generation <= int(m.group(1)) < keep_manifest:
                doomed.append(n)
        if doomed:
            try:
                self._call(self.fs.rm, [self._key(n) for n in doomed])
            except StoreError:
                self.known = None  # list again next time
                raise
            if self.known is not None:
                self.known.difference_update(doomed)

    def discard(self, generation: int) -> None:
        """Nothing: an aborted upload left no object, and objects of a generation whose
        manifest never landed are ignored, then collected."""

    def reader(self) -> ObjectReader:
        return ObjectReader(self)

    def preserve_corrupt_manifest(self) -> None:
        """Unreadable manifest objects are never deleted (see `unreadable`)."""

    def append_cell(self, line: str) -> None:
        if self._next_cell is None:
            nums = [int(m.group(1)) for n in self._names(CELLS_DIR) if (m := _CELL_RE.match(n))]
            self._next_cell = max(nums, default=0) + 1
        self._call(self.fs.pipe_file, self._key(f"{CELLS_DIR}/c{self._next_cell:08d}.json"),
                   line.encode())
        self._next_cell += 1

    def written_since(self, generation: int, cell: int) -> tuple[list[str], int, int]:
        """Objects of generations above `generation` (data and manifests) and cell records
        above `cell`, as names relative to the location, with the highest complete
        generation and cell number seen (the host's secret scrub reads these back)."""
        names: list[str] = []
        top_gen, top_cell = generation, cell
        for n in self._names():
            m = FILE_RE.match(n) or MANIFEST_OBJ_RE.match(n)
            if m and int(m.group(1)) > generation:
                names.append(n)
            if (m := MANIFEST_OBJ_RE.match(n)) and int(m.group(1)) > top_gen:
                top_gen = int(m.group(1))  # a generation is done once its manifest is there
        for n in self._names(CELLS_DIR):
            m = _CELL_RE.match(n)
            if m and int(m.group(1)) > cell:
                names.append(f"{CELLS_DIR}/{n}")
                top_cell = max(top_cell, int(m.group(1)))
        return sorted(names), top_gen, top_cell

    def read_object(self, name: str) -> bytes:
        return bytes(self._call(self.fs.cat_file, self._key(name)))

    def replace_object(self, name: str, data: bytes) -> None:
        self._call(self.fs.pipe_file, self._key(name), data)

    def cell_lines(self) -> list[str]:
        names = sorted(n for n in self._names(CELLS_DIR) if _CELL_RE.match(n))
        if not names:
            return []
        got = self._call(self.fs.cat, [self._key(f"{CELLS_DIR}/{n}") for n in names])
        return [got[k].decode("utf-8", "replace") for k in sorted(got)]


def _files(groups: dict[str, dict[str, Any]]) -> set[str]:
    return {g["file"] for g in groups.values() if isinstance(g, dict) and "file" in g}


class ObjectReader(EntryReader):
    """Reads entry segments from an object store: a small-group object once, a large
    group's byte range into a writable buffer."""

    def __init__(self, store: ObjectStore) -> None:
        super().__init__(store.url)
        self.store = store

    def read(self, entry: dict[str, Any]) -> list[memoryview]:
        fname, offset, length = entry["file"], int(entry["offset"]), int(entry["length"])
        if os.path.basename(fname) != fname or not FILE_RE.match(fname):
            raise ValueError(f"bad data file name {fname!r}")
        st, key = self.store, self.store._key(fname)
        if fname.endswith("-small.bin"):
            if fname not in self._cache:
                self._cache[fname] = st._call(st.fs.cat_file, key)
            data: Any = self._cache[fname][offset: offset + length]
        else:
            # keywords: s3fs's cat_file takes version_id second
            data = st._call(st.fs.cat_file, key, start=offset, end=offset + length) if length else b""
        if len(data) != length:
            raise ValueError(f"{fname} is truncated")
        view = memoryview(bytearray(data))  # writable: restored arrays must be too
        return [view[o: o + n] for o, n in entry["parts"]]
