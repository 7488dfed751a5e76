"""kernel_ext's bridge and API in-process: local handler, errors, install/uninstall."""

from __future__ import annotations

import pytest

from kernel_ext import api, bridge


class FakeShell:
    def __init__(self):
        self.user_ns: dict = {}
        self.user_ns_hidden: dict = {}
        self.kernel = None

    def push(self, variables, interactive=True):
        self.user_ns.update(variables)
        if not interactive:
            self.user_ns_hidden.update(variables)


@pytest.fixture
def shell():
    ip = FakeShell()
    bridge.install(ip)
    api.install(ip)
    yield ip
    api.uninstall(ip)
    bridge.uninstall(ip)
    bridge.set_local_handler(None)


def test_api_calls_go_through_the_local_handler(shell):
    calls = []

    def handler(method, params):
        calls.append((method, params))
        return {"llm_query_batched": ["a", "b"]}.get(method, "ok")

    bridge.set_local_handler(handler)
    ns = shell.user_ns
    assert ns["llm_query"]("hi") == "ok"
    assert ns["llm_query_batched"](["p", "q"], model="m") == ["a", "b"]
    shell.user_ns["answer"] = 42
    ns["final_var"]("answer")
    ns["heartbeat"].create("check", 60, label="x")
    ns["cron"].cancel("j1")
    ns["goal"].block("stuck")
    ns["compact"].run()
    assert calls == [
        ("llm_query", {"prompt": "hi", "model": None}),
        ("llm_query_batched", {"prompts": ["p", "q"], "model": "m"}),
        ("final", {"value": "42", "name": "answer"}),
        ("heartbeat.create", {"prompt": "check", "interval": 60, "label": "x"}),
        ("cron.cancel", {"id": "j1"}),
        ("goal.block", {"reason": "stuck"}),
        ("compact.run", {"instructions": None}),
    ]


def test_handler_error_becomes_runtime_error(shell):
    def handler(method, params):
        raise ValueError("nope")

    bridge.set_local_handler(handler)
    with pytest.raises(RuntimeError, match="nope"):
        shell.user_ns["goal"].get()


def test_no_kernel_and_no_handler_says_how_to_fix(shell):
    with pytest.raises(RuntimeError, match="set_local_handler"):
        bridge.request("ping", {})


def test_names_are_hidden_and_removed_on_uninstall(shell):
    assert set(api.NAMES) <= set(shell.user_ns_hidden)
    api.uninstall(shell)
    assert not set(api.NAMES) & set(shell.user_ns)
    assert not set(api.NAMES) & set(shell.user_ns_hidden)
