"""The session log's file, and when its lines reach the disk.

Every line is written when it is appended (a killed process loses nothing). The fsync
that makes it durable runs in one of three ways: at once (`write(durable=True)`); with
the next durable line or at `close` (`durable=False`); or on a thread of its own started
now (`sync_soon`), while the loop reads the cell's result, decides, and builds the next
prompt. A model request waits for every fsync started so: the model seam calls `settle`
before each request, so no request leaves this process while a line it could follow is
not on disk (issue 32: this fsync was ~0.8 ms of a ~6 ms step, paid in line)."""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from rlm.errors import SessionError, SessionGone
from rlm.trust import open_regular

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pending: dict[Future[None], Path] = {}  # started, not yet waited for by `settle`: its file


def _forget() -> None:
    global _pool
    _pool = None  # a forked child has no thread: its first sync_soon starts one
    _pending.clear()


os.register_at_fork(after_in_child=_forget)


def _start(fd: int, path: Path) -> Future[None]:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlm-fsync")
        future: Future[None] = _pool.submit(os.fsync, fd)
        _pending[future] = path
    future.add_done_callback(_done)  # outside the lock: it may run here, now
    return future


def _done(future: Future[None]) -> None:
    if future.exception() is None:  # a failure stays until `settle` says it
        with _lock:
            _pending.pop(future, None)


def settle() -> None:
    """Return once every fsync `sync_soon` started is done; SessionError for one that
    failed, said once."""
    with _lock:
        started = list(_pending.items())
    for future, path in started:
        try:
            _result(future, path)
        finally:
            with _lock:
                _pending.pop(future, None)


def _result(future: Future[None], path: Path) -> None:
    try:
        future.result()
    except OSError as e:
        raise SessionError(
            f"cannot make {path} durable: {e.strerror or e}; its last lines may not be on "
            "disk (fix the file system, then resume)") from e


class LogFile:
    """An append-only file opened once (never through a link); each line whole or not at
    all (a failed write is cut back)."""

    def __init__(self, path: Path, fd: int | None = None):
        self.path = path
        self._fd = fd
        self._unsynced = False  # written, no fsync begun for it
        self._syncing: Future[None] | None = None

    def write(self, line: bytes, durable: bool = True) -> int:
        """Append `line` (fsynced before this returns when `durable`); the offset it starts
        at. SessionGone when the file was removed under us (writes would vanish)."""
        if self._fd is None:
            self._fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND)
        st = os.fstat(self._fd)
        if st.st_nlink == 0:
            raise SessionGone(self.path.parent)
        size = st.st_size
        view = memoryview(line)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            if durable:
                os.fsync(self._fd)
            self._unsynced = not durable
        except OSError as e:  # ENOSPC, EIO, quota: take back the partial line, say it in one line
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)
            raise SessionError(
                f"cannot append to {self.path}: {e.strerror or e}; nothing was recorded "
                "(free some space or fix the file system, then resume)"
            ) from e
        return size

    def sync_soon(self) -> None:
        """Begin the fsync of what is written, on the fsync thread (see `settle`)."""
        if self._fd is not None and self._unsynced:
            self._unsynced = False
            self._syncing = _start(self._fd, self.path)

    def sync(self) -> None:
        """Every line written is on disk when this returns."""
        self._wait()
        if self._fd is not None and self._unsynced:
            os.fsync(self._fd)
            self._unsynced = False

    def _wait(self) -> None:
        future, self._syncing = self._syncing, None
        if future is not None:
            _result(future, self.path)

    def close(self) -> None:
        """Sync what is unsynced (best effort: the lines are written) and close."""
        with contextlib.suppress(SessionError, OSError):
            self.sync()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
