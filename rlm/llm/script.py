"""Scripted replies for `script:PATH` models (tests, demos, bug reports). No litellm here.

A script is a JSON list; each item is one reply to one model request, in order (or an
object `{"window": N, "replies": [...]}`: a script that declares its model's context
window, so compaction is sized to it as to a real model's; without it a scripted model
reports `DEFAULT_SCRIPT_WINDOW`; `"fenced": true` beside them makes the scripted model
behave like the small local one: no native tools, fenced code, text FINAL):

    "assistant text, may hold ```python fenced blocks```"
    {"content": "text", "tool_calls": [{"name": "python", "arguments": {"code": "..."}}]}
    {"error": "overflow" | "rate_limit" | "auth" | "server" | "timeout", "message": "..."}

Any object may carry "usage": {"input_tokens": N, "output_tokens": M}; without it the seam
counts with tiktoken. A reply object may carry "finish_reason" ("stop", "length", ...) to
replay how a provider ended (e.g. `{"content": "", "finish_reason": "length", "usage":
{"input_tokens": 127000, "output_tokens": 0}}` is a provider's silent overflow). The position is per model instance and a retry consumes a reply
(so `[{"error": "rate_limit"}, "ok"]` is "fails once, then succeeds"). When the replies
run out the next request raises `ScriptExhausted`; a reply is never chosen by looking at
the prompt.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm.errors import ConfigError, ScriptExhausted

DEFAULT_SCRIPT_WINDOW = 128_000  # scripted models: a common hosted window, unless declared
ERROR_KINDS = ("overflow", "rate_limit", "auth", "server", "timeout")


@dataclass
class Reply:
    content: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    message: str = ""
    usage: dict[str, int] | None = None
    finish_reason: str | None = None  # None: "tool_calls" with calls, else "stop"


def _usage(item: dict[str, Any], where: str) -> dict[str, int] | None:
    usage = item.get("usage")
    if usage is None:
        return None
    ok = isinstance(usage, dict) and all(
        k in ("input_tokens", "output_tokens") and isinstance(v, int) and not isinstance(v, bool)
        for k, v in usage.items()
    )
    if not ok:
        raise ConfigError(f"{where}: usage must be {{'input_tokens': int, 'output_tokens': int}}")
    return dict(usage)


def _tool_calls(raw: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: tool_calls must be a list")
    calls = []
    for j, call in enumerate(raw):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ConfigError(f"{where}: tool_calls[{j}] needs a string 'name'")
        args = call.get("arguments", {})
        if isinstance(args, str):  # allow the provider's JSON-string form too
            try:
                args = json.loads(args)
            except ValueError as e:
                raise ConfigError(f"{where}: tool_calls[{j}].arguments is not JSON") from e
        if not isinstance(args, dict):
            raise ConfigError(f"{where}: tool_calls[{j}].arguments must be an object")
        calls.append((call["name"], args))
    return calls


def parse_reply(item: Any, where: str) -> Reply:
    """One script item -> Reply; ConfigError naming `where` when it has the wrong shape."""
    if isinstance(item, str):
        return Reply(content=item)
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: a reply is a string or an object, not {type(item).__name__}")
    usage = _usage(item, where)
    if "error" in item:
        kind = item["error"]
        if kind not in ERROR_KINDS:
            raise ConfigError(f"{where}: error must be one of {', '.join(ERROR_KINDS)}")
        message = item.get("message") or f"scripted {kind} error"
        return Reply(error=kind, message=str(message), usage=usage)
    content = item.get("content") or ""
    if not isinstance(content, str):
        raise ConfigError(f"{where}: content must be a string")
    finish = item.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise ConfigError(f"{where}: finish_reason must be a string such as \"length\"")
    return Reply(
        content=content,
        tool_calls=_tool_calls(item.get("tool_calls"), where),
        usage=usage,
        finish_reason=finish,
    )


def parse_script(items: Any, source: str) -> list[Reply]:
    if not isinstance(items, list):
        raise ConfigError(f"{source}: a script is a JSON list of replies")
    return [parse_reply(item, f"{source} reply {i + 1}") for i, item in enumerate(items)]


@dataclass
class Script:
    replies: list[Reply]
    window: int | None = None  # the context window the script declares (None: the default)
    fenced: bool = False  # the script plays a fenced-code model (like `local`)


def load_script(path: str | Path) -> list[Reply]:
    return read_script(path).replies


def read_script(path: str | Path) -> Script:
    """A script file: its replies and the window it declares."""
    p = Path(path)
    try:
        items = json.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"script file {p} does not exist; `script:PATH` needs a JSON list"
        ) from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read script {p}: {e}") from e
    window, fenced = None, False
    if isinstance(items, dict):
        fenced = items.get("fenced") is True
        window = items.get("window")
        if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            raise ConfigError(f"{p}: a script object declares \"window\" as a positive whole "
                              "number of tokens, beside its \"replies\" list")
        items = items.get("replies")
    return Script(parse_script(items, str(p)), window, fenced)


class ReplyQueue:
    """The replies of one model instance; thread-safe (llm_query_batched shares one)."""

    def __init__(self, replies: list[Reply], source: str) -> None:
        self.replies = list(replies)
        self.source = source
        self.position = 0
        self._lock = threading.Lock()

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def take(self) -> int:
        """Claim the next reply's index; ScriptExhausted when there is none."""
        with self._lock:
            if self.position >= len(self.replies):
                n = len(self.replies)
                raise ScriptExhausted(
                    f"script {self.source} has {n} repl{'y' if n == 1 else 'ies'}; "
                    f"reply {self.position + 1} was requested. Add replies to the script."
                )
            self.position += 1
            return self.position - 1
