"""The embedded offline model: llama.cpp in-process, an in-process provider of the seam.

This module imports `llama_cpp` (never litellm), and only `rlm.llm.inproc_models`
imports it, lazily, when a `local` / `local:PATH.gguf` spec is used; hosted-model users
never load llama.cpp. The seam's `LocalModel` calls `handler.streaming(...)`, which yields
rlm.llm.inproc chunks, so the loop sees the local model exactly like any other model
(streaming, usage counts, error mapping).

    handler = make_handler(None, config)            # bundled Qwen2.5-Coder-1.5B (verified)
    handler = make_handler("/m/x.gguf", config)     # any GGUF; "#sha256=HEX" to verify it

Runtime rules:
- One `LocalModel` per (file, n_ctx) per process, loaded on first call (or `.load()`),
  `n_threads = os.cpu_count()`, one lock around the `Llama` object. `n_ctx` is
  `--context-window` when given (RLM_LOCAL_N_CTX is then ignored), else RLM_LOCAL_N_CTX,
  else 8192: the window loaded is always the one compaction is sized to.
- A call pays only for the tokens it adds. The agent's projection is append-only and
  byte-stable, and the prompt is rendered and tokenized deterministically, so llama.cpp's
  KV cache keeps the previous prompt (and the reply it generated) and evaluates only the
  new suffix (llama-cpp-python's longest-common-prefix match; we never `reset()`).
  A call from another conversation (an llm_query sub-call, a compaction summary) would
  overwrite that cache, so before such a call the current state is saved (KV bytes and
  token ids, not the 300 MB logits buffer `Llama.save_state` copies) and a later call that
  extends a saved state loads it back (`StateSlots`, at most `MAX_SLOTS` conversations).
  A process's first call starts from the system prompt's state an earlier run kept on
  disk (rlm.llm.local_prefix), or evaluates the system prompt first and keeps its state.
  Greedy output is repeatable for the same sequence of calls; evaluating a suffix instead
  of the whole prompt can change float rounding, so a reply may differ from a cold call's
  in rare near-ties. `LocalModel.reuse = False` restores the old reset-per-call behaviour
  (bench/bench_local.py measures both). `last_call` holds each call's token accounting.
- Temperature comes from the call; when the caller leaves it unset we use 0 (greedy).
  `max_tokens` defaults to 1024 so a looping small model cannot run for minutes.
- The chat prompt is rendered with the GGUF's own chat template; prompts that do not fit
  `n_ctx` raise `inproc.ContextWindowExceededError` (the seam maps it to
  `ContextOverflow`) before any generation starts.
- Generation stops where the model starts inventing the next turn (`TURN_STOPS`), on top
  of the template's end-of-turn token and any `stop` the caller passes.
- A call that offers the python tool (an agent's turn) is sampled under the reply grammar
  (rlm.llm.reply_grammar: one fenced cell or FINAL; a call requiring the tool: the cell),
  unless config `local_grammar` is off;
  the grammar acts on sampling only, so the prompt and its KV-cache reuse are unchanged.
- `verbose=False`; every loaded model is closed at exit, so shutdown prints nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm.errors import ModelError
from rlm.llm import inproc, modelfile, reply_grammar, types
from rlm.llm.local_prefix import Prefix, PrefixStore, common_prefix, identity

PROVIDER = "rlm_local"
PREFIX_DIR = "local-prefix"  # under $RLM_HOME/cache: system prompts' states (local_prefix)
BUNDLED_NAME = modelfile.MODEL_FILENAME.removesuffix(".gguf")
DEFAULT_N_CTX = modelfile.DEFAULT_N_CTX
DEFAULT_MAX_TOKENS = 1024
DEFAULT_SEED = 0
# The small model, having seen the worked example, tends to keep writing the conversation
# itself (a fake "User:" turn with invented cell output, then an answer). Stop there: what
# comes after a reply's own turn is never something we should run or believe.
TURN_STOPS = types.TURN_STOPS


MAX_SLOTS = 2  # saved conversations besides the live one (~28 KB of KV per token each)
MIN_SAVE_TOKENS = 256  # a state that would lose fewer cached tokens is not worth saving
MIN_PREFIX_TOKENS = 64  # a shorter system prompt is not kept between runs


@dataclass
class Prepared:
    """A rendered prompt, ready to generate from."""

    prompt: str
    stop: list[str]
    n_prompt: int
    max_tokens: int
    tokens: list[int] = field(default_factory=list)
    system: list[dict[str, str]] = field(default_factory=list)  # the leading system turns


@dataclass
class CallStats:
    """Token accounting for one generate() call, from llama.cpp's own eval calls."""

    prompt_tokens: int
    evaluated: int  # prompt tokens llama.cpp decoded for this call
    restored: bool  # a saved conversation state was loaded first
    saved: bool  # the live state was saved before this call overwrote it
    from_disk: bool = False  # the system prompt's state came from an earlier run
    kept: bool = False  # the system prompt's state was saved for later runs

    @property
    def reused(self) -> int:
        return self.prompt_tokens - self.evaluated


def cpu_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True on a CPU with Intel AMX tiles. There llama.cpp (0.3.x) repacks the weights for
    AMX and its first decode segfaults (seen on Xeon with amx_tile, q4_K/q6_K weights)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "amx_tile" in line.split()
    except OSError:
        pass
    return False


_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def _model_params(*, extra_buffers: bool) -> Iterator[None]:
    """Load-time llama.cpp model params that `Llama()` does not expose: with
    extra_buffers=False the weights stay in plain CPU buffers (no AMX or repacked
    layouts; what llama.cpp's --no-repack does)."""
    if extra_buffers:
        yield
        return
    import llama_cpp.llama as llama_mod

    with _PARAMS_LOCK:
        lib = llama_mod.llama_cpp
        default = lib.llama_model_default_params

        def params() -> Any:
            p = default()
            p.use_extra_bufts = False
            return p

        lib.llama_model_default_params = params
        try:
            yield
        finally:
            lib.llama_model_default_params = default


class StateSlots:
    """Saved llama.cpp states of other conversations, most recently used last.

    The KV bytes come from `llama_state_get_data` (used cells only); the token ids say
    which prompt they belong to, so the longest-prefix rule picks the slot to restore.
    """

    def __init__(self, max_slots: int = MAX_SLOTS) -> None:
        self.max_slots = max_slots
        self.slots: list[Prefix] = []

    def best(self, tokens: Sequence[int]) -> tuple[int, Prefix | None]:
        found: tuple[int, Prefix | None] = (0, None)
        for slot in self.slots:
            n = common_prefix(slot.tokens, tokens)
            if n > found[0]:
                found = (n, slot)
        return found

    def save(self, llm: Any) -> None:
        state = state_of(llm)
        tokens = state.tokens
        # a saved state that this one extends (same conversation, earlier turn) is stale
        self.slots = [s for s in self.slots if common_prefix(s.tokens, tokens) < len(s.tokens)]
        self.slots.append(state)
        del self.slots[: -self.max_slots]

    def load(self, llm: Any, slot: Prefix) -> None:
        self.slots.remove(slot)
        if not restore_state(llm, slot):
            raise ModelError("llama.cpp could not restore a saved model state")
        self.slots.append(slot)


def state_of(llm: Any) -> Prefix:
    """The live state: its KV bytes (used cells only) and the token ids they hold."""
    import llama_cpp

    tokens = [int(t) for t in llm.input_ids[: llm.n_tokens]]
    size = llama_cpp.llama_state_get_size(llm._ctx.ctx)
    buf = (ctypes.c_uint8 * int(size))()
    n = llama_cpp.llama_state_get_data(llm._ctx.ctx, buf, size)
    return Prefix(tokens, ctypes.string_at(buf, int(n)))


def restore_state(llm: Any, saved: Prefix) -> bool:
    """Make `saved` the live state; False (and an empty cache) when llama.cpp refuses it."""
    import llama_cpp

    buf = (ctypes.c_uint8 * len(saved.data)).from_buffer_copy(saved.data)
    if llama_cpp.llama_state_set_data(llm._ctx.ctx, buf, len(saved.data)) != len(saved.data):
        llm.reset()  # whatever the cache holds now, nothing may reuse it
        return False
    n = len(saved.tokens)
    llm.input_ids[:n] = saved.tokens
    llm.n_tokens = n
    llm._requires_eval = True  # logits must come from a live decode before sampling
    return True


class _TokenCounter:
    """A llama.cpp stopping criterion that never stops: counts sampled tokens exactly.

    It sees the ids before each sampled token; llama-cpp-python may call it twice for the
    last one, so we count distinct positions rather than calls.
    """

    def __init__(self) -> None:
        self.first: int | None = None
        self.last = 0

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        n = len(input_ids)
        if self.first is None:
            self.first = n
        self.last = max(self.last, n)
        return False

    @property
    def sampled(self) -> int:
        return 0 if self.first is None else self.last - self.first + 1


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _as_list(stop: Any) -> list[str]:
    if not stop:
        return []
    return [stop] if isinstance(stop, str) else [str(s) for s in stop]


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Plain role/content pairs for a model without tool calling.

    Tool results become user turns (the small-model protocol shows cell output as the next
    user message); tool-call metadata is dropped (the code is already in the content).
    """
    out = []
    for m in messages:
        role = m.get("role", "user")
        content = _text(m.get("content"))
        if role == "tool":
            role = "user"
        elif role not in ("system", "user", "assistant"):
            role = "user"
        out.append({"role": role, "content": content})
    return out


class LocalModel:
    """One llama.cpp model: lazy load, one lock, KV cache kept across calls, close at exit."""

    def __init__(self, path: Path, *, n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None):
        self.path = path
        self.n_ctx = n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.lock = threading.Lock()
        self.load_seconds: float | None = None
        self.reuse = True  # keep the KV cache across calls (False: reset before each call)
        self.slots = StateSlots()
        self.last_call: CallStats | None = None
        self._llm: Any = None
        self._formatter: Any = None
        self._evals: list[tuple[int, int]] = []  # llama.cpp eval calls: (start, n tokens)
        self.ident: str | None = None  # what a state saved on disk is valid for (at load)
        self._system_tokens: dict[str, list[int]] = {}  # a system prompt's tokens, alone
        self._grammars: dict[str, Any] = {}  # the reply grammar's forms, compiled on first use

    def load(self) -> Any:
        """Load the model if needed (thread-safe); returns the `Llama` object."""
        if self._llm is None:
            with self.lock:
                if self._llm is None:
                    self._load_locked()
        return self._llm

    def _load_locked(self) -> None:
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise ModelError(
                "llama-cpp-python is not installed, which the offline model needs: "
                "pip install 'rlm[local]'"
            ) from None
        evals = self._evals

        class _CountingLlama(Llama):  # type: ignore[misc]
            def eval(self, tokens: Any) -> None:
                evals.append((self.n_tokens, len(tokens)))
                super().eval(tokens)

            def _init_sampler(self, *args: Any, **kwargs: Any) -> Any:
                grammar = kwargs.get("grammar")
                if isinstance(grammar, reply_grammar.GreedyGrammar):  # greedy, checked
                    from llama_cpp import _internals  # one token at a time

                    sampler = _internals.LlamaSampler()
                    sampler.add_custom(grammar.apply)
                    sampler.add_greedy()
                    return sampler
                return super()._init_sampler(*args, **kwargs)

        t0 = time.perf_counter()
        try:
            with _model_params(extra_buffers=not cpu_has_amx()):
                llm = _CountingLlama(
                    model_path=str(self.path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                    n_threads_batch=self.n_threads, seed=DEFAULT_SEED, verbose=False,
                )
        except (ValueError, RuntimeError) as e:
            raise ModelError(f"llama.cpp could not load {self.path}: {e}") from e
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            llm.close()
            raise ModelError(f"{self.path} has no chat template; use an instruct/chat GGUF")
        eos, bos = llm.token_eos(), llm.token_bos()
        vocab = llm._model
        self._formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=vocab.token_get_text(eos) if eos != -1 else "",
            bos_token=vocab.token_get_text(bos) if bos != -1 else "",
            stop_token_ids=[eos],
        )
        self._llm = llm
        self.load_seconds = time.perf_counter() - t0
        with contextlib.suppress(OSError):
            import llama_cpp

            self.ident = identity(self.path, self.n_ctx, llama_cpp.__version__,
                                  not cpu_has_amx())

    def prepare(
        self, messages: list[dict[str, Any]], max_tokens: int | None, stop: Any = None
    ) -> Prepared:
        """Render and count the prompt; raise ContextWindowExceededError if it cannot fit."""
        llm = self.load()
        plain = normalize_messages(messages)
        resp = self._formatter(messages=plain)
        tokens = llm.tokenize(resp.prompt.encode("utf-8"), add_bos=True, special=True)
        n_prompt = len(tokens)
        want = max_tokens if max_tokens and max_tokens > 0 else DEFAULT_MAX_TOKENS
        room = self.n_ctx - n_prompt
        if room < 16:
            raise inproc.ContextWindowExceededError(
                f"prompt of {n_prompt} tokens does not fit the local model's "
                f"{self.n_ctx}-token window", self.path.name)
        stops = [*_as_list(resp.stop), *TURN_STOPS, *_as_list(stop)]
        system = list(itertools.takewhile(lambda m: m["role"] == "system", plain))
        return Prepared(resp.prompt, list(dict.fromkeys(stops)), n_prompt, min(want, room),
                        list(tokens), system)

    def _select_state(self, llm: Any, prep: Prepared, prefixes: PrefixStore | None
                      ) -> CallStats:
        """Make the live KV state the best start for the prompt: keep it, or save it and
        load the saved conversation this prompt extends; else, on a first call, the system
        prompt's state an earlier run saved (`prefixes`), or evaluate the system prompt and
        save its state for later runs. Returns the call's stats so far."""
        tokens = prep.tokens
        live = common_prefix(llm.input_ids[: llm.n_tokens].tolist(), tokens)
        stats = CallStats(prep.n_prompt, 0, False, False)
        if llm.n_tokens - live >= MIN_SAVE_TOKENS:  # this call would overwrite that much
            self.slots.save(llm)  # may evict the oldest slot: choose among what is left
            stats.saved = True
        n_slot, slot = self.slots.best(tokens)
        if slot is not None and n_slot > live:
            self.slots.load(llm, slot)
            stats.restored, live = True, n_slot
        if prefixes is None or self.ident is None:
            return stats
        k = common_prefix(self._system_prompt_tokens(llm, prep.system), tokens)
        if live >= k or k < MIN_PREFIX_TOKENS or k >= len(tokens) - 1:
            return stats  # the system prompt is in the cache already, or there is none
        n_disk, found = prefixes.find(self.ident, tokens)
        if found is not None and n_disk > live:
            if restore_state(llm, found):
                stats.from_disk, live = True, n_disk
            else:
                live = 0  # llama.cpp refused it: the cache is empty now
        if live < k:  # nothing kept for this system prompt: evaluate it, keep its state
            llm.n_tokens = live  # eval drops what is cached past the shared start
            llm.eval(tokens[live:k])
            prefixes.keep(self.ident, state_of(llm))
            stats.kept = True
        return stats

    def _system_prompt_tokens(self, llm: Any, system: list[dict[str, str]]) -> list[int]:
        """The tokens of the system turns rendered alone (their start is the prompt's)."""
        key = json.dumps(system)
        found = self._system_tokens.get(key)
        if found is None:
            text = self._formatter(messages=system).prompt if system else ""
            found = [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=True,
                                                   special=True)] if text else []
            if len(self._system_tokens) >= 4:
                self._system_tokens.clear()
            self._system_tokens[key] = found
        return found

    def generate(
        self, prep: Prepared, *, temperature: float | None, seed: int | None,
        prefixes: PrefixStore | None = None, form: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Stream inproc chunks; the last one carries finish_reason and exact usage.
        `prefixes`: where system prompts' states are kept between runs (None: nowhere);
        `form`: the reply is sampled under that form of rlm.llm.reply_grammar
        ("cell_or_answer", "cell"); None: free text."""
        from llama_cpp import StoppingCriteriaList

        counter = _TokenCounter()
        with self.lock:
            llm = self._llm
            temp = 0.0 if temperature is None else float(temperature)
            grammar: Any = None
            if form is not None:
                text = reply_grammar.FORMS[form]
                if form not in self._grammars:
                    self._grammars[form] = reply_grammar.check(llm, text)
                grammar = reply_grammar.GreedyGrammar(llm, text) if temp == 0 \
                    else self._grammars[form]
            self._evals.clear()
            stats = CallStats(prep.n_prompt, 0, False, False)
            if self.reuse:
                stats = self._select_state(llm, prep, prefixes)
            else:
                llm.reset()
            stream = llm.create_completion(
                prep.tokens,
                max_tokens=prep.max_tokens,
                temperature=temp,
                seed=DEFAULT_SEED if seed is None else int(seed),
                stop=prep.stop,
                stream=True,
                stopping_criteria=StoppingCriteriaList([counter]),
                grammar=grammar,
            )
            finish = "stop"
            try:
                for chunk in stream:
                    choice = chunk["choices"][0]
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                    if choice["text"]:
                        yield inproc.chunk(choice["text"])
            finally:
                if isinstance(grammar, reply_grammar.GreedyGrammar):
                    stream.close()  # its sampler calls the grammar until it is closed
                    grammar.close()
            n = prep.n_prompt
            stats.evaluated = sum(max(0, min(a + k, n) - a) for a, k in self._evals if a < n)
            self.last_call = stats
        # An end-of-generation token is sampled (and counted) but is not output. (A stop
        # string also ends with finish "stop"; then we under-count by one token.)
        n_out = max(0, counter.sampled - (1 if finish == "stop" else 0))
        yield inproc.chunk(
            finished=True, finish_reason=finish,
            usage={"prompt_tokens": prep.n_prompt, "completion_tokens": n_out,
                   "total_tokens": prep.n_prompt + n_out})

    def close(self) -> None:
        with self.lock:
            if self._llm is not None:
                self._llm.close()
                self._llm = None


# -- process-wide registry -----------------------------------------------------------------

_MODELS: dict[str, LocalModel] = {}
_REGISTRY_LOCK = threading.Lock()


def _close_all() -> None:
    for model in list(_MODELS.values()):
        try:
            model.close()
        except Exception:  # noqa: BLE001 - exiting: nothing useful to do with it
            pass


atexit.register(_close_all)


def _model_key(path: Path, bundled: bool, n_ctx: int) -> str:
    if bundled:
        base = BUNDLED_NAME
    else:
        base = f"{path.stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    return base if n_ctx == DEFAULT_N_CTX else f"{base}@{n_ctx}"


def get_model(key: str) -> LocalModel:
    try:
        return _MODELS[key]
    except KeyError:
        raise ModelError(f"no local model registered as {key!r}; build it with make_handler") from None


# -- the seam's provider --------------------------------------------------------------------


class LocalHandler:
    """Serves one registered local model (by key) to the seam's `LocalModel`.

    Which replies are legal is this provider's policy: a call that offers the python tool
    is an agent's turn, and with `grammar` (config `local_grammar`) its reply is sampled
    under rlm.llm.reply_grammar (one fenced cell or a FINAL answer; only the cell when the
    call requires the tool, `tool_choice="required"`). Other calls (summaries, sub-calls,
    the advisor) offer no tool and stay free text."""

    def __init__(self, default_key: str, prefixes: PrefixStore | None = None,
                 grammar: bool = True):
        self.default_key = default_key
        self.prefixes = prefixes  # system prompts' states kept between runs
        self.grammar = grammar

    @property
    def model_name(self) -> str:
        return f"{PROVIDER}/{self.default_key}"

    @property
    def model(self) -> LocalModel:
        return get_model(self.default_key)

    def streaming(self, model: str, messages: list, *args: Any, **kwargs: Any
                  ) -> Iterator[dict[str, Any]]:
        """The reply as inproc chunks; an overflow is raised before anything streams."""
        params = kwargs.get("optional_params") or {}
        local = self.model
        prep = local.prepare(messages, params.get("max_tokens"), params.get("stop"))
        turn = any((t.get("function") or {}).get("name") == "python"
                   for t in params.get("tools") or ())
        form = None if not (self.grammar and turn) else \
            "cell" if params.get("tool_choice") == "required" else "cell_or_answer"
        return local.generate(prep, temperature=params.get("temperature"),
                              seed=params.get("seed"), prefixes=self.prefixes, form=form)


N_CTX_ENV = modelfile.N_CTX_ENV


def _n_ctx(config: Any) -> int:
    return modelfile.local_n_ctx(config)


def make_handler(model_path: str | None, config: Any) -> LocalHandler:
    """The handler for `local` (model_path None) or `local:PATH.gguf[#sha256=HEX]`.

    Verifies the file now (joining the bundled parts on first use); loads it lazily.
    """
    home = getattr(config, "home", None)
    if model_path:
        path, bundled = modelfile.check_user_model(model_path, home), False
    else:
        path, bundled = modelfile.ensure_model(home, modelfile.TerminalProgress(
            "preparing the offline model file (joined once, on first use)")), True
    n_ctx = _n_ctx(config)
    key = _model_key(path, bundled, n_ctx)
    with _REGISTRY_LOCK:
        if key not in _MODELS:
            _MODELS[key] = LocalModel(path, n_ctx=n_ctx)
    return LocalHandler(key, PrefixStore(Path(home) / "cache" / PREFIX_DIR) if home else None,
                        grammar=bool(getattr(config, "local_grammar", True)))
