"""Where the kernel runs (`--kernel`, `Config.kernel`; parsed by `rlm.config.kernel_kind`).

`local` and `provisioner:NAME` are a `KernelRuntime` (jupyter_client's KernelManager; the
provisioner is picked through the kernelspec's `metadata.kernel_provisioner`); `gateway:URL`
is a `GatewayRuntime` (REST + websocket). `Kernel` talks to either through `Runtime`.
"""

from __future__ import annotations

import queue
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from jupyter_client.session import Session

from rlm import trust
from rlm.config import Config, kernel_kind
from rlm.kernel.bridge import BridgeDispatcher
from rlm.kernel.runtime import KernelRuntime, sandbox_choice


class Listener(Protocol):
    def route(self, msg_id: str) -> queue.SimpleQueue[dict[str, Any]]: ...

    def unroute(self, msg_id: str) -> None: ...

    def send_control(self, msg_type: str, content: dict[str, Any]) -> None: ...

    def stop(self) -> None: ...


class Runtime(Protocol):
    """One started kernel: what `Kernel` and the wait loop (execution.py) use of it."""

    @property
    def session(self) -> Session: ...

    @property
    def listener(self) -> Listener: ...

    @property
    def pid(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def exit_text(self, returncode: int) -> str: ...

    def log_tail(self, chars: int = 2000) -> str: ...

    def send_shell(self, msg: dict[str, Any]) -> None: ...

    def recv_shell(self, timeout_s: float) -> dict[str, Any] | None: ...

    def interrupt(self) -> None: ...

    def note(self, text: str) -> None:
        """A line of the host's own about this kernel (a diagnostic: what an interrupt did)."""

    def read_only(self) -> AbstractContextManager[str | None]:
        """The kernel's whole filesystem read-only for the block (what replay runs under):
        yields None when it is, else why it cannot be (then nothing was changed)."""

    def close(self, now: bool = False) -> None: ...


def make_runtime(session_dir: Path, config: Config, bridge: BridgeDispatcher) -> Runtime:
    kind = kernel_kind(config.kernel)
    if kind.kind == "gateway":
        from rlm.kernel.gateway import GatewayRuntime

        return GatewayRuntime(session_dir, config, bridge)
    if kind.kind == "provisioner":
        # a provisioner may place the kernel on another machine: TCP, not unix sockets
        return KernelRuntime(session_dir, config, bridge, transport="tcp",
                             provisioner=kind.name)
    return KernelRuntime(session_dir, config, bridge)


# Without --snapshot-url the kernel is given this host's snapshot path (RLM_SNAPSHOT_DIR),
# which on a gateway names a directory on the gateway's machine, not this one.
GATEWAY_SNAPSHOT_NOTE = (
    "snapshots are written on the gateway's machine, under this session's path there "
    "(<session dir>/snapshot), not on this machine: `rlm state` of a stopped session and a "
    "kernel started on another node will not find them; pass --snapshot-url "
    "s3://BUCKET/PREFIX (any fsspec URL both can reach) to keep them in one place")


def kernel_notes(config: Config) -> list[str]:
    """What the chosen kind does differently, said once at the start of a run; for a
    local kernel, the sandbox's first-run notice (once per user: rlm.kernel.sandbox_policy)."""
    kind = kernel_kind(config.kernel)
    if kind.kind == "gateway":
        return [f"kernel on the gateway {kind.url}"
                f"{' (kernelspec ' + kind.name + ')' if kind.name else ''}: no memory cap or "
                "sandbox from rlm (the gateway's kernelspec or cluster sets them); channels "
                "go over its websocket, not private unix sockets; a crash is noticed when "
                "the gateway reports it (its KernelRestarter.time_to_dead)"] + (
                    [] if config.snapshot_url else [GATEWAY_SNAPSHOT_NOTE])
    if kind.kind == "provisioner":
        return [f"kernel started by the provisioner {kind.name!r} over TCP channels; the "
                "memory cap and --sandbox apply only if it runs the kernelspec's command "
                "on this machine"]
    choice = sandbox_choice(config)
    if choice.notice and choice.notice_key and trust.first_time(choice.notice_key):
        return [choice.notice]
    return []
