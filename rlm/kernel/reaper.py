"""Every process a kernel starts ends with it, `setsid` children included.

A process group is not enough: a cell can double-fork a child that calls `setsid()`,
leaves the kernel's group and session, is re-parented to init, and outlives the run (the
issue-26 attack used one to forge the session log after the host exited). Two measures,
both in the host:

- the host is a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`, Linux), so an orphaned
  descendant of a kernel is re-parented to the host, not to init: it stays among the
  host's descendants however it detaches;
- each kernel gets a mark in its environment (`MARK_ENV`, inherited by everything it
  starts); at stop the host kills the kernel's descendants and every descendant of its
  own that carries that kernel's mark, then reaps them.

Side effect: an orphan re-parented to the host that exits on its own stays a zombie of
the host until the host exits (it holds no resources but a pid; reaping unknown children
could steal an exit status a `Popen` of the host is waiting for).

Not covered: a descendant that both detaches and clears its environment before the stop
(documented in docs/architecture.md); use `--sandbox`, where it still cannot write the
session log, `$RLM_HOME` or the user's config (rlm.kernel.sandbox).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import uuid

import psutil

from kernel_ext import contract

MARK_ENV = contract.KERNEL_MARK
_PR_SET_CHILD_SUBREAPER = 36
_subreaper: list[bool] = []


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (once; False where the
    platform cannot)."""
    if not _subreaper:
        ok = False
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            ok = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        _subreaper.append(ok)
    return _subreaper[0]


def new_mark() -> str:
    return uuid.uuid4().hex


def _marked(proc: psutil.Process, mark: str) -> bool:
    try:
        return proc.environ().get(MARK_ENV) == mark
    except (psutil.Error, OSError):
        return False


def kernel_processes(pid: int | None, mark: str) -> list[psutil.Process]:
    """The kernel's descendants, and every descendant of this host that carries its mark
    (re-parented orphans: double-forked, `setsid`)."""
    found: dict[int, psutil.Process] = {}
    if pid is not None:
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(pid).children(recursive=True):
                found[p.pid] = p
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process().children(recursive=True):
            if p.pid != pid and p.pid not in found and _marked(p, mark):
                found[p.pid] = p
    return list(found.values())


def kill_kernel_processes(pid: int | None, mark: str) -> int:
    """SIGKILL what `kernel_processes` finds (the kernel itself is its owner's to end),
    reap the host's own children among them; the number killed."""
    procs = kernel_processes(pid, mark)
    for p in procs:
        with contextlib.suppress(psutil.Error, OSError):
            p.send_signal(signal.SIGKILL)
    me = os.getpid()
    for p in procs:
        with contextlib.suppress(psutil.Error, OSError, ChildProcessError):
            if p.ppid() == me:
                os.waitpid(p.pid, 0)  # a re-parented orphan is ours to reap
    with contextlib.suppress(psutil.Error):
        psutil.wait_procs(procs, timeout=5)
    return len(procs)
