"""An in-process IPython shell with kernel_ext's snapshots installed, shared by the
snapshot unit tests (`from tests.snapshot_shell import manifest, new_kernel, run, shell`).
Snapshots go to `<tmp_path>/session/snapshot`, the layout a real session has."""

from __future__ import annotations

import json
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from kernel_ext import snapshot, snapshot_store


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_SNAPSHOT_DIR", str(tmp_path / "session" / "snapshot"))
    monkeypatch.delenv("RLM_SNAPSHOT_CRASH_AFTER_FILES", raising=False)
    ip = InteractiveShell.instance()
    ip.reset(new_session=False)
    snapshot.install(ip)
    yield ip
    snapshot.uninstall(ip)
    ip.reset(new_session=False)


def run(ip: Any, code: str) -> Any:
    res = ip.run_cell(code, store_history=True)
    assert res.success, res.error_in_exec or res.error_before_exec
    return res


def manifest(ip: Any) -> dict:
    """The manifest a restore reads: manifest.json with its journal applied."""
    return read_manifest(snapshot._get(ip).path)


def read_manifest(path: Any) -> dict:
    m, err = snapshot_store.LocalStore(str(path)).read_manifest()
    assert m is not None, err
    return m


def new_kernel(ip: Any) -> dict:
    """Simulate a restarted kernel: empty namespace, fresh snapshot state on the same dir."""
    snapshot.uninstall(ip)
    ip.reset(new_session=False)
    snapshot.install(ip)
    return json.loads(snapshot.restore_report_json(ip))
