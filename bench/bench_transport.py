"""rlm Kernel.execute round trip over unix sockets (ipc, the default for local kernels)
vs loopback TCP (the transport before issue 15.4): same config, interleaved blocks.

    .venv/bin/python bench/bench_transport.py [--n 300] [--code "1+1"]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlm.config import Config  # noqa: E402
from rlm.kernel import Kernel  # noqa: E402
from rlm.kernel import kernel as kernel_mod  # noqa: E402
from rlm.kernel.runtime import KernelRuntime  # noqa: E402


def start(session_dir: Path, transport: str) -> Kernel:
    k = Kernel(session_dir, Config(home=session_dir.parent))
    kernel_mod.KernelRuntime = functools.partial(KernelRuntime, transport=transport)  # type: ignore[misc]
    try:
        k.start()
    finally:
        kernel_mod.KernelRuntime = KernelRuntime  # type: ignore[misc]
    return k


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--code", default="1+1")
    ap.add_argument("--block", type=int, default=25)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kernels = {t: start(Path(tmp, t), t) for t in ("ipc", "tcp")}
        times: dict[str, list[float]] = {t: [] for t in kernels}
        try:
            for k in kernels.values():
                for _ in range(20):  # warm up
                    k.execute(args.code)
            while len(times["ipc"]) < args.n:
                for t, k in kernels.items():
                    for _ in range(args.block):
                        t0 = time.perf_counter()
                        k.execute(args.code)
                        times[t].append(time.perf_counter() - t0)
        finally:
            for k in kernels.values():
                k.stop()
    med = {t: statistics.median(v) for t, v in times.items()}
    print(f"cell {args.code!r}, n={len(times['ipc'])} each, interleaved blocks of {args.block}")
    print(f"rlm Kernel.execute over ipc   median {med['ipc'] * 1e3:7.3f} ms")
    print(f"rlm Kernel.execute over tcp   median {med['tcp'] * 1e3:7.3f} ms")
    print(f"ratio ipc / tcp               {med['ipc'] / med['tcp']:7.3f}x")


if __name__ == "__main__":
    main()
