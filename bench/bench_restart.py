"""Crash to ready-with-state vs kernel start + raw load (issues 2 and 16).

(a) rlm: a cell calls os._exit(1); `Kernel.execute` notices the death, starts a new
    kernel and restores the snapshot; timed from the execute call to its return.
(b) baseline, same run, same objects: start a fresh kernel (same argv) and load the same
    objects from one raw pickle-5 file written beforehand.

    python bench/bench_restart.py [--mb 50] [--n 5]
    python bench/bench_restart.py --realistic [--n 3]   # issue 16's namespace: 3 DataFrames of
        1M rows, arrays and views, a dict holding DataFrames, an alias, 300 small names
        (bench_snapshot.REALISTIC); the check after the crash also asserts identity
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rlm.config import Config
from rlm.kernel import Kernel

SETUP = (
    "import numpy as np, pandas as pd\n"
    "arr = np.arange({n}, dtype='float64')\n"
    "df = pd.DataFrame({{'a': np.arange({rows}), 'b': np.arange({rows}) * 0.5}})\n"
    "small = {{'k': list(range(1000))}}\n"
)


def rlm_crash_to_ready(work: Path, n: int, rows: int) -> float:
    with Kernel(work / "rlm", Config(home=work)) as k:
        k.execute(SETUP.format(n=n, rows=rows), timeout=300)
        t0 = time.perf_counter()
        res = k.execute("import os; os._exit(1)", timeout=300)
        dt = time.perf_counter() - t0
        assert res.status == "died" and res.restart and "arr" in res.restart.restored, res
        check = k.execute("print(arr.shape[0], len(df), len(small['k']))").shaped.strip()
        assert check == f"{n} {rows} 1000", check
    return dt


def baseline_start_and_load(work: Path, n: int, rows: int) -> float:
    pkl = work / "raw.pkl"
    cfg = Config(home=work)
    with Kernel(work / "dump", cfg) as k:
        k.execute(SETUP.format(n=n, rows=rows) + "import pickle\n"
                  f"with open({str(pkl)!r}, 'wb') as f:\n"
                  "    pickle.dump({'arr': arr, 'df': df, 'small': small}, f, protocol=5)\n",
                  timeout=300)
    t0 = time.perf_counter()
    with Kernel(work / "base", cfg) as k:  # a fresh kernel, nothing to restore
        k.execute("import pickle\n"
                  f"with open({str(pkl)!r}, 'rb') as f:\n    globals().update(pickle.load(f))",
                  timeout=300)
        dt = time.perf_counter() - t0
    return dt


REAL_NAMES = ("sales", "prices", "events", "sales_by_name", "current", "amount", "matrix",
              "first_rows", "features", "weights")


def realistic_crash_to_ready(work: Path) -> float:
    from bench.bench_snapshot import REALISTIC

    with Kernel(work / "rlm", Config(home=work)) as k:
        assert k.execute(REALISTIC, timeout=300).status == "ok"
        t0 = time.perf_counter()
        res = k.execute("import os; os._exit(1)", timeout=300)
        dt = time.perf_counter() - t0
        assert res.status == "died" and res.restart and not res.restart.failed, res
        check = k.execute("print(current is sales, sales_by_name['sales'] is sales,"
                          " np.shares_memory(first_rows, matrix), len(events), s299['k'])").shaped
        assert check.strip() == "True True True 1000000 299", check
    return dt


def realistic_baseline(work: Path) -> float:
    from bench.bench_snapshot import REALISTIC

    pkl = work / "raw.pkl"
    names = ", ".join(f"'{n}': {n}" for n in REAL_NAMES) + ", " + ", ".join(
        f"'s{i}': s{i}" for i in range(300))
    cfg = Config(home=work)
    with Kernel(work / "dump", cfg) as k:
        k.execute(REALISTIC + "\nimport pickle\n"
                  f"with open({str(pkl)!r}, 'wb') as f:\n"
                  f"    pickle.dump({{{names}}}, f, protocol=5)\n", timeout=300)
    t0 = time.perf_counter()
    with Kernel(work / "base", cfg) as k:
        k.execute("import pickle, numpy as np, pandas as pd\n"
                  f"with open({str(pkl)!r}, 'rb') as f:\n    globals().update(pickle.load(f))",
                  timeout=300)
        dt = time.perf_counter() - t0
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=50, help="array size in MB")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--realistic", action="store_true", help="issue 16's namespace (see above)")
    args = ap.parse_args()
    if args.realistic:
        a, b = [], []
        for _ in range(args.n):
            with tempfile.TemporaryDirectory() as d:
                a.append(realistic_crash_to_ready(Path(d)))
            with tempfile.TemporaryDirectory() as d:
                b.append(realistic_baseline(Path(d)))
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"realistic: crash -> ready with state (rlm): median {ma * 1000:.0f} ms  {[round(x, 2) for x in a]}")
        print(f"realistic: kernel start + raw pickle load:  median {mb * 1000:.0f} ms  {[round(x, 2) for x in b]}")
        print(f"ratio: {ma / mb:.2f}x  (312 names; identity checked after the crash)")
        return
    n, rows = args.mb * 1024 * 1024 // 8, 500_000
    a, b = [], []
    for _ in range(args.n):
        with tempfile.TemporaryDirectory() as d:
            a.append(rlm_crash_to_ready(Path(d), n, rows))
        with tempfile.TemporaryDirectory() as d:
            b.append(baseline_start_and_load(Path(d), n, rows))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"crash -> ready with state (rlm): median {ma * 1000:.0f} ms  {[round(x, 2) for x in a]}")
    print(f"kernel start + raw pickle load:  median {mb * 1000:.0f} ms  {[round(x, 2) for x in b]}")
    print(f"ratio: {ma / mb:.2f}x  ({args.mb} MB array + {rows:,}-row DataFrame + small dict)")


if __name__ == "__main__":
    main()
