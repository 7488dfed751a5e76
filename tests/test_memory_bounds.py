"""Issue 58 item 10, the pure parts and the files: the memory block is within its token
budget for any window and any text (numbers, CJK, emoji: where characters per token are
few); a huge file is read from its end, never whole; history.log is cut to its newest
lines; a run's line is bounded whatever its task and answer."""

from __future__ import annotations

import json
import os

import pytest

from rlm.llm.tokens import count_message
from rlm.memory import MemoryHead, MemoryTexts, ProjectMemory, budget_tokens, memory_block
from rlm.memory.files import HISTORY_MAX, NOTE_LIMIT, read_limit
from rlm.memory.runs import run_record

TEXTS = {
    "numbers": "\n".join(" ".join(str(k * 7919 % 100003) for k in range(j, j + 30))
                         for j in range(200)),
    "cjk": "\n".join("- 売上は返品を除く。日付は協定世界時で書く。" * 4 for _ in range(150)),
    "emoji": "\n".join("- " + "📈📉🧮" * 20 for _ in range(150)),
    "prose": "\n".join(f"- step {k}: cleaned the sales file and checked the totals"
                       for k in range(400)),
}


@pytest.mark.parametrize("kind", sorted(TEXTS))
@pytest.mark.parametrize("window", [1_000, 4_096, 8_192, 32_768, 128_000])
def test_the_block_is_within_ten_percent_of_any_window(kind, window):
    text = TEXTS[kind]
    t = MemoryTexts(dir="/p/.agent", state="# State\n" + text, conventions=text,
                    context=json.dumps({"k": text[:3000]}),
                    history=[json.dumps({"note": text[:200]})] * 20, history_total=500)
    block = memory_block(t, budget_tokens(window))
    assert block.tokens == (count_message({"role": "user", "content": block.text})
                            if block.text else 0)
    assert block.tokens <= window * 0.10
    assert block.cuts or window > 32_768  # over budget: said


def test_a_huge_file_is_read_from_its_end_newest_lines_kept(tmp_path):
    """A 20 GB sparse state.md (read whole it would not fit in memory): its last lines
    reach the block with the cut said, and only `read_limit` bytes are read."""
    mem = ProjectMemory(tmp_path)
    mem.init()
    path = tmp_path / ".agent" / "state.md"
    with open(path, "wb") as f:
        f.write(b"# State\n- OLDEST\n")
        f.truncate(20 * 10**9)
        f.seek(0, os.SEEK_END)
        f.write(b"\n- step 1: loaded\n- NEWEST: the totals reconcile\n")
    size = path.stat().st_size
    text, read_size = mem.read_sized("state")
    assert read_size == size and len(text.encode()) <= read_limit("state")
    assert text.endswith("- NEWEST: the totals reconcile\n") and "OLDEST" not in text
    block = MemoryHead(mem, lambda: 32_768, lambda: []).block()
    assert "- NEWEST: the totals reconcile" in block.text
    assert f" of {size:,} bytes of state.md shown; the rest is in .agent/state.md]" in block.text
    assert block.cuts == (block.cuts[0],) and block.cuts[0].startswith("state.md: the newest")


def test_an_oversized_context_json_is_left_out_and_said(tmp_path):
    mem = ProjectMemory(tmp_path)
    mem.init()
    (tmp_path / ".agent" / "context.json").write_text(json.dumps({"rows": list(range(40_000))}))
    block = MemoryHead(mem, lambda: 32_768, lambda: []).block()
    assert "[memory cut: left out" in block.text and "read .agent/context.json]" in block.text
    assert any(c.startswith("context.json: left out") for c in block.cuts)


def test_history_log_is_cut_to_its_newest_whole_lines(tmp_path):
    mem = ProjectMemory(tmp_path)
    for k in range(3000):
        mem.log("step", f"t{k}", "x" * 120)
    path = tmp_path / ".agent" / "history.log"
    assert path.stat().st_size <= HISTORY_MAX
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["target"] == "t2999"
    assert all(json.loads(ln)["action"] == "step" for ln in lines)  # whole lines only
    assert json.loads(lines[0])["target"] != "t0"


def test_a_run_line_is_bounded_whatever_the_run_said():
    action, target, note = run_record(
        "x" * 5000, {"status": "answered", "answered": True}, "y" * 5000,
        [f"out/file{k}.csv" for k in range(50)])
    assert action == "run" and len(note) <= NOTE_LIMIT and len(target) <= 200
    assert note.startswith("task: xxx") and "| answered | answer: yyy" in note
    assert target.endswith("(+44 more)")
    _a, _t, why = run_record("clean it", {"status": "limit", "answered": False,
                                          "why": "10 of 10 turns used"}, None, [])
    assert why == "task: clean it | limit | why: 10 of 10 turns used"
