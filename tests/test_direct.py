"""OpenAI's chat completions sent without litellm (rlm.llm.direct), to a real endpoint on
127.0.0.1 (bench/fake_openai.py): the bodies litellm would send, the same replies, the
same errors, litellm's path for what litellm maps, and a run that never imports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fake_openai import serving, tool_reply
from rlm.errors import AuthError, ContextOverflow, ModelError, RateLimited
from rlm.llm import direct
from rlm.llm.providers import get_llm
from rlm.llm.seam import LiteLLMModel, OpenAIModel

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-test-" + "a1b2c3d4" * 5
MESSAGES = [{"role": "system", "content": "You are rlm."},
            {"role": "user", "content": "what is 6*7?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": "python", "arguments": "{\"code\": \"6*7\"}"}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "42"}]
REPLIES = [{"content": "It is 42.", "usage": True},
           tool_reply("x = 6 * 7\nprint(x)")]


@pytest.fixture
def endpoint(monkeypatch):
    """`endpoint(replies)` starts a real endpoint on 127.0.0.1 and points OPENAI_API_BASE
    at it; `endpoint(replies, at_openai=True)` leaves the base unset, so both clients
    address api.openai.com (litellm decides some things by host), and httpx's transport
    takes the connection to 127.0.0.1 instead: nothing leaves the machine."""
    import httpx

    real = httpx.HTTPTransport.handle_request

    def start(replies, at_openai=False):
        cm = serving(replies)
        server = cm.__enter__()
        started.append(cm)
        if not at_openai:
            monkeypatch.setenv("OPENAI_API_BASE", server.base)
            return server
        port = int(server.base.split(":")[2].split("/")[0])

        def to_local(transport, request):
            assert request.url.host == "api.openai.com", request.url
            request.url = request.url.copy_with(scheme="http", host="127.0.0.1", port=port)
            return real(transport, request)

        monkeypatch.setattr(httpx.HTTPTransport, "handle_request", to_local)
        return server

    started: list = []
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", direct.CLIENT_ENV,
                 *direct.LITELLM_ONLY_ENVS):
        monkeypatch.delenv(name, raising=False)
    yield start
    for cm in started:
        cm.__exit__(None, None, None)


def _sent_by_litellm(headers: dict[str, str]) -> bool:
    return headers.get("user-agent", "").startswith("OpenAI/")  # litellm's openai SDK


def _openai_specs() -> list[str]:
    """Every OpenAI chat model in litellm's map, as `openai/NAME`."""
    from rlm.llm import modelmap

    return sorted({f"openai/{k.removeprefix('openai/')}" for k, e in modelmap._entries().items()
                   if isinstance(e, dict) and e.get("litellm_provider") == "openai"
                   and e.get("mode") == "chat"})


def _outcome(llm, **call):
    try:
        return llm.complete([dict(m) for m in MESSAGES], **call)
    except Exception as e:  # noqa: BLE001 - both ways must fail alike
        return type(e).__name__


CALLS = [{}, {"tools": []}, {"temperature": 0.3, "max_tokens": 500},
         {"tool_choice": "required"}]


def test_every_openai_model_gets_litellms_bodies_and_replies(endpoint):
    """Model by model, call by call: what reached the endpoint and what came back are the
    same whether rlm sent the request or litellm did."""
    specs = [s for s in _openai_specs() if direct.applies(s)]
    assert len(specs) > 60 and {"openai/gpt-4o-mini", "openai/gpt-5"} <= set(specs)
    assert not direct.applies("openai/o3-mini")  # litellm moves its system message
    assert not direct.applies("openai/gpt-5.4")  # litellm bridges its tools to /responses
    server = endpoint([REPLIES[1]], at_openai=True)
    differ, sent_direct = [], 0
    for spec in specs:
        ours, theirs = get_llm(spec, base_delay=0, retries=0), LiteLLMModel(spec, retries=0)
        assert isinstance(ours, OpenAIModel)
        for call in CALLS:
            n = len(server.requests)
            mine, litellms = _outcome(ours, **call), _outcome(theirs, **call)
            bodies, headers = server.requests[n:], server.headers[n:]
            sent_direct += sum(not _sent_by_litellm(h) for h in headers)
            if bodies[:1] != bodies[1:] or mine != litellms:
                differ.append((spec, call, bodies, mine, litellms))
    assert differ == []
    assert sent_direct >= 2 * len(specs)  # the plain calls never went through litellm


def test_a_text_reply_a_tool_call_and_usage_come_back_as_litellm_reads_them(endpoint):
    server = endpoint(REPLIES)
    llm = get_llm("openai/gpt-4o-mini", base_delay=0)
    text, tool = llm.complete(MESSAGES), llm.complete(MESSAGES)
    assert all(h["authorization"] == f"Bearer {KEY}" and not _sent_by_litellm(h)
               for h in server.headers)
    assert (text.content, text.finish_reason) == ("It is 42.", "stop")
    assert tool.tool_calls[0].arguments == {"code": "x = 6 * 7\nprint(x)"}
    assert tool.finish_reason == "tool_calls"
    assert (text.usage.input_tokens, text.usage.output_tokens,
            text.usage.cache_read_tokens) == (100, 10, 64)
    body = server.requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "gpt-4o-mini" and body["messages"] == MESSAGES


def test_what_litellm_maps_for_a_reasoning_model_goes_through_litellm(endpoint):
    server = endpoint(REPLIES)
    llm = get_llm("openai/gpt-5", base_delay=0)
    llm.complete(MESSAGES, tools=[], max_tokens=300)  # a compaction's summary call
    llm.complete(MESSAGES, tools=[])
    assert [_sent_by_litellm(h) for h in server.headers] == [True, False]
    assert server.requests[0]["max_completion_tokens"] == 300
    assert "max_tokens" not in server.requests[0]


def test_rlm_openai_client_litellm_sends_every_request_through_litellm(endpoint, monkeypatch):
    monkeypatch.setenv(direct.CLIENT_ENV, "litellm")
    server = endpoint(REPLIES)
    llm = get_llm("openai/gpt-4o-mini", base_delay=0)
    assert not isinstance(llm, OpenAIModel)
    llm.complete(MESSAGES)
    assert _sent_by_litellm(server.headers[0])


def test_openai_base_url_wins_over_openai_api_base_as_in_litellm(endpoint, monkeypatch):
    server = endpoint(REPLIES)
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")  # nothing listens
    monkeypatch.setenv("OPENAI_BASE_URL", server.base)
    get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)
    assert len(server.requests) == 1


def _error(status, message, code=None):
    return {"status": status, "body": {"error": {"message": message, "type": "x", "code": code}}}


def test_refusals_are_classified_as_litellms_and_transient_ones_retried(endpoint):
    server = endpoint([_error(401, f"Incorrect API key provided: {KEY}.")])
    with pytest.raises(AuthError) as auth:
        get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)
    assert "OPENAI_API_KEY" in str(auth.value) and KEY not in str(auth.value)
    assert len(server.requests) == 1  # never retried

    server = endpoint([_error(400, "This model's maximum context length is 128000 tokens.",
                              "context_length_exceeded")])
    with pytest.raises(ContextOverflow):
        get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)

    server = endpoint([_error(400, "Invalid value for 'tools'.", "invalid_value")])
    with pytest.raises(ModelError, match="Invalid value for 'tools'") as bad:
        get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)
    assert not isinstance(bad.value, RateLimited) and len(server.requests) == 1

    server = endpoint([_error(429, "Rate limit reached"), _error(503, "overloaded"),
                       REPLIES[0]])
    done = get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)
    assert done.content == "It is 42." and len(server.requests) == 3

    server = endpoint([_error(429, "Rate limit reached")])
    with pytest.raises(RateLimited, match="gave up after 2 attempts"):
        get_llm("openai/gpt-4o-mini", base_delay=0, retries=1).complete(MESSAGES)


def test_an_endpoint_that_cannot_be_reached_is_transient_and_named(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # the discard port: closed
    with pytest.raises(RateLimited, match=r"cannot reach http://127\.0\.0\.1:9/v1"):
        get_llm("openai/gpt-4o-mini", base_delay=0, retries=1).complete(MESSAGES)


def test_garbage_from_the_endpoint_is_a_clear_error(endpoint):
    endpoint([{"raw": ["{\"choices\": [{\"delta\": {\"content\": \"half\"}}]}", "<html>oops"]}])
    with pytest.raises(ModelError, match="not JSON: '<html>oops'"):
        get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)


def test_an_event_of_another_shape_is_a_clear_error(endpoint):
    endpoint([{"raw": ["{\"choices\": [\"not an object\"]}"]}])
    with pytest.raises(ModelError, match="an event rlm cannot read"):
        get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)


def test_a_body_instead_of_a_stream_is_a_clear_error(endpoint):
    """A proxy that ignored `stream` (or an error page with status 200) is not an empty
    reply."""
    endpoint([{"status": 200, "body": {"choices": [{"message": {"content": "hi"}}]}}])
    with pytest.raises(ModelError, match="sent no stream of events"):
        get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)


def test_one_connection_serves_every_request(endpoint):
    server = endpoint(REPLIES)
    llm = get_llm("openai/gpt-4o-mini", base_delay=0)
    for _ in range(3):
        llm.complete(MESSAGES)
    assert len(server.connections) == 3 and len(set(server.connections)) == 1


def test_a_stream_broken_inside_a_tool_call_is_not_sent_again(endpoint):
    """The arguments already reached `on_call` (the screen, the stream rules): a second
    request would feed them twice."""
    call = {"index": 0, "id": "call_0", "type": "function",
            "function": {"name": "python", "arguments": "{\"code\": \"x = 1"}}
    server = endpoint([{"raw": [json.dumps({"choices": [{"delta": {"tool_calls": [call]}}]}),
                                json.dumps({"error": {"message": "overloaded"}})]}])
    seen = []
    with pytest.raises(RateLimited, match="overloaded"):
        get_llm("openai/gpt-4o-mini", base_delay=0).complete(
            MESSAGES, on_call=lambda i, text: seen.append(text))
    assert len(server.requests) == 1 and seen == ["{\"code\": \"x = 1"]


def test_the_organization_and_project_are_read_as_the_openai_sdk_reads_them(endpoint,
                                                                            monkeypatch):
    server = endpoint(REPLIES)
    monkeypatch.setenv("OPENAI_ORG_ID", "org-sdk")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-sdk")
    monkeypatch.setenv("OPENAI_PROJECT", "proj-speech-only")
    get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)
    monkeypatch.setenv("OPENAI_ORGANIZATION", "org-litellm")
    get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)
    assert [(h["openai-organization"], h["openai-project"]) for h in server.headers] == \
        [("org-sdk", "proj-sdk"), ("org-litellm", "proj-sdk")]


@pytest.mark.parametrize("setting", ["SSL_VERIFY", "REQUEST_TIMEOUT",
                                     "OPENAI_IDENTITY_TOKEN_FILE"])
def test_a_setting_only_litellm_reads_sends_everything_through_litellm(endpoint, monkeypatch,
                                                                        setting):
    monkeypatch.setenv(setting, "False" if setting == "SSL_VERIFY" else "60")
    assert not isinstance(get_llm("openai/gpt-4o-mini"), OpenAIModel)
    monkeypatch.delenv(setting)
    monkeypatch.delenv("OPENAI_API_KEY")  # no key: litellm's to say what is missing
    assert not isinstance(get_llm("openai/gpt-4o-mini"), OpenAIModel)


def test_a_key_with_a_line_ending_is_refused_without_showing_it(endpoint, monkeypatch):
    server = endpoint(REPLIES)
    llm = get_llm("openai/gpt-4o-mini", base_delay=0)
    secret = "abcdefgh-no-sk-prefix-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret + "\r\n")
    with pytest.raises(AuthError, match="whitespace or control characters") as err:
        llm.complete(MESSAGES)
    assert secret not in str(err.value) and server.requests == []


def test_an_unreachable_base_is_named_without_its_credentials(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://me:hunter2@127.0.0.1:9/v1?token=t0ps3cret")
    with pytest.raises(RateLimited, match=r"cannot reach http://127\.0\.0\.1:9/v1 ") as e:
        get_llm("openai/gpt-4o-mini", base_delay=0, retries=0).complete(MESSAGES)
    assert "hunter2" not in str(e.value) and "t0ps3cret" not in str(e.value)


def test_a_data_field_over_several_lines_is_one_event(endpoint):
    event = json.dumps({"choices": [{"delta": {"content": "It is 42."}}]})
    cut = event.index(" [")  # between two tokens: the newline that joins the lines is JSON's
    endpoint([{"raw": [event[:cut] + "\ndata: " + event[cut:]]}])
    assert get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES).content \
        == "It is 42."


def test_a_reply_without_usage_is_counted(endpoint):
    endpoint([{"content": "It is 42.", "usage": False}])
    done = get_llm("openai/gpt-4o-mini", base_delay=0).complete(MESSAGES)
    assert done.usage.input_tokens > 10 and done.usage.output_tokens >= 3


def test_a_run_from_the_cli_never_imports_litellm_and_prices_its_usage(tmp_path, _isolated_home):
    """The user's path: `rlm run --model openai/gpt-4o-mini`, to its answer and its cost."""
    (tmp_path / "six.txt").write_text("6")  # the task's data: a verified answer reads it
    replies = [tool_reply("x = int(open('six.txt').read()) * 7\nprint(x)"),
               tool_reply("final(str(x))")]
    code = ("import sys; from rlm.cli.main import main; rc = main(sys.argv[1:]); "
            "print('LITELLM', 'litellm' in sys.modules, file=sys.stderr); sys.exit(rc)")
    with serving(replies) as server:
        env = {**os.environ, "OPENAI_API_KEY": KEY, "OPENAI_API_BASE": server.base,
               "PYTHONPATH": str(REPO)}
        env.pop(direct.CLIENT_ENV, None)
        proc = subprocess.run([sys.executable, "-c", code, "run", "what is 6*7?", "--model",
                               "openai/gpt-4o-mini"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "LITELLM False" in proc.stderr
    assert "42" in proc.stdout
    assert "$0.0000" in proc.stdout + proc.stderr  # the footer's cost: priced from the map
    assert [_sent_by_litellm(h) for h in server.headers] == [False, False]
