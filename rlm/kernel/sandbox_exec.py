"""`--sandbox` launcher: new user, mount, PID and network namespaces (`--net host` keeps the
host's network: --kernel-network), read-only binds, then the kernel.

Run by path with the host's interpreter (`python -I sandbox_exec.py --rw W ... --ro P ...
-- KERNEL ARGV`); stdlib only, imports nothing of rlm. It calls unshare(2) itself, so it
still holds every capability in the new user namespace when it mounts (util-linux's
`unshare` binary execs before a `mount` could run, and an exec as a non-root user drops
them): each `--rw` path is bound onto itself first, then each `--ro` path is bound onto
itself recursively and remounted read-only (the `--rw` binds under it stay writable).
Then it hides the `/proc/<pid>` of every ancestor whose environment it could read (an
empty read-only tmpfs over it): a wrapper the user started with a provider key (`timeout`,
`make`, `uv run`, a CI runner) keeps that key in its `/proc/<pid>/environ`, which a
same-user cell could otherwise read. The uid/gid inside are the user's own (like `unshare
--map-current-user`).

The kernel also gets a PID namespace of its own: this process forks, and the child, pid 1
of the new namespace, mounts a /proc of that namespace (where the platform allows it) and
execs the kernel. When the kernel exits, the kernel of Linux kills every process left in
its namespace, whatever it did to its environment or its session (`setsid`, a double
fork, an `execve` with an empty environment), so what a cell starts ends with the kernel.
This process stays as the kernel's stand-in outside, the pid the host knows: signals the
host sends to the process group (an interrupt: jupyter_client's `killpg`) reach the
kernel directly, so it ignores SIGINT itself and never sends one on (a second SIGINT
loses the interrupted cell's reply); it exits with the kernel's status, or by the signal
that ended the kernel; if it is killed, the kernel is too (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
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


def enter(ro: list[str], rw: list[str], network: bool = False) -> None:
    """`network`: keep the host's network namespace (`--net host`: --kernel-network)."""
    uid, gid = os.getuid(), os.getgid()
    ancestors = readable_ancestors()  # before unshare: the host's view of /proc
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | (0 if network else CLONE_NEWNET)
    _check(_libc.unshare(flags), "unshare")
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
    network = False
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--net":
            network = argv[i + 1] == "host"
        else:
            (ro if argv[i] == "--ro" else rw).append(argv[i + 1])
        i += 2
    command = argv[i + 1:]
    try:
        enter(ro, rw, network)
    except OSError as e:
        print(f"rlm sandbox: {e}", file=sys.stderr)
        sys.exit(111)
    if command:
        run_as_pid_one(command)


def run_as_pid_one(command: list[str]) -> None:
    """Fork: the child (pid 1 of the new PID namespace) execs `command`; this process waits
    for it and ends as it did (see the module doc)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel gets the group's SIGINT itself
    host = os.getppid()
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # for sigtimedwait in _wait
    child = os.fork()
    if child == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # (getppid() is 0 here, outside the namespace: a stand-in killed before this line
        # leaves the kernel to the host's sweep of marked processes, rlm.kernel.reaper)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _own_proc()
        try:
            os.execvp(command[0], command)
        except OSError as e:
            print(f"rlm sandbox: cannot run {command[0]}: {e}", file=sys.stderr)
            os._exit(127)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda signum, _frame: _pass_on(child, signum))
    status = _wait(child, host)
    if os.WIFSIGNALED(status):
        ended_by = os.WTERMSIG(status)
        if ended_by not in (signal.SIGKILL, signal.SIGSTOP):  # those two are always default
            signal.signal(ended_by, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [ended_by])
        os.kill(os.getpid(), ended_by)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 111)


def _wait(child: int, host: int) -> int:
    """The kernel's wait status. While it runs, the host is watched as ipykernel's parent
    poller watched it (the kernel, pid 1 here, cannot see the host): a host that died,
    SIGKILLed, takes the kernel with it."""
    while True:
        try:
            pid, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            os._exit(111)
        if pid:
            return status
        if os.getppid() != host:
            _pass_on(child, signal.SIGKILL)
            _, status = os.waitpid(child, 0)
            return status
        signal.sigtimedwait([signal.SIGCHLD], 0.5)


def _pass_on(child: int, signum: int) -> None:
    """A signal sent to this process alone (not the group): the kernel's to handle. As pid
    1 it ignores what it has no handler for, so SIGTERM then ends it by SIGKILL."""
    try:
        os.kill(child, signum)
        if signum == signal.SIGTERM:
            os.kill(child, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _own_proc() -> None:
    """/proc of the new namespace over the host's (the kernel sees its own processes only);
    a platform that refuses it (a container whose /proc has masked parts) keeps the
    host's /proc, with the ancestors' environ already hidden."""
    try:
        _mount(None, "/proc", MS_REC | MS_PRIVATE)
        _check(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
               "mount proc")
    except OSError:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
