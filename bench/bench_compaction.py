"""Compaction planning and projection cost.

1. Planning (cut point + serialization) on a generated ~200k-token, 5k-entry history,
   target < 50 ms, with json.dumps of the same entries as an in-run baseline. Token
   counts are cached per message (rlm.llm.tokens), as they are in a running session where
   every entry was counted when it arrived; the cold first count is reported apart.
2. Projection cost per turn (build_messages) after 20 compactions.

Run: .venv/bin/python bench/bench_compaction.py
"""

from __future__ import annotations

import json
import statistics
import time

from rlm.compaction.plan import CompactionSettings, Preparation, context_tokens, plan_compaction
from rlm.session.context import build_messages
from rlm.session.entries import CompactionEntry, Entry, MessageEntry


def _timed(fn, repeat: int = 7) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def history(n_entries: int = 5000, result_chars: int = 110) -> list[Entry]:
    """user -> (assistant call -> tool result) x k turns; ~40 tokens per turn header."""
    out: list[Entry] = []
    parent = None
    i = 0
    while len(out) < n_entries:
        if i % 10 == 0:
            e: Entry = MessageEntry(message={"role": "user", "content": f"Step {i}: analyse chunk {i} of data/big.csv and report the outliers."})
        elif i % 2:
            code = f"chunk_{i} = df.iloc[{i * 100}:{i * 100 + 100}]\nprint(chunk_{i}.describe())"
            e = MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "python", "arguments": json.dumps({"code": code})}}]},
                             usage={"input_tokens": 1000 + i * 40, "output_tokens": 30})
        else:
            text = "\n".join(f"{k:>5} {k * 3.14159 * i:14.4f} {k * 7 % 101:6d} ok" for k in range(result_chars // 30))
            e = MessageEntry(message={"role": "tool", "content": text, "tool_call_id": f"c{i - 1}"}, cell={"status": "ok"})
        e.parent_id = parent
        parent = e.id
        out.append(e)
        i += 1
    return out


def bench_planning() -> None:
    branch = history()
    settings = CompactionSettings()
    t = time.perf_counter()
    total = context_tokens(branch)  # cold: counts every entry once
    cold = (time.perf_counter() - t) * 1000
    print(f"history: {len(branch)} entries, {total} tokens (exact, o200k_base); cold count {cold:.0f} ms")

    def plan() -> Preparation:
        p = plan_compaction(branch, settings, tokens_before=total)
        assert isinstance(p, Preparation)
        p.history_text, p.prefix_text  # serialization  # noqa: B018
        return p

    ms, p = _timed(plan)
    dicts = [e.to_dict() for e in branch]
    base, _ = _timed(lambda: json.dumps(dicts))
    assert isinstance(p, Preparation)
    print(f"planning (cut point + serialization): {ms:.1f} ms (target < 50 ms); "
          f"summarised {len(p.history)} entries, {len(p.history_text)} chars")
    print(f"baseline json.dumps of the same entries: {base:.1f} ms; ratio {ms / base:.2f}x")


def bench_projection() -> None:
    """The 5k-entry history with a compaction every 250 entries (20 in all)."""
    branch: list[Entry] = []
    parent = None
    for k, e in enumerate(history()):
        e.parent_id = parent
        parent = e.id
        branch.append(e)
        if k % 250 == 200:
            comp = CompactionEntry(summary="## Goal\n" + "summary line\n" * 200,
                                   first_kept_entry_id=branch[-10].id, parent_id=parent)
            parent = comp.id
            branch.append(comp)
    n_comp = sum(isinstance(e, CompactionEntry) for e in branch)
    ms, msgs = _timed(lambda: build_messages(branch, system_prompt="sys", native_tools=True), 21)
    print(f"projection after {n_comp} compactions ({len(branch)} entries -> {len(msgs)} messages): "  # type: ignore[arg-type]
          f"{ms:.2f} ms per turn (full rebuild with build_messages)")


if __name__ == "__main__":
    bench_planning()
    bench_projection()
