"""Shared fixtures. Every test gets its own RLM_HOME and no provider keys."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    home = tmp_path / "rlm-home"
    monkeypatch.setenv("RLM_HOME", str(home))
    monkeypatch.delenv("RLM_CONFIG", raising=False)
    monkeypatch.delenv("RLM_MODEL", raising=False)
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    yield home
