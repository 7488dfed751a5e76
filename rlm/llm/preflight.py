"""Check the model before anything else: a start that cannot reach its model fails in
well under a second, with one line naming the fix, before a session exists.

`preflight(spec, config)` (rlm.llm.providers: each provider's check, the ones here) is
offline and cheap: it never imports litellm (seconds) or
llama_cpp (most of a second), never touches the network and never hashes the 1.1 GB
model file.

- a hosted model (`openai/...`, `anthropic/...`, ...): its provider's key must be in the
  environment (`KEY_ENVS`; providers not listed, such as `ollama/` or `hosted_vllm/`,
  need none, and a bare model name litellm would have to guess is not checked);
- `local`: `llama_cpp` must be importable, and the joined model file must exist or its
  22 part packages must be installed (whether the file is intact is the sidecar's job at
  load time); `local:PATH.gguf`: the file exists and is a GGUF;
- `script:PATH`: the file exists and parses.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rlm.errors import AuthError, ConfigError, ModelError

if TYPE_CHECKING:
    from rlm.config import Config

# provider -> the env vars litellm reads its key from (any one of them will do)
KEY_ENVS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "openrouter": ("OPENROUTER_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY", "TOGETHER_AI_API_KEY", "TOGETHER_API_KEY"),
    "xai": ("XAI_API_KEY",),
    "cohere": ("COHERE_API_KEY", "CO_API_KEY"),
    "azure": ("AZURE_API_KEY", "AZURE_OPENAI_API_KEY"),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY"),
}
# bare model names whose provider is certain (litellm routes these without a prefix)
_BARE = (("gpt-", "openai"), ("chatgpt-", "openai"), ("o1", "openai"), ("o3", "openai"),
         ("o4-", "openai"), ("claude-", "anthropic"))
LOCAL_HINT = "or use a hosted model, e.g. --model openai/gpt-4o-mini with OPENAI_API_KEY set"


def provider_of(spec: str) -> str | None:
    """The provider a litellm model string names; None when only litellm could guess."""
    if "/" in spec:
        return spec.split("/", 1)[0]
    for prefix, provider in _BARE:
        if spec.startswith(prefix):
            return provider
    return None


def key_envs(spec: str) -> tuple[str, ...]:
    """The env vars that can hold `spec`'s key (empty: the provider needs none we know)."""
    provider = provider_of(spec)
    return KEY_ENVS.get(provider, ()) if provider else ()


def check_key(spec: str) -> None:
    """A hosted model's provider key is in the environment (any of `key_envs`)."""
    names = key_envs(spec)
    if names and not any(os.environ.get(n) for n in names):
        alt = f" (or {', '.join(names[1:])})" if len(names) > 1 else ""
        raise AuthError(f"{names[0]}{alt} is not set: export it, or use --model local")


def check_local(path: str | None, config: Config | None) -> None:
    """The offline model can load: llama_cpp importable, its file or parts present."""
    from rlm.llm import modelfile
    from rlm.paths import model_cache

    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError("llama_cpp is not installed, so --model local cannot run: "
                          f"pip install 'rlm[local]', {LOCAL_HINT}")
    if path:
        file, _ = modelfile.parse_local_path(path)
        if not file.is_file():
            raise ConfigError(f"local model file {file} does not exist; "
                              "pass --model local:PATH.gguf")
        with open(file, "rb") as f:
            if f.read(4) != modelfile.GGUF_MAGIC:
                raise ConfigError(f"{file} is not a GGUF file (llama.cpp needs a .gguf model)")
        return
    home: Path | None = config.home if config is not None else None
    # where ensure_model finds it: the shared cache, or an old home's models/ (adopted);
    # checked without creating anything (models_dir would make the cache directory)
    if (model_cache() / modelfile.MODEL_FILENAME).is_file() or modelfile.legacy_model_paths(home):
        return  # verified against its sidecar (or re-hashed) when it is loaded
    try:
        modelfile.part_paths()  # the parts it is joined from on first use
    except ModelError as e:
        raise ConfigError(f"{e}; {LOCAL_HINT}") from None


__all__ = ["KEY_ENVS", "check_key", "check_local", "key_envs", "provider_of"]
