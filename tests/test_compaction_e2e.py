"""End to end: a scripted run with a small window compacts at least three times with a
real kernel; names defined before the first compaction are used afterwards; the kernel
process never changes; each compaction is followed by an <ipython_state> listing every
name defined so far."""

from __future__ import annotations

import threading

import pytest

from rlm.config import Config
from rlm.llm.types import Completion, ToolCall
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore


class QueueModel:
    """Queue-based scripted model returning prepared completions; records the messages."""

    native_tools = True

    def __init__(self, spec, replies):
        self.spec, self.replies, self.calls, self._lock = spec, list(replies), [], threading.Lock()

    def complete(self, messages, *, tools=None, on_text=None, temperature=None, max_tokens=None,
                 on_call=None):
        with self._lock:
            if not self.replies:
                raise AssertionError(f"{self.spec}: out of replies")
            self.calls.append(messages)
            r = self.replies.pop(0)
            return r if isinstance(r, Completion) else Completion(content=r)

    def context_window(self):
        return None


def cell(k: int, code: str) -> Completion:
    return Completion(content="", tool_calls=[ToolCall(f"call{k}", "python", {"code": code})])


@pytest.mark.timeout(120)
def test_three_compactions_keep_the_kernel_and_its_names(tmp_path):
    from rlm.app import build_agent

    steps = []
    for k in range(9):  # each step defines v{k} and prints ~500 tokens of numbers
        steps.append(cell(k, f"v{k} = list(range({k + 1} * 10))\nprint(' '.join(str(i * 7919) for i in range(250)))"))
    steps.append(cell(9, "check = sum(v0) + sum(v1)\nprint('check', check)"))
    steps.append(Completion(content="Done: check = 235"))
    agent_llm = QueueModel("script:agent", steps)
    summarizer = QueueModel("script:summary", [f"## Goal\nsummary {i}" for i in range(40)])
    # the summary tier alone: with the default tiers, shaking spares most summaries here
    # (tests/test_context_tiers_e2e.py covers the ladder)
    cfg = Config(model="script:agent", compaction_model="script:summary", context_window=3000,
                 reserve_tokens=1000, keep_recent_tokens=600, max_turns=20, home=tmp_path,
                 context_tiers=False)
    session = SessionStore.create(tmp_path, model="script:agent", task="e2e")
    agent = build_agent(session, cfg, llm=agent_llm, llm_factory=lambda spec: summarizer)
    with agent:
        pid = agent.executor.pid
        events = list(agent.run("Define v0..v8, then check sum(v0) + sum(v1)."))
        assert agent.executor.pid == pid
        listing = agent.executor.list_namespace(timeout=5.0)
    branch = session.branch()
    comps = [i for i, e in enumerate(branch) if isinstance(e, CompactionEntry)]
    assert len(comps) >= 3, [type(e).__name__ for e in events]
    for i in comps:
        state = branch[i + 1]
        assert isinstance(state, CustomEntry) and state.custom_type == "ipython_state"
        defined = {f"v{k}" for k in range(9)
                   if any(isinstance(e, MessageEntry) and f"v{k} = " in str(e.message.get("tool_calls"))
                          for e in branch[:i])}
        listed = {n["name"] for n in state.data["names"]}
        assert defined <= listed, (defined - listed)
    # the next model call after each compaction starts with the summary and the state notice
    for msgs in agent_llm.calls[1:]:
        assert str(msgs[1].get("content")).startswith("Project memory")  # the project memory
        if "compacted into the following summary" in str(msgs[2].get("content")):
            assert any("<ipython_state>" in str(m.get("content")) for m in msgs)
    last_result = [e for e in branch if isinstance(e, MessageEntry) and e.role == "tool"][-1]
    assert "check 235" in last_result.message["content"]  # sum(range(10)) + sum(range(20))
    assert {"v0", "v1", "check"} <= {n["name"] for n in listing["names"]}
