"""rlm's IPython extension: the code that runs inside the kernel.

Load with `%load_ext kernel_ext` (the host passes it at kernel start-up). It never imports
`rlm`: it may run in another interpreter. It shares only `kernel_ext.wire` with the host.

Each concept lives in its own module with `install(ip)` / `uninstall(ip)`:
    channels   the kernel's unix sockets made 0600 (ipc transport)
    streams    bounded IOPub stream messages (a 100 MB print arrives in 1 MB pieces)
    bridge     kernel -> host requests over comms, replies on the control channel
    snapshot   per-variable dill snapshots after each cell, restore at start
    fileops    an audit hook recording files the user's code reads and writes
    subshell   lists the namespace on a kernel subshell while a cell runs
    api        the names the model uses: final, final_var, llm_query, llm_query_batched,
               rlm_query, compact, goal, heartbeat, cron
`unload_ipython_extension` undoes every install in reverse order.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = ("channels", "streams", "bridge", "fileops", "snapshot", "subshell", "api")
_installed: list[Any] = []


def load_ipython_extension(ip: Any) -> None:
    if _installed:
        return
    for name in _MODULES:
        mod = importlib.import_module(f"kernel_ext.{name}")
        mod.install(ip)
        _installed.append(mod)


def unload_ipython_extension(ip: Any) -> None:
    while _installed:
        _installed.pop().uninstall(ip)
