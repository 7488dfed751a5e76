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

A host that is SIGKILLed reaps nothing: its kernels' detached descendants are re-parented
to init. The next host of the same session sweeps them when it starts a kernel
(`sweep_session_orphans`): a process that carries a kernel mark and this session's
RLM_SESSION_DIR but is not a descendant of this host belongs to a dead host (the session's
writer lock says no other host is alive on it).

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
SESSION_DIR_ENV = contract.SESSION_DIR  # in every kernel's environment (kernel_env)
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


def sweep_session_orphans(session_dir: str) -> int:
    """SIGKILL what a dead host's kernels of `session_dir` left running (see the module
    docstring); the number killed. Only this user's processes are readable, and only
    those carrying a kernel mark are candidates."""
    me = psutil.Process()
    ours = {me.pid} | {p.pid for p in _children(me)}
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid in ours:
            continue
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if env.get(MARK_ENV) and env.get(SESSION_DIR_ENV) == session_dir:
            found.append(p)
    for p in found:
        with contextlib.suppress(psutil.Error, OSError):
            p.send_signal(signal.SIGKILL)
    with contextlib.suppress(psutil.Error):
        psutil.wait_procs(found, timeout=5)
    return len(found)


def _children(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []
