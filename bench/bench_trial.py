"""Forked trials (kernel_ext.trial): what one isolated run of a small cell costs on a kernel
holding a 1,000,000-row DataFrame, against running the same cell as a normal cell (the
baseline, measured in this run), and against the cheapest other isolation: a fresh kernel
(empty, and restored from this session's snapshot, which is what a child kernel would
need to see the same data).

    python bench/bench_trial.py [--rows 1000000] [--n 20] [--fresh 3]

Prints a markdown table of medians and each figure's ratio to the normal cell. Asserts
only that the runs succeeded, never a time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rlm.config import Config
from rlm.kernel import Kernel
from rlm.session.store import SessionStore

CELL = "df['a'].mean()"


def _median_s(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _new_session(home: Path) -> Path:
    session = SessionStore.create(home, model="script:none")
    assert session.dir is not None
    session.close()
    return session.dir


def _cell(k: Kernel) -> None:
    res = k.execute(CELL)
    assert res.status == "ok", res.shaped


def _trial(k: Kernel, codes: list[str]) -> None:
    results = k.trial(codes)
    assert all(r["status"] == "ok" for r in results), results


def _fresh(home: Path, sdir: Path | None, expect_df: bool) -> None:
    """Start a kernel (on a copy of `sdir`, or a new session), run the cell, stop it."""
    target = _new_session(home)
    if sdir is not None:
        shutil.rmtree(target)
        shutil.copytree(sdir, target)
    with Kernel(target, Config(home=home)) as k:
        res = k.execute(CELL if expect_df else "1 + 1")
        assert res.status == "ok", res.shaped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--fresh", type=int, default=3)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-trial-"))
    os.environ["RLM_HOME"] = str(home)
    sdir = _new_session(home)
    setup = ("import numpy as np, pandas as pd\n"
             f"df = pd.DataFrame({{'a': np.arange({args.rows}), "
             f"'b': np.arange({args.rows}) * 0.5, 's': np.arange({args.rows}).astype(str)}})\n")
    with Kernel(sdir, Config(home=home)) as k:
        assert k.execute(setup, timeout=300).status == "ok"
        _cell(k)  # the first snapshot of df is written here, not in a measured cell
        rss = k.execute("import resource\nresource.getrusage(resource.RUSAGE_SELF).ru_maxrss")
        cell_s = _median_s(lambda: _cell(k), args.n)
        floor_s = _median_s(lambda: k.execute("1 + 1"), args.n)
        compute = k.execute(f"import timeit\ntimeit.timeit(lambda: {CELL}, number=20) / 20")
        one_s = _median_s(lambda: _trial(k, [CELL]), args.n)
        two_s = _median_s(lambda: _trial(k, [CELL, CELL]), args.n)
        four_s = _median_s(lambda: _trial(k, [CELL] * 4), max(1, args.n // 2))
        inner = k.trial([CELL])[0]["seconds"]
    empty_s = _median_s(lambda: _fresh(home, None, False), args.fresh)
    restored_s = _median_s(lambda: _fresh(home, sdir, True), args.fresh)
    shutil.rmtree(home, ignore_errors=True)
    rows = [
        ("normal cell (baseline; its snapshot after the cell included)", cell_s),
        ("the cell's own compute, in the kernel (timeit)", float(compute.shaped)),
        ("normal cell `1 + 1` (a cell's round trip, no data named)", floor_s),
        ("1 forked trial", one_s),
        ("2 forked trials (parallel)", two_s),
        ("4 forked trials (2 at a time)", four_s),
        ("fresh kernel, empty: start, `1 + 1`, stop", empty_s),
        ("fresh kernel restored from the snapshot: start, cell, stop", restored_s),
    ]
    print(f"kernel: {args.rows:,}-row DataFrame (3 columns), max RSS {rss.shaped.strip()} KiB; "
          f"medians of {args.n} runs ({args.fresh} for fresh kernels); "
          f"one trial's fork-to-result inside the kernel: {inner * 1000:.1f} ms\n")
    print("| figure | median | x normal cell |\n|---|---:|---:|")
    for name, s in rows:
        print(f"| {name} | {s * 1000:.1f} ms | {s / cell_s:.2f} |")


if __name__ == "__main__":
    main()
