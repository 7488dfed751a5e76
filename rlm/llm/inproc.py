"""What an in-process provider (the scripted replay, the embedded local model) hands the
seam, without litellm: importing litellm costs about 4 s, and a `script:` or `local` run
never sends a request anywhere.

- A provider streams `chunk(...)` dicts (the shape of litellm's `GenericStreamingChunk`:
  text, tool_use, is_finished, finish_reason, usage); `deltas(chunks)` turns them into the
  objects the seam's stream assembly reads from a provider's stream (`.choices[0].delta`,
  `.usage`), and closing it closes the provider's generator (the local model holds its
  lock until then).
- A provider's failure is a `ProviderError` whose `kind` says what a real provider's error
  would have been (overflow, rate limit, auth, timeout, server); the seam classifies it
  exactly as it classifies litellm's types.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import SimpleNamespace
from typing import Any


def chunk(text: str = "", tool_use: Any = None, finished: bool = False,
          finish_reason: str = "", usage: dict[str, int] | None = None) -> dict[str, Any]:
    """One streamed piece: text, or one whole tool call, or the last piece with the
    finish reason and the exact usage."""
    return {"text": text, "tool_use": tool_use, "is_finished": finished,
            "finish_reason": finish_reason, "usage": usage, "index": 0}


def deltas(chunks: Iterable[dict[str, Any]]) -> Iterator[Any]:
    """`chunks` as a provider stream's delta objects; closing this closes `chunks`."""
    try:
        for c in chunks:
            call = c.get("tool_use")
            tool_calls = None
            if call:
                fn = call.get("function") or {}
                tool_calls = [SimpleNamespace(
                    index=call.get("index", 0), id=call.get("id", ""),
                    function=SimpleNamespace(name=fn.get("name", ""),
                                             arguments=fn.get("arguments", "")))]
            delta = SimpleNamespace(content=c.get("text") or None, tool_calls=tool_calls)
            choice = SimpleNamespace(finish_reason=c.get("finish_reason") or None, delta=delta)
            yield SimpleNamespace(usage=c.get("usage"), choices=[choice])
    finally:
        close = getattr(chunks, "close", None)
        if callable(close):
            close()


class ProviderError(Exception):
    """An in-process provider's error; `kind` is one of KINDS."""

    KINDS = ("overflow", "rate_limit", "auth", "timeout", "server")
    kind = "server"

    def __init__(self, message: str, model: str = "") -> None:
        super().__init__(message)
        self.model = model


# Named as litellm names them: a model error's text says which kind it was.
class ContextWindowExceededError(ProviderError):
    kind = "overflow"


class RateLimitError(ProviderError):
    kind = "rate_limit"


class AuthenticationError(ProviderError):
    kind = "auth"


class Timeout(ProviderError):
    kind = "timeout"


class InternalServerError(ProviderError):
    kind = "server"


def error(kind: str, message: str, model: str = "") -> ProviderError:
    """The error a real provider would raise for `kind` (a scripted error item)."""
    for cls in (ContextWindowExceededError, RateLimitError, AuthenticationError, Timeout):
        if cls.kind == kind:
            return cls(message, model)
    return InternalServerError(message, model)
