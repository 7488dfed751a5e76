"""Make a sandboxed kernel's whole filesystem read-only, and writable again: what replay
runs under (issue 57: replay cannot write, whatever the spelling).

    python -I sandbox_freeze.py PID ro        -> prints the mount points it made read-only
    python -I sandbox_freeze.py PID rw M...   -> makes those writable again

`PID` is the sandbox launcher's stand-in (rlm/kernel/sandbox_exec.py), which lives in the
kernel's user and mount namespaces. This process (single-threaded, run by the host's user,
who owns that user namespace) joins both with setns(2), then remounts every writable mount
it sees there read-only (`MS_REMOUNT | MS_BIND | MS_RDONLY`, the flags a user namespace
locks kept), the pseudo file systems aside (proc, sysfs, devpts, ...: no file of the user's
is there). A mount flag is per mount, not per process: every thread of the kernel and
every process it starts sees the change at once, so no spelling of a write in a cell
(an alias of `open`, a subprocess, a C extension) gets past it. A mount with a file open
for writing cannot be made read-only (EBUSY): then nothing is changed and the reason is
printed; the host does not replay.

Stdlib only, imports nothing of rlm (run by path, like sandbox_exec.py). Exit 0 and a JSON
list on stdout, or exit 1 and one line on stderr.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND = 32, 4096
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
_KEEP = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
         "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
# no file of the user's lives on these; devices stay writable on a read-only mount anyway
PSEUDO = frozenset({"proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2", "bpf", "tracefs",
                    "debugfs", "securityfs", "pstore", "configfs", "fusectl", "hugetlbfs",
                    "binfmt_misc", "autofs", "nsfs", "efivarfs"})

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def join(pid: int) -> None:
    """Enter the user, then the mount namespace of `pid`."""
    for kind, flag in (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS)):
        fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(_libc.setns(fd, flag), f"setns {kind}")
        finally:
            os.close(fd)


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")


def mounts(pid: int) -> list[tuple[str, set[str], str]]:
    """(mount point, per-mount options, file system type) of each mount in the namespace of
    `pid`, as it sees them (read from the host's /proc before joining: inside, /proc is
    that of the kernel's PID namespace, in which this process has no pid)."""
    out = []
    with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            out.append((_unescape(fields[4]), set(fields[5].split(",")), rfields[0]))
    return out


def _flags(options: set[str], readonly: bool) -> int:
    flags = MS_REMOUNT | MS_BIND | (MS_RDONLY if readonly else 0)
    for name, bit in _KEEP.items():
        if name in options:
            flags |= bit
    return flags


def _remount(point: str, options: set[str], readonly: bool) -> None:
    _check(_libc.mount(None, point.encode(), None, _flags(options, readonly), None),
           f"remount {point} {'read-only' if readonly else 'writable'}")


def freeze(seen: list[tuple[str, set[str], str]]) -> list[str]:
    """Every writable mount of `seen` read-only; all or none."""
    todo = [(p, o) for p, o, fs in seen if "rw" in o and fs not in PSEUDO]
    done: list[tuple[str, set[str]]] = []
    try:
        for point, options in todo:
            _remount(point, options, True)
            done.append((point, options))
    except OSError:
        for point, options in done:
            try:
                _remount(point, options, False)
            except OSError:
                pass
        raise
    return [p for p, _ in done]


def thaw(seen: list[tuple[str, set[str], str]], points: list[str]) -> list[str]:
    wanted = set(points)
    back = []
    for point, options, _fs in seen:
        if point in wanted and "ro" in options:
            _remount(point, options, False)
            back.append(point)
    return back


def main(argv: list[str]) -> int:
    try:
        pid, mode = int(argv[0]), argv[1]
        seen = mounts(pid)
        join(pid)
        changed = freeze(seen) if mode == "ro" else thaw(seen, argv[2:])
    except (OSError, ValueError, IndexError) as e:
        print(f"rlm sandbox freeze: {e}", file=sys.stderr)
        return 1
    print(json.dumps(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
