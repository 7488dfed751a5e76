"""Project memory end to end: real kernels, the agent built by build_agent, a queue model
recording what reached it. The memory is on by default (no test sets it on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.config import Config
from rlm.errors import RlmError
from rlm.llm.types import Completion
from rlm.memory import MEMORY_MARK, ProjectMemory
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore
from tests.test_compaction_e2e import QueueModel as _QueueModel
from tests.test_compaction_e2e import cell

ROOT = Path(__file__).resolve().parents[1]
RULE = "Always report dates in UTC"


class QueueModel(_QueueModel):
    """test_compaction_e2e's queue model, keeping a copy of each call's messages."""

    def complete(self, messages, **kw):
        return super().complete(json.loads(json.dumps(messages)), **kw)


def assert_memory_heads(calls, rule=RULE):
    """Every call: system prompt, then the memory block holding `rule`, then the rest."""
    for msgs in calls:
        assert msgs[0]["role"] == "system"
        assert msgs[1]["role"] == "user" and msgs[1]["content"].startswith(MEMORY_MARK)
        assert rule in msgs[1]["content"]
        assert all(MEMORY_MARK not in str(m.get("content")) for m in msgs[2:])


RESUME = """
import json, sys, threading
sys.path.insert(0, sys.argv[3])
from tests.test_memory_run import QueueModel
from rlm.app import build_agent
from rlm.config import Config
from rlm.llm.types import Completion
from rlm.session.store import SessionStore
from pathlib import Path
home, sid = Path(sys.argv[1]), sys.argv[2]
session = SessionStore.open(sid, home)
llm = QueueModel("script:agent", [Completion(content="Continuing in UTC.")])
summarizer = QueueModel("script:summary", ["## Goal: summary"] * 5)  # if the resume compacts
cfg = Config(model="script:agent", compaction_model="script:summary", context_window=3000,
             reserve_tokens=1000, keep_recent_tokens=600, max_turns=3, home=home,
             context_tiers=False)
agent = build_agent(session, cfg, entry="resume", llm=llm, llm_factory=lambda s: summarizer)
with agent:
    list(agent.run("Go on."))
print(json.dumps(llm.calls))
"""


@pytest.mark.timeout(240)
def test_convention_heads_every_call_through_compactions_and_a_resume(tmp_path):
    from rlm.app import build_agent

    steps = [cell(0, "print(memory.update('state', '## In progress\\n- defining v0..v8\\n'))")]
    for k in range(1, 10):
        steps.append(cell(k, f"v{k} = {k}\nprint(' '.join(str(i * 7919) for i in range(250)))"))
    steps.append(Completion(content="Done."))
    llm = QueueModel("script:agent", steps)
    summarizer = QueueModel("script:summary", [f"## Goal\nsummary {i}" for i in range(40)])
    # context_tiers off: this test is about compactions (the tiers' relief comes first
    # otherwise); the memory is not an entry, so neither can touch it
    cfg = Config(model="script:agent", compaction_model="script:summary", context_window=3000,
                 reserve_tokens=1000, keep_recent_tokens=600, max_turns=20, home=tmp_path,
                 context_tiers=False)
    session = SessionStore.create(tmp_path, model="script:agent", task="memory e2e")
    agent = build_agent(session, cfg, llm=llm, llm_factory=lambda spec: summarizer)
    with agent:
        events = list(agent.run(f"{RULE}. Define v1..v9, printing a line of numbers each."))
    branch = session.branch()
    assert sum(isinstance(e, CompactionEntry) for e in branch) >= 3, events
    conv = (tmp_path / ".agent" / "conventions.md").read_text()
    assert f"- {RULE} (stated_by: user," in conv
    assert "- defining v0..v8" in (tmp_path / ".agent" / "state.md").read_text()
    assert len(llm.calls) == 11
    assert_memory_heads(llm.calls)
    after = [m for m in llm.calls if "compacted into the following summary" in str(m[2]["content"])]
    assert len(after) >= 3  # the summary comes after the memory, never before
    for prompt in summarizer.calls:  # the summariser is told memory exists, not given it
        assert ".agent/state.md" in prompt[-1]["content"] and MEMORY_MARK not in prompt[-1]["content"]
    writes = [e.data for e in branch if isinstance(e, CustomEntry) and e.custom_type == "memory_write"]
    assert [w["method"] for w in writes] == ["capture", "memory.update"]
    assert writes[0]["stated_by"] == "user" and writes[1]["file"] == "state"
    session.close()

    out = subprocess.run([sys.executable, "-c", RESUME, str(tmp_path), session.id, str(ROOT)],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    calls = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(calls) == 1
    assert_memory_heads(calls)
    assert "defining v0..v8" in calls[0][1]["content"]


@pytest.mark.timeout(120)
def test_user_convention_captured_and_an_agent_rewrite_is_logged_and_shown(tmp_path):
    from rlm.app import build_agent

    llm = QueueModel("script:agent", [
        cell(1, "memory.update('conventions', '- Revenue includes refunds', mode='replace')"),
        Completion(content="Changed."),
    ])
    session = SessionStore.create(tmp_path, model="script:agent", task="capture")
    agent = build_agent(session, Config(model="script:agent", home=tmp_path), llm=llm)
    with agent:
        events = list(agent.run("Revenue excludes refunds. Set up the revenue column."))
    assert any("recorded in .agent/conventions.md (stated_by: user)" in str(e) for e in events)
    assert "Revenue excludes refunds (stated_by: user" in llm.calls[0][1]["content"]
    result = [e for e in session.branch() if isinstance(e, MessageEntry) and e.role == "tool"][0]
    assert "changed convention(s) the user stated" in result.message["content"]  # the model sees it
    history = (tmp_path / ".agent" / "history.log").read_text().splitlines()
    # the change, then the run's own line (rlm.memory.runs)
    assert [json.loads(h)["action"] for h in history[-2:]] == ["convention_changed", "run"]
    assert any("changed convention(s) the user stated" in n.text for n in agent.notices)  # the user
    write = [e.data for e in session.branch()
             if isinstance(e, CustomEntry) and e.custom_type == "memory_write"][-1]
    assert write["changed_user_conventions"]
    assert "Revenue includes refunds" in llm.calls[1][1]["content"]  # re-read at the next call
    from rlm.notebook.export import export_session

    nb = export_session(session, tmp_path / "out.ipynb").read_text()
    assert "Project memory: capture -> .agent/conventions.md (stated by the user)" in nb
    assert "changed the user's convention(s)" in nb
    prelude = "".join(json.loads(nb)["cells"][0]["source"])  # a re-run outside rlm writes nothing
    assert "memory = _RlmNoOp('memory')" in prelude


def reminders(calls):
    return [m["content"] for m in calls[-1] if m["role"] == "user"
            and str(m["content"]).startswith("[Memory:")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("write", [False, True])
def test_reminder_after_a_completed_unit_without_a_write(tmp_path, write):
    from rlm.app import build_agent

    fix = "x = 1\nprint(x)" + ("\nmemory.log('fixed', 'x', 'x was undefined')" if write else "")
    llm = QueueModel("script:agent", [
        cell(1, "print(undefined_name)"),  # fails
        cell(2, fix),  # succeeds after the failure: a completed unit (turn 2)
        cell(3, "print(x + 1)"),
        Completion(content="Done: 2"),
    ])
    session = SessionStore.create(tmp_path, model="script:agent", task="remind")
    agent = build_agent(session, Config(model="script:agent", home=tmp_path), llm=llm)
    with agent:
        list(agent.run("Compute x + 1."))
    assert len(llm.calls) == 4
    assert reminders(llm.calls[:3]) == []
    got = reminders(llm.calls)
    if write:
        assert got == []
    else:
        assert len(got) == 1 and "a cell succeeded after a failed one in turn 2" in got[0]


@pytest.mark.timeout(120)
def test_no_reminder_without_a_completed_unit(tmp_path):
    from rlm.app import build_agent

    llm = QueueModel("script:agent", [cell(k, f"print({k})") for k in range(1, 5)]
                     + [Completion(content="Done: 4")])
    session = SessionStore.create(tmp_path, model="script:agent", task="no remind")
    agent = build_agent(session, Config(model="script:agent", home=tmp_path), llm=llm)
    with agent:
        list(agent.run("Print 1 to 4."))
    assert all(reminders([c]) == [] for c in llm.calls)


@pytest.mark.timeout(120)
def test_no_memory_and_children_are_read_only(tmp_path):
    from rlm.app import build_agent

    llm = QueueModel("script:agent", [Completion(content="Hi.")])
    session = SessionStore.create(tmp_path, model="script:agent", task="off")
    agent = build_agent(session, Config(model="script:agent", home=tmp_path, memory=False), llm=llm)
    with agent:
        list(agent.run("Always use UTC. Say hi."))
    assert all(MEMORY_MARK not in str(m.get("content")) for m in llm.calls[0])
    assert not (tmp_path / ".agent").exists()

    child_llm = QueueModel("script:agent", [Completion(content="Child done.")])
    child = build_agent(SessionStore.create(tmp_path, model="script:agent", task="child"),
                        Config(model="script:agent", home=tmp_path), entry="child",
                        llm=child_llm)
    with pytest.raises(RlmError, match="read-only in an rlm_query child"):
        child.handle_bridge("memory.update", {"file": "state", "content": "x"})
    assert MEMORY_MARK in child.handle_bridge("memory.show", {})["text"]
    ProjectMemory(tmp_path).init()
    with child:  # its end writes no `run` line either: the parent records its runs
        list(child.run("Always use UTC. Say hi."))
    assert (tmp_path / ".agent" / "history.log").read_text() == ""
    assert "Always use UTC" not in (tmp_path / ".agent" / "conventions.md").read_text()


@pytest.mark.timeout(120)
def test_a_fenced_model_gets_no_block_until_something_is_recorded(tmp_path, monkeypatch):
    """The local model's family (fenced code, no native tools) is not sent the guide while
    the memory is empty; once a convention is recorded the block comes, the same bytes in
    any directory (no absolute path). A tool-calling model gets the guide from the start."""
    from rlm.app import build_agent

    monkeypatch.chdir(tmp_path)

    class Fenced(QueueModel):
        native_tools = False

    llm = Fenced("script:agent", ["```python\nprint(6 * 7)\n```", "FINAL(42)",
                                  "```python\nprint(43)\n```", "FINAL(43)"])
    session = SessionStore.create(tmp_path, model="script:agent", task="fenced")
    with build_agent(session, Config(model="script:agent", home=tmp_path), llm=llm) as agent:
        list(agent.run("What is 6 * 7?"))
        list(agent.run(f"{RULE}. What is 43?"))
    assert len(llm.calls) == 4
    assert all(MEMORY_MARK not in str(m.get("content")) for c in llm.calls[:2] for m in c)
    assert_memory_heads(llm.calls[2:])
    assert str(tmp_path) not in llm.calls[2][1]["content"]

    native = QueueModel("script:agent", [Completion(content="Nothing to run.")])
    other = SessionStore.create(tmp_path, model="script:agent", task="native")
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")
    with build_agent(other, Config(model="script:agent", home=tmp_path), llm=native) as agent:
        list(agent.run("Say hello."))
    head = native.calls[0][1]["content"]
    assert head.startswith(MEMORY_MARK) and "(empty: nothing recorded yet)" in head


def test_the_reminder_is_not_given_to_a_fenced_model(tmp_path, monkeypatch):
    """bench.longrun (`staff`): told to record a line, the local model answered with the
    memory call itself, turn after turn, and a right report ended stuck. A fenced-code model
    gets no reminder; a tool-calling one does."""
    from rlm.agent.policy.memory_reminder import MemoryReminder
    from rlm.app import build_agent

    monkeypatch.chdir(tmp_path)

    class Fenced(QueueModel):
        native_tools = False

    for llm, expected in ((Fenced("script:agent", []), False),
                          (QueueModel("script:agent", []), True)):
        session = SessionStore.create(tmp_path, model="script:agent", task="r")
        agent = build_agent(session, Config(model="script:agent", home=tmp_path), llm=llm)
        assert any(isinstance(r, MemoryReminder) for r in agent.answers.rules) is expected
        agent.close()
