"""A real OpenAI-compatible HTTP endpoint on 127.0.0.1, for a hosted model's path through
litellm without the network: bench/bench_startup.py's hosted figure and
tests/test_hosted_model.py.

It answers `POST /v1/chat/completions` from a list of replies (one per request, the last
repeated), streamed as server-sent events the way OpenAI streams them, with usage. Each
request's body and its arrival time (`time.time()`) are kept, so a caller can say what
reached the model and when. Point litellm at it with `OPENAI_API_BASE=server.base`.

A tool call's arguments stream in pieces of 24 characters, as providers send them; a reply
with `"hold_after": N` stops after N characters of them until `release` is set (a test
looks at the screen while the model is still writing, then lets it finish); one with
`"hold_first": true` sends nothing until `release` is set (a provider still reading a
long prompt). A reply with
`"status"` is a refusal (that status, `"body"` as its JSON; with 200, a body that is no
stream); `"raw"` lists the events' data verbatim (garbage); `"usage": False` sends no
usage. Each request's headers and the connection it came on (the peer's address) are kept:
HTTP/1.1, so a client may send many requests on one.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ARG_PIECE = 24  # characters of a tool call's arguments per streamed chunk


def tool_reply(code: str) -> dict[str, Any]:
    """A reply that calls the `python` tool with `code`."""
    return {"tool_calls": [{"name": "python", "arguments": {"code": code}}]}


@dataclass
class FakeOpenAI:
    replies: list[dict[str, Any]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)  # each request's, lower-cased
    connections: list[tuple[str, int]] = field(default_factory=list)  # each request's peer
    arrivals: list[float] = field(default_factory=list)
    base: str = ""
    release: threading.Event = field(default_factory=threading.Event)

    def reply_for(self, index: int) -> dict[str, Any]:
        return self.replies[min(index, len(self.replies) - 1)]


def _events(reply: dict[str, Any], model: str,
            release: threading.Event | None = None) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": reply.get("content") or ""})
    calls = reply.get("tool_calls") or []
    hold = reply.get("hold_after") if release is not None else None  # in the first call
    for i, call in enumerate(calls):
        args = json.dumps(call["arguments"])
        k = 0
        while True:
            if hold is not None and k >= hold:
                release.wait(120)  # type: ignore[union-attr]
                hold = None
            end = min(k + ARG_PIECE, len(args))
            if hold is not None and k < hold < end:
                end = hold  # the piece ends where the model pauses
            head = {"id": f"call_{i}", "type": "function"} if k == 0 else {}
            yield chunk({"tool_calls": [{"index": i, **head, "function": {
                **({"name": call["name"]} if k == 0 else {}), "arguments": args[k:end]}}]})
            k = end
            if k >= len(args):
                break
        hold = None
    yield chunk({}, "tool_calls" if calls else "stop")
    if reply.get("usage", True):
        yield {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
               "model": model, "choices": [],
               "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                         "prompt_tokens_details": {"cached_tokens": 64}}}


def _handler(state: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # connections kept alive; streams sent chunked

        def setup(self) -> None:
            super().setup()
            # each event leaves at once, as a real endpoint sends it: with Nagle's rule a
            # small write waits for the client's delayed ack (40 ms) on a kept-alive socket
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def handle(self) -> None:
            try:
                super().handle()
            except (ConnectionResetError, BrokenPipeError):
                pass  # the client closed its kept-alive connection (or stopped a stream)

        def log_message(self, *_: Any) -> None:  # quiet: the caller reads `requests`
            pass

        def send(self, data: bytes) -> None:
            """One chunk of a chunked body."""
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            arrived = time.time()
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if not self.path.endswith("/chat/completions"):
                self.send_error(404)
                return
            state.arrivals.append(arrived)
            state.requests.append(body)
            state.headers.append({k.lower(): v for k, v in self.headers.items()})
            state.connections.append(self.client_address)
            reply = state.reply_for(len(state.requests) - 1)
            if reply.get("hold_first"):
                state.release.wait(120)
            if reply.get("status"):  # a refusal (or a plain 200 body): the status, its JSON
                data = json.dumps(reply.get("body") or {}).encode()
                self.send_response(reply["status"])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in reply.get("raw") or ():  # what an endpoint sent, verbatim
                self.send(f"data: {line}\n\n".encode())
            for event in () if reply.get("raw") else _events(
                    reply, body.get("model", "fake"), state.release):
                self.send(f"data: {json.dumps(event)}\n\n".encode())
            self.send(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")  # the chunked body's end
            self.wfile.flush()

    return Handler


@contextmanager
def serving(replies: list[dict[str, Any]]) -> Iterator[FakeOpenAI]:
    """The endpoint on a port the OS hands out, for the block."""
    state = FakeOpenAI(replies)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
