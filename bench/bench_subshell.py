"""Listing a busy kernel (issue 16): `rlm state` and the owner's listing while a 60 s cell
runs (answered on a kernel subshell) vs the same listing on an idle kernel's main shell.

    python bench/bench_subshell.py [--names 300] [--n 20] [--cli 3]

The namespace: `--names` small names, a 200k-row DataFrame (if pandas is installed), a
list of 100k ints. The busy cell sleeps in a loop for up to 60 s (it ends early when the
benchmark is done). Prints a markdown table of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rlm.config import Config
from rlm.kernel import Kernel
from rlm.kernel.state import session_state
from rlm.session.store import SessionStore


def _median_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _cli_state(sdir: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rlm", "state", str(sdir), "--json"],
                         capture_output=True, text=True, check=True, timeout=120)
    return time.perf_counter() - t0, json.loads(out.stdout)["source"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--names", type=int, default=300)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--cli", type=int, default=3)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-subshell-"))
    os.environ["RLM_HOME"] = str(home)
    session = SessionStore.create(home, model="script:none")
    assert session.dir is not None
    sdir = session.dir
    session.close()
    started, release = home / "started", home / "release"
    setup = (f"for _i in range({args.names}):\n    globals()[f'v{{_i}}'] = _i\n"
             "big = list(range(100_000))\n"
             "try:\n    import pandas as pd, numpy as np\n"
             "    df = pd.DataFrame({'a': np.arange(200_000), 'b': np.arange(200_000) * 0.5})\n"
             "except ImportError:\n    pass\n")
    busy = (f"import pathlib, time\npathlib.Path({str(started)!r}).write_text('1')\n"
            f"_t = time.monotonic()\n"
            f"while not pathlib.Path({str(release)!r}).exists() and time.monotonic() - _t < 60:\n"
            "    time.sleep(0.05)\n")
    rows = []
    with Kernel(sdir, Config(home=home)) as k:
        assert k.execute(setup).status == "ok"
        idle_ms = _median_ms(lambda: k.list_namespace(), args.n)
        idle_cli = [_cli_state(sdir) for _ in range(args.cli)]
        t = threading.Thread(target=lambda: k.execute(busy, timeout=120))
        t.start()
        while not started.exists():
            time.sleep(0.01)
        busy_ms = _median_ms(lambda: k.list_namespace(), args.n)
        busy_cli = [_cli_state(sdir) for _ in range(args.cli)]
        busy_client_ms = _median_ms(lambda: session_state(sdir), args.n)
        still_running = t.is_alive()
        release.write_text("1")
        t.join()
        names = len(k.list_namespace()["names"])
    floor = [_cli_state(sdir) for _ in range(args.cli)]  # no kernel: the snapshot answers
    assert still_running and all(src == "live" for _, src in busy_cli + idle_cli)
    assert all(src == "snapshot" for _, src in floor)
    rows.append(("owner listing, idle kernel (main shell)", f"{idle_ms:.1f} ms"))
    rows.append(("owner listing, busy kernel (subshell)", f"{busy_ms:.1f} ms"))
    rows.append(("second client in another process's place (`session_state`: connect, "
                 "kernel_info, create subshell, list, delete), busy kernel", f"{busy_client_ms:.1f} ms"))
    rows.append(("`rlm state` process, no kernel (snapshot; the process floor)",
                 f"{statistics.median(s for s, _ in floor):.2f} s"))
    rows.append(("`rlm state` process, idle kernel", f"{statistics.median(s for s, _ in idle_cli):.2f} s"))
    rows.append(("`rlm state` process, busy kernel (60 s cell)", f"{statistics.median(s for s, _ in busy_cli):.2f} s"))
    print(f"{names} names; medians of {args.n} listings and {args.cli} `rlm state` runs\n")
    print("| figure | value |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
