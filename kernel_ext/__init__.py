"""rlm's IPython extension: the code that runs inside the kernel.

Load with `%load_ext kernel_ext` (the host passes it at kernel start-up). It never imports
`rlm`: it may run in another interpreter. What it shares with the host is declared once in
`kernel_ext.contract`: the environment the host sets, the functions the host calls in the
kernel, the modules the host imports (among them `kernel_ext.wire`, the bridge format).

Each concept lives in its own module with `install(ip)` / `uninstall(ip)`:
    channels   the kernel's unix sockets made 0600 (ipc transport)
    streams    bounded IOPub stream messages (a 100 MB print arrives in 1 MB pieces)
    bridge     kernel -> host requests over comms, replies on the control channel
    snapshot   per-variable dill snapshots after each cell, restore at start
    fileops    an audit hook recording files the user's code reads and writes
    provenance which line of a cell read a file, and what each line said (the verified rule)
    subshell   lists the namespace on a kernel subshell while a cell runs
    api        the names the model uses: final, final_var, llm_query, llm_query_batched,
               rlm_query, compact, goal, heartbeat, cron, memory
    aliases    pd, np, plt (contract.ALIASES), bound lazily when installed
`unload_ipython_extension` undoes every install in reverse order.
Called by the host, installs nothing:
    trial      candidate cells run in forked copies of the kernel (contract.TRIAL)

It installs on its own as `rlm-kernel-ext` (kernel_ext/pyproject.toml), versioned with the
host: the host calls `handshake()` at kernel start and refuses another `__version__`.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

from kernel_ext import contract

__version__ = "0.1.0"  # always rlm's version (tests/test_gateway_unit.py checks)

_MODULES = ("channels", "provenance", "streams", "bridge", "fileops", "snapshot", "subshell",
            "api", "aliases")
_installed: list[Any] = []


# set by kernel_ext.launch: the umask to give back once IPython has made its profile dir
_restore_umask: int | None = None


def load_ipython_extension(ip: Any) -> None:
    global _restore_umask
    if _restore_umask is not None:  # user code creates files with the user's own umask
        os.umask(_restore_umask)
        _restore_umask = None
        _private_profile()
    if _installed:
        return
    adopt_gateway_env()
    for name in _MODULES:
        mod = importlib.import_module(f"kernel_ext.{name}")
        mod.install(ip)
        _installed.append(mod)


def _private_profile() -> None:
    """IPython copies its profile's README files with their installed modes (shutil.copy
    ignores the umask): make the profile dir the host gave it (IPYTHONDIR inside the
    session directory, never a user's own) 0700 dirs and 0600 files."""
    base, session = os.environ.get(contract.IPYTHONDIR), os.environ.get(contract.SESSION_DIR)
    if not base or not session:
        return
    base = os.path.realpath(base)
    if not base.startswith(os.path.realpath(session) + os.sep):
        return
    for root, _dirs, files in os.walk(base):
        for path, mode in [(root, 0o700)] + [(os.path.join(root, f), 0o600) for f in files]:
            try:
                os.chmod(path, mode, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass


def unload_ipython_extension(ip: Any) -> None:
    while _installed:
        _installed.pop().uninstall(ip)


def adopt_gateway_env(environ: Any = None) -> None:
    """Gateways pass a client's environment only as `KERNEL_*` names (Enterprise Gateway
    and Kernel Gateway both): `KERNEL_RLM_X` becomes `RLM_X` for each name of
    `contract.GATEWAY_ENV` unless the kernel's own environment already sets it."""
    env = os.environ if environ is None else environ
    for name in contract.GATEWAY_ENV:
        sent = env.get(contract.GATEWAY_PREFIX + name)
        if sent is not None:
            env.setdefault(name, sent)


def handshake() -> str:
    """The host's first call into a new kernel: load the extension when the kernelspec did
    not, and say which version runs here (JSON: version, python, loaded)."""
    loaded = bool(_installed)
    if not loaded:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None:
            ip.extension_manager.load_extension("kernel_ext")
    return json.dumps({"version": __version__, "python": sys.version.split()[0],
                       "loaded_by_kernelspec": loaded})
