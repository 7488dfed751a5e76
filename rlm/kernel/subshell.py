"""Listing a kernel's names while a cell runs, through a kernel subshell (JEP 91).

A running cell blocks the kernel's main shell: a listing sent there waits for the cell.
ipykernel >= 7 (`kernel_info_reply.supported_features` holds "kernel subshells") runs
extra shell threads: `create_subshell_request` on the control channel returns an id, and
a shell message whose header carries that `subshell_id` runs on the subshell's thread,
concurrently with the cell. We send kernel_ext's `wire.NAMESPACE_REQUEST`, answered by
kernel_ext.subshell's handler on the shell socket (why not an execute_request: see there).

`SubshellLister` opens shell and control sockets of its own (new DEALER identities), so
its replies never reach another client's sockets: in the process that owns the kernel it
leaves the execute loop's shell socket and the IOPub listener's control socket alone, and
`rlm state` in another process uses it through the connection file. Sockets and the
subshell are made on first use and kept until `close()`; one thread at a time.
Everything that goes wrong is a `SubshellUnavailable` whose message says why, so the
caller can fall back to the last snapshot and say so.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import zmq

from kernel_ext import wire

FEATURE = "kernel subshells"


class SubshellUnavailable(Exception):
    """No listing through a subshell; str() is one line saying why."""


class SubshellsUnsupported(SubshellUnavailable):
    """The kernel has no subshells at all (its main shell may still answer when idle)."""


class SubshellLister:
    """`conn` is a jupyter_client connection object: a KernelManager (the owner) or a
    KernelClient loaded from the connection file (`.session`, `.connect_shell()`,
    `.connect_control()`)."""

    def __init__(self, conn: Any):
        self._conn = conn
        self._session = conn.session
        self._shell: zmq.Socket[Any] | None = None
        self._control: zmq.Socket[Any] | None = None
        self._subshell_id: str | None = None
        self._orphans: list[str] = []  # subshells whose create reply came after we gave up
        self._supported: bool | None = None
        self._lock = threading.Lock()

    def namespace(self, timeout: float) -> dict[str, Any]:
        """kernel_ext's namespace listing ({"names": [...]}), answered on a subshell."""
        deadline = time.monotonic() + timeout
        if not self._lock.acquire(timeout=timeout):
            raise SubshellUnavailable(f"another listing was still waiting after {timeout} s")
        try:
            return self._namespace(deadline, timeout)
        except (zmq.ZMQError, ValueError) as exc:  # sockets closed under us, a bad message
            raise SubshellUnavailable(f"the subshell channel failed ({exc})") from None
        finally:
            self._lock.release()

    def _namespace(self, deadline: float, timeout: float) -> dict[str, Any]:
        if self._shell is None or self._control is None:
            self._shell, self._control = self._conn.connect_shell(), self._conn.connect_control()
        if self._supported is None:
            info = self._request(self._control, "kernel_info_request", {}, deadline, timeout)
            self._supported = FEATURE in (info.get("supported_features") or [])
        if not self._supported:
            raise SubshellsUnsupported("it does not support kernel subshells (ipykernel >= 7 does)")
        if self._subshell_id is None:
            reply = self._request(self._control, "create_subshell_request", {}, deadline, timeout)
            sid = reply.get("subshell_id")
            if not isinstance(sid, str):
                raise SubshellUnavailable(f"the kernel did not create a subshell: {_why(reply)}")
            self._subshell_id = sid
        content = self._request(self._shell, wire.NAMESPACE_REQUEST, {}, deadline, timeout,
                                subshell_id=self._subshell_id)
        if content.get("status") != "ok":
            if content.get("ename") == "UnknownSubshellError":
                self._subshell_id = None  # gone (deleted by someone): make a new one next time
            raise SubshellUnavailable(f"the listing failed in the kernel: {_why(content)}")
        try:
            listing = json.loads(content["listing"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SubshellUnavailable(f"malformed listing reply ({exc})") from None
        if not isinstance(listing, dict):
            raise SubshellUnavailable("malformed listing reply (not an object)")
        return listing

    def _request(self, sock: zmq.Socket[Any], msg_type: str, content: dict[str, Any],
                 deadline: float, timeout: float, subshell_id: str | None = None) -> dict[str, Any]:
        header = self._session.msg_header(msg_type)
        if subshell_id is not None:
            header["subshell_id"] = subshell_id
        msg = self._session.msg(msg_type, content, header=header)
        self._session.send(sock, msg)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1):
                old = ", or its kernel_ext predates subshell listings" if subshell_id else ""
                raise SubshellUnavailable(
                    f"no {msg_type.replace('_request', '_reply')} within {timeout:g} s: a cell "
                    f"that holds the GIL (a long C call) stalls every thread of the kernel{old}")
            _, reply = self._session.recv(sock, mode=zmq.NOBLOCK)
            if reply is None:
                continue
            if reply.get("parent_header", {}).get("msg_id") == msg["header"]["msg_id"]:
                return dict(reply.get("content") or {})
            late = reply.get("content") or {}
            if reply.get("msg_type") == "create_subshell_reply" and isinstance(
                    late.get("subshell_id"), str):
                self._orphans.append(late["subshell_id"])  # deleted by close()

    def close(self, delete: bool = True, timeout: float = 1.0) -> None:
        """Close the sockets; `delete` first asks the kernel to end our subshell(s) (pass
        False when the kernel is gone or about to be shut down)."""
        if not self._lock.acquire(timeout=timeout):
            return  # a listing is stuck on a dead kernel: its sockets go with the context
        try:
            ids = [i for i in (self._subshell_id, *self._orphans) if i]
            if delete and self._control is not None:
                deadline = time.monotonic() + timeout
                for sid in ids:
                    try:
                        self._request(self._control, "delete_subshell_request",
                                      {"subshell_id": sid}, deadline, timeout)
                    except SubshellUnavailable:
                        break
            for sock in (self._shell, self._control):
                if sock is not None:
                    sock.close(linger=0)
            self._shell = self._control = None
            self._subshell_id, self._orphans = None, []
        finally:
            self._lock.release()


class RuntimeLister:
    """The owner's `SubshellLister` for its current runtime: made on first use, made again
    for a new runtime (after a restart), closed before a runtime closes (the sockets share
    its zmq context). Thread-safe."""

    def __init__(self) -> None:
        self._held: tuple[Any, SubshellLister] | None = None  # (runtime, lister)
        self._lock = threading.Lock()

    def namespace(self, rt: Any, timeout: float) -> dict[str, Any]:
        km = getattr(rt, "km", None)  # a gateway kernel has no local client to open one on
        if km is None:
            raise SubshellsUnsupported("its channels go through a gateway, without subshells")
        with self._lock:
            if self._held is None or self._held[0] is not rt:
                self._held = (rt, SubshellLister(km))
            lister = self._held[1]
        return lister.namespace(timeout)

    def close(self, delete: bool) -> None:
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            held[1].close(delete=delete)


def busy_reason(exc: SubshellUnavailable) -> str:
    """Why a busy kernel's names come from the snapshot instead, for the user and model."""
    if isinstance(exc, SubshellsUnsupported):
        return f"the kernel is busy running a cell and {exc}"
    return f"the kernel is busy running a cell and did not answer on a subshell ({exc})"


def _why(content: dict[str, Any]) -> str:
    text = f"{content.get('ename') or 'error'}: {content.get('evalue') or content}"
    return text.splitlines()[0][:200] if text else "error"


def list_from_connection_file(conn_file: Path, timeout: float) -> dict[str, Any]:
    """The listing of the kernel behind `conn_file` (another process owns it), on a
    subshell made for this call and deleted after it."""
    from jupyter_client import BlockingKernelClient

    kc = BlockingKernelClient(connection_file=str(conn_file))
    try:
        kc.load_connection_file()
    except (OSError, ValueError) as exc:
        raise SubshellUnavailable(f"unreadable connection file {conn_file} ({exc})") from None
    lister = SubshellLister(kc)
    try:
        return lister.namespace(timeout)
    finally:
        lister.close(delete=True)
        kc.stop_channels()  # destroys the zmq context the client made
