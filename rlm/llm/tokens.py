"""Exact token counting with tiktoken, offline.

tiktoken downloads its encoding files on first use and this machine has no network. The
litellm wheel ships the cl100k_base and o200k_base files in
`litellm/litellm_core_utils/tokenizers/`, named as tiktoken's cache expects (sha1 of the
download URL). We locate that folder with `importlib.util.find_spec` (which does NOT
import litellm: importing it takes seconds and may reach the network) and point
`TIKTOKEN_CACHE_DIR` at it, unless the variable already names a folder holding the file.

`o200k_base` (GPT-4o family) is the default encoding: the counts steer compaction, so
they must be exact for number tables and base64, where chars/4 is 2-3x off. For other
providers they are a close estimate, which is what compaction needs.

Message counts follow OpenAI's chat accounting (3 tokens per message, 1 for a `name`,
3 to prime the reply). Per-message counts are cached in a bounded dict keyed by a hash of
the message's canonical JSON (never by `id()`, which is reused after garbage collection).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import operator
import os
import threading
from itertools import compress, count, islice
from pathlib import Path
from typing import Any

from rlm.errors import RlmError

DEFAULT_ENCODING = "o200k_base"
_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
_PER_MESSAGE = 3
_PER_NAME = 1
_REPLY_PRIMING = 3
_CACHE_MAX = 200_000
_message_cache: dict[bytes, int] = {}
# The same message object counted again (the session's incremental projection hands out
# the same dicts every turn, and they are never mutated): found by identity, without
# hashing its content. The entry keeps the object alive, so its id is not reused.
_SEEN_MAX = 4096
_seen: dict[int, tuple[dict[str, Any], int]] = {}


def _bundled_dir() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"


def _readable_file(path: Path) -> bool:
    """A file this process can open; an inherited TIKTOKEN_CACHE_DIR may name a folder of
    another user's (is_file() raises PermissionError there, and the run would end)."""
    try:
        return path.is_file() and os.access(path, os.R_OK)
    except OSError:
        return False


def _cache_key(name: str) -> str:
    return hashlib.sha1(_URLS[name].encode()).hexdigest()


_encodings: dict[str, Any] = {}
_encoding_lock = threading.Lock()
_warming: set[str] = set()


def get_encoding(name: str = DEFAULT_ENCODING) -> Any:
    """The tiktoken encoding `name`, loaded from local files only (once: a call while
    `warm_encoding`'s load runs waits for it instead of loading a second copy)."""
    enc = _encodings.get(name)
    if enc is None:
        with _encoding_lock:
            enc = _encodings.get(name)
            if enc is None:
                enc = _encodings[name] = _load_encoding(name)
    return enc


def _load_encoding(name: str) -> Any:
    _point_cache(name)
    import tiktoken

    return tiktoken.get_encoding(name)


def _point_cache(name: str) -> None:
    """Point TIKTOKEN_CACHE_DIR at the folder holding `name`'s file (rlm's own, or
    litellm's bundled one)."""
    if name not in _URLS:
        raise RlmError(f"unknown encoding {name!r}; use one of {', '.join(_URLS)}")
    key = _cache_key(name)
    current = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not (current and _readable_file(Path(current) / key)):
        bundled = _bundled_dir()
        if bundled is None or not (bundled / key).is_file():
            raise RlmError(
                f"tiktoken encoding {name} is not available offline: expected {key} in "
                f"litellm's tokenizers folder; reinstall litellm (pip install -e .)"
            )
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)


def warm_encoding(name: str = DEFAULT_ENCODING) -> None:
    """Load `name` in a background thread (once), beside what the caller does next (the
    kernel's start): the first prompt's count then finds it loaded instead of paying its
    ~0.3 s. A load that fails there fails again, with its error, at the first count. The
    interpreter's exit waits for it: a thread stopped inside an import can hold the lock."""
    if name in _encodings or name in _warming:
        return
    _warming.add(name)
    try:  # the environment is set on this thread, never beside a kernel's spawn
        _point_cache(name)
    except RlmError:
        return  # said, with the fix, at the first count

    def work() -> None:
        with contextlib.suppress(Exception):
            get_encoding(name)

    thread = threading.Thread(target=work, name="rlm-load-encoding", daemon=True)
    thread.start()
    atexit.register(thread.join)


# tiktoken's BPE is quadratic in the length of one pre-token (a run with no space: 20 MB
# of 'x' took 82 s), so long text is counted in pieces cut before a space (where the
# pre-tokenizer mostly cuts too: at most a token per piece differs) or, in a run with
# none, every RUN characters.
PIECE, RUN = 1 << 16, 1 << 12


def count_text(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Number of tokens in `text` (special-token strings count as plain text): exact up
    to 64 KB; longer text within a token per 64 KB piece (a 32 KB run with no space
    counts as pieces of 4 KB)."""
    if not text:
        return 0
    enc = get_encoding(encoding)
    if len(text) <= PIECE:
        return len(enc.encode(text, disallowed_special=()))
    total, pos = 0, 0
    while pos < len(text):
        end = min(pos + PIECE, len(text))
        if end < len(text):
            cut = text.rfind(" ", pos + PIECE // 2, end)
            end = cut if cut > pos else pos + RUN
        total += len(enc.encode(text[pos:end], disallowed_special=()))
        pos = end
    return total


def _message_text(message: dict[str, Any]) -> str:
    parts: list[str] = [str(message.get("role", ""))]
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):  # multi-part content: count the text parts
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        parts.append(str(fn.get("name", "")))
        parts.append(str(fn.get("arguments", "")))
    if message.get("tool_call_id"):
        parts.append(str(message["tool_call_id"]))
    return "\n".join(parts)


def count_message(message: dict[str, Any], encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens one chat message costs in a prompt, cached by identity (the same object,
    which callers never mutate) and by content hash."""
    default = encoding == DEFAULT_ENCODING
    if default:
        seen = _seen.get(id(message))
        if seen is not None and seen[0] is message:
            return seen[1]
    blob = json.dumps(message, sort_keys=True, default=str).encode()
    key = hashlib.blake2b(blob + encoding.encode(), digest_size=16).digest()
    n = _message_cache.get(key)
    if n is None:
        n = _PER_MESSAGE + count_text(_message_text(message), encoding)
        if message.get("name"):
            n += _PER_NAME
        if len(_message_cache) >= _CACHE_MAX:
            _message_cache.clear()
        _message_cache[key] = n
    if default:
        if len(_seen) >= _SEEN_MAX:
            _seen.clear()
        _seen[id(message)] = (message, n)
    return n


class RunningCount:
    """`count_message` summed over message lists that grow at their end, as a session's
    prompt does: the sums of the longest prefix a list shares, by identity, with the
    longest list counted before are reused, so a turn counts only its new messages
    (a compaction or a replaced result starts the sums again from where lists differ)."""

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] = []
        self._sums = [0]  # _sums[i]: the tokens of _messages[:i]

    def total(self, messages: list[dict[str, Any]]) -> int:
        old, sums = self._messages, self._sums
        # the first position where the lists differ, without copying either (C speed)
        k = next(compress(count(), map(operator.is_not, messages, old)),
                 min(len(old), len(messages)))
        if k == len(messages):  # a prefix of what was counted: served from the sums
            return sums[k]
        del sums[k + 1:], old[k:]  # `old` is this counter's own list
        for m in islice(messages, k, None):
            sums.append(sums[-1] + count_message(m))
            old.append(m)
        return sums[-1]


_running = threading.local()  # a RunningCount per thread: sessions are not shared across


def count_sum(messages: list[dict[str, Any]]) -> int:
    """`sum(count_message(m) for m in messages)` in the default encoding, in O(messages
    added since this thread's last count) for lists that grow at their end."""
    counter = getattr(_running, "counter", None)
    if counter is None:
        counter = _running.counter = RunningCount()
    return int(counter.total(messages))


def count_messages(messages: list[dict[str, Any]], encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens a whole prompt costs: the messages plus the reply priming."""
    if not messages:
        return 0
    if encoding == DEFAULT_ENCODING:
        return _REPLY_PRIMING + count_sum(messages)
    return _REPLY_PRIMING + sum(count_message(m, encoding) for m in messages)


def count_tokens(messages: list[dict[str, Any]] | str, encoding: str = DEFAULT_ENCODING) -> int:
    """`count_text` for a string, `count_messages` for a message list."""
    if isinstance(messages, str):
        return count_text(messages, encoding)
    return count_messages(messages, encoding)


# ----------------------------------------------------------- tokens -> characters
# The one place a token budget becomes characters (issue 59): a room to lay text out in
# or to cut it to, before it is counted. Prose runs about 4 characters a token in
# o200k_base; number tables and base64 run fewer, so a room is a first guess and the
# callers that must fit count the result (`tail_within`, rlm.memory.inject).
CHARS_PER_TOKEN = 4
DEFAULT_WINDOW = 32_768  # tokens, for a model that does not say its window


def chars_for(tokens: int) -> int:
    """Characters to lay out about `tokens` tokens of prose in (a first guess: count it)."""
    return max(0, int(tokens)) * CHARS_PER_TOKEN


def window_or_default(window: int | None) -> int:
    """The model's window, or DEFAULT_WINDOW for a model that does not say it."""
    return window or DEFAULT_WINDOW


def tail_within(text: str, tokens: int, encoding: str = DEFAULT_ENCODING) -> str:
    """The longest tail of `text` found that counts at most `tokens` tokens: cut to
    `chars_for(tokens)` characters, counted, and cut again smaller until it fits (text
    denser than prose is cut more). Never counts more than that room of characters."""
    if tokens <= 0:
        return ""
    room = min(len(text), chars_for(tokens))
    while room > 0:
        tail = text[len(text) - room:]
        n = count_text(tail, encoding)
        if n <= tokens:
            return tail
        room = min(room - 1, int(room * tokens / n * 0.95))
    return ""
