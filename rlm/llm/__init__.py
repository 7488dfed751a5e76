"""The model seam. `get_llm(spec)` builds an LLM; token counting works offline.

Importing this package does not import litellm (that takes seconds and may touch the
network); only rlm.llm.seam does, on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlm.llm import offline  # noqa: F401 - first: litellm's offline settings
from rlm.llm.tokens import count_message, count_messages, count_text, count_tokens
from rlm.llm.types import LLM, PYTHON_TOOL, Completion, ToolCall, Usage

if TYPE_CHECKING:
    from rlm.config import Config


def get_llm(spec: str, config: Config | None = None) -> LLM:
    """Build the model for `spec` (litellm string, `script:PATH`, `local[:PATH.gguf]`)."""
    from rlm.llm.providers import get_llm as _get_llm

    return _get_llm(spec, config)


def __getattr__(name: str) -> Any:
    if name == "ScriptedLLM":
        from rlm.llm.inproc_models import ScriptedLLM

        return ScriptedLLM
    if name == "LiteLLMModel":
        from rlm.llm.seam import LiteLLMModel

        return LiteLLMModel
    raise AttributeError(name)


__all__ = [
    "LLM",
    "PYTHON_TOOL",
    "Completion",
    "ToolCall",
    "Usage",
    "count_message",
    "count_messages",
    "count_text",
    "count_tokens",
    "get_llm",
    "ScriptedLLM",
    "LiteLLMModel",
]
