"""The one persistent IOPub listener of a kernel process.

It owns the IOPub socket (reads) and the control socket (writes), so neither is ever
touched by two threads. Messages are routed by parent msg_id to the queue of the
execution that registered it (`route`); bridge comm messages go to the dispatcher, whose
replies come back through `send_control` and are sent from this thread. Messages for no
registered route (status of control messages, output of background threads after their
cell ended) are dropped.

The kernel is untrusted, and it can put anything on IOPub (`session.send` from a cell,
not only ipykernel's bounded streams), so what the host holds is bounded here, whatever
the kernel sends:

- a message is decoded only when its frames total at most `MAX_MESSAGE_BYTES`; a larger
  one is received without a copy, its content never decoded: a stream keeps the first
  `KEEP_OF_CUT` characters of its text, any other kind becomes a one-line note, and the
  message says how many bytes were cut (`content["rlm_cut"]`, which the collector turns
  into the cell's one line about what was cut). The raw frames of such a message are
  libzmq's until the listener drops them: a transient peak of one message's size (zmq's
  MAXMSGSIZE would bound that too, but it closes the connection for good, losing the
  kernel's later messages: not used);
- the messages routed to a cell and not yet taken are at most `QUEUE_BYTES`: past it the
  listener waits for the cell's loop to take them (`QUEUE_WAIT_S` at most, then it drops
  the message and counts it), so a kernel that writes faster than the host spools does
  not pile up in host memory; the host's SUB socket keeps at most `RCV_HWM` messages.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections import deque
from typing import Any

import zmq
from jupyter_client.session import Session

from rlm.kernel.bridge import BridgeDispatcher

log = logging.getLogger(__name__)

_IDLE_POLL_MS = 500
MAX_MESSAGE_BYTES = 16 * 2**20  # a message's frames, decoded only up to this
KEEP_OF_CUT = 64 * 1024  # characters of a cut stream message's text that are kept
QUEUE_BYTES = 32 * 2**20  # routed, not yet taken by the cell's loop
QUEUE_WAIT_S = 5.0
RCV_HWM = 64  # messages the host's IOPub socket queues (zmq's default is 1000)
_HEADER_FRAME_MAX = 64 * 1024  # header, parent header, metadata: small in any honest message


def message_size(msg: dict[str, Any]) -> int:
    return int(msg.get("_rlm_bytes", 0))


class RouteQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    """A route's queue: taking a message gives its bytes back to the router's bound."""

    _router: Router

    def __new__(cls, router: Router) -> RouteQueue:
        self = super().__new__(cls)
        self._router = router
        return self

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        msg = super().get(block, timeout)
        self._router.taken(message_size(msg))
        return msg

    def get_nowait(self) -> Any:
        return self.get(False)


class Router:
    """What every transport's listener shares: routes by parent msg_id, bridge comms to the
    dispatcher (the zmq listener below; the gateway's websocket, rlm/kernel/gateway.py)."""

    def __init__(self, bridge: BridgeDispatcher):
        self._bridge = bridge
        self._routes: dict[str, RouteQueue] = {}
        self._stopping = False
        self._queued = 0  # bytes routed and not yet taken (`taken`)
        self._queued_lock = threading.Lock()
        self.dropped = 0  # messages dropped because the cell's loop did not take them

    def taken(self, nbytes: int) -> None:
        """The cell's loop took a message of `nbytes` from its queue."""
        if nbytes:
            with self._queued_lock:
                self._queued = max(self._queued - nbytes, 0)

    def route(self, msg_id: str) -> queue.SimpleQueue[dict[str, Any]]:
        """Register before sending the request, so no message can be missed."""
        q = RouteQueue(self)
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
        if q is None:
            return
        size = message_size(msg)
        end = time.monotonic() + QUEUE_WAIT_S
        while size and self._queued + size > QUEUE_BYTES and self._queued:
            if self._stopping or time.monotonic() > end or parent_id not in self._routes:
                self.dropped += 1
                log.warning("dropping an IOPub message: the cell's loop is not taking them")
                return
            time.sleep(0.005)
        with self._queued_lock:
            self._queued += size
        q.put(msg)


class IOPubListener(Router):
    def __init__(
        self, session: Session, iopub: zmq.Socket, control: zmq.Socket, bridge: BridgeDispatcher
    ):
        super().__init__(bridge)
        self._session, self._iopub, self._control = session, iopub, control
        _bound_queue(iopub)
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
                msg = self._recv()
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

    def _recv(self) -> dict[str, Any] | None:
        """One IOPub message, its size bounded in what the host decodes (see the module
        docstring); None when there is none."""
        try:
            frames = self._iopub.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.ZMQError as e:
            if e.errno == zmq.EAGAIN:
                return None
            raise
        total = sum(len(f) for f in frames)
        if total <= MAX_MESSAGE_BYTES:
            _, parts = self._session.feed_identities([f.bytes for f in frames])
            msg = self._session.deserialize(parts)
        else:
            msg = _cut_message(self._session, frames, total)
        msg["_rlm_bytes"] = total
        return msg

    def _flush_outbox(self) -> None:
        while self._outbox:
            msg_type, content = self._outbox.popleft()
            try:
                self._session.send(self._control, msg_type, content)
            except Exception:
                log.warning("could not send a control message", exc_info=True)


def _bound_queue(sock: zmq.Socket) -> None:
    """RCV_HWM on a connected SUB socket: a high-water mark applies to pipes made after it
    is set, so reconnect (before any cell: nothing is lost)."""
    try:
        url = sock.getsockopt(zmq.LAST_ENDPOINT)
        sock.setsockopt(zmq.RCVHWM, RCV_HWM)
        if url:
            endpoint = url.decode() if isinstance(url, bytes) else str(url)
            sock.disconnect(endpoint)
            sock.connect(endpoint)
    except (zmq.ZMQError, AttributeError, TypeError):
        log.warning("could not bound the IOPub socket's queue", exc_info=True)


def _cut_message(session: Session, frames: list[zmq.Frame], total: int) -> dict[str, Any]:
    """A message over MAX_MESSAGE_BYTES without decoding its content: checked like any
    other (signature, header), its content replaced by what is kept of it."""
    views = [f.buffer for f in frames]
    delim = next((i for i, v in enumerate(views) if v == b"<IDS|MSG>"), None)
    if delim is None or len(views) < delim + 6:
        raise ValueError("malformed message")
    sig, header, parent, metadata, content = views[delim + 1:delim + 6]
    if max(len(header), len(parent), len(metadata)) > _HEADER_FRAME_MAX:
        raise ValueError(f"a {total:,}-byte message with an oversized header")
    if session.auth is not None:
        check = session.sign([header, parent, metadata, content])
        if bytes(sig) != check:
            raise ValueError("Invalid Signature")
    msg: dict[str, Any] = {
        "header": session.unpack(bytes(header)),
        "parent_header": session.unpack(bytes(parent)),
        "metadata": {},
        "buffers": [],
    }
    kind = msg["header"].get("msg_type")
    if kind == "stream":
        head = bytes(content[:KEEP_OF_CUT * 6 + 1024])  # \u0000 is six bytes
        msg["content"] = {"name": _field(head, b'"name"') or "stdout",
                          "text": (_field(head, b'"text"') or "")[:KEEP_OF_CUT],
                          "rlm_cut": total}
    elif kind in ("display_data", "execute_result", "error"):
        msg["content"] = {"data": {}, "metadata": {}, "rlm_cut": total}
        if kind == "error":
            msg["header"]["msg_type"] = "display_data"
    else:  # a comm message or a status this large is not the kernel's own
        msg["content"] = {"rlm_cut": total}
    return msg


_scanstring: Any = getattr(json.decoder, "scanstring")  # noqa: B009 (untyped in typeshed)


def _field(raw: bytes, key: bytes) -> str | None:
    """The (start of the) JSON string value of `key` in the head `raw` of a JSON object:
    the value is decoded up to where `raw` ends."""
    at = raw.find(key)
    if at < 0:
        return None
    quote = raw.find(b'"', raw.find(b":", at + len(key)) + 1)
    if quote < 0:
        return None
    piece = raw[quote + 1:].decode("utf-8", errors="ignore")
    for trim in range(8):  # an escape cut at the end of `raw`: drop its pieces
        try:
            value, _ = _scanstring(piece[:len(piece) - trim] + '"', 0)
            return str(value)
        except ValueError:
            continue
    return None
