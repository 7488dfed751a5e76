"""A run's first prompt is counted with an encoding loaded while the kernel boots
(issue 32: a cold `rlm run` reaches its first model request in under a second).

The load (~0.3 s) starts once the kernel's process is spawned: started earlier, its thread
holds the GIL while the host's own start-up work (entry points, the sandbox probe, the
spawn) waits for it, and the kernel's start grows by as much as the load saves.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rlm.config import Config
from rlm.errors import RlmError
from rlm.llm import tokens
from rlm.llm.inproc_models import ScriptedLLM
from rlm.session.store import SessionStore


@pytest.fixture
def no_encoding(monkeypatch):
    """This test's own view of what is loaded: nothing yet."""
    monkeypatch.setattr(tokens, "_encodings", {})
    monkeypatch.setattr(tokens, "_warming", set())


def test_a_count_during_the_warm_load_waits_for_it_instead_of_loading_again(
        monkeypatch, no_encoding):
    import tiktoken

    real = tiktoken.get_encoding
    started, release = threading.Event(), threading.Event()
    loads: list[str] = []

    def slow_load(name: str) -> Any:
        loads.append(threading.current_thread().name)
        started.set()
        release.wait(30)
        return real(name)

    monkeypatch.setattr(tiktoken, "get_encoding", slow_load)
    tokens.warm_encoding()
    assert started.wait(30), "the warm load did not start"
    counted: list[int] = []
    counter = threading.Thread(target=lambda: counted.append(tokens.count_text("hello world")))
    counter.start()
    release.set()
    counter.join(30)
    tokens.warm_encoding()  # again: loaded already, nothing starts
    assert counted == [2]
    assert loads == ["rlm-load-encoding"]  # one load, on the warm thread
    assert tokens.get_encoding() is tokens._encodings[tokens.DEFAULT_ENCODING]


def test_a_warm_load_that_cannot_work_is_silent_and_the_count_says_why(
        monkeypatch, tmp_path, no_encoding):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # holds no encoding file
    monkeypatch.setattr(tokens, "_bundled_dir", lambda: None)  # and litellm's are gone
    tokens.warm_encoding()  # raises nothing, starts nothing
    assert not any(t.name == "rlm-load-encoding" for t in threading.enumerate())
    with pytest.raises(RlmError, match="not available offline.*reinstall litellm"):
        tokens.count_text("hello world")


@pytest.mark.timeout(120)
def test_the_roots_kernel_loads_the_encoding_once_its_process_is_spawned(
        monkeypatch, tmp_path, no_encoding):
    """Built by the root: the load starts after the spawn (the kernel's pid is alive) and
    before the start returns; the first prompt's count then finds it loaded."""
    import rlm.app.build as build
    from rlm.app import build_agent

    seen: list[dict[str, Any]] = []

    def recorder() -> None:
        kernel = agent.executor
        seen.append({"pid": kernel.pid, "alive": kernel.is_alive(), "started": started})
        tokens.warm_encoding()

    monkeypatch.setattr(build, "warm_encoding", recorder)
    session = SessionStore.create(tmp_path, model="script:x", task="warm")
    llm = ScriptedLLM(["The answer is 4."])
    agent = build_agent(session, Config(home=tmp_path, model="script:x"), llm=llm)
    started = False
    with agent:
        started = True
        list(agent.run("what is 2+2?"))
    assert len(seen) == 1 and seen[0]["pid"] and seen[0]["alive"] and not seen[0]["started"]
    assert tokens.DEFAULT_ENCODING in tokens._encodings
