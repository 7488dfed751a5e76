"""Issue 26 item 5 (and item 8's listing defects): a session directory given as a path is
never followed through symlinks or FIFOs, `rlm stop` signals only the process that holds
the lock, and `rlm sessions` lists every session once, a corrupt one included."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from rlm import app
from rlm.errors import SessionError
from rlm.longrun.lock import SessionLock, holder, holds_lock
from rlm.session.store import list_sessions, resolve_session_dir
from tests import rlmcli

rlm = partial(rlmcli.rlm, timeout=120)


def made_session(tmp_path: Path) -> Path:
    (tmp_path / "s.json").write_text(json.dumps(["done"]))
    with app.SessionRun.new("run", "t", app.RunOptions(
            overrides={"model": f"script:{tmp_path}/s.json"}), build=False) as run:
        s = run.session
    assert s is not None and s.dir is not None
    return s.dir


def copied(tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(made_session(tmp_path), copy)
    os.chmod(copy, 0o700)
    return copy


def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path):
    copy = copied(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (copy / "worker.lock").unlink(missing_ok=True)
    (copy / "worker.lock").symlink_to(victim)
    out = rlm("resume", str(copy), "hi", "--model", f"script:{tmp_path}/s.json", cwd=tmp_path)
    assert out.returncode != 0 and "worker.lock is a symbolic link" in out.stderr
    assert victim.read_text() == "precious\n"
    with pytest.raises(SessionError, match="symbolic link"):
        SessionLock.for_session(copy, "run").acquire()  # also when reached directly
    assert victim.read_text() == "precious\n"


def test_a_symlinked_snapshot_dir_is_refused(tmp_path):
    copy = copied(tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    shutil.rmtree(copy / "snapshot", ignore_errors=True)
    (copy / "snapshot").symlink_to(target)
    with pytest.raises(SessionError, match="snapshot is a symbolic link"):
        resolve_session_dir(copy)
    out = rlm("resume", str(copy), "hi", "--model", f"script:{tmp_path}/s.json", cwd=tmp_path)
    assert out.returncode != 0 and "snapshot is a symbolic link" in out.stderr
    assert list(target.iterdir()) == [] and (target.stat().st_mode & 0o777) == 0o755


@pytest.mark.timeout(120)  # a hang (the FIFO case without its fix) fails the test instead of blocking
def test_a_fifo_lock_hangs_neither_sessions_nor_stop(tmp_path, _isolated_home):
    sdir = made_session(tmp_path)
    (sdir / "worker.lock").unlink(missing_ok=True)
    os.mkfifo(sdir / "worker.lock")
    listed = rlm("sessions", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    stop = rlm("stop", sdir.name, cwd=tmp_path)
    assert stop.returncode != 0 and "not a regular file" in stop.stderr
    assert "\n" not in stop.stderr.strip()


def test_stop_does_not_signal_a_pid_the_lock_file_merely_names(tmp_path):
    sdir = made_session(tmp_path)
    bystander = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                 stdin=subprocess.PIPE)
    fd = os.open(sdir / "worker.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # this test process is the real holder...
        os.write(fd, f"{bystander.pid}\n0\nworker\n".encode())  # ...the file names another
        assert holder(sdir / "worker.lock").pid == bystander.pid
        assert holds_lock(sdir / "worker.lock", bystander.pid) is False
        assert holds_lock(sdir / "worker.lock", os.getpid()) is True
        # a process of its own: the holder is this one, `rlm stop` must be another
        out = rlm("stop", sdir.name, cwd=tmp_path, process=True)
        assert out.returncode != 0 and "does not hold the session's lock" in out.stderr
        assert bystander.poll() is None  # never signalled
    finally:
        os.close(fd)
        bystander.stdin.close()  # type: ignore[union-attr]
        bystander.wait(timeout=30)


def test_a_corrupt_header_is_listed_not_hidden(tmp_path, _isolated_home):
    sdir = made_session(tmp_path)
    good = made_session(tmp_path)
    lines = (sdir / "session.jsonl").read_text().splitlines()
    (sdir / "session.jsonl").write_text("{not json\n" + "\n".join(lines[1:]) + "\n")
    found = {s.id: s for s in list_sessions(_isolated_home)}
    assert set(found) == {sdir.name, good.name}
    assert found[sdir.name].problem and "corrupt header" in found[sdir.name].problem
    rows = json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)
    status = {r["id"]: r["status"] for r in rows}
    assert status[sdir.name] == "corrupt" and status[good.name] != "corrupt"


def test_a_copied_session_is_listed_once_under_each_directory(tmp_path, _isolated_home):
    sdir = made_session(tmp_path)
    copy = sdir.parent / (sdir.name + "-copy")
    shutil.copytree(sdir, copy)
    found = list_sessions(_isolated_home)
    assert sorted(s.id for s in found) == sorted([sdir.name, copy.name])
    (dup,) = [s for s in found if s.id == copy.name]
    assert dup.header_id == sdir.name
    assert resolve_session_dir(copy.name) == copy  # the listed id is the one that resolves
