"""The model seam: the ONLY module that imports litellm, lazily, offline settings first.

`get_llm(spec, config)` (rlm.llm.providers) builds one of:
- a litellm string (`openai/...`, `anthropic/...`, `ollama/...`, `hosted_vllm/...`) ->
  `LiteLLMModel`: streamed `litellm.completion` with usage; native tool calling when
  litellm says the model supports it, else fenced-code mode (`native_tools=False`); an
  OpenAI model from litellm's map -> `OpenAIModel` (over rlm.llm.direct), which sends the
  requests litellm would send unchanged itself and the rest through litellm;
- `script:PATH` -> `ScriptedLLM` (replies from rlm.llm.script) and `local` /
  `local:PATH.gguf` -> `LocalModel` (rlm.llm.local, fenced-code mode): in-process
  providers (`InProcessLLM`, rlm.llm.inproc_models). They stream rlm.llm.inproc chunks
  into the same assembly, retries and error classification as a hosted model's stream,
  without importing litellm (about 4 s of every run's start, for a model that sends no
  request).

Here: `SeamLLM`, the base every model kind shares (`complete`, retries, the silent
overflow), the hosted models, litellm's import (`_litellm`, `warm_litellm`, `warm_for`),
retry notices and `usage_cost`. The stream assembly and reply cap are rlm.llm.assemble;
the error mapping (`normalize_error`, `key_env`) is rlm.llm.errormap.

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
import random
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from rlm import durability
from rlm.errors import ConfigError, ContextOverflow, RateLimited, RlmError
from rlm.llm import direct, inproc, modelmap, offline
from rlm.llm.assemble import assemble, cleaning, cleaning_call, from_response
from rlm.llm.errormap import normalize_error
from rlm.llm.types import (
    PYTHON_TOOL,
    TURN_STOPS,
    CallStreamCallback,
    Completion,
    StreamCallback,
    clean_completion,
    copy_message,
)

if TYPE_CHECKING:
    from rlm.config import Config

_import_lock = threading.Lock()
SILENT_OVERFLOW_FRACTION = 0.99
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


# -- the base: retries, the silent overflow, litellm's call -----------------------------------


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
            on_text = cleaning(on_text)
        if on_call is not None:
            on_call = cleaning_call(on_call)
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
            completion = from_response(response, self.spec)
            if on_text is not None and completion.content:
                on_text(completion.content)  # one piece: renderers still show the text
            return completion
        return assemble(response, on_text, streamed, self.spec, on_call=on_call)


# -- hosted models ----------------------------------------------------------------------------


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
        return assemble(chunks, on_text, streamed, self.spec, on_call=on_call)


__all__ = ["LiteLLMModel", "OpenAIModel", "SeamLLM"]


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
