"""Session benchmark: host overhead per turn, and how fast a long session opens.

Per turn = append one assistant entry and one cell-result entry (each fsynced) + project
the context (`store.messages`, incremental) + count the tokens of the new messages.
Baseline: a bare `os.write + fsync` of the same two lines (the durability floor).

Open (issue 32): a session of N entries shaped like a long autonomous run (a `run_options`
entry first, assistant/cell pairs, a compaction every 1,000 entries keeping the last 200)
is opened and its branch projected (`SessionStore.open` + `messages()`):
- through session.index (what every open after the first does),
- by parsing the whole file (no index: the first open, or a stale index) -- the baseline,
  measured in the same run; also `json.loads` of every line (the parsing floor).
`rlm log -n 20` and `rlm state` run in-process (their command functions, output
discarded) on the indexed session. Each figure is the min of --rounds rounds; the peak
traced memory of the open + projection is from tracemalloc.

Run: python bench/bench_session.py [--sizes 1000,10000,100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlm.llm.tokens import count_message  # noqa: E402
from rlm.session.entries import CompactionEntry, CustomEntry, Entry, MessageEntry  # noqa: E402
from rlm.session.index import index_path  # noqa: E402
from rlm.session.lines import dumps  # noqa: E402
from rlm.session.store import SessionStore  # noqa: E402

TURNS = 50
COMPACT_EVERY, KEEP = 1_000, 200


def _entry(i: int) -> MessageEntry:
    if i % 2:
        return MessageEntry(message={"role": "tool", "tool_call_id": f"c{i}",
                                     "content": f"row count {i}: 1234\n" * 3},
                            cell={"status": "ok", "execution_count": i})
    return MessageEntry(message={"role": "assistant", "content": f"step {i}: inspect the data"})


def make_session(home: Path, n: int) -> Path:
    """A session of n entries written in one go (bench setup, not the measured path);
    returns its session.jsonl."""
    s = SessionStore.create(home, model="script:x", task="a long autonomous run")
    assert s.path is not None
    lines, ids = [], []
    leaf = None
    for i in range(n):
        e: Entry
        if i == 0:
            e = CustomEntry(custom_type="run_options", data={"model": "script:x"},
                            display=False, content=None)
        elif i % COMPACT_EVERY == 0:
            e = CompactionEntry(summary=f"summary up to entry {i}", tokens_before=50_000,
                                first_kept_entry_id=ids[-KEEP], details={})
        else:
            e = _entry(i)
        e.parent_id = leaf
        leaf = e.id
        ids.append(e.id)
        lines.append(dumps(e))
    s.close()
    with open(s.path, "ab") as f:
        f.write(b"".join(lines))
    return s.path


def per_turn(n: int) -> tuple[float, float]:
    home = Path(tempfile.mkdtemp())
    s = SessionStore.open(make_session(home, n))
    s.messages(system_prompt="SYS", native_tools=True)
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
            os.write(fd, dumps(e))
            os.fsync(fd)
        floor.append(time.perf_counter() - t0)
    os.close(fd)
    s.close()
    return statistics.median(times), statistics.median(floor)


def _best(fn: Callable[[], object], rounds: int) -> float:
    out = []
    for _ in range(rounds):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def _open_project(path: Path) -> int:
    s = SessionStore.open(path, readonly=True)
    return len(s.messages(system_prompt="SYS", native_tools=False))


def _no_index(path: Path) -> int:
    index_path(path).unlink(missing_ok=True)
    s = SessionStore.open(path, readonly=True)
    n = len(s.messages(system_prompt="SYS", native_tools=False))
    index_path(path).unlink(missing_ok=True)
    return n


def _peak(fn: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def _cli(home: Path, name: str, **kw: object) -> Callable[[], object]:
    from rlm.cli import commands

    ns = argparse.Namespace(session="last", json=False, all=False, **kw)
    fn = getattr(commands, name)

    def run() -> object:
        os.environ["RLM_HOME"] = str(home)
        with contextlib.redirect_stdout(io.StringIO()):
            return fn(ns)

    return run


def opening(n: int, rounds: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp())
    path = make_session(home, n)
    raw = _best(lambda: [json.loads(x) for x in path.read_bytes().splitlines()], rounds)
    full = _best(lambda: _no_index(path), rounds)
    mem_full = _peak(lambda: _no_index(path))
    SessionStore.open(path).close()  # the first open writes session.index
    fast = _best(lambda: _open_project(path), rounds)
    mem_fast = _peak(lambda: _open_project(path))
    log = _best(_cli(home, "cmd_log", last=20), rounds)
    state = _best(_cli(home, "cmd_state"), rounds)
    return {"n": n, "raw": raw, "full": full, "fast": fast, "log": log, "state": state,
            "mem_full": mem_full, "mem_fast": mem_fast}


def resume_seconds(n: int, rounds: int) -> float:
    """A whole `rlm resume` process on an indexed n-entry session (kernel start and a
    one-cell scripted answer included): min over rounds."""
    import subprocess

    home = Path(tempfile.mkdtemp())
    path = make_session(home, n)
    SessionStore.open(path).close()
    script = home / "reply.json"
    script.write_text(json.dumps([{"content": "", "tool_calls": [
        {"name": "python", "arguments": {"code": "final('ok')"}}]}]))
    env = {**os.environ, "RLM_HOME": str(home)}
    cmd = [sys.executable, "-P", "-m", "rlm", "resume", path.parent.name, "go on",
           "--model", f"script:{script}", "--json"]
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=home)
        out.append(time.perf_counter() - t0)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-turns", action="store_true", help="only the open figures")
    ap.add_argument("--resume", action="store_true",
                    help="also time whole `rlm resume` processes at the smallest and largest size")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if not args.no_turns:
        count_message({"role": "user", "content": "warm tiktoken"})
        for n in (1_000, 100_000):
            t, floor = per_turn(n)
            print(f"per turn @ {n:>7,} entries: {t * 1e3:6.2f} ms  "
                  f"(append+fsync floor {floor * 1e3:.2f} ms; overhead above floor "
                  f"{(t - floor) * 1e3:.2f} ms; ratio {t / floor:.2f}x)")
    print("entries | open+project (index) | no index (full parse) | json.loads floor | "
          "speed-up | rlm log -n 20 | rlm state | peak mem index / full")
    for n in (int(x) for x in args.sizes.split(",")):
        r = opening(n, args.rounds)
        print(f"{n:>7,} | {r['fast'] * 1e3:8.1f} ms | {r['full'] * 1e3:8.1f} ms | "
              f"{r['raw'] * 1e3:8.1f} ms | {r['full'] / r['fast']:6.1f}x | "
              f"{r['log'] * 1e3:7.1f} ms | {r['state'] * 1e3:7.1f} ms | "
              f"{r['mem_fast'] / 2**20:.1f} / {r['mem_full'] / 2**20:.1f} MiB")
    if args.resume:
        sizes = [int(x) for x in args.sizes.split(",")]
        small, large = resume_seconds(sizes[0], args.rounds), resume_seconds(sizes[-1], args.rounds)
        print(f"rlm resume (whole process, kernel start included): {small:.2f} s at "
              f"{sizes[0]:,} entries, {large:.2f} s at {sizes[-1]:,} "
              f"(difference {(large - small) * 1e3:+.0f} ms; ratio {large / small:.2f}x)")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
