"""The one persistent IOPub listener of a kernel process.

It owns the IOPub socket (reads) and the control socket (writes), so neither is ever
touched by two threads. Messages are routed by parent msg_id to the queue of the
execution that registered it (`route`); bridge comm messages go to the dispatcher, whose
replies come back through `send_control` and are sent from this thread. Messages for no
registered route (status of control messages, output of background threads after their
cell ended) are dropped.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections import deque
from typing import Any

import zmq
from jupyter_client.session import Session

from rlm.kernel.bridge import BridgeDispatcher

log = logging.getLogger(__name__)

_IDLE_POLL_MS = 500


class Router:
    """What every transport's listener shares: routes by parent msg_id, bridge comms to the
    dispatcher (the zmq listener below; the gateway's websocket, rlm/kernel/gateway.py)."""

    def __init__(self, bridge: BridgeDispatcher):
        self._bridge = bridge
        self._routes: dict[str, queue.SimpleQueue[dict[str, Any]]] = {}
        self._stopping = False

    def route(self, msg_id: str) -> queue.SimpleQueue[dict[str, Any]]:
        """Register before sending the request, so no message can be missed."""
        q: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._routes[msg_id] = q
        return q

    def unroute(self, msg_id: str) -> None:
        self._routes.pop(msg_id, None)

    def send_control(self, msg_type: str, content: dict[str, Any]) -> None:
        raise NotImplementedError

    def send_comm_reply(self, comm_id: str, data: dict[str, Any]) -> None:
        self.send_control("comm_msg", {"comm_id": comm_id, "data": data})

    def stop(self) -> None:
        raise NotImplementedError

    def _dispatch(self, msg: dict[str, Any]) -> None:
        msg_type = msg["header"]["msg_type"]
        if msg_type == "comm_open" and self._bridge.on_comm_open(msg["content"]):
            return
        if msg_type == "comm_msg" and self._bridge.on_comm_msg(
            msg["content"], self.send_comm_reply
        ):
            return
        parent_id = msg.get("parent_header", {}).get("msg_id")
        q = self._routes.get(parent_id) if parent_id else None
        if q is not None:
            q.put(msg)


class IOPubListener(Router):
    def __init__(
        self, session: Session, iopub: zmq.Socket, control: zmq.Socket, bridge: BridgeDispatcher
    ):
        super().__init__(bridge)
        self._session, self._iopub, self._control = session, iopub, control
        self._outbox: deque[tuple[str, dict[str, Any]]] = deque()
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="rlm-iopub", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def send_control(self, msg_type: str, content: dict[str, Any]) -> None:
        """Queue a message for the control channel; any thread may call this."""
        if self._stopping:
            return  # the kernel is gone: a late reply has nowhere to go
        self._outbox.append((msg_type, content))
        self._wake()

    def stop(self) -> None:
        self._stopping = True
        self._wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._iopub, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        while not self._stopping:
            try:
                events = dict(poller.poll(_IDLE_POLL_MS))
            except zmq.ZMQError:
                break
            if self._wake_r in events:
                os.read(self._wake_r, 4096)
            if self._iopub in events:
                self._drain_iopub()
            self._flush_outbox()

    def _drain_iopub(self) -> None:
        while not self._stopping:
            try:
                _, msg = self._session.recv(self._iopub, mode=zmq.NOBLOCK)
            except zmq.ZMQError:
                return
            except Exception:  # a malformed or badly signed message: never kill the thread
                log.warning("dropping an unreadable IOPub message", exc_info=True)
                continue
            if msg is None:
                return
            try:
                self._dispatch(msg)
            except Exception:
                log.warning("error routing an IOPub message", exc_info=True)

    def _flush_outbox(self) -> None:
        while self._outbox:
            msg_type, content = self._outbox.popleft()
            try:
                self._session.send(self._control, msg_type, content)
            except Exception:
                log.warning("could not send a control message", exc_info=True)
