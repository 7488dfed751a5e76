"""`--sandbox` launcher: new user, mount and network namespaces, read-only binds, exec.

Run by path with the host's interpreter (`python -I sandbox_exec.py --rw W ... --ro P ...
-- KERNEL ARGV`); stdlib only, imports nothing of rlm. It calls unshare(2) itself, so it
still holds every capability in the new user namespace when it mounts (util-linux's
`unshare` binary execs before a `mount` could run, and an exec as a non-root user drops
them): each `--rw` path is bound onto itself first, then each `--ro` path is bound onto
itself recursively and remounted read-only (the `--rw` binds under it stay writable).
Then it hides the `/proc/<pid>` of every ancestor whose environment it could read (an
empty read-only tmpfs over it): a wrapper the user started with a provider key (`timeout`,
`make`, `uv run`, a CI runner) keeps that key in its `/proc/<pid>/environ`, which a
same-user cell could otherwise read. Then it execs the kernel: no fork, so the pid the
host sees is the kernel's. The uid/gid inside are the user's own (like `unshare
--map-current-user`).
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# statvfs f_flag bits -> the mount flags a remount must keep (locked in a user namespace)
_KEEP = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
         (getattr(os, "ST_NOATIME", 1024), MS_NOATIME),
         (getattr(os, "ST_NODIRATIME", 2048), MS_NODIRATIME),
         (getattr(os, "ST_RELATIME", 4096), MS_RELATIME))

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, flags: int) -> None:
    _check(_libc.mount(src.encode() if src else None, target.encode(), None, flags, None),
           f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def readable_ancestors() -> list[int]:
    """The pids above this process (pid 1 excluded) whose environ this user can read."""
    out: list[int] = []
    pid = os.getppid()
    while pid > 1:
        if os.access(f"/proc/{pid}/environ", os.R_OK):
            out.append(pid)
        try:
            pid = _parent(pid)
        except (OSError, ValueError, IndexError):
            break
    return out


def _mask(pids: list[int]) -> None:
    for pid in pids:
        target = f"/proc/{pid}"
        if os.path.isdir(target):  # gone since: nothing left to read
            _check(_libc.mount(b"none", target.encode(), b"tmpfs",
                               MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
                   f"mount tmpfs over {target}")


def enter(ro: list[str], rw: list[str]) -> None:
    uid, gid = os.getuid(), os.getgid()
    ancestors = readable_ancestors()  # before unshare: the host's view of /proc
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    _mount(None, "/", MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    for path in map(os.path.realpath, rw):
        if os.path.isdir(path):
            _mount(path, path, MS_BIND | MS_REC)
    for path in map(os.path.realpath, ro):  # a linked dir: protected where it really is
        if not os.path.exists(path):
            continue
        _mount(path, path, MS_BIND | MS_REC)
        kept = os.statvfs(path).f_flag
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for bit, flag in _KEEP:
            if kept & bit:
                flags |= flag
        _mount(None, path, flags)
    _mask(ancestors)


def main(argv: list[str]) -> None:
    ro: list[str] = []
    rw: list[str] = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        (ro if argv[i] == "--ro" else rw).append(argv[i + 1])
        i += 2
    command = argv[i + 1:]
    try:
        enter(ro, rw)
    except OSError as e:
        print(f"rlm sandbox: {e}", file=sys.stderr)
        sys.exit(111)
    if command:
        os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
