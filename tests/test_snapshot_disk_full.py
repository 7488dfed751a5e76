"""Issue 15.6: a full disk (ENOSPC) during a snapshot leaves no partial file behind, the
previous manifest stays the one restored, and the next snapshot after space returns works.
ENOSPC is simulated in-process: data files accept half a write, then fail (or fail at fsync)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from kernel_ext import snapshot, snapshot_store, store_protocol
from tests.snapshot_shell import manifest, new_kernel, run  # `shell` comes from conftest


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _FullFile:
    """A data file on a disk that fills up after half a write."""

    def __init__(self, f) -> None:
        self.f = f

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.f.write(view[: max(1, view.nbytes // 2)])
        raise _enospc()

    def __getattr__(self, name):
        return getattr(self.f, name)


def _fill_at_write(monkeypatch) -> None:
    real = store_protocol.open_new
    monkeypatch.setattr(store_protocol, "open_new", lambda path: _FullFile(real(path)))


def _fill_at_fsync(monkeypatch) -> None:
    def fsync(fd):
        raise _enospc()

    monkeypatch.setattr(snapshot_store.os, "fsync", fsync)


def _files(ip) -> set[str]:
    return {n for n in os.listdir(snapshot._get(ip).path) if n != "cells.jsonl"}


@pytest.mark.parametrize("fill", [_fill_at_write, _fill_at_fsync])
def test_full_disk_leaves_no_partial_file_and_next_snapshot_works(shell, monkeypatch, capsys, fill):
    run(shell, "a = 1")
    before, gen = _files(shell), manifest(shell)["generation"]
    with monkeypatch.context() as m:
        fill(m)
        run(shell, "big = bytes(3 * 1024 * 1024)\nsmall = [1, 2, 3]")  # a large and a small file
    assert "No space left on device" in capsys.readouterr().err
    assert _files(shell) == before, "a partial file of the failed snapshot stayed behind"
    assert manifest(shell)["generation"] == gen
    run(shell, "c = 3")  # space is back: the touched names are written now
    m2 = manifest(shell)
    assert m2["generation"] > gen and {"a", "big", "small", "c"} <= m2["entries"].keys()
    report = new_kernel(shell)
    assert report["failed"] == [], json.dumps(report)
    assert shell.user_ns["big"] == bytes(3 * 1024 * 1024) and shell.user_ns["small"] == [1, 2, 3]


def test_full_disk_restores_previous_manifest(shell, monkeypatch):
    run(shell, "a = 1")
    with monkeypatch.context() as m:
        _fill_at_write(m)
        run(shell, "b = bytes(2 * 1024 * 1024)")
    new_kernel(shell)
    assert shell.user_ns["a"] == 1 and "b" not in shell.user_ns


def test_full_disk_leaves_no_partial_cell_record(shell, monkeypatch):
    run(shell, "a = 1")
    path = os.path.join(snapshot._get(shell).path, "cells.jsonl")
    before = open(path, "rb").read()
    real_write = os.write

    def half_write(fd, data):
        real_write(fd, bytes(data)[: len(data) // 2])
        raise _enospc()

    with monkeypatch.context() as m:
        m.setattr(snapshot_store.os, "write", half_write)
        run(shell, "b = 2")
    assert open(path, "rb").read() == before
