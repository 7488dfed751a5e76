"""The local model's window when both RLM_LOCAL_N_CTX and --context-window are set: the
flag wins, so the window llama.cpp is loaded with is the one compaction is sized to. No
model is loaded (LocalModel loads on first call); the GGUF is a 4-byte stub."""

from __future__ import annotations

import pytest

from rlm.config import Config
from rlm.errors import ConfigError


@pytest.fixture
def stub_gguf(tmp_path):
    path = tmp_path / "stub.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 16)
    return f"local:{path}"


def _window(spec: str, config: Config) -> tuple[int, int | None]:
    from rlm.llm import get_llm

    llm = get_llm(spec, config)
    loaded = llm._handler.model.n_ctx  # what llama.cpp would be built with
    assert llm._handler.model._llm is None  # nothing was loaded
    return loaded, llm.context_window()


def test_context_window_wins_over_the_env_var_and_both_sides_agree(stub_gguf, monkeypatch, tmp_path):
    monkeypatch.setenv("RLM_LOCAL_N_CTX", "2048")
    config = Config(home=tmp_path, context_window=4096)
    loaded, reported = _window(stub_gguf, config)
    assert loaded == reported == 4096  # compaction (Agent.context_window) uses 4096 too


def test_the_env_var_sets_the_window_when_no_context_window_is_given(stub_gguf, monkeypatch, tmp_path):
    monkeypatch.setenv("RLM_LOCAL_N_CTX", "2048")
    assert _window(stub_gguf, Config(home=tmp_path)) == (2048, 2048)


def test_a_malformed_env_var_is_a_one_line_config_error(stub_gguf, monkeypatch, tmp_path):
    monkeypatch.setenv("RLM_LOCAL_N_CTX", "8k")
    with pytest.raises(ConfigError, match="RLM_LOCAL_N_CTX='8k' is not a positive number"):
        _window(stub_gguf, Config(home=tmp_path))
