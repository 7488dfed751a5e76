"""The model seam's vocabulary. Everything above the seam speaks only these types."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


def copy_message(m: dict[str, Any]) -> dict[str, Any]:
    """A message a provider may change in place (litellm's do), leaving the host's intact:
    the dict and its tool calls copied, the strings shared."""
    out = dict(m)
    if "tool_calls" in out:
        out["tool_calls"] = [{**tc, "function": dict(tc.get("function") or {})}
                             for tc in out["tool_calls"]]
    return out


def clean_text(text: str) -> str:
    """`text` as valid Unicode: a surrogate pair written as two code units joined, every
    lone surrogate (`"\\ud800"`, which no encoder takes: the log, the terminal and the
    kernel would each fail on it) replaced by U+FFFD. A model's reply is cleaned once,
    where it enters the host (`clean_completion`, the seam's stream callbacks)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_value(value: Any) -> Any:
    """`clean_text` through a decoded JSON value (a tool call's arguments): keys too."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_value(k): clean_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_value(v) for v in value]
    return value


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    synthetic: bool = False  # parsed from a fenced code block, not native tool calling

    def to_message(self) -> dict[str, Any]:
        import json

        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)  # asdict of four ints, without its walk (twice a step)


@dataclass
class Completion:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = "stop"


def clean_completion(c: Completion) -> Completion:
    """A reply as the host may keep it: every string valid Unicode (`clean_text`)."""
    c.content = clean_text(c.content)
    for call in c.tool_calls:
        call.id, call.name = clean_text(call.id), clean_text(call.name)
        call.arguments = clean_value(call.arguments)
    return c


StreamCallback = Callable[[str], None]
# a native tool call's argument text as it streams: (the call's index, the new piece)
CallStreamCallback = Callable[[int, str], None]

# Where a model that writes fenced code starts inventing the next turn (a fake "User:"
# message, made-up cell output): the seam passes these as stop strings, and the parser
# cuts a reply there when a provider ignores them. rlm.session.context writes the real
# "Output of cell [k]:" turns.
TURN_STOPS = ["\nUser:", "\nOutput of cell ["]


class LLM(Protocol):
    """What the loop, compaction and recursion call. Built by rlm.llm.get_llm(spec)."""

    spec: str
    native_tools: bool  # False: the model writes fenced code blocks instead of tool calls

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_text: StreamCallback | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_call: CallStreamCallback | None = None,
        seed: int | None = None,  # a draw of its own (candidates); None: the provider's
        tool_choice: str | None = None,  # "required": the reply must call a tool offered
    ) -> Completion: ...

    def context_window(self) -> int | None: ...


PYTHON_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "python",
        "description": (
            "Run Python code in the persistent IPython kernel. Variables persist between "
            "calls. Returns stdout, stderr, the value of the last expression and errors."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python source"}},
            "required": ["code"],
        },
    },
}
