"""Model seam: scripted replies (an in-process provider, no litellm), streaming, usage, error
paths, laziness."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from rlm.errors import (
    AuthError,
    ConfigError,
    ContextOverflow,
    ModelError,
    RateLimited,
    ScriptExhausted,
)
from rlm.llm import count_messages, count_text, get_llm
from rlm.llm.errormap import normalize_error
from rlm.llm.inproc_models import ScriptedLLM
from rlm.llm.script import DEFAULT_SCRIPT_WINDOW
from rlm.llm.seam import LiteLLMModel, OpenAIModel
from rlm.llm.types import PYTHON_TOOL

USER = [{"role": "user", "content": "hello"}]


def test_importing_rlm_llm_does_not_import_litellm():
    code = "import sys, rlm.llm, rlm.session.store; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_count_text_works_with_network_blocked(monkeypatch):
    def refuse(*a, **k):
        raise OSError("network blocked in test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert count_text("hello world") == 2
    assert count_text("3.14159,2.71828,1.41421\n" * 10) > len("3.14159,2.71828,1.41421\n" * 10) / 4
    n = count_messages(USER)
    assert n == count_messages([dict(USER[0])])  # cached by content, not identity
    assert n > count_text("hello")


def test_text_reply_streams_and_reports_usage():
    llm = ScriptedLLM(["The answer is forty-two, computed in the kernel."], stream=True)
    seen: list[str] = []
    c = llm.complete(USER, on_text=seen.append)
    assert c.content == "The answer is forty-two, computed in the kernel."
    assert len(seen) > 1 and "".join(seen) == c.content
    assert c.usage.input_tokens == count_messages(USER)
    assert c.usage.output_tokens == count_text(c.content)
    assert c.tool_calls == [] and c.finish_reason == "stop"
    assert llm.calls == [USER]  # what reached the provider


def test_non_streaming_reply_reaches_on_text_once():
    llm = ScriptedLLM(["Forty-two."])
    seen: list[str] = []
    assert llm.complete(USER, on_text=seen.append).content == "Forty-two."
    assert seen == ["Forty-two."]


def test_tool_calls_and_given_usage():
    llm = ScriptedLLM(
        [
            {
                "content": "running",
                "usage": {"input_tokens": 11, "output_tokens": 3},
                "tool_calls": [
                    {"name": "python", "arguments": {"code": "x = 1"}},
                    {"name": "python", "arguments": {"code": "x"}},
                ],
            }
        ]
    )
    c = llm.complete(USER)
    assert [t.arguments for t in c.tool_calls] == [{"code": "x = 1"}, {"code": "x"}]
    assert [t.id for t in c.tool_calls] == ["call_1_0", "call_1_1"]
    assert (c.usage.input_tokens, c.usage.output_tokens) == (11, 3)
    assert c.finish_reason == "tool_calls"
    assert llm.requests[0]["tools"] == [PYTHON_TOOL]  # native tools offered by default


def test_no_tools_when_asked():
    llm = ScriptedLLM(["summary"])
    llm.complete(USER, tools=[])
    assert llm.requests[0]["tools"] is None


def test_script_file_and_exhaustion(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(["one", "```python\nprint(1)\n```"]))
    llm = get_llm(f"script:{path}")
    assert llm.native_tools is True and llm.context_window() == DEFAULT_SCRIPT_WINDOW
    assert llm.complete(USER).content == "one"
    assert "```python" in llm.complete(USER).content
    with pytest.raises(ScriptExhausted, match=r"has 2 replies; reply 3 was requested"):
        llm.complete(USER)


def test_instances_keep_their_own_position():
    a, b = ScriptedLLM(["a1", "a2"]), ScriptedLLM(["b1"])
    assert a.complete(USER).content == "a1"
    assert b.complete(USER).content == "b1"
    assert a.complete(USER).content == "a2"


def test_bad_script_is_a_config_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(["ok", {"error": "nope"}]))
    with pytest.raises(ConfigError, match="reply 2"):
        get_llm(f"script:{path}")
    with pytest.raises(ConfigError, match="does not exist"):
        get_llm(f"script:{tmp_path / 'missing.json'}")
    with pytest.raises(ConfigError, match="RLM_MODEL"):
        get_llm("")


def test_overflow():
    llm = ScriptedLLM([{"error": "overflow", "message": "prompt is too long: 300000 tokens"}])
    with pytest.raises(ContextOverflow):
        llm.complete(USER)


def test_rate_limit_retried_then_success():
    sleeps: list[float] = []
    llm = ScriptedLLM(
        [{"error": "rate_limit"}, {"error": "server"}, "finally"],
        base_delay=0.01,
        sleep=sleeps.append,
    )
    assert llm.complete(USER).content == "finally"
    assert len(sleeps) == 2 and 0.005 <= sleeps[0] <= 0.01 and sleeps[1] <= 0.02
    assert len(llm.calls) == 3


def test_rate_limit_exhausted():
    llm = ScriptedLLM([{"error": "rate_limit"}] * 3, retries=2, base_delay=0)
    with pytest.raises(RateLimited, match="after 3 attempts"):
        llm.complete(USER)


def test_auth_error_names_env_var():
    llm = ScriptedLLM([{"error": "auth", "message": "invalid key sk-abcdefghijklmnopqrstu"}])
    with pytest.raises(AuthError) as info:
        llm.complete(USER)
    assert "sk-abcdefghijkl" not in str(info.value)
    import litellm

    err, transient = normalize_error(
        litellm.AuthenticationError(message="bad", llm_provider="anthropic", model="m"),
        "anthropic/claude-3-5-haiku-latest",
    )
    assert isinstance(err, AuthError) and "ANTHROPIC_API_KEY" in str(err) and not transient


def test_overflow_recognised_from_message_wording():
    import litellm

    for text in (
        "This model's maximum context length is 8192 tokens",
        "input exceeds the context window",
        "prompt is too long",
    ):
        err, _ = normalize_error(
            litellm.BadRequestError(message=text, model="m", llm_provider="openai"), "openai/x"
        )
        assert isinstance(err, ContextOverflow)
    err, transient = normalize_error(RuntimeError("weird"), "openai/x")
    assert isinstance(err, ModelError) and not transient


def test_litellm_model_offline_properties(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-000000")
    llm = get_llm("openai/gpt-4o-mini")
    assert isinstance(llm, OpenAIModel)  # its plain requests skip litellm (test_direct.py)
    assert llm.native_tools is True
    assert llm.context_window() == 128000
    claude = get_llm("anthropic/claude-sonnet-4-5")
    assert isinstance(claude, LiteLLMModel)
    assert claude.native_tools is True and claude.context_window() == 200000
    ollama = get_llm("ollama/some-unknown-model")
    assert ollama.context_window() is None


def test_real_provider_auth_failure_without_network(monkeypatch):
    """No key and no network: the call must come out as an rlm error, never raw."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-000000")
    llm = get_llm("openai/gpt-4o-mini")
    llm.retries, llm.base_delay = 1, 0
    with pytest.raises(ModelError):
        llm.complete(USER)


def test_an_unreadable_inherited_tiktoken_dir_is_passed_over(tmp_path):
    """Before: a TIKTOKEN_CACHE_DIR inherited from another user's process (its folder
    unreadable here) raised PermissionError at the first token count and ended the run
    ("Permission denied ...; set RLM_HOME ..."); now the bundled files are used."""
    import os

    from as_nobody import as_nobody

    from rlm.llm import tokens

    private = tmp_path / "private"
    private.mkdir()
    key = tokens._cache_key(tokens.DEFAULT_ENCODING)
    (private / key).write_bytes(b"")
    os.chmod(private, 0o700)
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(private)}
    argv = as_nobody([sys.executable, "-c",
                      "from rlm.llm import count_text; print(count_text('hello world'))"], env)
    out = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "2", out.stderr[-2000:]
