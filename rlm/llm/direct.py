"""OpenAI's chat completions spoken directly, for the requests litellm would send as they are.

Importing litellm takes 2.5-3.5 s here, longer than a whole scripted run takes to reach its
first request; for `openai/gpt-4o-mini` it then builds the request body rlm gave it,
unchanged. So an OpenAI model from litellm's bundled map (rlm.llm.modelmap) sends such
requests itself, over one kept-alive httpx connection, and streams the reply into the
seam's own assembly, retries and error classification (as rlm.llm.inproc's providers do).

litellm stays the authority on what a model accepts. A request that litellm would change
goes through litellm: a reasoning model's `max_tokens` (sent as `max_completion_tokens`)
or `temperature` (refused, or kept only at 1), and every request of a reasoning model
whose entry does not say it takes system messages (litellm sends them as user messages),
and the search-only models (litellm refuses them tools). `tests/test_direct.py` sends the same
requests both ways to a real endpoint on 127.0.0.1 and holds the bodies and the replies
to be the same.

Where the request goes is read as litellm reads it: `OPENAI_BASE_URL`, else
`OPENAI_API_BASE`, else api.openai.com; the key from `OPENAI_API_KEY`; `OPENAI_ORGANIZATION`
and `OPENAI_PROJECT` as headers. `RLM_OPENAI_CLIENT=litellm` sends every request through
litellm instead. Keys are read at each request and never kept in an error's text.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from typing import Any

from rlm.llm import inproc, modelmap
from rlm.llm.preflight import provider_of
from rlm.llm.tokens import count_messages, count_text

CLIENT_ENV = "RLM_OPENAI_CLIENT"
DEFAULT_BASE = "https://api.openai.com/v1"
# litellm's own reading of these settings (its openai handler), in its order
BASE_ENVS = ("OPENAI_BASE_URL", "OPENAI_API_BASE")
HEADER_ENVS = (("OPENAI_ORGANIZATION", "OpenAI-Organization"), ("OPENAI_PROJECT", "OpenAI-Project"))
# what the seam sends that reaches the body as given; anything else goes through litellm
PLAIN = frozenset({"model", "messages", "tools", "stop", "stream", "stream_options"})
MAPPED_FOR_REASONING = frozenset({"temperature", "max_tokens"})
CONNECT_S, READ_S = 10.0, 600.0  # the openai SDK's read timeout; a slow start fails sooner


def sends_as_is(kwargs: dict[str, Any], reasoning: bool) -> bool:
    """Whether litellm would send `kwargs` (the seam's) to this model unchanged."""
    allowed = PLAIN if reasoning else PLAIN | MAPPED_FOR_REASONING
    return all(k in allowed or k == "num_retries" for k in kwargs)


def body(kwargs: dict[str, Any], spec: str) -> dict[str, Any]:
    """The request's body: the seam's kwargs as OpenAI takes them."""
    out = {k: v for k, v in kwargs.items() if k != "num_retries"}
    out["model"] = spec.removeprefix("openai/")
    return out


def copied(message: dict[str, Any]) -> dict[str, Any]:
    """A copy litellm may change (its providers edit messages in place)."""
    return json.loads(json.dumps(message))


def applies(spec: str) -> bool:
    """An OpenAI chat model litellm's map describes, unless the user asked for litellm or
    litellm rewrites its messages (a reasoning model the map does not say takes system
    messages: litellm sends them as user messages)."""
    if os.environ.get(CLIENT_ENV, "").strip().lower() == "litellm":
        return False
    known = modelmap.facts(spec) if provider_of(spec) == "openai" else None
    if known is None or "search" in spec:  # search-only models: litellm limits their params
        return False
    return known.system_messages or not known.reasoning


class APIStatusError(Exception):
    """A refusal with a status the seam classifies by itself (a 400, a 404)."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


def _error(status: int, body: bytes) -> Exception:
    """The error for a refusal: typed as the seam's providers type them (inproc)."""
    try:
        err = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        err = {}
    if not isinstance(err, dict):
        err = {"message": str(err)}
    text = " ".join(str(err.get("message") or body[:300].decode("utf-8", "replace")).split())
    message = f"OpenAI returned {status}: {text}"
    code = str(err.get("code") or err.get("type") or "")
    if status in (401, 403):
        return inproc.AuthenticationError(message)
    if status == 429:
        return inproc.RateLimitError(message)
    if code == "context_length_exceeded":
        return inproc.ContextWindowExceededError(message)
    if status == 408:
        return inproc.Timeout(message)
    if status >= 500:
        return inproc.InternalServerError(message)
    return APIStatusError(message, status)


class Endpoint:
    """One OpenAI-compatible endpoint: an httpx client kept open between requests (its
    connection with it) and the stream of one request as rlm.llm.inproc chunks."""

    def __init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import httpx  # about 0.15 s: at the first request, not at the start

                self._client = httpx.Client(timeout=httpx.Timeout(READ_S, connect=CONNECT_S))
            return self._client

    @staticmethod
    def url() -> str:
        base = next((os.environ[n] for n in BASE_ENVS if os.environ.get(n)), DEFAULT_BASE)
        return base.rstrip("/") + "/chat/completions"

    @staticmethod
    def headers() -> dict[str, str]:
        out = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        key = os.environ.get("OPENAI_API_KEY")
        if key:
            out["Authorization"] = f"Bearer {key}"
        for env, header in HEADER_ENVS:
            if os.environ.get(env):
                out[header] = os.environ[env]
        return out

    def streaming(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The reply's chunks; a refusal raises before the first. Closing the generator
        closes the response (a stream rule stopped the reply)."""
        import httpx

        client = self.client()
        try:
            with client.stream("POST", self.url(), headers=self.headers(),
                               content=json.dumps(request).encode()) as response:
                if response.status_code >= 400:
                    raise _error(response.status_code, response.read())
                yield from _chunks(response.iter_lines(), request["messages"])
        except httpx.TimeoutException as e:
            raise inproc.Timeout(f"OpenAI did not answer in time ({type(e).__name__})") from None
        except httpx.TransportError as e:
            raise inproc.InternalServerError(
                f"cannot reach {self.url()} ({type(e).__name__}: {e})") from None


def _chunks(lines: Iterator[str], messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Server-sent events as inproc chunks: text, each tool call's pieces, and a last
    chunk with the finish reason and the usage (which OpenAI sends after the choices; an
    endpoint that sends none gets it counted, as litellm counts it)."""
    finish, usage, written, events, other = "", None, [], 0, ""
    for line in lines:
        if not line.startswith("data:"):
            other = other or line.strip()
            continue  # a comment, an event name, the blank line between events
        events += 1
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            event = json.loads(data)
        except ValueError:
            raise APIStatusError(f"OpenAI sent an event that is not JSON: {data[:200]!r}",
                                 200) from None
        if not isinstance(event, dict):
            raise APIStatusError(f"OpenAI sent an event that is not an object: {data[:200]!r}",
                                 200)
        if event.get("error"):
            raise _error(500, json.dumps({"error": event["error"]}).encode())
        usage = event.get("usage") or usage
        try:
            for choice in event.get("choices") or ():
                finish = choice.get("finish_reason") or finish
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    written.append(str(delta["content"]))
                    yield inproc.chunk(text=written[-1])
                for call in delta.get("tool_calls") or ():
                    written.append(str((call.get("function") or {}).get("arguments") or ""))
                    yield inproc.chunk(tool_use=call)
        except (AttributeError, TypeError):  # a field of another shape than OpenAI's
            raise APIStatusError(f"OpenAI sent an event rlm cannot read: {data[:200]!r}",
                                 200) from None
    if not events:  # a body, not a stream: a proxy that ignored `stream`, an error page
        raise APIStatusError(f"OpenAI's endpoint sent no stream of events: {other[:200]!r}", 200)
    if not usage:
        inp, out = count_messages(messages) or 0, count_text("".join(written))
        usage = {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
    yield inproc.chunk(finished=True, finish_reason=finish or "stop", usage=usage)
