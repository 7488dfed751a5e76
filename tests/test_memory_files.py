"""Project memory (.agent/): files, budgets, locking, capture and the reminder decision.
Pure parts on fixtures; the files on a real directory; concurrency with real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.agent.policy.memory_reminder import reminder_due
from rlm.llm.tokens import count_message
from rlm.memory import (
    MemoryActivity,
    MemoryHead,
    MemoryRefused,
    MemoryTexts,
    ProjectMemory,
    memory_block,
    stated_conventions,
)
from rlm.memory.files import LIMITS

ROOT = Path(__file__).resolve().parents[1]


def head_text(mem: ProjectMemory, window: int | None = 32_768) -> str:
    return MemoryHead(mem, lambda: window, lambda: []).text()


def test_init_creates_the_templates_and_keeps_existing_files(tmp_path):
    mem = ProjectMemory(tmp_path)
    (tmp_path / ".agent").mkdir()
    (tmp_path / ".agent" / "state.md").write_text("# State\n- mine\n")
    made = mem.init()
    assert set(made) == {"conventions.md", "context.json", "history.log", ".gitignore"}
    assert (tmp_path / ".agent" / "state.md").read_text() == "# State\n- mine\n"
    assert "snapshots/" in (tmp_path / ".agent" / ".gitignore").read_text()
    assert mem.init() == []


def test_update_modes(tmp_path):
    mem = ProjectMemory(tmp_path)
    mem.update("state", "## In progress\n- cleaning sales.csv\n", "merge")
    mem.update("state", "## Next steps\n1. plot by region\n", "merge")
    mem.update("state", "## In progress\n- plotting\n", "merge")
    state = mem.read("state")
    assert "- plotting" in state and "cleaning" not in state and "1. plot by region" in state
    assert state.index("## In progress") < state.index("## Next steps")  # template order kept
    mem.update("conventions", "dates are UTC", "append")
    mem.update("conventions", "- dates are UTC\n- money in EUR", "merge")
    conv = mem.read("conventions")
    assert conv.count("dates are UTC") == 1 and "- money in EUR (stated_by: agent," in conv
    mem.update("context", {"datasets": {"sales": {"path": "sales.csv", "rows": 1200}}}, "merge")
    mem.update("context", '{"unit": "EUR"}', "merge")
    assert json.loads(mem.read("context")) == {
        "datasets": {"sales": {"path": "sales.csv", "rows": 1200}}, "unit": "EUR"}
    with pytest.raises(MemoryRefused, match="pass a dict"):
        mem.update("context", "[1, 2]", "merge")
    with pytest.raises(MemoryRefused, match="'state'"):
        mem.update("notes", "x")
    with pytest.raises(MemoryRefused, match="mode"):
        mem.update("state", "x", "overwrite")


def test_over_budget_write_is_refused_with_its_reason_and_changes_nothing(tmp_path):
    mem = ProjectMemory(tmp_path)
    mem.update("state", "## In progress\n- short\n", "replace")
    before = mem.read("state")
    with pytest.raises(MemoryRefused) as e:
        mem.update("state", "- line of narrative\n" * 400, "append")
    assert f"budget of {LIMITS['state']:,}" in str(e.value) and "Condense" in str(e.value)
    assert mem.read("state") == before


def test_a_big_history_injects_only_its_last_lines(tmp_path):
    mem = ProjectMemory(tmp_path)
    mem.init()
    with open(tmp_path / ".agent" / "history.log", "w") as f:
        i = 0
        while f.tell() < 50_000:
            f.write(json.dumps({"ts": "2026-01-01T00:00:00", "action": "step",
                                "target": f"t{i}", "note": "x" * 40}) + "\n")
            i += 1
    text = head_text(mem)
    shown = [ln for ln in text.splitlines() if ln.startswith('{"ts"')]
    assert len(shown) == 20
    assert f'"target": "t{i - 1}"' in shown[-1] and f'"target": "t{i - 20}"' in shown[0]
    assert "history.log (last 20 of" in text
    assert len(text) < 5000


def test_an_oversized_state_is_cut_oldest_first_with_a_note(tmp_path):
    mem = ProjectMemory(tmp_path)
    mem.init()
    lines = [f"- step {k}: done" for k in range(600)]  # the user edited it past any budget
    (tmp_path / ".agent" / "state.md").write_text("# State\n" + "\n".join(lines) + "\n")
    mem.update("conventions", "- dates are UTC", "merge", stated_by="user")
    text = head_text(mem, window=8192)
    assert "- step 599: done" in text and "- step 0: done" not in text
    assert "[memory cut: the newest " in text and " bytes of state.md shown; the rest is " \
        "in .agent/state.md]" in text
    assert "dates are UTC" in text  # conventions whole
    assert count_message({"role": "user", "content": text}) <= 8192 * 0.1  # 10%, in tokens


def test_block_is_empty_note_for_templates_and_says_stale(tmp_path):
    mem = ProjectMemory(tmp_path)
    mem.init()
    assert "(empty: nothing recorded yet)" in head_text(mem)
    t = MemoryTexts(dir="/p/.agent", state="# State\n## In progress\n- x\n", stale_turns=8)
    assert "[stale: state.md was not updated during the last 8 turns" in memory_block(t, 3000).text


def test_memory_files_are_data_a_symlink_is_never_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET KEY")
    proj = tmp_path / "proj"
    (proj / ".agent").mkdir(parents=True)
    os.symlink(secret, proj / ".agent" / "state.md")
    mem = ProjectMemory(proj)
    assert "TOP SECRET" not in head_text(mem)
    mem.update("state", "## In progress\n- real\n", "replace")  # replaces the link itself
    assert secret.read_text() == "TOP SECRET KEY"
    assert not (proj / ".agent" / "state.md").is_symlink()


def test_known_secrets_are_redacted_before_the_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-memtest-0123456789abcdefghij")
    mem = ProjectMemory(tmp_path)
    mem.update("context", {"key": "sk-memtest-0123456789abcdefghij"}, "merge")
    mem.log("used", "api", "with sk-memtest-0123456789abcdefghij")
    for f in (tmp_path / ".agent").iterdir():
        assert "sk-memtest-0123456789abcdefghij" not in f.read_text(), f


WRITER = """
import sys
from rlm.memory import ProjectMemory
mem = ProjectMemory(sys.argv[1])
who = sys.argv[2]
for k in range(25):
    mem.update("conventions", f"- rule {who}-{k}", "merge")
    mem.update("context", {f"{who}-{k}": k}, "merge")
    mem.log("step", who, str(k))
"""


def test_concurrent_writers_lose_no_update(tmp_path):
    """Two processes (two children of one tree, or a worker and a chat in one directory)
    writing at once: every line and every key is there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), who], env=env)
             for who in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    mem = ProjectMemory(tmp_path)
    conv, ctx = mem.read("conventions"), json.loads(mem.read("context"))
    for who in ("a", "b"):
        for k in range(25):
            assert f"- rule {who}-{k} (stated_by: agent" in conv
            assert ctx[f"{who}-{k}"] == k
    lines, total = mem.history_lines(100)
    assert total == 50 and all(json.loads(ln)["action"] == "step" for ln in lines)


@pytest.mark.parametrize("text,expected", [
    ("Always use UTC for timestamps.", ["Always use UTC for timestamps"]),
    ("Revenue excludes refunds. What was revenue in March?", ["Revenue excludes refunds"]),
    ("From now on, round money to 2 decimals", ["From now on, round money to 2 decimals"]),
    ("never drop rows with missing region; then plot it", ["never drop rows with missing region"]),
    ("What is the total revenue?", []),
    ("Does revenue include refunds?", []),
    ("Plot sales by region and tell me which grew fastest.", []),
    ("I always wondered why sales dip in May", []),
    # the demo's task: a description in a parenthetical, split at its ';', is not a rule
    ("The DataFrame `sales` is already loaded in the kernel (one row per order, from "
     "sales.csv; columns include region and revenue). Which region had the largest total "
     "revenue?", []),
    ("The columns include region and revenue.", []),
    ("The file includes 2024 only; revenue includes tax.", ["revenue includes tax"]),
    ("Revenue excludes refunds (see the finance wiki).", ["Revenue excludes refunds"]),
])
def test_stated_conventions(text, expected):
    assert stated_conventions(text) == expected


def test_an_agent_rewrite_of_a_user_convention_is_logged(tmp_path):
    mem = ProjectMemory(tmp_path)
    mem.update("conventions", "- Revenue excludes refunds", "merge", stated_by="user")
    assert "(stated_by: user," in mem.read("conventions")
    same = mem.update("conventions", "- a new agent rule", "merge")  # kept: not a change
    assert same.changed_user_conventions == ()
    res = mem.update("conventions", "- Revenue includes refunds", "replace")
    assert res.changed_user_conventions and "Revenue excludes refunds" in res.changed_user_conventions[0]
    last = json.loads(mem.history_lines(1)[0][0])
    assert last["action"] == "convention_changed" and "Revenue excludes refunds" in last["note"]


def test_snapshot_numbers_its_files(tmp_path):
    mem = ProjectMemory(tmp_path)
    mem.update("state", "## In progress\n- a\n", "merge")
    one, two = mem.snapshot("cleaned data"), mem.snapshot("first model!")
    assert Path(one.path).name == "001-cleaned-data.md" and Path(two.path).name == "002-first-model.md"
    assert "- a" in Path(one.path).read_text()


@pytest.mark.parametrize("completed,writes,reminded,turn,due", [
    ([(2, "x")], [], [], 4, (2, "x")),     # done in turn 2, no write: reminded before turn 4
    ([(2, "x")], [], [], 3, None),         # too early: the model gets a turn to write
    ([(2, "x")], [2], [], 4, None),        # written in the same turn
    ([(2, "x")], [3], [], 5, None),        # written the turn after
    ([(2, "x")], [1], [], 4, (2, "x")),    # a write before the unit does not count
    ([(2, "x")], [], [2], 5, None),        # reminded once
    ([], [], [], 9, None),                 # nothing completed: never
])
def test_reminder_decision(completed, writes, reminded, turn, due):
    act = MemoryActivity(completed=completed, writes=writes, reminded=reminded)
    assert reminder_due(act, turn) == due


def test_the_memory_message_is_the_same_dict_until_a_file_or_the_window_changes(tmp_path):
    """The prompt's token count finds a message it counted by identity: an unchanged
    memory block is handed out as the same dict, a changed one as a new one."""
    mem = ProjectMemory(tmp_path)
    mem.init()
    window = [32_768]
    head = MemoryHead(mem, lambda: window[0], lambda: [])
    first = head.message()
    assert first is not None and head.message() is first
    mem.update("state", "## In progress\n- cleaning sales.csv\n", "merge")
    second = head.message()
    assert second is not first and "cleaning sales.csv" in second["content"]
    assert head.message() is second
    window[0] = 4_096
    assert head.message() is not second
