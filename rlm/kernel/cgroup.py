"""A cgroup of the kernel's own: a bound on its tasks, and an end for all of them.

Where the platform lets rlm make one (cgroup v2 with the `pids` controller delegated to
the host's cgroup, or a cgroup v1 `pids` hierarchy, each writable: root, or a delegated
subtree), every kernel starts inside a new cgroup `rlm-<mark>` below the host's own:

- `pids.max` = `Config.kernel_max_procs` bounds the tasks (processes and threads) the
  kernel and everything it starts hold at once: a fork bomb in a cell gets EAGAIN from
  fork() at the bound, and the host and the machine carry on;
- at stop every task in the cgroup is killed (`cgroup.kill` on v2, else SIGKILL to each
  pid listed, again until none is left), whatever it did to hide: `setsid`, a double
  fork, an empty environment. This is what closes the reaper's gap without the sandbox.

The kernel joins the cgroup before it execs anything (`join_argv`: a shell writes its
own pid to `cgroup.procs`, then execs the kernel's command line, sandbox launcher
included), so no task of the kernel is ever outside it.

Not protected: where no cgroup can be made (an unprivileged user without a delegated
cgroup, macOS) there is no task bound (RLIMIT_NPROC is per user, not per kernel, and
root ignores it) and no cgroup kill: the reaper's subreaper and mark walk remain. A root
kernel without the sandbox can move itself out of its cgroup (it can write any
`cgroup.procs`); the sandboxed kernel cannot (its user namespace holds no capability
over the host's cgroupfs, mounted read-only or absent in it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

_PREFIX = "rlm-"


def _mounts() -> list[tuple[str, str, list[str]]]:
    """(mount point, fs type, options) of every cgroup filesystem."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                out.append((parts[1], parts[2], parts[3].split(",")))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per hierarchy: "" for v2, else the v1 controller list."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrl, path = line.split(":", 2)
            out[ctrl] = path
    return out


def pids_parent() -> Path | None:
    """The directory a kernel's cgroup is made in (the host's own `pids` cgroup, on v2
    where `pids` is enabled for its children, else on v1), or None where none can be."""
    own = _own_paths()
    for mount, kind, opts in _mounts():
        if kind == "cgroup2" and "" in own:
            base = Path(mount, own[""].lstrip("/"))
            try:
                if "pids" in (base / "cgroup.subtree_control").read_text().split():
                    if os.access(base, os.W_OK):
                        return base
            except OSError:
                continue
        elif kind == "cgroup" and "pids" in opts:
            path = next((p for c, p in own.items() if "pids" in c.split(",")), None)
            base = Path(mount, (path or "/").lstrip("/"))
            if path is not None and os.access(base, os.W_OK):
                return base
    return None


class KernelCgroup:
    """One kernel's cgroup (see the module docstring); `make` returns None where the
    platform allows none."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def make(cls, name: str, max_tasks: int) -> KernelCgroup | None:
        parent = pids_parent()
        if parent is None:
            return None
        _sweep(parent)
        path = parent / f"{_PREFIX}{name}"
        try:
            path.mkdir(mode=0o755)
            if max_tasks:
                (path / "pids.max").write_text(f"{max_tasks}\n")
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def join_argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside this cgroup: the shell joins it, then execs `argv`."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"',
                str(self.path / "cgroup.procs"), *argv]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self, timeout: float = 5.0) -> int:
        """SIGKILL every task in the cgroup until none is left (or `timeout`); the number
        of processes signalled. A forker cannot outrun it: pids.max bounds what it makes."""
        killed: set[int] = set()
        kill_file = self.path / "cgroup.kill"
        if kill_file.exists():
            killed.update(self.pids())
            with contextlib.suppress(OSError):
                kill_file.write_text("1\n")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            time.sleep(0.01)
        return len(killed)

    def remove(self) -> None:
        """Kill what is left and remove the cgroup (an empty cgroup is removed by rmdir;
        zombies the host has not reaped still count, so retry briefly)."""
        self.kill_all()
        end = time.monotonic() + 2.0
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > end:
                    return
                time.sleep(0.02)


_SWEEP_AGE_S = 120.0  # younger: another host may be starting its kernel in it


def _sweep(parent: Path) -> None:
    """Remove the empty cgroups earlier hosts left (a SIGKILLed host removes nothing)."""
    with contextlib.suppress(OSError):
        for d in parent.iterdir():
            if d.name.startswith(_PREFIX) and d.is_dir() \
                    and time.time() - d.stat().st_mtime > _SWEEP_AGE_S:
                with contextlib.suppress(OSError):
                    if not (d / "cgroup.procs").read_text().strip():
                        d.rmdir()
