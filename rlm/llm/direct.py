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
and the search-only models (litellm refuses them tools).

Where the request goes is read as litellm reads it: `OPENAI_BASE_URL`, else
`OPENAI_API_BASE`, else api.openai.com; the key from `OPENAI_API_KEY`; the organization
from `OPENAI_ORGANIZATION`, else `OPENAI_ORG_ID`, the project from `OPENAI_PROJECT_ID` (the
openai SDK's, under litellm). A setting only litellm reads (its TLS and timeout settings,
workload identity) or no key at all sends every request through litellm, and so does
`RLM_OPENAI_CLIENT=litellm`. Keys are read at each request and never put in an error's
text: a transport error says its type and the URL without credentials.

The gpt-5.4-and-later models go through litellm: with function tools and reasoning on,
litellm sends them to OpenAI's Responses API at api.openai.com (chat completions refuses
that pair). `tests/test_direct.py` compares both ways with the requests addressed to
api.openai.com, so host-dependent choices of litellm are compared too.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
import weakref
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rlm.llm import inproc, modelmap
from rlm.llm.preflight import provider_of
from rlm.llm.tokens import count_messages, count_text

CLIENT_ENV = "RLM_OPENAI_CLIENT"
DEFAULT_BASE = "https://api.openai.com/v1"
# litellm's own reading of these settings (its openai handler), in its order
BASE_ENVS = ("OPENAI_BASE_URL", "OPENAI_API_BASE")
HEADER_ENVS = ((("OPENAI_ORGANIZATION", "OPENAI_ORG_ID"), "OpenAI-Organization"),
               (("OPENAI_PROJECT_ID",), "OpenAI-Project"))
# settings litellm (or its openai SDK) reads and this client does not: left to litellm
LITELLM_ONLY_ENVS = ("SSL_VERIFY", "SSL_CERTIFICATE", "SSL_SECURITY_LEVEL", "SSL_ECDH_CURVE",
                     "REQUEST_TIMEOUT", "OPENAI_IDENTITY_PROVIDER_ID", "OPENAI_SERVICE_ACCOUNT_ID",
                     "OPENAI_IDENTITY_TOKEN_FILE")
# gpt-N.M from 5.4 on (litellm's `is_model_gpt_5_4_plus_model`): its Responses API bridge
_GPT_VERSION = re.compile(r"^gpt-(\d+)(?:\.(\d+))?(?=[.-]|$)")
MAX_ERROR_BYTES = 64 * 1024  # of a refusal's body
DRAIN_LINES = 64  # read after [DONE] so the connection goes back to the pool
MAX_LINE_CHARS = 4 * 1024 * 1024  # one event's line: far above the seam's 512 KB reply cap
# what the seam sends that reaches the body as given; anything else goes through litellm
PLAIN = frozenset({"model", "messages", "tools", "tool_choice", "stop", "stream",
                   "stream_options"})
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


def applies(spec: str) -> bool:
    """An OpenAI chat model litellm's map describes, unless the user asked for litellm or
    litellm rewrites its messages (a reasoning model the map does not say takes system
    messages: litellm sends them as user messages)."""
    if os.environ.get(CLIENT_ENV, "").strip().lower() == "litellm":
        return False
    if not os.environ.get("OPENAI_API_KEY") or any(os.environ.get(e) for e in LITELLM_ONLY_ENVS):
        return False
    known = modelmap.facts(spec) if provider_of(spec) == "openai" else None
    if known is None or "search" in spec:  # search-only models: litellm limits their params
        return False
    version = _GPT_VERSION.match(spec.split("/")[-1])
    if version and (int(version[1]), int(version[2] or 0)) >= (5, 4):
        return False  # litellm bridges their tool calls to the Responses API
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


_endpoints: weakref.WeakSet[Endpoint] = weakref.WeakSet()


def _forget_clients() -> None:
    """In a forked child: the parent's connections are not this process's to use."""
    for endpoint in list(_endpoints):
        endpoint._client, endpoint._lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_clients)


class Endpoint:
    """One OpenAI-compatible endpoint: an httpx client kept open between requests (its
    connection with it) and the stream of one request as rlm.llm.inproc chunks."""

    def __init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()
        _endpoints.add(self)

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import httpx  # about 0.15 s: at the first request, not at the start

                self._client = httpx.Client(  # follows redirects, as the openai SDK does
                    timeout=httpx.Timeout(READ_S, connect=CONNECT_S), follow_redirects=True)
            return self._client

    @staticmethod
    def url() -> str:
        base = next((os.environ[n] for n in BASE_ENVS if os.environ.get(n)), DEFAULT_BASE)
        return base.rstrip("/") + "/chat/completions"

    @staticmethod
    def shown_url() -> str:
        """The URL for an error's text: no credentials, no query."""
        parts = urlsplit(Endpoint.url())
        host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, host, parts.path, "", ""))

    @staticmethod
    def headers() -> dict[str, str]:
        key = os.environ.get("OPENAI_API_KEY", "")
        if not key.isprintable() or key != key.strip() or " " in key:
            raise inproc.AuthenticationError(
                "OPENAI_API_KEY holds whitespace or control characters (a line ending "
                "copied with it?): set it to the key alone")
        out = {"Content-Type": "application/json", "Accept": "text/event-stream",
               "Authorization": f"Bearer {key}"}
        for envs, header in HEADER_ENVS:
            value = next((os.environ[e] for e in envs if os.environ.get(e)), None)
            if value:
                out[header] = value
        return out

    def streaming(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The reply's chunks; a refusal raises before the first. Closing the generator
        closes the response (a stream rule stopped the reply)."""
        import httpx

        headers, client = self.headers(), self.client()
        try:
            with client.stream("POST", self.url(), headers=headers,
                               content=json.dumps(request).encode()) as response:
                if response.status_code >= 400:
                    raise _error(response.status_code, _head(response.iter_bytes()))
                yield from _chunks(_lines(response.iter_text()), request["messages"])
        except httpx.TimeoutException as e:
            raise inproc.Timeout(f"OpenAI did not answer in time ({type(e).__name__})") from None
        except httpx.TransportError as e:  # its text may hold a header's value: not shown
            raise inproc.InternalServerError(
                f"cannot reach {self.shown_url()} ({type(e).__name__})") from None


def _head(pieces: Iterator[bytes]) -> bytes:
    """The first MAX_ERROR_BYTES of a body (a refusal's text; a huge one is not read)."""
    out = b""
    for piece in pieces:
        out += piece
        if len(out) >= MAX_ERROR_BYTES:
            break
    return out[:MAX_ERROR_BYTES]


def _lines(pieces: Iterator[str]) -> Iterator[str]:
    """The body's lines, none longer than MAX_LINE_CHARS (a body with no line ending is
    not held whole in memory)."""
    rest = ""
    for piece in pieces:
        if "\n" not in piece:  # a long line in many pieces is not split again per piece
            rest += piece
        else:
            *whole, rest = (rest + piece).split("\n")
            yield from (line.removesuffix("\r") for line in whole)
        if len(rest) > MAX_LINE_CHARS:
            raise APIStatusError(f"OpenAI's endpoint sent a line of over {MAX_LINE_CHARS:,} "
                                 f"characters: {rest[:200]!r}", 200)
    if rest:
        yield rest.removesuffix("\r")


def _events(lines: Iterator[str]) -> Iterator[tuple[str | None, str]]:
    """(data, "") for each server-sent event, its `data:` lines joined as the format joins
    them; (None, line) for a line that is no part of one (a body that is no stream)."""
    data: list[str] = []
    for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line.strip():
            if data:
                yield "\n".join(data), ""
                data = []
        elif not line.startswith((":", "event:", "id:", "retry:")):
            yield None, line
    if data:
        yield "\n".join(data), ""


def _chunks(lines: Iterator[str], messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Server-sent events as inproc chunks: text, each tool call's pieces, and a last
    chunk with the finish reason and the usage (which OpenAI sends after the choices; an
    endpoint that sends none gets it counted, as litellm counts it)."""
    finish, usage, written, events, other = "", None, [], 0, ""
    for event_data, stray in _events(lines):
        if event_data is None:  # not an event: what the body held instead, for the error
            other = other or stray.strip()
            continue
        events += 1
        data = event_data.strip()
        if data == "[DONE]":
            for _ in itertools.islice(lines, DRAIN_LINES):  # to the body's end, so the
                pass                                       # connection serves the next
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
