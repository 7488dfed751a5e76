"""Issue 26: what the untrusted-side bounds cost, each against a baseline from the same run.

    python -m bench.bench_untrusted [--mb 20] [--rounds 3]

1. A runaway model reply (`--mb` MB of text) through the seam (a scripted provider),
   streamed and not, vs a reply of exactly the bound (rlm.llm.assemble.MAX_REPLY_CHARS):
   wall time and peak RSS, each case in its own interpreter.
2. Kernel start + first cell with the default sandbox vs `--no-sandbox`, interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlm.config import Config
from rlm.kernel import Kernel, runtime
from rlm.llm import assemble

_CHILD = """
import resource, sys, time
from rlm.llm.inproc_models import ScriptedLLM
block = " ".join(f"w{i}" for i in range(200)) + "\\n"  # no run of equal chunks
chars, stream = int(sys.argv[1]), sys.argv[2] == "1"
text = (block * (chars // len(block) + 1))[:chars]
llm = ScriptedLLM([text], stream=stream)
t = time.perf_counter()
got = llm.complete([{"role": "user", "content": "go"}])
took = time.perf_counter() - t
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, len(got.content))
"""


def _reply(chars: int, stream: bool) -> tuple[float, float, int]:
    """(seconds in `complete`, the process's peak RSS in MiB, characters kept), measured
    in a fresh interpreter so one case's peak is not another's."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(chars), "1" if stream else "0"],
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def replies(mb: int) -> None:
    cap = assemble.MAX_REPLY_CHARS
    print("| reply | path | wall in complete() | peak RSS | kept chars |\n|---|---|---:|---:|---:|")
    for stream in (True, False):
        path = "streamed" if stream else "whole"
        base = _reply(cap, stream)
        big = _reply(mb * 2**20, stream)
        for name, (took, peak, kept) in ((f"{cap // 1024} KB (the bound)", base),
                                         (f"{mb} MB", big)):
            print(f"| {name} | {path} | {took:.2f} s | {peak:.0f} MiB | {kept:,} |")
        print(f"| ratio {mb} MB / bound | {path} | {big[0] / base[0]:.2f}x | "
              f"{big[1] / base[1]:.2f}x | |")


def sandbox_start(rounds: int) -> None:
    times: dict[str, list[float]] = {"no-sandbox": [], "default": []}
    for _ in range(rounds):
        for name, setting in (("no-sandbox", False), ("default", None)):
            with tempfile.TemporaryDirectory() as d:
                t = time.perf_counter()
                with Kernel(Path(d) / "s", Config(home=Path(d), sandbox=setting)) as k:
                    k.execute("1")
                times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    on = runtime.sandboxed(Config())
    print(f"\nkernel start + first cell, median of {rounds}: --no-sandbox "
          f"{med['no-sandbox']:.2f} s, default ({'sandboxed' if on else 'not sandboxed here'}) "
          f"{med['default']:.2f} s, ratio {med['default'] / med['no-sandbox']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    replies(args.mb)
    sandbox_start(args.rounds)


if __name__ == "__main__":
    main()
