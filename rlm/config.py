"""One configuration dataclass. Sources, weakest first: defaults, TOML file, env, flags.

TOML file: $RLM_CONFIG, else ./rlm.toml, else $RLM_HOME/config.toml; keys are the field
names below (e.g. `model = "openai/gpt-4o-mini"`, `cell_timeout = 120`).
Env: RLM_MODEL, RLM_SUB_MODEL, RLM_COMPACTION_MODEL, RLM_HOME.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rlm.errors import ConfigError
from rlm.paths import rlm_home

MiB = 1024 * 1024


@dataclass
class Config:
    model: str | None = None  # litellm string | local | local:PATH.gguf | script:PATH
    sub_model: str | None = None  # llm_query default; None: the session's model
    compaction_model: str | None = None  # None: the session's model
    home: Path = field(default_factory=rlm_home)

    # run limits (None: unlimited)
    max_turns: int | None = 30
    max_tokens: int | None = None
    max_wall_s: float | None = None
    temperature: float | None = None

    # kernel
    cell_timeout: float = 300.0
    interrupt_grace_s: float = 2.0
    output_budget_chars: int = 20_000
    memory_cap_bytes: int | None = None
    kernel_python: str | None = None  # default: the host's interpreter
    kernel_env_pass: tuple[str, ...] = ()  # secret-looking env names the kernel may see
    snapshot_var_cap: int = 256 * MiB
    snapshot_total_cap: int = 1024 * MiB
    sandbox: bool = False  # kernel in its own user + network namespace (rlm.kernel.runtime)

    # compaction
    compaction_enabled: bool = True
    context_window: int | None = None  # None: litellm's model info
    reserve_tokens: int = 16_384
    keep_recent_tokens: int = 20_000

    # recursion
    max_depth: int = 1
    token_budget: int | None = None  # bounds the whole rlm_query tree
    batch_concurrency: int = 8

    def with_overrides(self, **kw: Any) -> Config:
        """Flags win: apply every non-None keyword."""
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


_ENV = {
    "model": "RLM_MODEL",
    "sub_model": "RLM_SUB_MODEL",
    "compaction_model": "RLM_COMPACTION_MODEL",
}


def _config_file() -> Path | None:
    explicit = os.environ.get("RLM_CONFIG")
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            raise ConfigError(f"RLM_CONFIG points at {p}, which does not exist")
        return p
    for p in (Path("rlm.toml"), rlm_home() / "config.toml"):
        if p.is_file():
            return p
    return None


_KINDS: dict[str, tuple[type, ...]] = {}


def _kinds(name: str) -> tuple[type, ...]:
    """Accepted TOML value types for a Config field, from its annotation."""
    if not _KINDS:
        for f in fields(Config):
            text = str(f.type)
            kinds: list[type] = []
            for word, kind in (("str", str), ("int", int), ("float", float), ("bool", bool),
                               ("Path", str), ("tuple", list)):
                if word in text:
                    kinds.append(kind)
            if "float" in text:
                kinds.append(int)  # 300 is a fine cell_timeout
            _KINDS[f.name] = tuple(kinds)
    return _KINDS[name]


def _checked(path: Path, name: str, value: Any) -> Any:
    kinds = _kinds(name)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        want = " or ".join(sorted({k.__name__ for k in kinds}))
        raise ConfigError(f"{path}: {name} = {value!r} should be {want}")
    if name == "home":
        return Path(value)
    if name == "kernel_env_pass":
        return tuple(str(v) for v in value)
    return value


def load_config(**flags: Any) -> Config:
    """Defaults < TOML file < env < flags (None flags are ignored)."""
    cfg = Config()
    path = _config_file()
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"{path}: cannot read config ({e}); fix the file or remove it") from e
        known = {f.name: f for f in fields(Config)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}")
        cfg = replace(cfg, **{k: _checked(path, k, v) for k, v in data.items()})
    env: dict[str, Any] = {k: os.environ[v] for k, v in _ENV.items() if os.environ.get(v)}
    cfg = replace(cfg, **env)
    return cfg.with_overrides(**flags)
