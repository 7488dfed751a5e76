"""The worker sees what it should (issue 15.10): the lock is not lost to a probe, a job
added while it idles wakes it, `rlm stop` interrupts a running cell, an idle worker exits."""

from __future__ import annotations

import fcntl
import os

import pytest

from rlm.longrun import lock as lockmod
from rlm.longrun.lock import SessionBusy, SessionLock


def test_acquire_is_not_refused_by_a_holder_probe(tmp_path, monkeypatch):
    """`holder()` (rlm ps, attach, start_detached's wait) probes with a shared flock; a
    writer starting during that probe must still get the lock, not 'in use by another
    process' (the start-up flake of test_detached_worker_attach_and_stop)."""
    path = tmp_path / "worker.lock"
    probe = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a probe in progress
    ended = []

    def probe_ends(_seconds):
        fcntl.flock(probe, fcntl.LOCK_UN)
        ended.append(True)

    monkeypatch.setattr(lockmod.time, "sleep", probe_ends)
    lock = SessionLock(path, "worker")
    lock.acquire()
    try:
        assert ended and lockmod.lock_holder(path) == os.getpid()
    finally:
        lock.release()
        os.close(probe)


def test_a_named_holder_is_still_refused_at_once(tmp_path, monkeypatch):
    path = tmp_path / "worker.lock"
    monkeypatch.setattr(lockmod.time, "sleep", lambda s: pytest.fail("retried a real holder"))
    with SessionLock(path, "run"), pytest.raises(SessionBusy, match=f"pid {os.getpid()}"):
        SessionLock(path, "worker").acquire()
