"""A hosted model's facts read from litellm's bundled map without importing litellm
(rlm.llm.modelmap) are litellm's own answers, model by model."""

from __future__ import annotations

import subprocess
import sys

from rlm.llm import modelmap


def _specs() -> set[str]:
    """Every map key, and its provider-prefixed spelling where the key has none."""
    specs = set()
    for key, entry in modelmap._entries().items():
        if not isinstance(entry, dict):
            continue
        specs.add(key)
        provider = entry.get("litellm_provider")
        if provider and not key.startswith(f"{provider}/"):
            specs.add(f"{provider}/{key}")
    return specs


def test_every_answer_from_the_map_is_litellms_own():
    from rlm.llm.seam import _litellm

    litellm = _litellm()
    answered, disagree = [], []
    for spec in sorted(_specs()):
        facts = modelmap.facts(spec)
        if facts is None:
            continue
        answered.append(spec)
        litellm.get_llm_provider(spec)  # a spelling the map answers is one litellm accepts
        info = litellm.get_model_info(spec)
        window = info.get("max_input_tokens") or info.get("max_tokens")
        theirs = (bool(litellm.supports_function_calling(spec)), int(window) if window else None)
        if theirs != (facts.native_tools, facts.window):
            disagree.append((spec, theirs, facts))
    assert len(answered) > 300, len(answered)  # the common providers' chat models
    assert {"openai/gpt-4o-mini", "gpt-4o-mini", "anthropic/claude-sonnet-4-5"} <= set(answered)
    assert disagree == []


def test_what_only_litellm_can_resolve_is_left_to_it():
    for spec in ("ollama/llama3", "hosted_vllm/my-model", "openai/rlm-no-such-model",
                 "fireworks_ai/accounts/fireworks/models/qwen3-8b",  # litellm's own rule
                 "openai/text-embedding-3-small",  # not a chat model
                 "my-bare-model"):
        assert modelmap.facts(spec) is None, spec


def test_reading_the_map_imports_no_litellm():
    code = ("import sys; from rlm.llm import modelmap; "
            "f = modelmap.facts('openai/gpt-4o-mini'); "
            "print(f.native_tools, f.window, 'litellm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "128000", "False"]


def test_every_price_from_the_map_is_litellms_own():
    """`price` answers where litellm's `cost_per_token` is the two counts times the map's
    prices, and nowhere else (tiers above a prompt size, prices by the hour)."""
    from rlm.llm.seam import _litellm, usage_cost

    litellm = _litellm()
    priced, disagree = 0, []
    for spec in sorted(_specs()):
        if modelmap.price(spec) is None:
            continue
        priced += 1
        for tokens in ((1_000, 500), (150_000, 9_000), (300_000, 20_000), (0, 0)):
            theirs = sum(litellm.cost_per_token(model=spec, prompt_tokens=tokens[0],
                                                completion_tokens=tokens[1]))
            mine = usage_cost(spec, *tokens)
            if mine is None or abs(mine - theirs) > 1e-12 * max(1.0, theirs):
                disagree.append((spec, tokens, mine, theirs))
    assert priced > 250, priced
    assert disagree == []
    assert modelmap.price("deepseek/deepseek-v4-pro") is None  # off-peak prices by the hour
    assert modelmap.price("ollama/llama3") is None
