"""Controller: threshold, requested (even when disabled, only during a turn), stale and
model-switch guards, overflow retry once then report, branch summary."""

from __future__ import annotations

from rlm.compaction.branch import summarize_branch
from rlm.compaction.controller import SCHEDULED_NOTE, CompactionController
from rlm.compaction.plan import CompactionSettings
from rlm.session.entries import BranchSummaryEntry, CompactionEntry, MessageEntry
from tests.test_compaction_core import FakeKernel, ScriptedLLM, calls, session_from


def controller(name="task_with_cells", *, window=4000, enabled=True, replies=("S1", "S2", "S3", "S4"),
               current="gpt-test"):
    s = session_from(name)
    llm = ScriptedLLM(list(replies))
    settings = CompactionSettings(enabled=enabled, reserve_tokens=1000, keep_recent_tokens=110)
    # the summary tier alone (tiers=False): the ladder before it is in test_context_tiers
    ctl = CompactionController(s, llm, settings, lambda: window, current_model_fn=lambda: current,
                               tiers=False)
    return s, llm, ctl


def assistant(s, usage, model="gpt-test", error=None):
    return s.append(MessageEntry(message={"role": "assistant", "content": "ok"},
                                 usage={"input_tokens": usage, "output_tokens": 0}, model=model, error=error))


def test_threshold_compacts_after_turn():
    s, llm, ctl = controller(window=4000)  # a7 reports 3730 tokens > 4000 - 1000
    entry = ctl.after_turn(FakeKernel([{"name": "df", "type": "DataFrame"}]))
    assert isinstance(entry, CompactionEntry) and entry.trigger == "threshold"
    assert s.branch()[-1].custom_type == "ipython_state"
    assert ctl.status()["last_compaction"]["id"] == entry.id
    # stale guard: no assistant message since the compaction -> no chain reaction
    assert ctl.after_turn(None) is None and len(llm.calls) == 1


def test_below_threshold_or_disabled_does_nothing():
    s, llm, ctl = controller(window=100_000)
    assert ctl.after_turn(None) is None
    s, llm, ctl = controller(window=4000, enabled=False)
    assert ctl.after_turn(None) is None and llm.calls == []


def test_stale_usage_older_than_compaction_cannot_trigger():
    s, llm, ctl = controller("after_compaction", window=1000)
    s.append(CompactionEntry(summary="later", first_kept_entry_id="a9", parent_id=None))
    s.append(MessageEntry(message={"role": "user", "content": "go on"}))
    # the newest assistant (a9, 1730 tokens) is older than the compaction
    assert ctl.after_turn(None) is None and llm.calls == []


def test_request_only_during_a_turn_and_runs_when_disabled():
    s, llm, ctl = controller(window=100_000, enabled=False)
    refused = ctl.request("focus on store_3")
    assert refused["scheduled"] is False and "while the model is working" in refused["reason"]
    ctl.turn_active = True
    assert ctl.request("focus on store_3") == {"scheduled": True, "note": SCHEDULED_NOTE}
    assert "resume automatically" in SCHEDULED_NOTE and ctl.status()["scheduled"] is True
    assert llm.calls == []  # deferred to the end of the turn
    entry = ctl.after_turn(None)
    assert entry.trigger == "requested" and entry.instructions == "focus on store_3"
    assert any("focus on store_3" in m[1]["content"] for m, _ in calls(llm))
    assert ctl.status()["scheduled"] is False
    st = ctl.status()
    assert st["context_window"] == 100_000 and st["percent"] == round(100 * st["tokens"] / 100_000, 1)


def test_overflow_retries_once_then_reports():
    s, llm, ctl = controller(window=4000)
    err = assistant(s, 0, error="context overflow")
    assert ctl.on_overflow(err.id, "gpt-test", None) == "retry"
    assert ctl.overflow_state == "attempted"
    assert isinstance(s.branch()[-1], CompactionEntry) and s.branch()[-1].trigger == "overflow"
    err2 = assistant(s, 0, error="context overflow")
    assert ctl.on_overflow(err2.id, "gpt-test", None) == "report"
    assert "larger context window" in ctl.overflow_message
    assert len(llm.calls) == 1  # one compaction (cut at u2: one call), no loop
    ctl.note_assistant_ok()
    assert ctl.overflow_state == "idle" and ctl.overflow_message is None


def test_overflow_from_previous_model_does_not_count():
    s, llm, ctl = controller(window=4000, current="gpt-big")
    err = assistant(s, 0, model="gpt-test", error="context overflow")
    assert ctl.on_overflow(err.id, "gpt-test", None) == "retry"
    assert ctl.overflow_state == "idle" and llm.calls == []


def test_overflow_with_nothing_to_compact_reports():
    s, llm, ctl = controller(window=4000)
    ctl.settings.keep_recent_tokens = 10**6
    err = assistant(s, 0, error="context overflow")
    assert ctl.on_overflow(err.id, "gpt-test", None) == "report" and llm.calls == []


def test_branch_summary_from_common_ancestor_newest_first():
    s, llm, _ = controller(replies=["SHORT", "BRANCH"])
    old_leaf = s.leaf_id
    # u2 23 + a6 74 + t5 9 + a7 18 = 124 tokens: a budget of 110 drops the oldest (u2)
    short = summarize_branch(s, old_leaf, "a5", llm, budget_tokens=110)
    assert "[User]" not in calls(llm)[0][0][1]["content"] and short.summary == "SHORT"
    llm.calls.clear()
    entry = summarize_branch(s, old_leaf, "a5", llm, budget_tokens=124)
    assert isinstance(entry, BranchSummaryEntry) and entry.parent_id == "a5"
    assert entry.from_id == old_leaf and entry.summary == "BRANCH"
    (msgs, _), = calls(llm)
    body = msgs[1]["content"]
    # the abandoned part is u2..a7: all of it fits in 124 tokens
    assert body.startswith("<conversation>\n[User]: Now add a monthly breakdown")
    assert "[Assistant]: Saved the chart" in body and "sales.csv" not in body.split("</conversation>")[0]
    assert s.branch()[-1] is entry
    assert summarize_branch(s, "a5", entry.id, llm, 100) is None  # nothing abandoned
