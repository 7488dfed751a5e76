"""One worker per session: an flock on `<session_dir>/worker.lock` holding the owner's pid.

The OS drops an flock when its process dies, however it dies, so a crashed (even SIGKILLed)
worker never leaves the session locked; the pid in the file is informational only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from rlm.errors import RlmError
from rlm.paths import PRIVATE_FILE


class WorkerRunning(RlmError):
    """The session already has a live worker."""

    def __init__(self, path: Path, pid: int | None):
        self.path, self.pid = path, pid
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"a worker ({who}) already runs this session (lock {path}); "
            "attach with `rlm attach SESSION` or end it with `rlm stop SESSION`"
        )


def _read_pid(fd: int) -> int | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 64).decode(errors="replace").strip()
    return int(raw) if raw.isdigit() else None


class SessionLock:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise WorkerRunning(self.path, pid) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
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


def lock_holder(path: Path) -> int | None:
    """The pid of the live process holding the lock (0 if unknown), or None when free."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
