"""Tiers 1-2 (prune, shake) as pure decisions on a built transcript, their records in the
log (projection, resume, export), the cache-aware tail, the guards and the ladder."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from rlm.compaction.ladder import LowYieldGuard, apply_tier, relieve
from rlm.compaction.plan import context_tokens
from rlm.compaction.tiers import (
    RELIEF_CUSTOM,
    Replacement,
    TierSettings,
    plan_prune,
    plan_shake,
)
from rlm.session.context import build_messages
from rlm.session.entries import CustomEntry, MessageEntry
from rlm.session.store import SessionStore

NUMBERS = " ".join(str(i * 7919) for i in range(300))  # ~600 tokens of output


def add_cell(s, k: int, code: str, output: str, status: str = "ok",
             binds: list[str] | None = None) -> MessageEntry:
    """A cell and its result; `binds`: the names the kernel said it bound (the real
    kernel's word on such cells: tests/test_cell_binds.py; None: not recorded)."""
    cell = {"status": status, "execution_count": k, "shaped": output}
    if binds is not None:
        cell["binds"] = binds
    s.append(MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{k}", "type": "function",
         "function": {"name": "python", "arguments": json.dumps({"code": code})}}]}))
    return s.append(MessageEntry(
        message={"role": "tool", "tool_call_id": f"c{k}", "name": "python", "content": output},
        cell=cell))  # type: ignore[return-value]


def transcript(s, *, pinned: bool = False):
    """Cell 3 binds `df` and `m`; cell 7 rebinds both; cell 5's `for i` never counts."""
    s.append(MessageEntry(message={"role": "user", "content": "analyse the numbers"}))
    ids = {}
    for k in range(1, 9):
        if k == 3:
            code, binds = "df = list(range(300))\nm = max(df)\nprint(' '.join(map(str, df)))", \
                ["df", "m"]
            if pinned:
                code += "  # rlm: keep"
        elif k == 5:
            code, binds = "for i in range(3):\n    print(i)", ["i"]
        elif k == 7:
            code, binds = "df = [x * 2 for x in range(300)]\nm = 0", ["df", "m"]
        else:
            code, binds = f"v{k} = {k}\nprint({k})", [f"v{k}"]
        ids[k] = add_cell(s, k, code, NUMBERS if k in (2, 3, 4) else f"out {k}",
                          binds=binds).id
    return ids


def native(branch):
    return build_messages(list(branch), system_prompt="sys", native_tools=True)


COLD = TierSettings(warm_suffix_tokens=10**9)  # every candidate is in the cheap tail


def test_a_cell_whose_binds_are_not_known_is_never_superseded(tmp_path):
    """A log from before the kernel's record (or a kernel without kernel_ext): nothing
    says what the cell bound, so nothing supersedes it."""
    s = SessionStore.create(tmp_path / "s", model="m", task="t")
    add_cell(s, 1, "df = list(range(300))\nprint(df)", NUMBERS)
    add_cell(s, 2, "df = [0]\nprint(df)", "[0]", binds=["df"])
    assert plan_prune(s.branch(), COLD) == []
    add_cell(s, 3, "df = list(range(300))\nprint(df)", NUMBERS, binds=["df"])
    add_cell(s, 4, "df = [0]\nprint(df)", "[0]", binds=["df"])
    assert [r.reason for r in plan_prune(s.branch(), COLD)] == ["superseded"]


def test_names_all_rebound_later_supersede_the_result_and_the_projection_shows_it(tmp_path):
    s = SessionStore.create(tmp_path, model="m", task="t")
    ids = transcript(s)
    plan = plan_prune(s.branch(), COLD)
    assert [(r.entry_id, r.reason, r.cell) for r in plan] == [(ids[3], "superseded", 3)]
    assert plan[0].text.startswith("[superseded by cell 7")
    assert apply_tier(s, "prune", "threshold", plan, None) is not None
    msgs = native(s.branch())
    shown = [m["content"] for m in msgs if m.get("role") == "tool"]
    assert shown[2].startswith("[superseded by cell 7") and "history.cell(3)" in shown[2]
    assert shown[1] == NUMBERS and shown[3] == NUMBERS  # cells 2 and 4 are untouched
    # resumed: the log on disk projects byte-identically
    again = SessionStore.open(s.path)
    assert json.dumps(native(again.branch())) == json.dumps(msgs)
    # and the record tells what was replaced and what it saved
    rec = again.branch()[-1]
    assert isinstance(rec, CustomEntry) and rec.custom_type == RELIEF_CUSTOM
    assert rec.content is None and rec.data["replaced"][0]["id"] == ids[3]
    assert rec.data["tokens_after"] < rec.data["tokens_before"]


def test_a_protected_result_is_never_touched():
    s = SessionStore.in_memory()
    transcript(s, pinned=True)
    assert plan_prune(s.branch(), COLD) == []
    shaken = plan_shake(s.branch(), TierSettings(manual_protect_tokens=100), manual=True)
    assert shaken and all(r.cell != 3 for r in shaken)


def test_a_repeated_traceback_is_uneventful():
    s = SessionStore.in_memory()
    tb = "Traceback (most recent call last):\n" + "  File x\n" * 80 + "KeyError: 'price'"
    first = add_cell(s, 1, "df['price']", tb, status="error")
    add_cell(s, 2, "df['price'] + 1", tb, status="error")
    plan = plan_prune(s.branch(), COLD)
    assert [(r.entry_id, r.reason) for r in plan] == [(first.id, "uneventful")]


def test_prune_stays_in_the_warm_tail_and_keeps_the_prefix_unless_the_cache_is_cold():
    s = SessionStore.in_memory()
    ids = transcript(s)
    for k in range(9, 14):  # ~3,000 tokens after cell 3's result
        add_cell(s, k, f"w{k} = {k}\nprint(w{k})", NUMBERS, binds=[f"w{k}"])
    add_cell(s, 14, "w13 = 0", "", binds=["w13"])  # supersedes cell 13 (its result is in the tail)
    warm = TierSettings(warm_suffix_tokens=1000)
    plan = plan_prune(s.branch(), warm, now=datetime.now(UTC))
    assert ids[3] not in {r.entry_id for r in plan}  # deep in the cached prefix: kept
    assert [r.cell for r in plan] == [13]
    before = native(s.branch())
    apply_tier(s, "prune", "threshold", plan, None)
    after = native(s.branch())
    first_changed = next(i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b)
    kept = len(json.dumps(before[:first_changed]))
    assert kept / len(json.dumps(before)) > 0.8  # the byte-stable prefix is kept
    # idle past the cache's retention: the cold prefix may be rewritten at once
    later = datetime.now(UTC) + timedelta(hours=1)
    assert ids[3] in {r.entry_id for r in plan_prune(s.branch(), warm, now=later)}


def test_shake_protects_the_recent_window_and_needs_a_minimum_saving():
    s = SessionStore.in_memory()
    transcript(s)
    auto = TierSettings(protect_recent_tokens=700, min_savings_tokens=100)
    shaken = plan_shake(s.branch(), auto)
    assert {r.cell for r in shaken} == {2, 3}  # cell 4's output is inside the window
    assert all("history.cell(" in r.text for r in shaken)
    assert plan_shake(s.branch(), TierSettings(protect_recent_tokens=700,
                                               min_savings_tokens=10_000)) == []


def test_a_tier_that_does_not_shrink_is_rejected_and_logged():
    s = SessionStore.in_memory()
    ids = transcript(s)
    longer = Replacement(ids[5], "x " * 500, "shaken", 5, 1)
    assert apply_tier(s, "shake", "threshold", [longer], None) is None
    last = s.branch()[-1]
    assert last.custom_type == "compaction_outcome" and "would not shrink" in last.data["reason"]
    assert not any(isinstance(e, CustomEntry) and e.custom_type == RELIEF_CUSTOM
                   for e in s.branch())


def test_a_torn_relief_record_is_never_projected(tmp_path):
    s = SessionStore.create(tmp_path, model="m", task="t")
    transcript(s)
    before = native(s.branch())
    apply_tier(s, "prune", "threshold", plan_prune(s.branch(), COLD), None)
    raw = s.path.read_bytes()
    s.path.write_bytes(raw[: len(raw) - 40])  # killed mid-append
    assert json.dumps(native(SessionStore.open(s.path).branch())) == json.dumps(before)


def test_relieve_stops_at_the_limit_prune_first():
    s = SessionStore.in_memory()
    transcript(s)
    total = context_tokens(s.branch())
    relief = relieve(s, COLD, "threshold", limit=total - 100)
    assert [r.data["tier"] for r in relief.records] == ["prune"]  # prune was enough
    assert relief.tokens_after <= total - 100


def test_low_yield_guard_stops_after_the_set_count_with_one_notice():
    g = LowYieldGuard(min_fraction=0.05, count=3)
    assert g.record(100, 10_000) is None and g.record(100, 10_000) is None
    notice = g.record(100, 10_000)
    assert notice and "stopped" in notice and g.stopped
    assert g.record(100, 10_000) is None  # said once
    g.reset()
    assert not g.stopped


def test_a_summary_that_does_not_shrink_the_context_is_rejected():
    from rlm.compaction.core import perform_compaction
    from rlm.compaction.plan import CompactionSettings
    from tests.test_compaction_core import ScriptedLLM

    s = SessionStore.in_memory()
    transcript(s)
    llm = ScriptedLLM(["word " * 6000])  # a summary longer than what it replaces
    entry = perform_compaction(s, llm, CompactionSettings(keep_recent_tokens=50),
                               trigger="threshold")
    assert entry is None
    last = s.branch()[-1]
    assert last.custom_type == "compaction_outcome" and "would not shrink" in last.data["reason"]


def test_a_run_that_keeps_refilling_stops_compacting_with_one_notice():
    from rlm.compaction.controller import CompactionController
    from rlm.compaction.plan import CompactionSettings
    from tests.test_compaction_core import ScriptedLLM

    s = SessionStore.in_memory()
    llm = ScriptedLLM(["short summary"] * 40)
    # keep-recent holds nearly the whole threshold: each summary frees ~5% of the window
    ctl = CompactionController(s, llm, CompactionSettings(reserve_tokens=400, keep_recent_tokens=3400),
                               lambda: 4000)
    ctl.start_run()
    notices, compactions = [], 0
    for k in range(60):  # a heartbeat-like prompt every turn re-fills the context
        s.append(MessageEntry(message={"role": "user", "content": f"beat {k}: " + " ".join(
            str(i * 31) for i in range(40))}))
        s.append(MessageEntry(message={"role": "assistant", "content": "noted"},
                              usage={"input_tokens": 0, "output_tokens": 1}))
        if ctl.after_turn(None) is not None:
            compactions += 1
        if (n := ctl.take_notice()) is not None:
            notices.append(n)
    assert len(notices) == 1 and "automatic compaction stopped: 3 compactions" in notices[0]
    assert compactions == 3 and ctl.low_yield.stopped
    logged = [e for e in s.branch() if isinstance(e, CustomEntry)
              and "automatic compaction stopped" in str((e.data or {}).get("reason"))]
    assert len(logged) == 1 and logged[0].display and logged[0].content is None
    ctl.start_run()  # the next run may compact again
    assert not ctl.low_yield.stopped


def test_a_second_read_of_the_same_file_supersedes_the_first():
    s = SessionStore.in_memory()
    first = add_cell(s, 1, "print(open('data.csv').read())", NUMBERS)
    first.cell["files_read"] = ["/w/data.csv"]
    other = add_cell(s, 2, "print(open('other.csv').read())", NUMBERS)
    other.cell["files_read"] = ["/w/other.csv"]
    again = add_cell(s, 3, "print(open('data.csv').read()[:50])", "abc")
    again.cell["files_read"] = ["/w/data.csv"]
    plan = plan_prune(s.branch(), COLD)
    assert [(r.entry_id, r.cell) for r in plan] == [(first.id, 1)]
    assert plan[0].text.startswith("[superseded by cell 3: it read the same file again")
