"""One kernel process: launch, sockets, listener, escalating shutdown.

A restart throws the whole `KernelRuntime` away and builds a new one (new process, new
connection file, new sockets): nothing stale from the dead kernel can leak into the new
one's replies. `Kernel` (kernel.py) owns the policy; this module owns the mechanics.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager

from kernel_ext import contract
from rlm import safeio, trust
from rlm.config import Config, kernel_kind
from rlm.errors import KernelError
from rlm.kernel import reaper
from rlm.kernel.bridge import BridgeDispatcher
from rlm.kernel.cgroup import KernelCgroup
from rlm.kernel.listener import IOPubListener
from rlm.kernel.sandbox_policy import SandboxChoice, choose
from rlm.kernel.state import check_snapshot_url, snapshot_location
from rlm.paths import HOST_DIR, private_dir, write_private_atomic
from rlm.secrets import SECRET_ENV_SUFFIXES, scrub_session, secret_url

# Model-provider credentials never enter the kernel: every name rlm.secrets counts as a
# secret (…_KEY, …_APIKEY, …_TOKEN, …_SECRET: WATSONX_APIKEY, LANGFUSE_SECRET_KEY,
# *_PRIVATE_KEY) is held back. Data-access credentials pass, on purpose: the kernel is
# the user's data environment (pd.read_csv("s3://..."), SQL), so AWS_ACCESS_KEY_ID/
# AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN and *_PASSWORD pass through;
# Config.kernel_env_pass names more (e.g. a database token). The session log redacts any
# secret-looking value a cell prints anyway (rlm.secrets).
_SECRET_ENV = re.compile(
    "(" + "|".join(re.escape(s) for s in SECRET_ENV_SUFFIXES if "PASS" not in s) + ")$",
    re.IGNORECASE)
_DATA_CREDENTIALS = frozenset({"AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_SECRET_ACCESS_KEY"})
_KERNEL_EXT_ROOT = str(Path(__file__).resolve().parents[2])  # the dir holding kernel_ext/


def kernel_argv(config: Config, session_dir: Path | None = None,
                extra_rw: list[Path] | None = None,
                group: KernelCgroup | None = None) -> list[str]:
    """The kernel command line ({connection_file} is filled in by jupyter_client).
    kernel_ext.launch gives up the capabilities that reach into other processes' memory
    (a root kernel could otherwise read the host's), then runs ipykernel_launcher. The
    memory cap (`Config.memory_cap`: RLIMIT_DATA, so an allocation past it is a
    MemoryError in the cell) wraps it; the kernel's cgroup (rlm.kernel.cgroup), where
    there is one, wraps everything, so the sandbox launcher starts inside it."""
    python = config.kernel_python or sys.executable
    argv = [
        python,
        "-m",
        contract.LAUNCHER,
        "-f",
        "{connection_file}",
        "--HistoryManager.hist_file=:memory:",
        f"--IPKernelApp.extensions={contract.EXTENSION}",
    ]
    cap = config.memory_cap()
    if cap and (config.memory_cap_bytes or shutil.which("prlimit")):
        # prlimit execs the kernel, so the pid is the kernel's; overruns become MemoryError
        argv = ["prlimit", f"--data={int(cap)}", "--", *argv]
    if sandboxed(config):
        net = ["--net", "host"] if config.kernel_network else []
        argv = [*SANDBOX_ARGV[:-1], *sandbox_binds(config, session_dir, extra_rw), *net, "--",
                *argv]
    return group.join_argv(argv) if group is not None else argv


def gate_sandbox(config: Config, session_dir: Path | None,
                 cwd: Path) -> tuple[list[str], dict[str, str]]:
    """Where a `--gate` command runs: where the kernel's cells run (a cell wrote what the
    gate reads: a conftest.py, a Makefile). The sandbox launcher's command line with the
    kernel's binds plus `cwd` (empty without the sandbox), and the kernel's environment
    without what only the kernel needs: no provider key or host channel either way."""
    env = user_env(config)
    if not sandboxed(config):
        return [], env
    net = ["--net", "host"] if config.kernel_network else []
    return [*SANDBOX_ARGV[:-1], *sandbox_binds(config, session_dir, [cwd]), *net, "--"], env


# `--sandbox`: unshare(2) then exec (no fork: the pid stays the kernel's, so interrupts
# and liveness work as usual). In a new network namespace the kernel has no network, not
# even loopback (the bridge and the ipc channels are unix sockets, so llm_query works);
# in a new user namespace it holds no capability over the host's processes, so even a
# root kernel cannot read the host's /proc/<pid>/environ or mem; in a new mount
# namespace with a root of its own it sees only what `sandbox_binds` shows: the working
# directory, the session's snapshot/ and runtime/ and the matplotlib cache read-write;
# host/, artifacts/, the interpreters and their import paths read-only; $RLM_HOME (every
# session's log and lock, config.toml), the user's rlm config dir (run records, `rlm
# trust` consents), $RLM_CONFIG and the rest of HOME absent (rlm/kernel/sandbox_exec.py
# does the mounts; sandbox_freeze.py makes them read-only for a replay). Costs: no network for
# data reads from the kernel, and output printed by a fork()ed child process is lost
# (ipykernel's fork pipe is a loopback TCP socket).
_SANDBOX_EXEC = str(Path(__file__).resolve().with_name("sandbox_exec.py"))
_SANDBOX_FREEZE = str(Path(__file__).resolve().with_name("sandbox_freeze.py"))
NO_READ_ONLY = ("the kernel runs without the sandbox (--no-sandbox, or this platform has no "
                "user namespaces), so rlm cannot make its files read-only; replay re-runs "
                "cells only under a read-only filesystem")
SANDBOX_ARGV = (sys.executable, "-I", _SANDBOX_EXEC, "--")
_sandbox_ok: list[str | None] = []  # cached probe: [None] works, [reason] does not


def sandbox_problem() -> str | None:
    """None when this machine can give the kernel its own user, mount and network
    namespaces, else why not (probed once per process)."""
    if not _sandbox_ok:
        try:
            proc = subprocess.run([*SANDBOX_ARGV, "true"], capture_output=True, text=True,
                                  timeout=10)
            _sandbox_ok.append(None if proc.returncode == 0 else
                               (proc.stderr.strip().splitlines() or ["failed"])[-1])
        except (OSError, subprocess.SubprocessError) as e:
            _sandbox_ok.append(str(e))
    return _sandbox_ok[0]


def sandbox_choice(config: Config) -> SandboxChoice:
    """Whether this config's kernel runs sandboxed (rlm.kernel.sandbox_policy)."""
    return choose(getattr(config, "sandbox", None), os.environ.get("RLM_SANDBOX"),
                  kernel_kind(config.kernel).kind, config.snapshot_url, sandbox_problem)


def sandboxed(config: Config) -> bool:
    return sandbox_choice(config).on


# what a cell's traceback says when it reached for the network from the sandbox's empty
# network namespace (DNS fails first; an address literal is unreachable)
_NO_NETWORK = re.compile(r"Temporary failure in name resolution|Name or service not known|"
                         r"No address associated with hostname|Network is unreachable|"
                         r"Cannot assign requested address|\[Errno (?:-2|-3|99|101)\]")
NO_NETWORK_NOTE = ("[rlm: this kernel has no network (the sandbox): pass --kernel-network, or "
                   "set kernel_network = true in your config, to let cells reach it; the file "
                   "protections stay]")


def network_note(config: Config, shaped: str) -> str | None:
    """One line naming --kernel-network for a failed cell that reached for the network
    from the sandbox, instead of a bare socket error; None otherwise."""
    if config.kernel_network or not _NO_NETWORK.search(shaped) or not sandboxed(config):
        return None
    return NO_NETWORK_NOTE


def check_sandbox() -> None:
    """Raise a one-line KernelError when this machine cannot give the kernel its own
    user and network namespace."""
    problem = sandbox_problem()
    if problem is not None:
        raise KernelError(
            f"--sandbox is not available here ({problem}): it needs Linux user, mount and "
            "network namespaces (unprivileged); run with --no-sandbox, or enable user "
            "namespaces (sysctl user.max_user_namespaces)"
        )


def sandbox_binds(config: Config, session_dir: Path | None,
                  extra_rw: list[Path] | None = None) -> list[str]:
    """The sandbox launcher's `--rw`/`--ro`/`--hide` arguments (rlm/kernel/sandbox_exec.py
    shows the kernel nothing else): read-write the working directory, the session's
    `snapshot/` and `runtime/`, the matplotlib cache and `extra_rw` (the fallback socket
    dir of a deep session, `ipc_prefix`); read-only the session's `host/` and `artifacts/`
    (what the host writes for the kernel to read) and `context.bin`, the interpreters and every directory
    they import from (`_python_paths`: a cell must not plant a `.pth` the next `rlm` runs)
    and the user's matplotlibrc; hidden wherever a shown path would show them the user's
    rlm config dir, `$RLM_HOME`, `$RLM_CONFIG`, the session dir itself
    (rlm.trust.protected_paths), `$XDG_RUNTIME_DIR` and Jupyter's runtime dir."""
    trust.ensure_dir(trust.config_dir())  # exists, so a cell cannot create it with records
    workdir = os.path.realpath(config.kernel_cwd or os.getcwd())
    rw: list[Path] = list(extra_rw or [])
    ro: list[str] = []
    if session_dir is not None:
        rw += [private_dir(session_dir / d) for d in ("snapshot", "runtime")]
        private_dir(session_dir / "artifacts")  # shown only if it exists when the kernel starts
        # a missing one is skipped; context.bin: an rlm_query child's `context`, which its
        # kernel loads (rlm.app.inputs.put_context)
        ro += [str(session_dir / d) for d in ("host", "artifacts", "context.bin")]
    rw.append(private_dir(config.home / "cache" / "matplotlib"))  # MPLCONFIGDIR (kernel_env)
    rw.append(Path(workdir))
    rc = _user_matplotlibrc(dict(os.environ))
    if rc is not None:
        ro.append(str(rc))
    ro += [p for p in _python_paths(config) if p != workdir]
    # the run's --context files and the files its task names, where they are: read-only
    ro += [os.path.realpath(p) for p in config.kernel_inputs if os.path.isfile(p)]
    out: list[str] = []
    for path in rw:
        out += ["--rw", str(path)]
    for p in ro:
        out += ["--ro", p]
    hidden = trust.protected_paths(config.home, [session_dir] if session_dir else [])
    # rlm's own parts of $RLM_HOME, for a working directory that is $RLM_HOME or under it
    # (then $RLM_HOME itself stays shown: sandbox_exec)
    hidden += [Path(config.home).resolve() / d for d in ("sessions", "config.toml", "rules")]
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    for path in [*hidden, *([Path(runtime_dir)] if runtime_dir else []), _jupyter_runtime()]:
        out += ["--hide", str(path)]
    return out


def _jupyter_runtime() -> Path:
    """The user's Jupyter runtime dir (jpserver-*.json: each running server's URL and
    token, which `rlm run --live` reads to find the server of a notebook): hidden, so a
    cell whose working directory shows it (the home dir) can neither read a token there nor
    plant a server for the host to join."""
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


_other_python: dict[str, list[str]] = {}  # kernel_python -> its paths, asked once


def _python_paths(config: Config) -> list[str]:
    """What the kernel's interpreter (and the host's, whose site-packages a cell must not
    write) imports from: prefixes, site-packages (the user's too), the import path with
    PYTHONPATH, and rlm's own packages (an editable install imports them from the
    checkout). "/", $HOME and its parents are left out: never shown whole."""
    import site

    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(),
             site.getusersitepackages(), *sys.path,
             *os.environ.get(contract.PYTHONPATH, "").split(os.pathsep),
             *(os.path.join(_KERNEL_EXT_ROOT, d) for d in (contract.EXTENSION, "rlm"))]
    python = config.kernel_python
    if python and python != sys.executable:
        if python not in _other_python:
            _other_python[python] = _ask_python(python)
        found += _other_python[python]
    home = os.path.realpath(os.path.expanduser("~"))
    out: list[str] = []
    for p in found:
        if not p or not os.path.isabs(p) or not os.path.exists(p):
            continue
        real = os.path.realpath(p)
        if real == "/" or home == real or home.startswith(real.rstrip("/") + "/"):
            continue
        if p not in out:
            out.append(p)
    return out


def _ask_python(python: str) -> list[str]:
    """Another interpreter's prefixes and import path (or, where it does not answer, the
    prefixes its path and its real path suggest)."""
    import json

    code = "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, *sys.path]))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30)
        paths = json.loads(proc.stdout)
        if proc.returncode == 0 and isinstance(paths, list):
            return [str(p) for p in paths]
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return [str(Path(python).parent.parent), str(Path(python).resolve().parent.parent)]


# Host channels, not data: sockets a cell could drive the user's session through (an ssh
# or gpg agent, dbus, docker, the display, a terminal multiplexer, an editor). Never
# passed to the kernel, sandboxed or not; with the sandbox their paths are absent too.
_HOST_CHANNELS = frozenset({
    "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "GNUPGHOME",
    "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "DOCKER_HOST", "CONTAINER_HOST",
    "XDG_RUNTIME_DIR", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "GNOME_KEYRING_CONTROL",
    "TMUX", "TMUX_PANE", "STY", "NVIM", "NVIM_LISTEN_ADDRESS", "KITTY_LISTEN_ON",
    "PULSE_SERVER", "PIPEWIRE_REMOTE", "SWAYSOCK", "I3SOCK", "HYPRLAND_INSTANCE_SIGNATURE"})
_HOST_CHANNEL = re.compile(r"(_SOCK|_SOCKET|_IPC_HOOK\w*|_IPC_HANDLE)$", re.IGNORECASE)


def user_env(config: Config) -> dict[str, str]:
    """The host's environment a kernel (or a gate) may have: without provider secrets and
    host channels (`_HOST_CHANNELS`), with the data credentials and `kernel_env_pass`."""
    passed = _DATA_CREDENTIALS | set(config.kernel_env_pass)
    return {k: v for k, v in os.environ.items()
            if k in passed or not (_SECRET_ENV.search(k) or k in _HOST_CHANNELS
                                   or _HOST_CHANNEL.search(k) or secret_url(k, v))}


def kernel_env(session_dir: Path, config: Config) -> dict[str, str]:
    """The host env minus provider secrets and host channels (`_HOST_CHANNELS`), plus what
    kernel_ext needs (every name it sets is declared in kernel_ext.contract)."""
    env = user_env(config)
    env.update({
        contract.SESSION_DIR: str(session_dir),
        contract.SNAPSHOT_DIR: str(session_dir / "snapshot"),
        contract.SNAPSHOT_VAR_CAP: str(config.snapshot_var_cap),
        contract.SNAPSHOT_TOTAL_CAP: str(config.snapshot_total_cap),
        contract.CHILD_CONTEXT_CAP: str(config.child_context_max_bytes),
    })
    if config.snapshot_url:  # the kernel writes there (kernel_ext.snapshot), not to the dir
        env[contract.SNAPSHOT_URL] = snapshot_location(session_dir, config.snapshot_url)
    env.setdefault(contract.MPLBACKEND, "module://matplotlib_inline.backend_inline")
    if contract.IPYTHONDIR not in env:
        # IPython makes ~/.ipython/profile_default at start: keep it in the session's
        # private runtime dir, so a kernel writes nothing under HOME
        env[contract.IPYTHONDIR] = str(private_dir(session_dir / "runtime" / "ipython"))
    cache = config.home / "cache" / "matplotlib"
    if sandboxed(config):
        # the sandbox shows no HOME: matplotlib's font cache and config dir are rlm's
        # (shared by its sessions, so the font cache is built once); the user's own
        # matplotlibrc is still read (shown read-only: sandbox_binds)
        rc = _user_matplotlibrc(env)
        env[contract.MPLCONFIGDIR] = str(private_dir(cache))
        if rc is not None:
            env[contract.MATPLOTLIBRC] = str(rc)
    elif contract.MPLCONFIGDIR not in env and not _user_mpl_config(env).exists():
        # matplotlib writes its font cache under ~/.cache/matplotlib (and a config dir)
        # on first import: with no config of the user's own to hide, keep both in
        # $RLM_HOME (shared by its sessions, so the font cache is built once)
        env[contract.MPLCONFIGDIR] = str(private_dir(cache))
    if config.kernel_python and config.kernel_python != sys.executable:
        # another interpreter may not have kernel_ext installed: put ours on its path
        env[contract.PYTHONPATH] = os.pathsep.join(
            p for p in (_KERNEL_EXT_ROOT, env.get(contract.PYTHONPATH)) if p
        )
    return env


def _user_matplotlibrc(env: dict[str, str]) -> Path | None:
    """The user's own matplotlibrc (MATPLOTLIBRC, else in MPLCONFIGDIR or matplotlib's
    per-user config dir), if there is one."""
    given = env.get(contract.MATPLOTLIBRC)
    if given:
        path = Path(given)
        path = path / "matplotlibrc" if path.is_dir() else path
        return path if path.is_file() else None
    base = env.get(contract.MPLCONFIGDIR)
    path = (Path(base) if base else _user_mpl_config(env)) / "matplotlibrc"
    return path if path.is_file() else None


def _user_mpl_config(env: dict[str, str]) -> Path:
    """matplotlib's per-user config dir (matplotlibrc, stylelib) when MPLCONFIGDIR is
    unset: $XDG_CONFIG_HOME/matplotlib, else ~/.config/matplotlib."""
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "matplotlib"


def provisioned_spec(name: str, config: Config) -> KernelSpec:
    """`provisioner:NAME`. jupyter_client picks a provisioner from a kernelspec's
    `metadata.kernel_provisioner` (entry point group jupyter_client.kernel_provisioners).
    NAME is an installed kernelspec that names one (e.g. made by gateway_provisioners'
    `jupyter k8s-spec install`: its launcher argv is kept; kernel_ext is loaded by the
    host's handshake when the image's kernel does not load it), else a provisioner name
    run with rlm's own kernel command."""
    try:
        installed = KernelSpecManager().get_kernel_spec(name)
    except Exception:  # NoSuchKernel: not a kernelspec name
        installed = None
    if installed is not None and "kernel_provisioner" in (installed.metadata or {}):
        return installed
    return KernelSpec(argv=kernel_argv(config), display_name="rlm", language="python",
                      metadata={"kernel_provisioner": {"provisioner_name": name, "config": {}}})


class _SpecManager(KernelSpecManager):
    """Serves our one kernel spec; no kernelspec dirs are searched."""

    def __init__(self, spec: KernelSpec, **kw: Any):
        super().__init__(**kw)
        self._rlm_spec = spec

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return self._rlm_spec


def died_cause(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


PROVISIONER_POLL_S = 0.5

# sun_path is 108 bytes with the NUL; jupyter_client appends "-<port>" (port: 1..~10)
AF_UNIX_PATH_MAX = 107


def ipc_prefix(runtime_dir: Path, name: str, host_dir: Path) -> tuple[Path, Path | None]:
    """Where the kernel's unix sockets go: `<runtime_dir>/<name>-<N>` when that fits in
    an AF_UNIX path, else a fresh private (0700, random name) directory under
    $XDG_RUNTIME_DIR or the temp dir. Returns (prefix, the fallback dir to remove or None).
    The fallback's owner marker goes in `host_dir`, which the kernel cannot write: a
    marker is a path the host removes."""
    prefix = runtime_dir / name
    if len(os.fsencode(prefix)) + 4 <= AF_UNIX_PATH_MAX:
        return prefix, None
    base = socket_base()
    drop_stale_ipc_dirs(host_dir)
    sweep_orphan_ipc_dirs(base)
    short = Path(tempfile.mkdtemp(prefix="rlm-", dir=base))  # 0700, unguessable name
    # who owns it, so a later start can remove it when this host dies without closing:
    # this session's next start (the marker) or any later kernel start (the file inside)
    owner = f"{os.getpid()}\n{short}\n".encode()
    write_private_atomic(short / IPC_OWNER, owner)
    write_private_atomic(host_dir / f"{name}{IPC_OWNER}", owner)
    return short / "k", short


IPC_OWNER = ".ipc-owner"


def socket_base() -> Path:
    """The first of $XDG_RUNTIME_DIR, the temp dir and /tmp that is a writable directory
    short enough for `<base>/rlm-XXXXXXXX/k-NN` to be an AF_UNIX path."""
    tried = []
    for base in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir(), "/tmp"):
        if not base or base in tried:
            continue
        tried.append(base)
        fits = len(os.fsencode(os.path.join(base, "rlm-XXXXXXXX", "k"))) + 4 <= AF_UNIX_PATH_MAX
        if fits and os.path.isdir(base) and os.access(base, os.W_OK):
            return Path(base)
    raise KernelError(
        "the session directory is too deep for the kernel's unix sockets (107 bytes) and "
        f"none of {', '.join(tried)} is a short writable directory to put them in: set "
        "TMPDIR (or XDG_RUNTIME_DIR) to a short private directory, or RLM_HOME to a "
        "shorter path")


def drop_stale_ipc_dirs(host_dir: Path) -> None:
    """Remove the fallback socket dirs (outside the session) of hosts that died without
    closing their kernel (SIGKILL): each is named by a `<name>.ipc-owner` file in the
    session's host dir holding the owner's pid; a live owner's is kept."""
    for marker in host_dir.glob(f"*{IPC_OWNER}"):
        try:
            pid_text, path = safeio.read_text(host_dir, marker, 4096).split("\n")[:2]
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if pid != os.getpid():
            if _alive(pid):
                continue  # alive (or not ours to signal): keep it
        elif path and Path(path).exists():
            continue  # ours and still in use
        if Path(path).name.startswith("rlm-"):
            shutil.rmtree(path, ignore_errors=True)
        safeio.unlink(host_dir, marker)


def _alive(pid: int) -> bool:
    """True unless `pid` is surely gone (a process we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except OSError:
        return True


def sweep_orphan_ipc_dirs(base: Path) -> None:
    """Remove this user's `rlm-*` socket dirs under `base` whose owning host died without
    closing (a SIGKILLed host, or a child session's host that is never resumed): each holds
    an `.ipc-owner` file naming its host's pid. Dirs without one, another user's, or a live
    host's are kept."""
    try:
        candidates = list(base.glob("rlm-*"))
    except OSError:
        return
    for d in candidates:
        try:
            st = d.lstat()
            if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
                continue
            pid = int(safeio.read_text(d, IPC_OWNER, 4096).split("\n")[0])
        except (OSError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(d, ignore_errors=True)


class KernelRuntime:
    """A started kernel process with its sockets and IOPub listener.

    Local kernels talk over unix sockets (`transport="ipc"`) in the session's private
    runtime directory (0700; kernel_ext makes the socket files 0600): no other user and no
    process outside this user's file permissions can subscribe to IOPub, as they could to
    a loopback TCP port (the HMAC key signs messages, it does not hide them). `transport=
    "tcp"` is for a kernel on another machine."""

    def __init__(self, session_dir: Path, config: Config, bridge: BridgeDispatcher,
                 transport: str = "ipc", provisioner: str | None = None):
        self.session_dir = session_dir
        self._sandboxed = provisioner is None and sandboxed(config)
        runtime_dir = safeio.make_dirs(session_dir, "runtime")  # the kernel's own
        host_dir = self._host_dir = safeio.make_dirs(session_dir, HOST_DIR)  # the host's
        scrub_session(session_dir)  # whatever an earlier host died before scrubbing
        if sandbox_choice(config).required:
            check_sandbox()
        if config.snapshot_url:
            check_snapshot_url(config.snapshot_url)
        name = f"kernel-{uuid.uuid4().hex[:12]}"
        self._ipc_dir: Path | None = None
        extra: dict[str, Any] = {}
        if transport == "ipc":
            prefix, self._ipc_dir = ipc_prefix(runtime_dir, f"k{name[7:13]}", host_dir)
            extra = {"transport": "ipc", "ip": str(prefix)}
        # a bound on the kernel's tasks and an end for all of them (rlm.kernel.cgroup)
        self._cgroup = None if provisioner else KernelCgroup.make(name, config.kernel_max_procs)
        spec = provisioned_spec(provisioner, config) if provisioner else KernelSpec(
            argv=kernel_argv(config, session_dir, [self._ipc_dir] if self._ipc_dir else None,
                             self._cgroup),
            display_name="rlm", language="python")
        self.km = KernelManager(
            kernel_name="rlm",
            kernel_spec_manager=_SpecManager(spec),
            connection_file=str(host_dir / f"{name}.json"),
            **extra,
        )
        self.km.shutdown_wait_time = 2.0
        # what the kernel starts ends with it, setsid children too (rlm.kernel.reaper)
        reaper.become_subreaper()
        reaper.sweep_session_orphans(str(session_dir))  # a SIGKILLed host's leftovers
        self._mark = reaper.new_mark()
        self._log_path = host_dir / "kernel.log"
        log_fd = safeio.open_append(session_dir, self._log_path)
        with os.fdopen(log_fd, "ab") as log_file, self._ipc_dir_dropped_on_error():
            try:
                self.km.start_kernel(
                    env={**kernel_env(session_dir, config), reaper.MARK_ENV: self._mark},
                    stdout=log_file, stderr=log_file,
                    **({"cwd": config.kernel_cwd} if config.kernel_cwd else {}),
                )
            except FileNotFoundError as e:
                if config.kernel_cwd and not Path(config.kernel_cwd).is_dir():
                    raise KernelError(f"the kernel's working directory {config.kernel_cwd} does "
                                      "not exist (kernel_cwd; for `rlm demo`, its data folder)"
                                      ) from e
                raise KernelError(f"could not start the kernel ({e})") from e
            except Exception as e:
                if provisioner and "provisioner" in str(e).lower():
                    raise KernelError(
                        f"--kernel provisioner:{provisioner}: {e}; install the package that "
                        "provides it (entry point group jupyter_client.kernel_provisioners)"
                    ) from e
                raise KernelError(
                    f"could not start the kernel ({e}); check config.kernel_python "
                    f"({config.kernel_python or sys.executable}) has ipykernel installed"
                ) from e
        os.chmod(self.km.connection_file, safeio.PRIVATE_FILE, follow_symlinks=False)
        # a provisioner that launches elsewhere (a pod, a container) has no local process:
        # liveness then comes from the provisioner's own poll
        self.proc: subprocess.Popen[bytes] | None = getattr(self.km.provisioner, "process", None)
        self._alive_checked, self._gone = 0.0, False
        # `rlm state` finds the live kernel through this: "<pid>\n<connection file>\n"
        self._pid_file = host_dir / "kernel.pid"
        if self.proc is not None:
            write_private_atomic(self._pid_file,
                                 f"{self.proc.pid}\n{self.km.connection_file}\n".encode(),
                                 root=session_dir)
        self.session = self.km.session
        self.shell = self.km.connect_shell()
        self.iopub = self.km.connect_iopub()
        self.control = self.km.connect_control()
        bridge.reset()
        self.listener = IOPubListener(self.session, self.iopub, self.control, bridge)
        self.listener.start()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def poll(self) -> int | None:
        """The exit code if the process has ended (cheap: one waitpid). Without a local
        process, the provisioner's poll at most every PROVISIONER_POLL_S (1 when gone)."""
        if self.proc is not None:
            return self.proc.poll()
        now = time.monotonic()
        if not self._gone and now - self._alive_checked >= PROVISIONER_POLL_S:
            self._alive_checked = now
            self._gone = not self.km.is_alive()
        return 1 if self._gone else None

    def exit_text(self, returncode: int) -> str:
        """How the kernel ended, for the model and the user."""
        if self.proc is None:
            return "the provisioner reports the kernel is gone"
        return died_cause(returncode)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            fd = safeio.open_file(self.session_dir, self._log_path)
        except OSError:
            return ""
        with os.fdopen(fd, "rb") as f:
            f.seek(max(0, os.fstat(fd).st_size - 4 * chars))
            return f.read().decode("utf-8", "replace")[-chars:]

    def send_shell(self, msg: dict[str, Any]) -> None:
        self.session.send(self.shell, msg)

    def recv_shell(self, timeout_s: float) -> dict[str, Any] | None:
        if not self.shell.poll(int(timeout_s * 1000)):
            return None
        _, msg = self.session.recv(self.shell, mode=zmq.NOBLOCK)
        return msg

    def interrupt(self) -> None:
        """SIGINT through the kernel manager. What it did, or what it raised, is appended
        to kernel.log beside ipykernel's own lines ("KeyboardInterrupt caught in kernel"
        says a SIGINT landed outside a cell), so a lost interrupt can be told apart from
        one never sent."""
        code = self.poll()
        if code is not None:
            self.note(f"interrupt not sent: the kernel exited ({code})")
            return
        try:
            self.km.interrupt_kernel()
        except Exception as e:
            self.note(f"interrupt failed: {type(e).__name__}: {e}")
            raise
        self.note(f"interrupt sent to pid {self.pid}")

    @contextlib.contextmanager
    def read_only(self) -> Iterator[str | None]:
        """Every writable mount of the sandbox read-only for the block, for the kernel and
        all it starts (rlm/kernel/sandbox_freeze.py), then writable again: yields None, or
        why not (no sandbox; a file open for writing) with nothing changed."""
        if not self._sandboxed or self.proc is None:
            yield NO_READ_ONLY
            return
        frozen = self._freeze("ro")
        if not isinstance(frozen, list):
            yield f"its files could not be made read-only ({frozen})"
            return
        try:
            yield None
        finally:
            back = self._freeze("rw", frozen)
            if not isinstance(back, list) and self.poll() is None:
                self.note(f"could not make the sandbox writable again: {back}")

    def _freeze(self, mode: str, points: list[str] | None = None) -> list[str] | str:
        """Run sandbox_freeze.py on this kernel: the mount points changed, or the error."""
        assert self.proc is not None
        try:
            proc = subprocess.run([sys.executable, "-I", _SANDBOX_FREEZE, str(self.proc.pid),
                                   mode, *(points or [])], capture_output=True, text=True,
                                  timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            return str(e)
        if proc.returncode != 0:
            return (proc.stderr.strip().splitlines() or ["failed"])[-1]
        try:
            return [str(p) for p in json.loads(proc.stdout)]
        except (ValueError, TypeError):
            return "unreadable answer"

    def note(self, text: str) -> None:
        """One line of the host's own in kernel.log (best effort: a diagnostic)."""
        line = f"[rlm host {time.strftime('%H:%M:%S')}] {text}\n".encode("utf-8", "replace")
        with contextlib.suppress(OSError):
            fd = safeio.open_append(self.session_dir, self._log_path)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    def close(self, now: bool = False) -> None:
        """Stop the process (shutdown request, SIGTERM, SIGKILL) and free everything."""
        reaper.kill_kernel_processes(self.pid, self._mark)
        if self.poll() is None:
            try:
                self.km.shutdown_kernel(now=now)
            except Exception:
                pass
        self._kill_group()
        if self._cgroup is not None:  # everything the kernel started, however it hid
            self._cgroup.remove()
        self._forget_pid_file()
        self.listener.stop()
        for sock in (self.shell, self.iopub, self.control):
            sock.close(linger=0)
        try:
            self.km.cleanup_resources()  # removes the ipc socket files too
        except Exception:
            pass
        self._drop_ipc_dir()

    @contextlib.contextmanager
    def _ipc_dir_dropped_on_error(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self._drop_ipc_dir()
            raise

    def _drop_ipc_dir(self) -> None:
        """Remove the fallback socket dir and its owner marker (at close, or a failed start)."""
        if self._ipc_dir is not None:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)
            for marker in self._ipc_dir_markers():
                safeio.unlink(self._host_dir, marker)

    def _ipc_dir_markers(self) -> list[Path]:
        out = []
        for marker in self._host_dir.glob(f"*{IPC_OWNER}"):
            try:
                if safeio.read_text(self._host_dir, marker, 4096).split("\n")[1] == str(self._ipc_dir):
                    out.append(marker)
            except (OSError, IndexError):
                continue
        return out

    def _forget_pid_file(self) -> None:
        if self.proc is None:
            return
        try:
            if safeio.read_text(self.session_dir, self._pid_file, 4096).split("\n", 1)[0] == str(self.proc.pid):
                safeio.unlink(self.session_dir, self._pid_file)
        except OSError:
            pass

    def _kill_group(self) -> None:
        """The kernel leads its own process group: take its children down with it."""
        if self.proc is None:
            return
        if self.poll() is None:
            self.proc.kill()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        reaper.kill_kernel_processes(self.proc.pid, self._mark)  # started during shutdown
        deadline = time.monotonic() + 5.0
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
