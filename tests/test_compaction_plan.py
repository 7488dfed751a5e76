"""Pure planning on checked-in JSONL fixtures: cut points, split turns, rolling start,
serialization, token accounting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm.compaction.plan import (
    CompactionSettings,
    Preparation,
    Skip,
    context_tokens,
    entry_tokens,
    merge_file_ops,
    plan_compaction,
    prepare_compaction,
    serialize_entries,
    should_compact,
)
from rlm.config import Config
from rlm.session.entries import CompactionEntry, MessageEntry, entry_from_dict

FIXTURES = Path(__file__).parent / "fixtures" / "compaction"


def load(name: str):
    lines = (FIXTURES / f"{name}.jsonl").read_text().splitlines()
    return [entry_from_dict(json.loads(line)) for line in lines if line.strip()]


def plan(branch, keep: int, **kw) -> Preparation:
    p = plan_compaction(branch, CompactionSettings(keep_recent_tokens=keep), **kw)
    assert isinstance(p, Preparation), p
    return p


def ids(entries):
    return [e.id for e in entries]


def test_settings_from_config_and_threshold():
    s = CompactionSettings.from_config(Config(reserve_tokens=100, keep_recent_tokens=50))
    assert (s.enabled, s.reserve_tokens, s.keep_recent_tokens) == (True, 100, 50)
    assert should_compact(901, 1000, s) and not should_compact(900, 1000, s)
    assert not should_compact(10**6, None, s) and not should_compact(10**6, 0, s)
    s.enabled = False
    assert not should_compact(10**6, 1000, s)


@pytest.mark.parametrize("name", ["task_with_cells", "after_compaction", "split_turn_no_complete_turn"])
def test_cut_point_is_never_a_tool_result(name):
    branch = load(name)
    by_id = {e.id: e for e in branch}
    for keep in range(10, 6000, 37):
        p = prepare_compaction(branch, CompactionSettings(keep_recent_tokens=keep))
        if p is None:
            continue
        first = by_id[p.first_kept_entry_id]
        assert not (isinstance(first, MessageEntry) and first.role == "tool"), keep
        # every kept tool result still has its call kept
        kept = branch[branch.index(first):]
        kept_calls = {
            c["id"] for e in kept if isinstance(e, MessageEntry) for c in e.message.get("tool_calls") or []
        }
        for e in kept:
            if isinstance(e, MessageEntry) and e.role == "tool":
                assert e.message["tool_call_id"] in kept_calls


def test_cut_at_user_message_is_not_a_split_turn():
    # a7 18 + t5 9 + a6 74 + u2 23 = 124 tokens: keeping 110 lands the walk on u2
    branch = load("task_with_cells")
    assert [entry_tokens(e) for e in branch[-4:]] == [23, 74, 9, 18]
    p = plan(branch, 110)
    assert p.first_kept_entry_id == "u2" and not p.is_split_turn and p.turn_prefix == []
    assert ids(p.history) == ["u1", "a1", "t1", "a2", "t2", "h1", "a3", "t3", "a4", "t4", "a5"]


def test_split_turn_detected_at_assistant_cut():
    p = plan(load("task_with_cells"), 100)
    assert p.first_kept_entry_id == "a6" and p.is_split_turn
    assert ids(p.turn_prefix) == ["u2"]
    assert ids(p.history)[-1] == "a5"


def test_custom_entry_with_content_is_a_turn_start():
    p = plan(load("task_with_cells"), 300)  # the walk stops inside the heartbeat's turn
    assert p.first_kept_entry_id == "a3" and ids(p.turn_prefix) == ["h1"]
    assert ids(p.history) == ["u1", "a1", "t1", "a2", "t2"]


def test_rolling_start_at_previous_first_kept_entry():
    branch = load("after_compaction")
    p = plan(branch, 100)
    # the region starts at k1.first_kept_entry_id (u2), not at the start of the session
    assert ids(p.history) == ["u2", "a6", "t5", "a7"]  # k1 and the old ipython_state dropped
    assert ids(p.turn_prefix) == ["u3"] and p.first_kept_entry_id == "a8"
    assert p.previous_summary.startswith("## Goal\nTop-3 stores report")
    assert p.read_files == ["data/sales.csv"] and p.modified_files == ["out/report.md"]


def test_file_ops_accumulate_and_modified_wins():
    p = plan(load("after_compaction"), 100, file_ops={"read": ["out/report.md", "b.csv"], "modified": ["out/growth.csv"]})
    assert p.read_files == ["b.csv", "data/sales.csv"]
    assert p.modified_files == ["out/growth.csv", "out/report.md"]
    assert merge_file_ops(None, None) == ([], [])


def test_skip_reasons():
    branch = load("after_compaction")
    s = plan_compaction(branch, CompactionSettings(keep_recent_tokens=5000))
    assert isinstance(s, Skip) and "nothing to summarize" in s.reason
    comp = CompactionEntry(summary="x", first_kept_entry_id="a9", parent_id="a9")
    s = plan_compaction([*branch, comp], CompactionSettings(keep_recent_tokens=10))
    assert isinstance(s, Skip) and "already compacted" in s.reason
    assert prepare_compaction([], CompactionSettings()) is None


def test_context_tokens_uses_usage_floored_by_local_count():
    branch = load("after_compaction")
    assert context_tokens(branch) == 1700 + 30  # a9's usage, newer than k1
    # a provider that under-reports cannot hide the stored history
    a9 = branch[-1]
    a9.usage = {"input_tokens": 1, "output_tokens": 1}
    local = context_tokens(branch)
    assert 250 < local < 400
    # usage older than the latest compaction is ignored: only the local count remains
    before = load("after_compaction")[:-5]  # ends at the ipython_state after k1
    # k1 62 + u2..a7 124 + s1 21 + 3 priming the reply (a prompt's count, as the model
    # call's: rlm.llm.tokens.count_messages); a7 usage (3730) ignored
    assert context_tokens(before) == 210


def test_serialized_conversation_exact():
    p = plan(load("after_compaction"), 100)
    assert p.history_text == (
        "[User]: Now add a monthly breakdown for store_3 as a chart in out/store3.png.\n\n"
        "[Assistant tool calls]:\n"
        "import matplotlib\nmatplotlib.use('Agg')\n"
        "m3 = df[df.store == 'store_3'].set_index('date').amount.resample('ME').sum()\n"
        "ax = m3.plot(kind='bar')\nax.figure.savefig('out/store3.png')\nlen(m3)\n\n"
        "[Tool result]: 12\n\n"
        "[Assistant]: Saved the chart to out/store3.png (12 monthly bars)."
    )
    assert p.prefix_text == (
        "[User]: Also compute the year-over-year growth per store and save it to out/growth.csv."
    )


def test_tool_results_truncated_and_custom_as_context():
    text = serialize_entries(load("task_with_cells")[:6])
    assert "[... 2120 more characters truncated ...]" in text
    result = text.split("[Tool result]: ", 1)[1]
    head, rest = result.split("\n[... 2120 more characters truncated ...]\n", 1)
    assert len(head) == 1200  # head and tail kept: a traceback's last line survives
    assert rest.split("\n\n[Assistant tool calls]", 1)[0].endswith("119  2025-12-08  store_0  403.00")
    assert "[Context]: Heartbeat: 10 minutes elapsed. Continue the task." in text
    assert "[Assistant]: I'll load the CSV first.\n\n[Assistant tool calls]:\nimport pandas" in text


def test_a_large_context_entry_is_cut_to_head_and_tail_for_the_summariser():
    """Before: a context entry went to the summariser whole; a notebook import of 16,000
    characters alone filled most of the local model's window in the summary call."""
    from rlm.compaction.plan import CONTEXT_MAX_CHARS
    from rlm.session.entries import CustomEntry

    body = "HEAD " + "word " * 4000 + "TAIL"
    text = serialize_entries([CustomEntry(custom_type="notebook_import", content=body)])
    assert text.startswith("[Context]: HEAD ") and text.endswith("TAIL")
    assert len(text) < CONTEXT_MAX_CHARS + 200 and "more characters truncated" in text


def test_the_running_count_equals_counting_every_message_as_lists_grow_and_change():
    """count_sum reuses the sums of the prefix a list shares by identity with the longest
    list it counted; whatever the lists do, the total is the plain sum."""
    from rlm.llm.tokens import count_message, count_sum

    def msg(i: int) -> dict:
        return {"role": "user" if i % 2 else "assistant", "content": f"message {i} " * (i % 7)}

    msgs = [msg(i) for i in range(30)]
    plain = lambda ms: sum(count_message(m) for m in ms)  # noqa: E731
    lists = [msgs[:5], msgs[:12], msgs[:3], msgs[:12], msgs[:30],
             [*msgs[:4], msg(99), *msgs[5:30]],  # one replaced in the middle
             msgs[:30], [msgs[0], msg(100), *msgs[1:20]],  # one inserted after the first
             [], msgs[:1], [dict(m) for m in msgs[:10]]]  # equal content, other objects
    for ms in lists:
        assert count_sum(ms) == plain(ms)
