"""The model seam's per-call cost at 10, 100 and 1,000 messages (issue 32: constant in the
conversation's length).

Two models behind the same seam (`SeamLLM.complete`), each against its baseline in the
same run:
  scripted  `script:` replies (in-process, no litellm): one call's wall time at each size,
            against the same call at 10 messages (a constant seam reads 1.0x at 1,000)
  hosted    `openai/gpt-4o-mini` to a real OpenAI-compatible endpoint on 127.0.0.1
            (bench/fake_openai.py), as rlm sends it (`direct`: rlm.llm.direct, one kept-alive
            connection) and through litellm (`litellm`), against an http.client POST of the
            same request body on one kept-alive connection that reads the same streamed
            reply (what any client must pay): the ratio is the client's and rlm's own
            per-call work
The messages are what a session holds: a system prompt, then turns of a tool call (a
short cell) and its result (a few hundred characters of output). Medians of --calls
calls per size, the sizes interleaved round by round.

    python -m bench.bench_seam [--calls 30] [--sizes 10,100,1000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from bench.fake_openai import serving, tool_reply

REPLY = tool_reply("print(len(df))")


def conversation(n: int) -> list[dict[str, Any]]:
    """A system prompt and then n - 1 messages of tool-call turns."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are rlm. " * 200}]
    turn = 0
    while len(msgs) < n:
        cid = f"call_{turn}"
        code = f"part_{turn} = df[df.region == 'r{turn}'].revenue.sum()\nprint(part_{turn})"
        msgs.append({"role": "assistant", "content": "", "tool_calls": [{
            "id": cid, "type": "function",
            "function": {"name": "python", "arguments": json.dumps({"code": code})}}]})
        if len(msgs) < n:
            msgs.append({"role": "tool", "tool_call_id": cid, "name": "python",
                         "content": f"{turn * 1234.5}\n" + "row data " * 40})
        turn += 1
    return msgs


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def scripted(sizes: list[int], calls: int) -> dict[int, list[float]]:
    from rlm.llm import ScriptedLLM

    convs = {n: conversation(n) for n in sizes}
    llm = ScriptedLLM([REPLY] * (calls * len(sizes) + 1))
    llm.complete(convs[sizes[0]])  # first use: token encodings
    out: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(calls):
        for n in sizes:
            out[n].append(timed(lambda n=n: llm.complete(convs[n])))  # type: ignore[misc]
        llm.calls.clear()
        llm.requests.clear()
    return out


class RawClient:
    """The same request as a bare client sends it: POST on one kept-alive connection with
    TCP_NODELAY, then read the whole stream. The floor any client pays."""

    def __init__(self, base: str) -> None:
        self.url = urlparse(base)
        self.conn = http.client.HTTPConnection(self.url.hostname or "127.0.0.1", self.url.port,
                                               timeout=60)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, body: bytes) -> None:
        self.conn.request("POST", f"{self.url.path.rstrip('/')}/chat/completions", body=body,
                          headers={"Content-Type": "application/json",
                                   "Authorization": "Bearer sk-bench-not-a-key"})
        resp = self.conn.getresponse()
        while resp.read(65536):
            pass


def hosted(sizes: list[int], calls: int) -> dict[str, dict[int, list[float]]]:
    from rlm.llm import PYTHON_TOOL
    from rlm.llm.seam import LiteLLMModel, OpenAIModel

    convs = {n: conversation(n) for n in sizes}
    out: dict[str, dict[int, list[float]]] = {k: {n: [] for n in sizes}
                                              for k in ("direct", "litellm", "raw")}
    with serving([REPLY]) as server:
        os.environ["OPENAI_API_KEY"] = "sk-bench-not-a-key"
        os.environ["OPENAI_API_BASE"] = server.base
        llm = LiteLLMModel("openai/gpt-4o-mini")
        llm.complete(convs[sizes[0]])  # first use: litellm's import and its clients
        ours = OpenAIModel("openai/gpt-4o-mini")
        ours.complete(convs[sizes[0]])  # first use: httpx's import and its connection
        raw = RawClient(server.base)
        bodies = {n: json.dumps({
            "model": "gpt-4o-mini", "messages": convs[n], "tools": [PYTHON_TOOL],
            "stream": True, "stream_options": {"include_usage": True}}).encode()
            for n in sizes}
        for _ in range(calls):
            for n in sizes:
                out["direct"][n].append(timed(lambda n=n: ours.complete(convs[n])))  # type: ignore[misc]
                out["litellm"][n].append(timed(lambda n=n: llm.complete(convs[n])))  # type: ignore[misc]
                out["raw"][n].append(timed(lambda n=n: raw.post(bodies[n])))  # type: ignore[misc]
    return out


def ms(ts: list[float]) -> float:
    return statistics.median(ts) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--only", choices=["scripted", "hosted"])
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.only in (None, "scripted"):
        s = scripted(sizes, a.calls)
        for n in sizes:
            print(f"scripted {n:5d} messages  {ms(s[n]):7.3f} ms  "
                  f"vs {sizes[0]} messages: {ms(s[n]) / ms(s[sizes[0]]):.2f}x")
    if a.only in (None, "hosted"):
        h = hosted(sizes, a.calls)
        for n in sizes:
            raw = ms(h["raw"][n])
            for client in ("direct", "litellm"):
                t = ms(h[client][n])
                print(f"hosted   {n:5d} messages  {client:7s} {t:7.2f} ms  raw POST {raw:7.2f} ms"
                      f"  ratio {t / raw:.2f}x  (rlm's call over raw: {t - raw:+.2f} ms)")


if __name__ == "__main__":
    main()
