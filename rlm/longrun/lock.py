"""One writer per session: an flock on `<session_dir>/worker.lock` naming its holder.

Every process that appends to a session's log or runs its kernel takes this lock first:
the resident worker, a foreground `rlm run` / `rlm chat` / `rlm resume`, `rlm compact`,
a direct `rlm goal` change. (The file keeps the name it had when only workers took it.)
The OS drops an flock when its process dies, however it dies, so a crashed (even
SIGKILLed) holder never leaves the session locked; the file's contents are informational:

    <pid>\\n<since, unix seconds>\\n<holder: worker | run | chat | resume | compact | goal>\\n
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path

from rlm.errors import RlmError, SessionError
from rlm.paths import PRIVATE_FILE
from rlm.trust import open_regular

LOCK_NAME = "worker.lock"
# `holder()` probes with a shared flock, which makes a concurrent exclusive acquire fail;
# an acquirer that finds the file naming nobody retries this often before giving up.
PROBE_RETRIES = 50
PROBE_RETRY_S = 0.01


@dataclass(frozen=True)
class Holder:
    pid: int | None
    since: float | None = None
    kind: str = "worker"

    def describe(self) -> str:
        who = f"pid {self.pid}" if self.pid else "another process"
        when = ""
        if self.since:
            when = ", since " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        what = {"worker": "a worker", "notebook": "a notebook kernel (%%rlm)"}.get(
            self.kind, f"`rlm {self.kind}`")
        return f"{what} ({who}{when})"


class SessionBusy(RlmError):
    """Another process writes this session."""

    exit_code = 4

    def __init__(self, path: Path, holder: Holder):
        self.path, self.holder, self.pid = path, holder, holder.pid
        sid = Path(path).parent.name
        super().__init__(
            f"session {sid} is in use by {holder.describe()}; follow it with `rlm attach {sid}` "
            f"(or stop a worker with `rlm stop {sid}`), then try again"
        )


# The first wave's name: the session already has a live writer.
WorkerRunning = SessionBusy


def _read_holder(fd: int) -> Holder:
    os.lseek(fd, 0, os.SEEK_SET)
    lines = os.read(fd, 256).decode(errors="replace").splitlines()
    pid = int(lines[0]) if lines and lines[0].strip().isdigit() else None
    since = None
    if len(lines) > 1:
        with contextlib.suppress(ValueError):
            since = float(lines[1])
    kind = lines[2].strip() if len(lines) > 2 and lines[2].strip() else "worker"
    return Holder(pid, since, kind)


def _open_lock(path: Path, flags: int) -> int:
    """The lock file, opened safely: never through a symlink (a copied session's
    `worker.lock -> ~/.bashrc` would be truncated), never blocking on a FIFO (it would
    hang `rlm sessions` and `rlm stop`): a one-line SessionError instead."""
    try:
        return open_regular(path, flags, PRIVATE_FILE)
    except FileNotFoundError:
        raise
    except OSError as e:
        what = "a symbolic link" if os.path.islink(path) else "not a regular file"
        raise SessionError(f"{path} is {what}; rlm refuses to use it as the session's lock: "
                           "remove it") from e


class SessionLock:
    def __init__(self, path: Path, kind: str = "worker"):
        self.path = Path(path)
        self.kind = kind
        self._fd: int | None = None

    @classmethod
    def for_session(cls, session_dir: Path, kind: str) -> SessionLock:
        return cls(Path(session_dir) / LOCK_NAME, kind)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        fd = _open_lock(self.path, os.O_RDWR | os.O_CREAT)
        for attempt in range(PROBE_RETRIES + 1):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read_holder(fd)
                if holder.pid is None and attempt < PROBE_RETRIES:
                    # no holder named: most likely `holder()` probing (a shared lock held
                    # for microseconds by `rlm ps`, `attach`, a starting client); retry
                    time.sleep(PROBE_RETRY_S)
                    continue
                os.close(fd)
                raise SessionBusy(self.path, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{time.time():.3f}\n{self.kind}\n".encode(), 0)
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)

    def __enter__(self) -> SessionLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(path: Path) -> Holder | None:
    """Who holds the lock (pid 0/None if unknown), or None when it is free."""
    try:
        fd = _open_lock(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def lock_holder(path: Path) -> int | None:
    """The pid of the live process holding the lock (0 if unknown), or None when free."""
    h = holder(path)
    return None if h is None else (h.pid or 0)


def worker_holds(session_dir: Path) -> bool:
    """True when a resident worker (not a foreground command) holds the session."""
    h = holder(Path(session_dir) / LOCK_NAME)
    return h is not None and h.kind == "worker"


def holds_lock(path: Path, pid: int) -> bool | None:
    """Does process `pid` hold the flock on `path`? From /proc/locks (Linux): True/False;
    None where the kernel does not say. `rlm stop` checks this before it signals the pid
    the file names (the file's contents are only informational: a copied or edited
    `worker.lock` could name any process)."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.replace("->", " ").split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[4] == str(pid):
            dev_ino = parts[5].split(":")
            if len(dev_ino) == 3 and _same_file(dev_ino, st):
                return True
    return False


def _same_file(dev_ino: list[str], st: os.stat_result) -> bool:
    try:
        major, minor, ino = int(dev_ino[0], 16), int(dev_ino[1], 16), int(dev_ino[2])
    except ValueError:
        return False
    return (major, minor, ino) == (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)

