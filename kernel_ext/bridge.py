"""Kernel -> host requests over Jupyter comms (kernel side).

A request is a `comm_msg` on a comm with target `wire.BRIDGE_TARGET`; it leaves on IOPub
while the cell runs. The host answers with a `comm_msg` on the CONTROL channel (the shell
channel is blocked by the running cell). Our control handler runs on the kernel's control
thread and only resolves the waiting `threading.Event`: it must stay tiny, because it
blocks interrupts and shutdown while it runs.

Any thread may call `request`; each waits on its own event, so concurrent callers work.
A reply that arrives after its caller gave up (timeout, KeyboardInterrupt) is ignored.

Every request is a method kernel_ext.contract declares (`contract.METHODS`), with only its
declared parameters: kernel_ext sends one as `request(contract.NAME, {...})`.

`set_local_handler(fn)` short-circuits the comm: `fn(method, params)` is called in-process
(the `%%rlm` magic, where the agent runs inside the user's own kernel).
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kernel_ext import contract, wire

Handler = Callable[[str, dict[str, Any]], Any]

_WAIT_TICK_S = 0.1  # short waits keep the main thread responsive to KeyboardInterrupt


class _Pending:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: tuple[bool, Any, str | None] | None = None


class _Bridge:
    def __init__(self) -> None:
        self.ip: Any = None
        self.comm: Any = None
        self.lock = threading.Lock()
        self.pending: dict[str, _Pending] = {}
        self.local_handler: Handler | None = None
        self.previous_control: Any = None

    def on_control_comm_msg(self, stream: Any, ident: Any, msg: dict[str, Any]) -> None:
        """Control-thread handler: resolve the waiting event, nothing else."""
        data = msg.get("content", {}).get("data")
        try:
            req_id, ok, result, error = wire.parse_reply(data)
        except wire.WireError:
            if self.previous_control is not None:
                self.previous_control(stream, ident, msg)
            return
        with self.lock:
            pending = self.pending.get(req_id)
        if pending is None:
            return  # late reply: its caller gave up
        pending.reply = (ok, result, error)
        pending.event.set()

    def get_comm(self) -> Any:
        with self.lock:
            if self.comm is None:
                if self.ip is None or getattr(self.ip, "kernel", None) is None:
                    raise RuntimeError(
                        "no host bridge: kernel_ext is not loaded in a Jupyter kernel "
                        "started by rlm (use bridge.set_local_handler for in-process use)"
                    )
                from comm import create_comm

                self.comm = create_comm(
                    target_name=wire.BRIDGE_TARGET, data={"v": wire.WIRE_VERSION}
                )
            return self.comm


_bridge = _Bridge()


def set_local_handler(fn: Handler | None) -> None:
    """Answer requests in-process with `fn(method, params)` instead of over comms."""
    _bridge.local_handler = fn


def request(method: contract.Method | str, params: dict[str, Any] | None = None,
            timeout: float | None = None) -> Any:
    """Send one request to the host and block until it replies.

    `method`: a declared one (a `contract.Method`, or its name from a test's cell); an
    undeclared method or parameter is a ValueError here, before anything is sent.
    Returns the host's result; raises RuntimeError with the host's message on an error
    reply, TimeoutError when `timeout` seconds pass. KeyboardInterrupt (an interrupt from
    the host) propagates; the late reply is then ignored.
    """
    params = {} if params is None else params
    method = _declared(method, params)
    local = _bridge.local_handler
    if local is not None:
        try:
            return local(method, params)
        except Exception as e:
            raise RuntimeError(f"{method}: {e}") from e
    comm = _bridge.get_comm()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()  # or the request overtakes earlier prints on IOPub
    req_id = uuid.uuid4().hex
    pending = _Pending()
    with _bridge.lock:
        _bridge.pending[req_id] = pending
    try:
        comm.send(wire.make_request(req_id, method, params))
        _wait(pending, timeout, method)
    finally:
        with _bridge.lock:
            _bridge.pending.pop(req_id, None)
    assert pending.reply is not None
    ok, result, error = pending.reply
    if not ok:
        raise RuntimeError(error or f"{method} failed on the host")
    return result


def _declared(method: contract.Method | str, params: dict[str, Any]) -> str:
    declared = contract.BY_NAME.get(method if isinstance(method, str) else method.name)
    if declared is None or (isinstance(method, contract.Method) and method != declared):
        raise ValueError(f"{method!r} is not a bridge method kernel_ext.contract declares")
    extra = set(params) - set(declared.params)
    if extra:
        raise ValueError(f"{declared.name} takes {', '.join(declared.params) or 'no parameters'}"
                         f", not {', '.join(sorted(extra))}")
    return declared.name


def _wait(pending: _Pending, timeout: float | None, method: str) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    while not pending.event.wait(_WAIT_TICK_S):
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"the host did not answer {method!r} within {timeout} s")


def install(ip: Any) -> None:
    _bridge.ip = ip
    kernel = getattr(ip, "kernel", None)
    if kernel is None:
        return  # plain IPython: only the local handler can answer
    _bridge.previous_control = kernel.control_handlers.get("comm_msg")
    kernel.control_handlers["comm_msg"] = _bridge.on_control_comm_msg


def uninstall(ip: Any) -> None:
    kernel = getattr(ip, "kernel", None)
    if (
        kernel is not None
        and kernel.control_handlers.get("comm_msg") == _bridge.on_control_comm_msg
    ):
        if _bridge.previous_control is None:
            kernel.control_handlers.pop("comm_msg", None)
        else:
            kernel.control_handlers["comm_msg"] = _bridge.previous_control
    with _bridge.lock:
        comm, _bridge.comm = _bridge.comm, None
        for pending in _bridge.pending.values():
            pending.reply = (False, None, "kernel_ext was unloaded while waiting for the host")
            pending.event.set()
    if comm is not None:
        try:
            comm.close()
        except Exception:
            pass
    _bridge.ip = None
    _bridge.previous_control = None
