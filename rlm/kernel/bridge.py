"""Host side of the kernel -> host bridge.

The kernel sends requests as comm messages on IOPub (see `kernel_ext.wire`). The IOPub
listener thread hands each one to `BridgeDispatcher.on_comm_msg`, which validates it
(untrusted input) and runs the handler on a small thread pool, so a slow handler (an LLM
call, a child agent) never stalls output routing. The reply is given back through
`send_reply`, which queues it for the listener thread: only that thread touches the
control socket (zmq sockets are not thread-safe).

`llm_query_batched` arrives as ONE request; the handler fans the prompts out itself.
A `ping` with no handler installed is echoed (params back), for health checks and tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kernel_ext import wire

BridgeHandler = Callable[[str, dict[str, Any]], Any]
SendReply = Callable[[str, dict[str, Any]], None]  # (comm_id, reply data)

DEFAULT_WORKERS = 8


class BridgeDispatcher:
    def __init__(self, handler: BridgeHandler | None = None, workers: int = DEFAULT_WORKERS):
        self.handler = handler
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._comm_ids: set[str] = set()

    def on_comm_open(self, content: dict[str, Any]) -> bool:
        """Remember the bridge comm; False when the comm is someone else's."""
        if content.get("target_name") != wire.BRIDGE_TARGET:
            return False
        comm_id = content.get("comm_id")
        if isinstance(comm_id, str):
            self._comm_ids.add(comm_id)
        return True

    def on_comm_msg(self, content: dict[str, Any], send_reply: SendReply) -> bool:
        """Dispatch a bridge request; False when the message is not for the bridge."""
        comm_id, data = content.get("comm_id"), content.get("data")
        looks_like_request = isinstance(data, dict) and data.get("kind") == "request"
        if not isinstance(comm_id, str) or (
            comm_id not in self._comm_ids and not looks_like_request
        ):
            return False
        try:
            req_id, method, params = wire.parse_request(data)
        except wire.WireError as e:
            bad_id = data.get("id") if isinstance(data, dict) else None
            if isinstance(bad_id, str) and 0 < len(bad_id) <= wire.MAX_ID_LEN:
                send_reply(
                    comm_id, wire.make_reply(bad_id, False, error=f"bad bridge request: {e}")
                )
            return True
        self._get_pool().submit(self._answer, comm_id, req_id, method, params, send_reply)
        return True

    def _get_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="rlm-bridge")
        return self._pool

    def _answer(
        self, comm_id: str, req_id: str, method: str, params: dict[str, Any], send_reply: SendReply
    ) -> None:
        send_reply(comm_id, self.answer(req_id, method, params))

    def answer(self, req_id: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run the handler; its result or exception becomes a wire reply."""
        handler = self.handler
        try:
            if handler is None:
                if method != "ping":
                    raise RuntimeError(
                        f"no host handler for {method!r}: this kernel was started without a "
                        "bridge handler (Kernel.set_bridge_handler)"
                    )
                result: Any = params
            else:
                result = handler(method, params)
            json.dumps(result)  # the reply must travel as JSON: fail here, not in the listener
        except Exception as e:
            return wire.make_reply(req_id, False, error=str(e) or type(e).__name__)
        return wire.make_reply(req_id, True, result=result)

    def reset(self) -> None:
        """A new kernel process: forget the old comm ids."""
        self._comm_ids.clear()

    def close(self, *, wait: bool = False) -> None:
        """Stop the handler pool. `wait=True` lets submitted answers finish (and be sent)."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=not wait)
            self._pool = None
