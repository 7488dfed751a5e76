"""Kernel start + first cell with the confining launcher (kernel_ext.launch) vs plain
ipykernel_launcher, interleaved in the same run; prints the median ratio.

    python -m bench.bench_confine [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rlm.config import Config
from rlm.kernel import Kernel, runtime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    rounds = ap.parse_args().rounds
    confined = runtime.kernel_argv

    def plain(config: Config) -> list[str]:
        return ["ipykernel_launcher" if a == "kernel_ext.launch" else a for a in confined(config)]

    times: dict[str, list[float]] = {"plain": [], "launch": []}
    try:
        for _ in range(rounds):
            for name, argv in (("plain", plain), ("launch", confined)):
                runtime.kernel_argv = argv  # type: ignore[assignment]
                with tempfile.TemporaryDirectory() as d:
                    t = time.perf_counter()
                    with Kernel(Path(d) / "s", Config(home=Path(d))) as k:
                        k.execute("1")
                    times[name].append(time.perf_counter() - t)
    finally:
        runtime.kernel_argv = confined  # type: ignore[assignment]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"start + first cell, median of {rounds}: plain {med['plain']:.3f} s, "
          f"launch {med['launch']:.3f} s, ratio launch/plain {med['launch'] / med['plain']:.2f}x")


if __name__ == "__main__":
    main()
