"""Which provider a model spec names, decided in one place: `provider(spec)`.

A provider is how rlm reaches a kind of model: the scripted replay (`script:PATH`), the
embedded offline model (`local`, `local:PATH.gguf`), an OpenAI model called directly
(rlm.llm.direct, when its rules apply), or any model litellm routes. Each says how to
build the model (`get_llm`), how to check it offline before a session exists
(`preflight`, with the checks of rlm.llm.preflight), which window it reports without being built, and whether it computes
in this process (no price to charge; no background checkpoint writer sharing it).

**Where a new provider goes:** a model class implementing `rlm.llm.types.LLM` (subclass
`rlm.llm.seam.SeamLLM` for its retries and error mapping), and one `Provider` in
`PROVIDERS` before the ones it must win over (litellm, last, takes every other spec).
Importing this module imports no provider's library: each builds lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlm.errors import ConfigError
from rlm.llm.preflight import check_key, check_local

if TYPE_CHECKING:
    from rlm.config import Config
    from rlm.llm.seam import SeamLLM


@dataclass(frozen=True)
class Provider:
    name: str
    matches: Callable[[str], bool]
    build: Callable[..., SeamLLM]  # (spec, config, **kw): the model
    check: Callable[[str, Config | None], None]  # offline; raises a one-line RlmError
    window: Callable[[str, Config | None], int | None]  # without building it; None: unknown
    in_process: bool  # computes here: costs nothing, shares its one instance


def _is_script(spec: str) -> bool:
    return spec.startswith("script:")


def _is_local(spec: str) -> bool:
    return spec == "local" or spec.startswith("local:")


def _build_script(spec: str, config: Config | None, **kw: Any) -> SeamLLM:
    from rlm.llm.inproc_models import ScriptedLLM

    return ScriptedLLM.from_file(spec.removeprefix("script:"), config, **kw)


def _build_local(spec: str, config: Config | None, **kw: Any) -> SeamLLM:
    from rlm.llm.inproc_models import LocalModel

    return LocalModel(spec.partition(":")[2] or None, config, **kw)


def _build_direct(spec: str, config: Config | None, **kw: Any) -> SeamLLM:
    from rlm.llm.seam import OpenAIModel

    return OpenAIModel(spec, config, **kw)


def _build_litellm(spec: str, config: Config | None, **kw: Any) -> SeamLLM:
    from rlm.llm.seam import LiteLLMModel

    return LiteLLMModel(spec, config, **kw)


def _check_script(spec: str, config: Config | None) -> None:
    from rlm.llm.script import load_script

    load_script(spec.removeprefix("script:"))  # ConfigError: missing or unparsable


def _check_local(spec: str, config: Config | None) -> None:
    check_local(spec.partition(":")[2] or None, config)


def _check_hosted(spec: str, config: Config | None) -> None:
    check_key(spec)


def _script_window(spec: str, config: Config | None) -> int | None:
    from rlm.llm.script import DEFAULT_SCRIPT_WINDOW, read_script

    return read_script(spec.removeprefix("script:")).window or DEFAULT_SCRIPT_WINDOW


def _local_window(spec: str, config: Config | None) -> int | None:
    from rlm.llm.modelfile import local_n_ctx

    return local_n_ctx(config)


def _direct_applies(spec: str) -> bool:
    from rlm.llm import direct

    return direct.applies(spec)


def _unknown(spec: str, config: Config | None) -> int | None:
    return None  # a hosted model's window is checked once the model is built


PROVIDERS: tuple[Provider, ...] = (
    Provider("script", _is_script, _build_script, _check_script, _script_window, True),
    Provider("local", _is_local, _build_local, _check_local, _local_window, True),
    Provider("openai-direct", _direct_applies, _build_direct, _check_hosted, _unknown, False),
    Provider("litellm", lambda spec: True, _build_litellm, _check_hosted, _unknown, False),
)


def provider(spec: str) -> Provider:
    """The provider `spec` names (litellm's for every spec no other claims)."""
    spec = spec.strip()
    return next(p for p in PROVIDERS if p.matches(spec))


def in_process(spec: str | None) -> bool:
    """Whether `spec`'s model computes in this process (`local`, `script:`)."""
    return bool(spec) and provider(spec or "").in_process


NO_MODEL = ("No model configured: pass --model or set RLM_MODEL; "
            "`rlm run --model local` works offline")


def get_llm(spec: str, config: Config | None = None, **kw: Any) -> SeamLLM:
    """Build the model for `spec`; ConfigError when the spec is empty."""
    spec = (spec or "").strip()
    if not spec:
        raise ConfigError(NO_MODEL)
    return provider(spec).build(spec, config, **kw)


def preflight(spec: str | None, config: Config | None = None) -> None:
    """Raise a one-line RlmError naming the fix when `spec` cannot run here (offline and
    cheap: no litellm, no llama_cpp import, no network, no hashing: rlm.llm.preflight)."""
    spec = (spec or "").strip()
    if not spec:
        raise ConfigError(NO_MODEL)
    provider(spec).check(spec, config)


def declared_window(spec: str | None, config: Config | None = None) -> int | None:
    """The window `spec` will report, where that is known offline and cheaply (no litellm,
    no model load): `--context-window`, a script's declared window (or the scripted
    default), the local model's n_ctx. None for hosted models: their window is checked
    once the model is built."""
    if config is not None and config.context_window:
        return int(config.context_window)
    spec = (spec or "").strip()
    return provider(spec).window(spec, config) if spec else None
