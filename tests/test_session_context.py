"""Context projection: compaction, fenced vs native, byte-stable prefix; loader property."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.errors import SessionCorrupt
from rlm.session.context import MISSING_RESULT, SUMMARY_PREFIX, build_messages
from rlm.session.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    MessageEntry,
    ModelChangeEntry,
)
from rlm.session.store import SessionStore


def _call(cid: str, code: str) -> dict:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": "python", "arguments": json.dumps({"code": code})},
    }


def _turn(store: SessionStore, n: int) -> None:
    store.append(MessageEntry(message={"role": "user", "content": f"task {n}"}))
    store.append(
        MessageEntry(
            message={
                "role": "assistant",
                "content": "",
                "tool_calls": [_call(f"a{n}", "x=1"), _call(f"b{n}", "x")],
            }
        )
    )
    store.append(MessageEntry(message={"role": "tool", "tool_call_id": f"a{n}", "content": ""}))
    store.append(
        MessageEntry(
            message={"role": "tool", "tool_call_id": f"b{n}", "content": "1"},
            cell={"execution_count": 7},
        )
    )
    store.append(MessageEntry(message={"role": "assistant", "content": f"answer {n}"}))


def test_native_projection_is_as_stored():
    s = SessionStore.in_memory()
    _turn(s, 1)
    s.append(ModelChangeEntry(model="other"))
    s.append(MessageEntry(message={"role": "assistant", "content": "x"}, error="boom"))
    msgs = build_messages(s.branch(), system_prompt="SYS", native_tools=True)
    assert msgs[0] == {"role": "system", "content": "SYS"}
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert msgs[2]["tool_calls"][0]["id"] == "a1"
    assert msgs[4] == {"role": "tool", "tool_call_id": "b1", "content": "1"}


def test_fenced_projection_text_only_and_merged_results():
    s = SessionStore.in_memory()
    _turn(s, 1)
    msgs = build_messages(s.branch(), system_prompt="SYS", native_tools=False)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
    assert "tool_calls" not in msgs[2]
    assert msgs[2]["content"] == "```python\nx=1\n```\n\n```python\nx\n```"
    assert msgs[3]["content"] == "Output of cell [1]:\n\n\nOutput of cell [7]:\n1"


def test_compaction_projection_summary_then_kept_entries():
    s = SessionStore.in_memory()
    _turn(s, 1)
    kept = s.append(MessageEntry(message={"role": "user", "content": "task 2"}))
    s.append(MessageEntry(message={"role": "assistant", "content": "answer 2"}))
    s.append(CompactionEntry(summary="S1", first_kept_entry_id=kept.id, tokens_before=50))
    s.append(CustomEntry(custom_type="ipython_state", display=False, content="<ipython_state/>"))
    s.append(CustomEntry(custom_type="silent", data={"a": 1}))  # content None: skipped
    s.append(BranchSummaryEntry(summary="other branch"))
    s.append(MessageEntry(message={"role": "user", "content": "task 3"}))
    msgs = build_messages(s.branch(), system_prompt="SYS", native_tools=True)
    assert msgs[1]["role"] == "user"
    assert msgs[1]["content"] == f"{SUMMARY_PREFIX}\n\n<summary>\nS1\n</summary>"
    assert [m["content"] for m in msgs[2:]][:3] == ["task 2", "answer 2", "<ipython_state/>"]
    assert "<branch_summary>\nother branch\n</branch_summary>" in msgs[5]["content"]
    assert msgs[-1]["content"] == "task 3"
    # a second compaction wins; the first is not repeated
    s.append(CompactionEntry(summary="S2", first_kept_entry_id=None))
    msgs = build_messages(s.branch(), system_prompt="SYS", native_tools=True)
    assert len(msgs) == 2 and "S2" in msgs[1]["content"]
    assert s.messages(system_prompt="SYS", native_tools=True) == msgs


def test_dangling_tool_call_gets_placeholder_in_native_mode():
    s = SessionStore.in_memory()
    s.append(
        MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [_call("c", "1")]})
    )
    s.append(MessageEntry(message={"role": "user", "content": "stop"}))
    msgs = build_messages(s.branch(), system_prompt="", native_tools=True)
    assert msgs[2] == {"role": "tool", "tool_call_id": "c", "content": MISSING_RESULT}


def test_a_note_logged_while_a_call_runs_waits_for_its_result():
    """A handler may log a note (a `<children_state>`) or the user type a message while a
    cell runs: between a native call and its result, where no provider takes anything.
    It is shown after the result, and the result stays the call's."""
    for incremental in (True, False):
        s = SessionStore.in_memory()
        if incremental:
            s.messages(system_prompt="", native_tools=True)
        s.append(MessageEntry(message={"role": "assistant", "content": "",
                                       "tool_calls": [_call("c", "1"), _call("d", "2")]}))
        s.append(MessageEntry(message={"role": "tool", "tool_call_id": "c", "content": "1"}))
        s.append(CustomEntry(custom_type="children_state", display=False, content="<note/>"))
        s.append(MessageEntry(message={"role": "user", "content": "typed meanwhile"}))
        held = s.messages(system_prompt="", native_tools=True)  # d not answered yet
        assert [m.get("content") for m in held[2:]] == ["1", MISSING_RESULT, "<note/>",
                                                        "typed meanwhile"]
        s.append(MessageEntry(message={"role": "tool", "tool_call_id": "d", "content": "2"}))
        msgs = s.messages(system_prompt="", native_tools=True)
        assert msgs == build_messages(s.branch(), system_prompt="", native_tools=True)
        assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in msgs[2:]] == [
            ("tool", "c", "1"), ("tool", "d", "2"), ("user", None, "<note/>"),
            ("user", None, "typed meanwhile")]


def test_prefix_byte_stable_and_incremental_matches_pure():
    for native in (True, False):
        s = SessionStore.in_memory()
        prev = json.dumps(s.messages(system_prompt="SYS", native_tools=native))
        for n in range(5):
            _turn(s, n)
            now = s.messages(system_prompt="SYS", native_tools=native)
            text = json.dumps(now)
            assert text.startswith(prev[:-1])  # old list is a prefix of the new one
            assert now == build_messages(s.branch(), system_prompt="SYS", native_tools=native)
            prev = text


def test_a_prefix_of_the_live_branch_is_projected_as_afresh():
    """`projection_of(branch()[:n])` (what compaction's counts take each turn) comes from
    the incremental projection where it can; it always equals a fresh projection, across
    merged cell outputs, held notes, superseded state notes and a compaction."""
    for native in (True, False):
        s = SessionStore.in_memory()
        kw = {"system_prompt": "SYS", "native_tools": native}
        for n in range(3):
            _turn(s, n)
            s.messages(**kw)  # the incremental projector follows the appends
            s.append(MessageEntry(message={"role": "assistant", "content": "",
                                           "tool_calls": [_call(f"h{n}", "1")]}))
            s.append(CustomEntry(custom_type="children_state", display=False,
                                 content=f"<note {n}/>"))
            s.messages(**kw)
            s.append(MessageEntry(message={"role": "tool", "tool_call_id": f"h{n}",
                                           "content": "held"}))
            s.append(CustomEntry(custom_type="ipython_state", display=False,
                                 content=f"<ipython_state {n}/>"))
        kept = s.append(MessageEntry(message={"role": "user", "content": "kept"}))
        s.append(CompactionEntry(summary="S", first_kept_entry_id=kept.id, tokens_before=9))
        _turn(s, 9)
        branch = s.branch()
        for n in range(len(branch) + 1):
            assert s.projection_of(branch[:n], **kw) == build_messages(branch[:n], **kw), n
        assert s.projection_of(list(branch), **kw) == build_messages(branch, **kw)


def test_store_cache_follows_set_leaf():
    s = SessionStore.in_memory()
    _turn(s, 1)
    first = s.entries[0]
    s.messages(system_prompt="S", native_tools=True)
    s.set_leaf(first.id)
    s.append(MessageEntry(message={"role": "assistant", "content": "branch"}))
    assert [m["content"] for m in s.messages(system_prompt="S", native_tools=True)] == [
        "S",
        "task 1",
        "branch",
    ]


# -- loader property -----------------------------------------------------------------------


def _sample(tmp_path):
    s = SessionStore.create(tmp_path / "home")
    _turn(s, 1)
    s.close()
    return s.path, s.path.read_bytes()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(junk=st.binary(min_size=1, max_size=40), where=st.floats(0, 1), append=st.booleans())
def test_loader_never_crashes_or_rewrites(tmp_path_factory, junk, where, append):
    path, original = _sample(tmp_path_factory.mktemp("p"))
    pos = len(original) if append else int(where * len(original))
    mutated = original[:pos] + junk + original[pos:]
    path.write_bytes(mutated)
    try:
        store = SessionStore.open(path)
    except SessionCorrupt:
        assert path.read_bytes() == mutated  # an error never rewrites
        return
    after = path.read_bytes()
    backups = list(path.parent.glob(f"{path.name}.v*.bak"))
    if after != mutated and backups:  # junk in the header's "version" key reads as an older
        assert [b.read_bytes() for b in backups] == [mutated]  # session: migrated, original kept
    elif after != mutated:  # else only torn-tail recovery may change the file
        assert store.recovered is not None
        assert after + store.recovered.read_bytes() == mutated
    assert len(store.entries) >= 1
