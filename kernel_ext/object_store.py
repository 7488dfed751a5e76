"""A snapshot location in an object store, through fsspec: a `SnapshotStore`
(kernel_ext.store_protocol; kernel_ext.snapshot_store has the local layout, and
kernel_ext.stores.open_store picks one of the two).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from kernel_ext.store_protocol import (
    FILE_RE,
    EntryReader,
    GenerationWriter,
    StoreError,
    new_manifest,
    protocol,
    public_url,
)
from kernel_ext.wire import MANIFEST_VERSION

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
