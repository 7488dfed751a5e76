"""Stream assembly: a provider's reply, streamed or whole, as one `Completion`.

`assemble(chunks, ...)` joins streamed deltas (litellm's stream, or rlm.llm.inproc's
`deltas` for an in-process or direct provider): text forwarded to `on_text` as it comes,
native tool calls' arguments joined by index (and forwarded to `on_call`), usage, the
finish reason. A reply is bounded (`MAX_REPLY_CHARS`): past it the stream is closed and
the reply ends for length with `CUT_NOTE`. `from_response` reads a reply that was not
streamed under the same bound. `cleaning` / `cleaning_call` wrap the stream callbacks so
no lone surrogate gets past (rlm.llm.types.clean_text). No litellm here: the objects are
read by their attributes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from rlm.llm.types import (
    CallStreamCallback,
    Completion,
    StreamCallback,
    ToolCall,
    Usage,
    clean_text,
)

# One reply's text plus tool-call arguments, at most: above any provider's output limit
# (128k tokens is ~500 KB), so only a runaway or hostile endpoint reaches it. The stream
# is closed there: a 20 MB reply costs the time and memory of 512 KB (bench/RESULTS.md).
MAX_REPLY_CHARS = 512 * 1024
CUT_NOTE = "\n[rlm: the reply was cut at {cap:,} characters; the rest was not read]"


def cleaning(on_text: StreamCallback) -> StreamCallback:
    return lambda piece: on_text(clean_text(piece))


def cleaning_call(on_call: CallStreamCallback) -> CallStreamCallback:
    return lambda index, piece: on_call(index, clean_text(piece))


def assemble(
    chunks: Iterable[Any], on_text: StreamCallback | None, streamed: list[bool], spec: str,
    cap: int | None = None, on_call: CallStreamCallback | None = None,
) -> Completion:
    """Join streamed deltas: text (forwarded to on_text), tool calls by index, usage. When
    `on_text` raises (a stream rule stopped the reply) the stream is closed on the spot: the
    local model's generator holds its model lock until it is closed. Past `cap` characters
    (MAX_REPLY_CHARS) the stream is closed too and the reply ends for length."""
    try:
        return _join(chunks, on_text, streamed, spec,
                     MAX_REPLY_CHARS if cap is None else cap, on_call)
    except BaseException:
        _close(chunks)
        raise


def _close(chunks: Iterable[Any]) -> None:
    for stream in (chunks, getattr(chunks, "completion_stream", None)):
        close = getattr(stream, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


def _join(
    chunks: Iterable[Any], on_text: StreamCallback | None, streamed: list[bool], spec: str,
    cap: int, on_call: CallStreamCallback | None = None,
) -> Completion:
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage, finish, size, cut = None, "stop", 0, False
    for chunk in chunks:
        if getattr(chunk, "usage", None):
            usage = chunk.usage
        for choice in getattr(chunk, "choices", None) or ():
            if choice.finish_reason:
                finish = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                piece = delta.content[:max(0, cap - size)]
                size += len(delta.content)
                streamed[0] = True
                text.append(piece)
                if on_text is not None and piece:
                    on_text(piece)
            for tc in delta.tool_calls or ():
                slot = calls.setdefault(tc.index or 0, {"id": "", "name": "", "arguments": []})
                slot["id"] = tc.id or slot["id"]
                if tc.function is not None:
                    slot["name"] = tc.function.name or slot["name"]
                    args = (tc.function.arguments or "")[:max(0, cap - size)]
                    slot["arguments"].append(args)
                    size += len(tc.function.arguments or "")
                    streamed[0] = streamed[0] or bool(args)  # on_call has it: no retry
                    if on_call is not None and args:
                        on_call(tc.index or 0, args)
        if size > cap:
            cut = True
            break
    if cut:
        _close(chunks)  # stop the provider's stream (the local model's lock with it)
        finish = "length"
        text.append(CUT_NOTE.format(cap=cap))
        if on_text is not None:
            on_text(text[-1])
    for slot in calls.values():
        slot["arguments"] = "".join(slot["arguments"])
    tool_calls = [_tool_call(calls[i], i) for i in sorted(calls)]
    if tool_calls and finish == "stop":
        finish = "tool_calls"
    got = _usage(usage)
    if cut and not got.output_tokens:  # the usage chunk comes last: never read
        got = replace(got, output_tokens=min(size, cap) // 4)
    return Completion("".join(text), tool_calls, got, spec, finish)


def _tool_call(slot: dict[str, str], i: int) -> ToolCall:
    """Arguments that are not a JSON object are kept under `_invalid_arguments`, so the
    loop can tell the model instead of running garbage."""
    try:
        args = json.loads(slot["arguments"] or "{}")
    except ValueError:
        args = None
    if not isinstance(args, dict):
        args = {"_invalid_arguments": slot["arguments"]}
    return ToolCall(id=slot["id"] or f"call_{i}", name=slot["name"] or "python", arguments=args)


def _usage(u: Any) -> Usage:
    if u is None:
        return Usage()
    get = u.get if isinstance(u, dict) else lambda k, d=None: getattr(u, k, d)
    details = get("prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if isinstance(details, dict):
        cached = details.get("cached_tokens")
    return Usage(
        input_tokens=int(get("prompt_tokens", 0) or 0),
        output_tokens=int(get("completion_tokens", 0) or 0),
        cache_read_tokens=int(get("cache_read_input_tokens", 0) or cached or 0),
        cache_write_tokens=int(get("cache_creation_input_tokens", 0) or 0),
    )


def from_response(response: Any, spec: str) -> Completion:
    choice = response.choices[0]
    msg = choice.message
    calls = [
        _tool_call(
            {
                "id": tc.id or "",
                "name": tc.function.name or "",
                "arguments": tc.function.arguments or "",
            },
            i,
        )
        for i, tc in enumerate(getattr(msg, "tool_calls", None) or ())
    ]
    content, finish = msg.content or "", choice.finish_reason or "stop"
    if len(content) > MAX_REPLY_CHARS:  # the same bound as a stream's (`assemble`)
        content, finish = content[:MAX_REPLY_CHARS] + CUT_NOTE.format(cap=MAX_REPLY_CHARS), "length"
    return Completion(content, calls, _usage(getattr(response, "usage", None)), spec, finish)
