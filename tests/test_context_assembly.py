"""What compaction counts is what the model is sent (issue 59, item 2: one context
assembler, rlm.agent.assembly). Through the composition root with scripted models and
real kernels: an always-on rule file, a memory file and a child's `<children_state>`
note present, the tokens the compaction controller counts just before a model call equal
the tokens of the messages that call sent (counted with rlm.llm.tokens).

Before the assembler, compaction projected without the rules note: with one always-rule
file it counted 688 tokens where the model was sent 1,580, so the threshold and the
checkpoint rungs fired late."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm import app
from rlm.compaction.controller import CompactionController
from rlm.llm import get_llm
from rlm.llm.tokens import count_messages
from tests.rlmcli import call, script

pytestmark = pytest.mark.timeout(300)

RULE = ("---\nalways: true\n---\n" + "\n".join(
    f"- Step {i}: check the units of every column before summing it, report the totals "
    "in UTC-dated tables, and name the source file of every figure." for i in range(24)))
MEMORY = "## In progress\n" + "\n".join(f"- table t{i} checked, totals agree" for i in range(30))


# a parent cell's start: a child spawned, and at work once its first cell runs
SPAWN = ("import os, time\nh = rlm_spawn('count the big table', name='slowpoke')\n"
         "while not os.path.exists('started'):\n    time.sleep(0.05)\n")


def slow_child(tmp_path: Path) -> str:
    """A child model whose first cell says it started, then works on until cancelled."""
    return script(tmp_path / "child.json", [
        call("import time\nopen('started', 'w').close()\nwhile True:\n    time.sleep(0.05)"),
        call("final('never')")])


class Models:
    """The run's model factory, keeping each model it builds per spec."""

    def __init__(self) -> None:
        self.built: dict[str, list] = {}

    def __call__(self, spec: str):
        llm = get_llm(spec)
        self.built.setdefault(spec, []).append(llm)
        return llm


def counted_before_each_prompt(run: app.SessionRun, prompt: str) -> int:
    """Drive `prompt`; what the compaction controller counted just before its first call."""
    agent = run.agent
    assert agent is not None and agent.parts.get(CompactionController) is not None
    seen: list[int] = []
    agent.chain.prompt.append(lambda a: seen.append(a.parts.get(CompactionController).context_tokens()) or [])
    run.drive(prompt)
    [tokens] = seen
    return tokens


def test_compaction_counts_the_tokens_the_model_call_sends(tmp_path: Path):
    (tmp_path / ".rlm" / "rules").mkdir(parents=True)
    (tmp_path / ".rlm" / "rules" / "x.md").write_text(RULE)
    (tmp_path / ".agent").mkdir()
    (tmp_path / ".agent" / "state.md").write_text(MEMORY)
    child = slow_child(tmp_path)
    first = script(tmp_path / "p1.json", [
        call(SPAWN + "final('left it at work')")])
    models = Models()
    run = app.SessionRun.new("run", "go", app.RunOptions(
        overrides={"model": first, "sub_model": child}), llm_factory=models)
    with run:
        counted1 = counted_before_each_prompt(run, "go")
        sid = run.session.id
    [parent] = models.built[first]
    sent1 = parent.calls[0]
    assert any("Step 23: check the units" in str(m["content"]) for m in sent1)  # the rule
    assert any("table t29 checked" in str(m["content"]) for m in sent1)  # the memory
    assert counted1 == count_messages(sent1)

    # the next run's model reads the child's note (its child was cancelled at the close)
    second = script(tmp_path / "p2.json", [call("final('ok')")])
    again = app.SessionRun.open("resume", sid, app.RunOptions(
        overrides={"model": second}), llm_factory=models)
    with again:
        counted2 = counted_before_each_prompt(again, "and now?")
    [parent2] = models.built[second]
    sent2 = parent2.calls[0]
    assert sum("<children_state>" in str(m["content"]) for m in sent2) == 1
    assert any("Step 23: check the units" in str(m["content"]) for m in sent2)
    assert any("table t29 checked" in str(m["content"]) for m in sent2)
    assert counted2 == count_messages(sent2)


def test_each_relief_note_is_told_again_after_every_compaction_and_shown_once(tmp_path: Path):
    """Relief notes come from providers (rlm.compaction.notes) written at one place after
    every relief: `/compact` in a chat (app.compact_now), twice, with a child at work.
    Before, `/compact` wrote `<ipython_state>` only: the model never heard of its child
    again. Now each compaction tells both, and the model sees each note once."""
    child = slow_child(tmp_path)
    parent = script(tmp_path / "parent.json", [
        call(SPAWN + "rows = list(range(50))\nprint(rows)"),
        call("final('left it at work')"),
        call("total = sum(rows)\nprint(total)"),
        call("final(str(total))"),
        call("final('still at work')"),
    ])
    summaries = script(tmp_path / "summary.json", [f"## Goal\nsummary {i}" for i in range(8)])
    models = Models()
    run = app.SessionRun.new("chat", None, app.RunOptions(overrides={
        "model": parent, "sub_model": child, "compaction_model": summaries,
        "keep_recent_tokens": 64}), llm_factory=models)
    with run:
        run.drive("go")
        assert app.compact_now(run.agent) is not None
        run.drive("sum the rows")
        assert app.compact_now(run.agent) is not None
        run.drive("and the child?")
        log = list(run.session.branch())
    [model] = models.built[parent]
    last = "\n".join(str(m["content"]) for m in model.calls[-1][1:])  # after the system prompt
    assert last.count("<children_state>") == 1 and "slowpoke" in last.split(
        "<children_state>")[1]
    assert last.count("<ipython_state>") == 1 and "- total:" in last
    kinds = [getattr(e, "custom_type", None) for e in log]
    assert kinds.count("ipython_state") == 2 and kinds.count("children_state") == 2


def test_a_note_provider_that_disagrees_with_the_projection_is_refused():
    """A provider says whether its note supersedes the previous one; the projection (a pure
    function of the log) must agree, or its older notes would stay, or vanish, unseen."""
    from rlm.compaction.notes import COMPACTION, ReliefNotes

    class Goal:
        kind, supersedes, after = "thread_goal_state", True, COMPACTION

        def write(self, session, before, kernel):
            raise AssertionError("never written")

    with pytest.raises(ValueError, match="SUPERSEDED_CUSTOM"):
        ReliefNotes().add(Goal())
