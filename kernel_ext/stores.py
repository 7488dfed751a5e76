"""The one place a snapshot location picks its store (kernel_ext.store_protocol): a local
path or a file:// URL gets the directory layout (kernel_ext.snapshot_store), any other URL
the fsspec object store (kernel_ext.object_store; fsspec itself is imported only when the
store is first used)."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from kernel_ext.object_store import ObjectStore
from kernel_ext.snapshot_store import LocalStore
from kernel_ext.store_protocol import SnapshotStore, is_url, protocol


def open_store(location: str) -> LocalStore | ObjectStore:
    """The store for a local path, a file:// URL or an fsspec URL (nothing is read yet)."""
    if not is_url(location):
        return LocalStore(location)
    if protocol(location) == "file":
        return LocalStore(unquote(urlsplit(location).path))
    return ObjectStore(location)


__all__ = ["SnapshotStore", "open_store"]
