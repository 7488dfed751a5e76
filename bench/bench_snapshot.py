"""Snapshot benchmark (in-process IPython InteractiveShell, not a kernel: the snapshot code
is the same, the Jupyter messaging around it is not measured here).

Prints
  1. the median cost of the post_run_cell snapshot hook after a cell that touches nothing
     (`1 + 1`), with 300 user names in the namespace (target < 2 ms);
  2. snapshot + restore of a 100 MB float64 array and a 1M-row DataFrame (int, float, str
     columns) vs raw `pickle.dump(protocol=5)` + `pickle.load` of the same objects to the
     same directory, as ratios measured in the same run (target <= 1.5x). Our snapshot
     fsyncs its files and the directory; the ratio is given against raw pickle without
     fsync (what a plain user would write) and with fsync.

Run: .venv/bin/python bench/bench_snapshot.py [--dir DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _noop_hook_ms(ip, snapshot, n: int = 200) -> float:
    st = snapshot._state
    ip.events.unregister("post_run_cell", st.post_run_cell)
    times: list[float] = []

    def timed(result):
        t0 = time.perf_counter()
        st.post_run_cell(result)
        times.append(time.perf_counter() - t0)

    ip.events.register("post_run_cell", timed)
    gen = st.generation
    for _ in range(n):
        ip.run_cell("1 + 1;", silent=False, store_history=True)
    ip.events.unregister("post_run_cell", timed)
    ip.events.register("post_run_cell", st.post_run_cell)
    assert st.generation == gen, "a no-op cell wrote a snapshot"
    return statistics.median(times) * 1000


def _raw(objs, path: str, fsync: bool) -> float:
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        pickle.dump(objs, f, protocol=5)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    with open(path, "rb") as f:
        back = pickle.load(f)
    dt = time.perf_counter() - t0
    del back
    os.unlink(path)
    return dt


def _ours(ip, snapshot, names) -> tuple[float, float]:
    st = snapshot._state
    st.pending |= set(names)
    t0 = time.perf_counter()
    st.snapshot()
    t_snap = time.perf_counter() - t0
    saved = {k: ip.user_ns.pop(k) for k in names}
    gc.collect()
    fresh = snapshot.Snapshotter(ip, st.path, st.var_cap, st.total_cap)
    t0 = time.perf_counter()
    rep = fresh.restore()
    t_rest = time.perf_counter() - t0
    assert sorted(rep["restored"]) == sorted(names), rep
    for k in names:
        ip.user_ns[k] = saved[k]
    return t_snap, t_rest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="rlm-bench-snap-", dir=args.dir)
    os.environ["RLM_SNAPSHOT_DIR"] = os.path.join(base, "snap")
    import numpy as np
    import pandas as pd
    from IPython.core.interactiveshell import InteractiveShell

    from kernel_ext import snapshot

    ip = InteractiveShell.instance()
    snapshot.install(ip)
    ip.run_cell("\n".join(f"v{i} = {{'k': {i}, 'l': list(range(20))}}" for i in range(300)))
    print(f"1. no-op cell snapshot hook, median of 200 (300 names): {_noop_hook_ms(ip, snapshot):.3f} ms"
          " (target < 2 ms)")

    ip.run_cell("\n".join(f"del v{i}" for i in range(300)))
    rng = np.random.default_rng(0)
    ip.user_ns["arr"] = rng.random(100 * 1024 * 1024 // 8)
    n = 1_000_000
    ip.user_ns["df"] = pd.DataFrame({"i": np.arange(n), "x": rng.random(n),
                                     "s": pd.Series([f"row{i % 5000}" for i in range(n)])})
    names = ["arr", "df"]
    snapshot._state.snapshot()  # first write of the big objects (warm-up)
    objs = {k: ip.user_ns[k] for k in names}
    rows = []
    for _ in range(args.repeat):
        raw = _raw(objs, os.path.join(base, "raw.pkl"), fsync=False)
        raw_sync = _raw(objs, os.path.join(base, "raw.pkl"), fsync=True)
        t_snap, t_rest = _ours(ip, snapshot, names)
        rows.append((raw, raw_sync, t_snap, t_rest))
    raw, raw_sync, t_snap, t_rest = (statistics.median(c) for c in zip(*rows, strict=True))
    ours = t_snap + t_rest
    print(f"2. 100 MB array + 1M-row DataFrame, medians of {args.repeat} in {base}:")
    print(f"   ours: snapshot {t_snap * 1000:.0f} ms + restore {t_rest * 1000:.0f} ms = {ours * 1000:.0f} ms")
    print(f"   raw pickle-5 write+read: {raw * 1000:.0f} ms (with fsync: {raw_sync * 1000:.0f} ms)")
    print(f"   ratio ours/raw = {ours / raw:.2f}x (target <= 1.5x); vs raw with fsync = {ours / raw_sync:.2f}x")
    snapshot.uninstall(ip)
    import shutil

    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
