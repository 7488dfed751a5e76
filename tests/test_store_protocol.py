"""The snapshot-store interface is declared once (kernel_ext.store_protocol): both stores
implement it, `kernel_ext.stores` is the one place a location picks one, and neither store
module imports the other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernel_ext import object_store, snapshot_store, stores
from kernel_ext.store_protocol import SnapshotStore

ROOT = Path(__file__).resolve().parents[1]


def _typed(store: SnapshotStore) -> SnapshotStore:
    return store  # statically: mypy checks kernel_ext.snapshot's `Snapshotter.store: SnapshotStore`


@pytest.mark.parametrize("location, kind", [
    ("relative/dir", snapshot_store.LocalStore),
    ("file:///tmp/snap", snapshot_store.LocalStore),
    ("memory://bucket/snap", object_store.ObjectStore),
])
def test_each_location_gets_a_store_that_is_a_snapshot_store(location, kind):
    store = stores.open_store(location)
    assert type(store) is kind
    assert isinstance(_typed(store), SnapshotStore)


def test_a_file_url_is_the_local_dir_it_names():
    assert stores.open_store("file:///tmp/a%20b").path == "/tmp/a b"


def _imported(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


@pytest.mark.parametrize("module, other", [
    ("snapshot_store", "object_store"), ("object_store", "snapshot_store"),
    ("store_protocol", "snapshot_store"), ("store_protocol", "object_store"),
])
def test_no_store_module_imports_another_store(module, other):
    """Anywhere in the file, function bodies and TYPE_CHECKING blocks included."""
    assert f"kernel_ext.{other}" not in _imported(ROOT / "kernel_ext" / f"{module}.py")
