"""The model a run uses when none is configured: `local`, unless a provider key is set."""

from __future__ import annotations

import os
from dataclasses import replace

from rlm.config import Config

# Provider keys and the model used when one is set but no model is configured.
_KEY_DEFAULTS = (
    ("OPENAI_API_KEY", "openai/gpt-4o-mini"),
    ("ANTHROPIC_API_KEY", "anthropic/claude-3-5-haiku-latest"),
    ("GEMINI_API_KEY", "gemini/gemini-2.0-flash"),
    ("OPENROUTER_API_KEY", "openrouter/openai/gpt-4o-mini"),
)


def default_model() -> str:
    """`local` unless a provider key is set; then that provider's small model."""
    for key, model in _KEY_DEFAULTS:
        if os.environ.get(key):
            return model
    return "local"


def resolve_model(config: Config) -> Config:
    return config if config.model else replace(config, model=default_model())
