"""Wall time of a one-turn scripted `rlm run` (issue 39: no run imports what it does not use).

The same one-turn scripted run, alternated in each round, same machine state:
  baseline  litellm imported first, then the run (what every `script:`/`local` run paid
            when those models were litellm custom providers)
  rlm       `python -m rlm run ...` as a user runs it (litellm never imported)
Prints each variant's median wall seconds and the ratio rlm / baseline.

    python -m bench.bench_startup --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPLIES = [{"content": "", "tool_calls": [{"name": "python", "arguments": {
    "code": "final(str(6 * 7))"}}]}]
BASELINE = ("import sys; import rlm.llm.seam as s; s._litellm(); from rlm.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))")


def timed(argv: list[str], env: dict[str, str], cwd: str) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{argv[:3]} exited {out.returncode}:\n{out.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "replies.json"
        script.write_text(json.dumps(REPLIES))
        env = {**os.environ, "RLM_HOME": str(Path(tmp) / "home")}
        run = ["run", "what is 6*7?", "--model", f"script:{script}", "--json"]
        variants = {"baseline": [sys.executable, "-c", BASELINE, *run],
                    "rlm": [sys.executable, "-m", "rlm", *run]}
        timed(variants["rlm"], env, tmp)  # warm the page cache and the kernel's first start
        times: dict[str, list[float]] = {k: [] for k in variants}
        for i in range(a.rounds):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for name in order:
                times[name].append(timed(variants[name], env, tmp))
    for name, ts in times.items():
        print(f"{name:9s} median {statistics.median(ts):6.2f} s  min {min(ts):6.2f}  "
              f"max {max(ts):6.2f}  ({len(ts)} runs)")
    ratio = statistics.median(times["rlm"]) / statistics.median(times["baseline"])
    print(f"ratio rlm / baseline (one-turn scripted run, wall): {ratio:.2f}x")


if __name__ == "__main__":
    main()
