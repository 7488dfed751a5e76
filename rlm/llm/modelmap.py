"""What a hosted model is, read from litellm's bundled model map without importing litellm.

Importing litellm takes about 4 s. Building a hosted model needs only two facts before
its first request: whether it calls tools natively, and its context window. Both come
from the JSON file litellm ships and reads itself offline
(`model_prices_and_context_window_backup.json`; `LITELLM_LOCAL_MODEL_COST_MAP` is set by
rlm.llm.offline). So `LiteLLMModel` reads them here and imports litellm in the background
while the kernel starts, and the first turn waits for the longer of the two, not both.

Only the plain spellings are answered (`openai/gpt-4o-mini`, `anthropic/claude-...`,
`gpt-4o`, `claude-...`) for providers whose facts litellm takes from that file alone;
anything else returns None and the caller asks litellm itself, as before.
`tests/test_modelmap.py` checks every answer against litellm's own, model by model.
`price` is what a run's usage cost, for the entries litellm prices from the two counts
alone, so the end of a hosted run needs no litellm either.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm.llm.preflight import provider_of

MAP_FILE = "model_prices_and_context_window_backup.json"
# providers whose chat models litellm describes from the static map alone (no per-provider
# lookup at run time, no region or deployment names); the test holds each answer to it
STATIC_PROVIDERS = frozenset({
    "openai", "anthropic", "gemini", "openrouter", "groq", "mistral", "deepseek", "xai",
    "together_ai",
})


@dataclass(frozen=True)
class ModelFacts:
    native_tools: bool  # litellm.supports_function_calling
    window: int | None  # get_model_info's max_input_tokens, else its max_tokens
    # litellm.supports_reasoning: litellm maps some parameters for these (max_tokens to
    # max_completion_tokens, temperature), so rlm.llm.direct leaves such requests to it
    reasoning: bool = False
    # supports_system_messages, said by the map (litellm sends a reasoning model's system
    # messages as user messages unless its entry says it takes them)
    system_messages: bool = False


@functools.lru_cache(maxsize=1)
def _entries() -> dict[str, Any]:
    """litellm's bundled map, or {} when litellm is not installed or the file is unreadable."""
    spec = importlib.util.find_spec("litellm")  # finds the package; imports nothing
    if spec is None or not spec.submodule_search_locations:
        return {}
    try:
        data = json.loads((Path(list(spec.submodule_search_locations)[0]) / MAP_FILE)
                          .read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _entry(spec: str) -> dict[str, Any] | None:
    """`spec`'s chat-model entry, looked up as litellm looks it up; None when only litellm
    itself can say (another provider, a name it has to resolve, not a chat model)."""
    provider = provider_of(spec)
    if provider is None or provider not in STATIC_PROVIDERS:
        return None
    name = spec.split("/", 1)[1] if "/" in spec and spec.startswith(f"{provider}/") else spec
    entries = _entries()
    for key in (f"{provider}/{name}", name):  # litellm's order: prefixed first, then bare
        entry = entries.get(key)
        if not isinstance(entry, dict) or entry.get("litellm_provider") != provider:
            continue
        return entry if entry.get("mode") == "chat" else None
    return None


def facts(spec: str) -> ModelFacts | None:
    """`spec`'s facts from the map; None when only litellm itself can say."""
    entry = _entry(spec)
    if entry is None:
        return None
    window = entry.get("max_input_tokens") or entry.get("max_tokens")
    return ModelFacts(native_tools=entry.get("supports_function_calling") is True,
                      window=int(window) if isinstance(window, int | float) else None,
                      reasoning=entry.get("supports_reasoning") is True,
                      system_messages=entry.get("supports_system_messages") is True)


def price(spec: str) -> tuple[float, float] | None:
    """USD per (input, output) token, as litellm's `cost_per_token` prices plain usage; None
    where its price depends on more than the two counts (tiers above a prompt size) or the
    map has none, and litellm itself has to say."""
    entry = _entry(spec)
    # prices that depend on more than the counts: above a prompt size, by the hour
    if entry is None or any("_above_" in key or key.endswith("_pricing") for key in entry):
        return None
    prices = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if not all(isinstance(p, int | float) and not isinstance(p, bool) for p in prices):
        return None
    return float(prices[0]), float(prices[1])  # type: ignore[arg-type]
