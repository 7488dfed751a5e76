"""What every test is isolated from: the user's rlm home, model cache and XDG directories,
and provider keys."""

from __future__ import annotations

from pathlib import Path

import pytest


def isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """RLM_HOME, the model cache and the XDG directories under tmp_path, no provider keys;
    returns the home. Per test (conftest's autouse fixture) and for what a module shares
    (tests/kernels.py)."""
    home = tmp_path / "rlm-home"
    monkeypatch.setenv("RLM_HOME", str(home))
    monkeypatch.setenv("RLM_MODEL_CACHE", str(tmp_path / "model-cache"))
    for var in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / "xdg" / var.lower()))
    monkeypatch.delenv("RLM_CONFIG", raising=False)
    monkeypatch.delenv("RLM_MODEL", raising=False)
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    return home
