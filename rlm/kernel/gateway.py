"""`--kernel gateway:URL`: the kernel runs on a Jupyter Kernel Gateway or Enterprise Gateway.

The gateway's REST API starts, interrupts and deletes the kernel (`/api/kernels`); its
websocket (`/api/kernels/<id>/channels`, JSON messages tagged with their channel) carries
shell, IOPub and control. `GatewayRuntime` has the shape of `KernelRuntime` (the `Runtime`
protocol in rlm/kernel/kinds.py), so `Kernel` keeps one policy for both: the same wait loop,
output shaping, bridge dispatcher, timeout escalation and restart + restore.

Threads: one asyncio loop thread owns the websocket (reads, and every write: shell
requests and bridge replies are handed to it with `call_soon_threadsafe`); IOPub messages
are routed on that thread exactly as the zmq listener routes them (`listener.Router`).

Death: the gateway's own restarter notices a dead kernel (every `KernelRestarter.
time_to_dead` seconds, 3 by default; set it to 0.5 on the gateway for ~1 s) and sends an
IOPub `status` of `restarting` or `dead`; a websocket that closes or stops answering pings
(`WS_PING_S`, `WS_PING_TIMEOUT_S`) means the gateway or the network is gone. Either makes
`poll()` non-None, and `Kernel` restarts: the old kernel is deleted, a new one started.

The token comes from the environment (`TOKEN_ENV`) at every start, is sent only in the
`Authorization` header, and is never stored in the Config, the session or any file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import socket
import struct
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jupyter_client.jsonutil import json_default
from jupyter_client.session import Session

from kernel_ext import contract
from rlm import safeio
from rlm.config import Config, kernel_kind
from rlm.errors import KernelError
from rlm.kernel.bridge import BridgeDispatcher
from rlm.kernel.listener import Router
from rlm.kernel.runtime import kernel_env
from rlm.paths import HOST_DIR, write_private_atomic
from rlm.secrets import scrub_session

log = logging.getLogger(__name__)

TOKEN_ENV = ("RLM_GATEWAY_TOKEN", "JUPYTER_GATEWAY_AUTH_TOKEN")
REQUEST_TIMEOUT_S = 30.0
START_REQUEST_TIMEOUT_S = 300.0  # a cluster may pull an image and schedule a pod first
WS_PING_S = 1.0
WS_PING_TIMEOUT_S = 1.0  # tornado: at most the interval; a silent gateway is gone in ~2 s
MAX_MESSAGE_BYTES = 512 * 1024 * 1024


def gateway_token() -> str | None:
    for name in TOKEN_ENV:
        value = os.environ.get(name)
        if value:
            return value
    return None


def remote_env(session_dir: Path, config: Config) -> dict[str, str]:
    """The env sent with the start request: kernel_ext's settings only, never secrets."""
    env = kernel_env(session_dir, config)
    # what the kernel needs of it (kernel_ext.contract.GATEWAY_ENV, no secret among them),
    # sent as KERNEL_<NAME>: the only names both gateways pass through;
    # kernel_ext.adopt_gateway_env maps them back
    return {f"{contract.GATEWAY_PREFIX}{key}": env[key] for key in contract.GATEWAY_ENV
            if key in env}


class GatewayHttp:
    """The gateway's kernels REST API (stdlib urllib: a few calls per kernel lifetime)."""

    def __init__(self, url: str, token: str | None):
        self.url, self._token = url.rstrip("/"), token

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self._token:
            h["Authorization"] = f"token {self._token}"
        return h

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             timeout: float = REQUEST_TIMEOUT_S) -> Any:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers=self.headers())
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (http(s) only)
                raw = resp.read()
        except urllib.error.HTTPError as e:
            detail = _error_detail(e)
            if e.code in (401, 403):
                raise KernelError(
                    f"the gateway at {self.url} refused the request (HTTP {e.code}{detail}): set "
                    f"{TOKEN_ENV[0]} to its auth token") from None
            raise KernelError(
                f"the gateway at {self.url} answered {method} {path} with HTTP {e.code}{detail}"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise KernelError(
                f"cannot reach the gateway at {self.url} ({reason}); start it or fix --kernel"
            ) from None
        return json.loads(raw) if raw else None

    def start_kernel(self, name: str, env: dict[str, str]) -> dict[str, Any]:
        body: dict[str, Any] = {"env": env}
        if name:
            body["name"] = name
        model = self.call("POST", "/api/kernels", body, timeout=START_REQUEST_TIMEOUT_S)
        if not isinstance(model, dict) or not isinstance(model.get("id"), str):
            raise KernelError(f"the gateway at {self.url} answered a kernel start with {model!r}")
        return model

    def interrupt(self, kernel_id: str) -> None:
        self.call("POST", f"/api/kernels/{quote(kernel_id)}/interrupt")

    def delete(self, kernel_id: str) -> None:
        self.call("DELETE", f"/api/kernels/{quote(kernel_id)}")


GATEWAY_RECORD = f"{HOST_DIR}/gateway-kernel.json"


def delete_recorded(session_dir: Path, token: str | None = None, *,
                    keep_unreachable: bool = True) -> bool:
    """Delete the gateway kernel `session_dir` records as its own (a host that died, or a
    child whose stop failed, left it running there). True when none is left to delete;
    False when the gateway could not be reached and the record is kept for a later try
    (`keep_unreachable`)."""
    record = session_dir / GATEWAY_RECORD  # in host/: a record a cell wrote would send the
    try:                                   # gateway token to the URL it names
        old = json.loads(safeio.read_text(session_dir, record, 4096))
        url, kernel_id = str(old["url"]), str(old["kernel_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return True
    try:
        GatewayHttp(url, token if token is not None else gateway_token()).delete(kernel_id)
    except KernelError as e:
        if keep_unreachable and "cannot reach the gateway" in str(e):
            return False
        # gone already (404), or deleted by its culler: nothing more to do
    safeio.unlink(session_dir, record)
    return True


def _error_detail(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read() or b"{}")
        text = body.get("message") or body.get("reason") or ""
    except (ValueError, OSError, AttributeError):
        text = ""
    return f": {str(text).splitlines()[0][:200]}" if text else ""


def decode_frame(frame: str | bytes) -> dict[str, Any]:
    """One websocket frame of jupyter_server's default (legacy JSON) protocol. Binary
    frames carry buffers (widgets): `!I` count, offsets, then the JSON message first;
    the buffers are not needed here."""
    if isinstance(frame, str):
        return json.loads(frame)
    n = struct.unpack("!I", frame[:4])[0]
    offsets = struct.unpack(f"!{n}I", frame[4:4 + 4 * n])
    end = offsets[1] if n > 1 else len(frame)
    return json.loads(frame[offsets[0]:end])


def _tcp_socket(conn: Any) -> Any:
    """The websocket's TCP socket, with Nagle off for what rlm sends; None if unknown."""
    sock = getattr(getattr(getattr(conn, "protocol", None), "stream", None), "socket", None)
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        return None
    return sock


def _quick_ack(sock: Any) -> None:
    """Acknowledge what arrives at once (Linux; the flag does not stay set, so it is set
    again before each read). The gateway relays a cell's replies as several small
    websocket writes with Nagle on: each one after the first waits for the ACK of the one
    before, and a delayed ACK holds that for 40 ms. A `1+1` on a loopback gateway took
    48 ms against 5 ms locally; acknowledged at once, 6-9 ms (bench/RESULTS.md)."""
    quick = getattr(socket, "TCP_QUICKACK", None)
    if sock is not None and quick is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, quick, 1)
        except OSError:
            pass


class _WebSocket:
    """The websocket on its own asyncio loop thread; `send` may be called from any thread."""

    def __init__(self, url: str, headers: dict[str, str], on_frame: Any, on_close: Any,
                 timeout: float = REQUEST_TIMEOUT_S):
        self._url, self._headers = url, headers
        self._on_frame, self._on_close = on_frame, on_close
        self._loop = asyncio.new_event_loop()
        self._conn: Any = None
        self._error: BaseException | None = None
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlm-gateway-ws", daemon=True)
        self._thread.start()
        if not self._connected.wait(timeout) or self._error is not None:
            self.close()
            why = self._error or f"no answer within {timeout:.0f} s"
            raise KernelError(f"cannot open the kernel's websocket at {url} ({why})")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        try:
            req = HTTPRequest(self._url, headers=self._headers, connect_timeout=REQUEST_TIMEOUT_S,
                              request_timeout=REQUEST_TIMEOUT_S)
            self._conn = await websocket_connect(
                req, ping_interval=WS_PING_S, ping_timeout=WS_PING_TIMEOUT_S,
                max_message_size=MAX_MESSAGE_BYTES)
        except Exception as e:
            self._error = e
            self._connected.set()
            return
        self._connected.set()
        sock = _tcp_socket(self._conn)
        while True:
            _quick_ack(sock)
            frame = await self._conn.read_message()
            if frame is None:
                break
            try:
                self._on_frame(frame)
            except Exception:
                log.warning("dropping an unreadable gateway message", exc_info=True)
        self._on_close(self._conn.close_reason or "the gateway closed the kernel's websocket")

    def send(self, text: str) -> None:
        try:
            self._loop.call_soon_threadsafe(self._write, text)
        except RuntimeError:  # the loop is closed: the socket is gone, poll() says so
            pass

    def _write(self, text: str) -> None:
        if self._conn is None:
            return
        try:
            fut = self._conn.write_message(text)
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        except Exception:  # WebSocketClosedError: the reader reports the close
            pass

    def close(self) -> None:
        def _close() -> None:
            if self._conn is not None:
                self._conn.close()
            else:
                for task in asyncio.all_tasks(self._loop):
                    task.cancel()
        try:
            self._loop.call_soon_threadsafe(_close)
        except RuntimeError:
            pass
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)


class GatewayListener(Router):
    """IOPub routing for a gateway kernel; control messages go out on the websocket."""

    def __init__(self, runtime: GatewayRuntime, bridge: BridgeDispatcher):
        super().__init__(bridge)
        self._rt = runtime

    def send_control(self, msg_type: str, content: dict[str, Any]) -> None:
        if not self._stopping:
            self._rt.send("control", self._rt.session.msg(msg_type, content))

    def deliver(self, msg: dict[str, Any]) -> None:
        if not self._stopping:
            self._dispatch(msg)

    def stop(self) -> None:
        self._stopping = True


class GatewayRuntime:
    """A kernel on a gateway: started by REST, spoken to over one websocket."""

    def __init__(self, session_dir: Path, config: Config, bridge: BridgeDispatcher):
        kind = kernel_kind(config.kernel)
        self.session_dir = session_dir
        safeio.make_dirs(session_dir, HOST_DIR)
        scrub_session(session_dir)
        self.url = kind.url
        token = gateway_token()
        self._http = GatewayHttp(kind.url, token)
        # builds messages only: the gateway signs what it forwards (a key avoids the warning)
        self.session = Session(key=os.urandom(16).hex().encode(), username="rlm")
        self._shell: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._gone: str | None = None
        bridge.reset()
        self.listener = GatewayListener(self, bridge)
        # the kernel this session holds on a gateway: a host that died (SIGKILL, power) left
        # it running there (on a cluster: a pod); the next start deletes it
        self._record = session_dir / GATEWAY_RECORD
        self._delete_stale(token)
        model = self._http.start_kernel(kind.name, remote_env(session_dir, config))
        self.kernel_id: str = model["id"]
        write_private_atomic(self._record, json.dumps(
            {"url": kind.url, "kernel_id": self.kernel_id}).encode(), root=session_dir)
        self.kernel_name = str(model.get("name", kind.name))
        ws_url = ("ws" + kind.url[4:] if kind.url.startswith("http") else kind.url) + \
            f"/api/kernels/{quote(self.kernel_id)}/channels?session_id={self.session.session}"
        try:
            self._ws = _WebSocket(ws_url, self._http.headers(), self._on_frame, self._on_close)
        except BaseException:
            self._delete()
            raise

    # -- the Runtime protocol -----------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return None  # the process is on the gateway's machine

    def poll(self) -> int | None:
        return 1 if self._gone is not None else None

    def exit_text(self, returncode: int) -> str:
        return self._gone or "the gateway's kernel is gone"

    def log_tail(self, chars: int = 2000) -> str:
        return f"(the kernel's log is the gateway's: see the output of the gateway at {self.url})"

    def send_shell(self, msg: dict[str, Any]) -> None:
        self.send("shell", msg)

    def recv_shell(self, timeout_s: float) -> dict[str, Any] | None:
        try:
            if timeout_s <= 0:
                return self._shell.get_nowait()
            return self._shell.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def interrupt(self) -> None:
        if self._gone is None:
            try:
                self._http.interrupt(self.kernel_id)
            except KernelError as e:
                log.warning("interrupt failed: %s", e)

    @contextlib.contextmanager
    def read_only(self) -> Iterator[str | None]:
        """Replay's read-only filesystem: not for a kernel that runs elsewhere."""
        yield ("the kernel runs on a gateway, whose files rlm cannot make read-only; replay "
               "re-runs cells only under a read-only filesystem")

    def note(self, text: str) -> None:
        log.info("%s", text)

    def close(self, now: bool = False) -> None:
        self.listener.stop()
        self._ws.close()
        self._delete()

    # -- the websocket ------------------------------------------------------------------
    def send(self, channel: str, msg: dict[str, Any]) -> None:
        self._ws.send(json.dumps({**msg, "channel": channel}, default=json_default))

    def _on_frame(self, frame: str | bytes) -> None:
        msg = decode_frame(frame)
        channel = msg.pop("channel", None)
        if channel == "shell":
            self._shell.put(msg)
        elif channel == "iopub":
            content = msg.get("content") or {}
            state = content.get("execution_state")
            if msg.get("header", {}).get("msg_type") == "status" and state in ("restarting", "dead"):
                self._gone = f"the gateway reported the kernel {state} (it died)"
            self.listener.deliver(msg)

    def _on_close(self, reason: str) -> None:
        if self._gone is None:
            self._gone = f"the connection to the gateway closed ({reason})"

    def _delete(self) -> None:
        try:
            self._http.delete(self.kernel_id)
        except KernelError:
            pass  # already gone (deleted, culled, or the gateway is down)
        try:
            record = json.loads(safeio.read_text(self.session_dir, self._record, 4096))
            if record.get("kernel_id") == self.kernel_id:
                safeio.unlink(self.session_dir, self._record)
        except (OSError, ValueError):
            pass

    def _delete_stale(self, token: str | None) -> None:
        delete_recorded(self.session_dir, token, keep_unreachable=False)
