"""Make the kernel's unix sockets owner-only (0600).

The host starts local kernels with `transport="ipc"`: ZeroMQ binds the five channels as
unix sockets `<ip>-<port>` with the process umask (typically 0755). Their directory is
already private (0700); this narrows the files themselves as soon as the extension loads
(the sockets are bound before extensions load). Nothing to do for TCP kernels.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

_CHANNELS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def socket_paths(app: Any) -> list[str]:
    if getattr(app, "transport", "tcp") != "ipc":
        return []
    return [f"{app.ip}-{getattr(app, ch)}" for ch in _CHANNELS if getattr(app, ch, 0)]


def install(ip: Any) -> None:
    try:
        from ipykernel.kernelapp import IPKernelApp
    except ImportError:  # not in an ipykernel (e.g. a plain IPython shell)
        return
    # the singleton a kernel's app made; not a sibling's (terminal IPython's own app is
    # one: `IPKernelApp.instance()` then raised MultipleInstanceError on `%load_ext rlm`)
    app = getattr(IPKernelApp, "_instance", None)
    if not isinstance(app, IPKernelApp):
        return
    for path in socket_paths(app):
        with contextlib.suppress(OSError):
            os.chmod(path, 0o600)


def uninstall(ip: Any) -> None:
    pass
