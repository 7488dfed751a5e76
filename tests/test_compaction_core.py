"""The summarizer prompts (exact, as the scripted model received them), the W1 fix,
perform_compaction's entries and the <ipython_state> notice."""

from __future__ import annotations

import json
from pathlib import Path

from rlm.compaction.core import perform_compaction
from rlm.compaction.notes import format_ipython_state
from rlm.compaction.plan import CompactionSettings
from rlm.compaction.summarize import SPLIT_HEADING, load_prompt
from rlm.errors import KernelBusy, KernelDied
from rlm.session.entries import CompactionEntry, CustomEntry, entry_from_dict
from rlm.session.store import SessionStore

FIXTURES = Path(__file__).parent / "fixtures" / "compaction"
NOTE = load_prompt("kernel_note") + "\n\n" + load_prompt("memory_note")  # the tail of every prompt


class ScriptedLLM:
    """Queue-based scripted model (fallback while rlm.llm.script is not importable)."""

    spec = "script:test"
    native_tools = True

    def __init__(self, replies):
        import threading

        self.replies, self.calls, self._lock = list(replies), [], threading.Lock()

    def complete(self, messages, *, tools=None, on_text=None, temperature=None, max_tokens=None,
                 on_call=None):
        from rlm.llm.types import Completion

        with self._lock:
            if not self.replies:
                raise AssertionError("scripted model ran out of replies")
            self.calls.append({"messages": messages, "max_tokens": max_tokens})
            return Completion(content=self.replies.pop(0))

    def context_window(self):
        return None


try:  # the project's scripted model, once it exists
    from rlm.llm.script import ScriptedLLM  # type: ignore[no-redef]  # noqa: F811
except ImportError:
    pass


def calls(llm):
    out = []
    for c in llm.calls:
        msgs = c["messages"] if isinstance(c, dict) else c
        out.append((msgs, c.get("max_tokens") if isinstance(c, dict) else None))
    return out


def session_from(name: str) -> SessionStore:
    s = SessionStore.in_memory()
    for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
        s.append(entry_from_dict(json.loads(line)))
    return s


class FakeKernel:
    def __init__(self, names=None, error=None, ops=None):
        self.names, self.error, self.ops, self.restarts = names or [], error, ops, 0

    def list_namespace(self, timeout=5.0):
        assert timeout == 5.0
        if self.error:
            raise self.error
        return {"names": self.names}

    def file_ops(self):
        return self.ops or {"read": [], "modified": []}


def test_exact_prompts_for_an_update_summary_with_instructions():
    s = session_from("after_compaction")
    llm = ScriptedLLM(["HIST", "PREFIX"])
    settings = CompactionSettings(reserve_tokens=1000, keep_recent_tokens=100)
    entry = perform_compaction(s, llm, settings, trigger="requested", instructions="Keep `growth`.")
    sent = calls(llm)
    assert len(sent) == 2
    by_kind = {("prefix" if "BEGINNING of a turn" in m[1]["content"] else "history"): (i, m, mt)
               for i, (m, mt) in enumerate(sent)}
    _, hist_msgs, hist_max = by_kind["history"]
    _, prefix_msgs, prefix_max = by_kind["prefix"]
    assert hist_msgs[0] == {"role": "system", "content": load_prompt("system")}
    assert "Do NOT continue the conversation" in hist_msgs[0]["content"]
    instr = load_prompt("instructions").replace("{instructions}", "Keep `growth`.")
    prev = entry_from_dict(json.loads((FIXTURES / "after_compaction.jsonl").read_text().splitlines()[15]))
    assert hist_msgs[1]["content"] == (
        "<conversation>\n"
        "[User]: Now add a monthly breakdown for store_3 as a chart in out/store3.png.\n\n"
        "[Assistant tool calls]:\nimport matplotlib\nmatplotlib.use('Agg')\n"
        "m3 = df[df.store == 'store_3'].set_index('date').amount.resample('ME').sum()\n"
        "ax = m3.plot(kind='bar')\nax.figure.savefig('out/store3.png')\nlen(m3)\n\n"
        "[Tool result]: 12\n\n"
        "[Assistant]: Saved the chart to out/store3.png (12 monthly bars).\n"
        "</conversation>\n\n"
        f"<previous-summary>\n{prev.summary}\n</previous-summary>\n\n"
        f"{load_prompt('update')}\n\n{instr}\n\n{NOTE}"
    )
    assert "PRESERVE all information" in hist_msgs[1]["content"]
    assert prefix_msgs[1]["content"] == (
        "<conversation>\n[User]: Also compute the year-over-year growth per store and save it "
        "to out/growth.csv.\n</conversation>\n\n"
        f"{load_prompt('turn_prefix')}\n\n{instr}\n\n{NOTE}"
    )
    assert (hist_max, prefix_max) in ((800, 500), (None, None))  # 0.8x / 0.5x reserve
    # the two calls run in parallel: call i got reply i; history comes first in the merge
    hist, prefix = ["HIST", "PREFIX"][by_kind["history"][0]], ["HIST", "PREFIX"][by_kind["prefix"][0]]
    assert entry.summary == (
        f"{hist}\n\n---\n\n{SPLIT_HEADING}\n\n{prefix}"
        "\n\n<read-files>\ndata/sales.csv\n</read-files>"
        "\n\n<modified-files>\nout/report.md\n</modified-files>"
    )
    assert entry.first_kept_entry_id == "a8" and entry.trigger == "requested"
    assert entry.instructions == "Keep `growth`." and entry.tokens_before == 1730
    assert entry.details == {"read_files": ["data/sales.csv"], "modified_files": ["out/report.md"]}


def test_w1_split_turn_without_complete_turn_carries_previous_summary():
    s = session_from("split_turn_no_complete_turn")
    llm = ScriptedLLM(["PREFIX SUMMARY"])
    settings = CompactionSettings(reserve_tokens=1000, keep_recent_tokens=1000)
    entry = perform_compaction(s, llm, settings, trigger="threshold", instructions="Keep s0.")
    (msgs, _), = calls(llm)  # one call: the history is the previous summary, unchanged
    prompt = msgs[1]["content"]
    assert prompt.startswith("<conversation>\n[User]: Profile every store")
    assert "<user-instructions>" in prompt and "Keep s0." in prompt and prompt.endswith(NOTE)
    prev = s.get("k2").summary
    assert entry.summary.startswith(f"{prev}\n\n---\n\n{SPLIT_HEADING}\n\nPREFIX SUMMARY")
    assert "No prior history" not in entry.summary
    assert entry.first_kept_entry_id == "p4a"


def test_ipython_state_lists_names_fragile_and_removed():
    s = session_from("after_compaction")
    names = [
        {"name": "df", "type": "DataFrame", "bytes": 2_400_000, "restorable": True, "reason": None},
        {"name": "top3", "type": "Series", "bytes": 300, "restorable": True, "reason": None},
        {"name": "conn", "type": "sqlite3.Connection", "bytes": 64, "restorable": False,
         "reason": "cannot pickle 'sqlite3.Connection' object"},
    ]
    k = FakeKernel(names, ops={"read": ["in.parquet"], "modified": []})
    entry = perform_compaction(s, ScriptedLLM(["H", "P"]), CompactionSettings(keep_recent_tokens=100),
                               trigger="threshold", kernel=k)
    state = s.branch()[-1]
    assert isinstance(state, CustomEntry) and state.custom_type == "ipython_state"
    assert state.parent_id == entry.id and state.display is False
    assert state.data["removed"] == ["tmp"]  # listed by the previous notice, gone now
    assert state.content == (
        "<ipython_state>\nThe IPython kernel persisted through this compaction (it was not "
        "restarted): every name below is still defined with its current value. Reuse them; "
        "do not recompute or redefine them. Outputs no longer shown are in `history.cell(N)` and `history.search(pattern)`.\nDefined names (3):\n- df: DataFrame, 2.3 MB\n"
        "- top3: Series, 300 B\n- conn: sqlite3.Connection, 64 B\n"
        "These would NOT survive a kernel restart (not snapshotted); keep how to rebuild them:\n"
        "- conn: cannot pickle 'sqlite3.Connection' object\n"
        "Removed since the previous state notice: tmp\n</ipython_state>"
    )
    assert "in.parquet" in entry.details["read_files"]
    assert k.restarts == 0
    assert "No user-defined names." in format_ipython_state([], [])


def test_dead_or_busy_kernel_writes_no_ipython_state():
    for err in (KernelDied("signal SIGKILL"), KernelBusy("busy")):
        s = session_from("after_compaction")
        entry = perform_compaction(s, ScriptedLLM(["H", "P"]), CompactionSettings(keep_recent_tokens=100),
                                   trigger="threshold", kernel=FakeKernel(error=err))
        assert isinstance(entry, CompactionEntry) and s.branch()[-1] is entry


def test_skipped_compaction_appends_hidden_outcome():
    s = session_from("after_compaction")
    llm = ScriptedLLM([])
    assert perform_compaction(s, llm, CompactionSettings(keep_recent_tokens=10**6), trigger="requested") is None
    out = s.branch()[-1]
    assert out.custom_type == "compaction_outcome" and out.content is None
    assert out.data["compacted"] is False and "nothing to summarize" in out.data["reason"]
    assert llm.calls == []
