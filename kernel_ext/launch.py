"""The kernel's launcher: `python -m kernel_ext.launch -f CONNECTION_FILE ...`.

It confines the process, then runs `ipykernel_launcher` in it (runpy, no exec: the pid
the host started is the kernel's, so interrupts and liveness work as before).

Confinement: a cell runs as the host's user, and the host is non-dumpable, so a cell of
an ordinary user cannot read the host's memory or environment. Root can, through
capabilities: CAP_SYS_PTRACE overrides non-dumpable (/proc/<pid>/mem, environ, ptrace,
process_vm_readv), and CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF, CAP_SYS_RAWIO and
CAP_SYS_MODULE each give another way into another process's memory (bpf/perf probes,
/dev/mem, a module). The kernel gives those up before user code runs: out of the bounding
set (no exec can get them back, setuid-root binaries included), out of the effective,
permitted and inheritable sets, and the ambient set cleared. Everything else root may do
(read any file, bind low ports, chown) stays: users run data work as root in containers.
PR_SET_NO_NEW_PRIVS is not set: once the bounding set is cut it adds nothing for root,
and for other users it would break `sudo` in a cell. A non-root kernel holds none of
these capabilities, so confining it changes nothing.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import sys

# linux/capability.h
CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE, CAP_SYS_ADMIN = 16, 17, 19, 21
CAP_PERFMON, CAP_BPF = 38, 39
DROPPED = (CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF)

# linux/prctl.h
_PR_CAPBSET_READ, _PR_CAPBSET_DROP = 23, 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def confine(caps: tuple[int, ...] = DROPPED) -> list[int]:
    """Give up `caps` for good; return the ones this process held in its bounding set and
    dropped. Best effort: where a call is missing or refused the rest still runs."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return []
    dropped = []
    for cap in caps:  # needs CAP_SETPCAP, so before capset takes anything away
        if libc.prctl(_PR_CAPBSET_READ, cap, 0, 0, 0) == 1 and \
                libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
            dropped.append(cap)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) == 0:
        for cap in caps:
            word, keep = cap // 32, ~(1 << (cap % 32)) & 0xFFFFFFFF
            data[word].effective &= keep
            data[word].permitted &= keep
            data[word].inheritable &= keep
        libc.capset(ctypes.byref(header), data)
    return dropped


def main() -> None:
    confine()
    # IPython's start-up writes its profile dir (IPYTHONDIR is in the session's private
    # runtime dir) with the default umask: 0755 dirs and 0644 files in a session directory
    # that must be the user's alone. kernel_ext gives the umask back when it loads, before
    # any user code runs.
    import kernel_ext

    kernel_ext._restore_umask = os.umask(0o077)
    sys.argv[0] = "ipykernel_launcher"
    runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
