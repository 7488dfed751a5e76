"""`--sandbox` launcher: new user, mount, PID and network namespaces (`--net host` keeps the
host's network: --kernel-network), a root of its own holding only what the kernel needs,
then the kernel.

Run by path with the host's interpreter (`python -I sandbox_exec.py --rw W --ro P --hide
H ... -- KERNEL ARGV`); stdlib only, imports nothing of rlm. It calls unshare(2) itself, so
it still holds every capability in the new user namespace when it mounts (util-linux's
`unshare` binary execs before a `mount` could run, and an exec as a non-root user drops
them). The uid/gid inside are the user's own (like `unshare --map-current-user`).

**The view is a mount, not a list.** A fresh tmpfs becomes the root (pivot_root; the old
root is detached, so nothing of the host is reachable by a path that was not bound), and
only these are bound into it, each at its real path (a symlinked path given also resolves:
a link to the real path is made where the new root has none):

- read-only: the system (`SYSTEM_DIRS`; a top-level link such as /bin -> usr/bin is made
  again as a link; fontconfig's cache of /var), /sys, and every `--ro` path (the host passes the interpreter, every
  directory on its import path, rlm's own directory and the session's `host/` and
  `artifacts/`); mounts under them are made read-only too;
- read-write: every `--rw` path (the working directory, the session's `snapshot/` and
  `runtime/`, the fallback socket dir, the matplotlib cache). A `--ro` path at or under
  a `--rw` one stays read-only (a venv inside the working directory);
- of its own: a private, size-bounded tmpfs at /tmp; a minimal /dev (null, zero, full,
  random, urandom, tty bound from the host, the fd/stdin/stdout/stderr links, a tmpfs
  /dev/shm, a devpts of its own where allowed): not the host's /dev, whose /dev/log is a
  socket; the host's /proc, replaced by the PID namespace's own where the platform allows
  (below);
- `--hide` paths (`$RLM_HOME`, the user's rlm config dir, `$RLM_CONFIG`, the session dir,
  `$XDG_RUNTIME_DIR`), and /run and /var/run, are covered by an empty read-only tmpfs (an
  empty file) wherever a bound path shows them (the working directory is the home dir);
  paths bound under them (the session's own dirs) show through. One that is the working
  directory or holds it is left shown: the host also names rlm's parts inside it
  (`$RLM_HOME/sessions`, `config.toml`, `rules`).

Everything else is absent: /home, /root, /var, /run, /mnt, /media, /srv, the host's /tmp
and whatever else the host has. Each source is resolved and opened (O_PATH) before
anything is mounted, checked to still be the resolved path, and bound from its
descriptor, so the private /tmp shadows nothing that is bound from the host's. Once built,
every tmpfs but /tmp, /dev/shm and the root's own is made read-only, and the root too.

Then it hides the `/proc/<pid>` of every ancestor whose environment it could read (an
empty read-only tmpfs over it): a wrapper the user started with a provider key (`timeout`,
`make`, `uv run`, a CI runner) keeps that key in its `/proc/<pid>/environ`, which a
same-user cell could otherwise read where the host's /proc stays.

The kernel also gets a PID namespace of its own: this process forks, and the child, pid 1
of the new namespace, mounts a /proc of that namespace (where the platform allows it;
/proc/sys read-only) and execs the kernel. Where it may not, the host's /proc stays and
the child covers every process there but itself (their `/proc/<pid>/root` would lead back
to the host's files). When the kernel exits, the kernel of Linux kills every process left
in its namespace, whatever it did to its environment or its session (`setsid`, a double
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
import platform
import signal
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
O_PATH = getattr(os, "O_PATH", 0o10000000)
# statvfs f_flag bits -> the mount flags a remount must keep (locked in a user namespace)
_KEEP = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
         (getattr(os, "ST_NOATIME", 1024), MS_NOATIME),
         (getattr(os, "ST_NODIRATIME", 2048), MS_NODIRATIME),
         (getattr(os, "ST_RELATIME", 4096), MS_RELATIME))
# pivot_root(2) has no libc wrapper: its number per architecture
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "i686": 217,
                   "i386": 217, "armv7l": 218, "armv6l": 218, "ppc64le": 203, "ppc64": 203,
                   "s390x": 217, "loongarch64": 41}

# the system, shown read-only (a top-level link, /bin -> usr/bin, is made again as a link)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# of /var only fontconfig's system cache: without it `fc-list` (matplotlib's first import)
# rebuilds one under the user's XDG cache dir
SYSTEM_DATA = ("/var/cache/fontconfig",)
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))
ALWAYS_HIDDEN = ("/run", "/var/run")  # host sockets (dbus, docker) where a bound path shows them
TMP_OPTIONS = "mode=1777,size=25%"  # the private /tmp: scratch, at most a quarter of RAM
_OLD = "/.oldroot"  # the host's root while the new one is built

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, flags: int, fstype: str | None = None,
           data: str | None = None) -> None:
    _check(_libc.mount(src.encode() if src else None, target.encode(),
                       fstype.encode() if fstype else None, flags,
                       data.encode() if data else None), f"mount {target}")


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
            _mount("none", target, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "tmpfs",
                   "size=4k,mode=555")


# ------------------------------------------------------------------ the plan
RW, RO, HIDE = 0, 1, 2  # at one path: a --rw bind, then --ro over it, then a hide over both


class _Source:
    """A path to show: resolved and opened before anything is mounted."""

    def __init__(self, kind: int, given: str):
        self.kind, self.given = kind, os.path.abspath(given)
        self.real = os.path.realpath(given)
        self.fd = -1
        self.is_dir = True

    def open(self) -> bool:
        """Open the resolved path (O_PATH); False when it is missing or unreachable. A
        path swapped for a link since it was resolved is refused (OSError)."""
        try:
            self.fd = os.open(self.real, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        where = os.readlink(f"/proc/self/fd/{self.fd}")
        if where != self.real:
            raise OSError(f"{self.given} changed while the sandbox was built ({where})")
        st = os.fstat(self.fd)
        self.is_dir = (st.st_mode & 0o170000) == 0o040000
        return True

    @property
    def source(self) -> str:
        return f"{_OLD}/proc/self/fd/{self.fd}"


def _plan(ro: list[str], rw: list[str], hide: list[str], network: bool,
          cwd: str = "/") -> list[_Source]:
    """Every path to bind or hide, opened, parents before children. A hidden path that is
    the working directory or holds it is not covered (the working dir is shown whole: the
    host names rlm's own parts inside it to hide, `$RLM_HOME/sessions` say)."""
    wanted = [_Source(RO, p) for p in (*SYSTEM_DIRS, *SYSTEM_DATA, "/sys")]
    if network:  # DNS: resolv.conf's real file (systemd-resolved's stub is under /run)
        wanted.append(_Source(RO, "/etc/resolv.conf"))
    wanted += [_Source(RW, p) for p in rw] + [_Source(RO, p) for p in ro]
    wanted += [_Source(HIDE, p) for p in (*hide, *ALWAYS_HIDDEN)]
    out: list[_Source] = []
    for s in wanted:
        if s.kind == HIDE:
            if not (cwd + "/").startswith(s.real.rstrip("/") + "/"):
                out.append(s)  # hidden where it shows; nothing to open
        elif s.given in SYSTEM_DIRS and os.path.islink(s.given):
            out.append(s)  # a top-level link (/bin -> usr/bin): made again as a link
        elif s.open() and (s.is_dir or s.kind == RO):
            out.append(s)
    # parents first; at one path: --rw, then --ro (code inside a working dir stays
    # read-only), then hide
    out.sort(key=lambda s: (s.real.rstrip("/").split("/"), s.kind))
    return out


# ------------------------------------------------------------------ building the root
def _pivot(new_root: str) -> None:
    """Make `new_root` (a mount point) the root; the old one stays at _OLD until dropped."""
    os.chdir(new_root)
    os.mkdir(_OLD.lstrip("/"), 0o700)
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(f"pivot_root: unknown architecture {platform.machine()}")
    _check(_libc.syscall(number, b".", _OLD.lstrip("/").encode()), "pivot_root")
    os.chdir("/")


def _kept(path: str) -> int:
    """The mount flags a read-only remount of `path` must keep."""
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    kept = os.statvfs(path).f_flag
    for bit, flag in _KEEP:
        if kept & bit:
            flags |= flag
    return flags


def _mounts_under(path: str) -> list[str]:
    """Mount points at or under `path`, from /proc/self/mountinfo (octal escapes undone)."""
    prefix = path.rstrip("/") + "/"
    out = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            point = line.split()[4].decode()
            if "\\" in point:
                point = point.encode().decode("unicode_escape")
            if point == path or point.startswith(prefix):
                out.append(point)
    return out


def _read_only(path: str) -> None:
    """`path` and every mount under it read-only (one refused stays as the host had it:
    /sys's cgroup mounts are often locked read-only already)."""
    for point in _mounts_under(path):
        try:
            _mount(None, point, _kept(point))
        except OSError:
            if point == path:
                raise


def _make_target(path: str, is_dir: bool) -> None:
    if os.path.lexists(path):
        return
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    if is_dir:
        os.mkdir(path, 0o755)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o444))


def _bind(s: _Source) -> None:
    _make_target(s.real, s.is_dir)
    _mount(s.source, s.real, MS_BIND | MS_REC)
    if s.kind == RO:
        _read_only(s.real)


def _hide(path: str, made: list[str]) -> None:
    """An empty tmpfs (an empty file) over `path` where the new root shows it. A hidden
    directory the new root does not show yet gets one too, where it can be made (in the
    private /tmp, say: `$RLM_HOME` under /tmp): the targets of the binds below it (the
    session's `snapshot/`, `runtime/`) are then made in that tmpfs, which ends read-only,
    so a cell cannot write files at the hidden paths, not even ones only the sandbox sees."""
    if os.path.islink(path):
        return
    if not os.path.lexists(path):
        if not os.path.isdir(f"{_OLD}{path}"):
            return
        try:
            os.makedirs(path, 0o755)
        except OSError:
            return  # under a read-only bind: nothing shows it
    if os.path.isdir(path):
        _mount("none", path, MS_NOSUID | MS_NODEV | MS_NOEXEC, "tmpfs", "size=64k,mode=755")
        made.append(path)
    else:
        _mount("/.empty", path, MS_BIND)
        _mount(None, path, _kept(path))


def _link_given(s: _Source) -> None:
    """A path given through a link also resolves in the new root (a link to the real path
    where the new root has nothing at the given path)."""
    if s.given == s.real or os.path.lexists(s.given):
        return
    try:
        os.makedirs(os.path.dirname(s.given), 0o755, exist_ok=True)
        os.symlink(s.real, s.given)
    except OSError:
        pass  # under a read-only bind: the host's own link is there or nothing is


def _system_link(s: _Source) -> None:
    """/bin -> usr/bin in the new root as on the host."""
    name = s.given
    if not os.path.lexists(name):
        os.symlink(os.readlink(f"{_OLD}{name}"), name)


def _dev(made: list[str]) -> None:
    """A minimal /dev: the harmless nodes bound from the host's, links, /dev/shm, devpts."""
    _mount("none", "/dev", MS_NOSUID | MS_NOEXEC, "tmpfs", "size=64k,mode=755")
    made.append("/dev")
    for name in DEV_NODES:
        node = f"/dev/{name}"
        if not os.path.exists(f"{_OLD}{node}"):
            continue
        os.close(os.open(node, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666))
        _mount(f"{_OLD}{node}", node, MS_BIND)
    for name, target in DEV_LINKS:
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm", 0o1777)
    _mount("none", "/dev/shm", MS_NOSUID | MS_NODEV, "tmpfs", "mode=1777,size=25%")
    try:
        os.mkdir("/dev/pts", 0o755)
        _mount("devpts", "/dev/pts", MS_NOSUID | MS_NOEXEC, "devpts",
               "newinstance,ptmxmode=0666,mode=620")
        os.symlink("pts/ptmx", "/dev/ptmx")
    except OSError:
        pass  # no pseudo-terminals: nothing the kernel needs


def build_root(plan: list[_Source]) -> None:
    """The new root from `plan` (module doc). Runs in the new mount namespace."""
    staging = "/tmp" if os.path.isdir("/tmp") else "/mnt"
    _mount("none", staging, MS_NOSUID | MS_NODEV, "tmpfs", "size=1m,mode=755")
    _pivot(staging)
    made = ["/"]  # the tmpfs to make read-only once built
    os.close(os.open("/.empty", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o444))
    for path in ("/proc", "/tmp", "/dev"):
        os.mkdir(path, 0o755)
    _mount(f"{_OLD}/proc", "/proc", MS_BIND | MS_REC)
    _mount("none", "/tmp", MS_NOSUID | MS_NODEV, "tmpfs", TMP_OPTIONS)
    _dev(made)
    for s in plan:
        if s.kind == HIDE:
            _hide(s.real, made)
        elif s.fd < 0:
            _system_link(s)
        else:
            _bind(s)
    for s in plan:
        if s.fd >= 0:
            _link_given(s)
            os.close(s.fd)
    _check(_libc.umount2(_OLD.encode(), MNT_DETACH), "umount the old root")
    os.rmdir(_OLD)
    for path in reversed(made):
        _mount(None, path, _kept(path))


def enter(ro: list[str], rw: list[str], network: bool = False,
          hide: list[str] | None = None) -> None:
    """`network`: keep the host's network namespace (`--net host`: --kernel-network)."""
    uid, gid = os.getuid(), os.getgid()
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = "/"
    ancestors = readable_ancestors()  # before unshare: the host's view of /proc
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | (0 if network else CLONE_NEWNET)
    _check(_libc.unshare(flags), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    _mount(None, "/", MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    # resolved and opened in the host's view (a mount of this namespace: a bind source)
    build_root(_plan(ro, rw, list(hide or []), network, os.path.realpath(cwd)))
    _mask(ancestors)
    try:
        os.chdir(cwd)
    except OSError:
        os.chdir("/")  # not shown (a working dir the host did not pass): the kernel starts at /


def main(argv: list[str]) -> None:
    paths: dict[str, list[str]] = {"--ro": [], "--rw": [], "--hide": []}
    network = False
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--net":
            network = argv[i + 1] == "host"
        else:
            paths[argv[i]].append(argv[i + 1])
        i += 2
    command = argv[i + 1:]
    try:
        enter(paths["--ro"], paths["--rw"], network, paths["--hide"])
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
    """/proc of the new namespace over the host's (the kernel sees its own processes only),
    its /proc/sys read-only (a uid-0 kernel is the host's root to sysctl). A platform that
    refuses it (a container whose /proc has masked parts) keeps the host's /proc: every
    process there but this one is covered, as the ancestors' environ already is."""
    try:
        _mount(None, "/proc", MS_REC | MS_PRIVATE)
        _mount("proc", "/proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "proc")
    except OSError:
        me = os.readlink("/proc/self")
        _mask([int(p) for p in os.listdir("/proc") if p.isdigit() and p != me])
    for path in ("/proc/sys", "/proc/sysrq-trigger"):
        try:
            _mount(path, path, MS_BIND | MS_REC)
            _mount(None, path, _kept(path))
        except OSError:
            pass


if __name__ == "__main__":
    main(sys.argv[1:])
