"""Session benchmark: host overhead per turn and load time, with same-run baselines.

Per turn = append one assistant entry and one cell-result entry (each fsynced) + project
the context (`store.messages`, incremental) + count the tokens of the new messages.
Reported at 1k and 100k entries, median over 50 turns. Baselines measured in the same
run: a bare `os.write + fsync` of the same two lines (the durability floor), and for
loading, `json.loads` of every line of the same file (the parsing floor).

Run: .venv/bin/python bench/bench_session.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlm.llm.tokens import count_message  # noqa: E402
from rlm.session import store as store_mod  # noqa: E402
from rlm.session.entries import MessageEntry  # noqa: E402
from rlm.session.store import SessionStore  # noqa: E402

TURNS = 50


def _entry(i: int) -> MessageEntry:
    if i % 2:
        return MessageEntry(message={"role": "tool", "tool_call_id": f"c{i}",
                                     "content": f"row count {i}: 1234\n" * 3},
                            cell={"status": "ok", "execution_count": i})
    return MessageEntry(message={"role": "assistant", "content": f"step {i}: inspect the data"})


def _fill(home: Path, n: int) -> SessionStore:
    """n entries written in one go (bench setup, not the measured path)."""
    s = SessionStore.create(home)
    lines = []
    for i in range(n):
        e = _entry(i)
        e.parent_id = s._leaf
        s._entries.append(e)
        s._by_id[e.id] = e
        s._leaf = e.id
        s._branch.append(e)
        lines.append(store_mod._dumps(e))
    with open(s.path, "ab") as f:
        f.write(b"".join(lines))
    return s


def per_turn(n: int) -> tuple[float, float]:
    home = Path(tempfile.mkdtemp())
    s = _fill(home, n)
    s.messages(system_prompt="SYS", native_tools=True)  # warm: first projection is O(n)
    times, floor = [], []
    fd = os.open(home / "floor", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for t in range(TURNS):
        a, r = _entry(2 * t), _entry(2 * t + 1)
        t0 = time.perf_counter()
        s.append(a)
        s.append(r)
        msgs = s.messages(system_prompt="SYS", native_tools=True)
        for m in msgs[-2:]:
            count_message(m)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for e in (a, r):
            os.write(fd, store_mod._dumps(e))
            os.fsync(fd)
        floor.append(time.perf_counter() - t0)
    os.close(fd)
    s.close()
    return statistics.median(times), statistics.median(floor)


def load(n: int) -> tuple[float, float]:
    home = Path(tempfile.mkdtemp())
    s = _fill(home, n)
    s.close()
    t0 = time.perf_counter()
    loaded = SessionStore.open(s.path)
    t_load = time.perf_counter() - t0
    assert len(loaded) == n
    t0 = time.perf_counter()
    for line in s.path.read_bytes().split(b"\n")[:-1]:
        json.loads(line)
    return t_load, time.perf_counter() - t0


def main() -> None:
    count_message({"role": "user", "content": "warm tiktoken"})
    for n in (1_000, 100_000):
        t, floor = per_turn(n)
        print(f"per turn @ {n:>7,} entries: {t * 1e3:6.2f} ms  "
              f"(append+fsync floor {floor * 1e3:.2f} ms; overhead above floor "
              f"{(t - floor) * 1e3:.2f} ms; ratio {t / floor:.2f}x)")
    t_load, raw = load(100_000)
    print(f"load 100,000 entries: {t_load:.3f} s  (json.loads of every line {raw:.3f} s; "
          f"ratio {t_load / raw:.2f}x)")


if __name__ == "__main__":
    main()
