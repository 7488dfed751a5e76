"""Trivial-cell round trip through rlm's Kernel.execute vs a raw jupyter_client round trip.

Both kernels run the same command line (kernel_ext loaded, in-memory history, same env):
the raw side sends execute_request with a BlockingKernelClient and reads IOPub until idle
plus the shell reply; the rlm side calls Kernel.execute. Iterations are interleaved in
blocks so machine noise hits both sides alike. Prints medians and the ratio measured in
this run (target <= 1.15x).

    .venv/bin/python bench/bench_kernel.py [--n 300] [--code "1+1"]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import KernelManager

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlm.config import Config  # noqa: E402
from rlm.kernel import Kernel  # noqa: E402
from rlm.kernel.runtime import _SpecManager, kernel_argv, kernel_env  # noqa: E402


def raw_round_trip(kc, code: str) -> None:
    msg_id = kc.execute(code, store_history=True)
    while True:
        msg = kc.get_iopub_msg(timeout=30)
        if (
            msg["parent_header"].get("msg_id") == msg_id
            and msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
        ):
            break
    while kc.get_shell_msg(timeout=30)["parent_header"].get("msg_id") != msg_id:
        pass


def socket_round_trip(km, shell, iopub, code: str) -> None:
    """The floor: the same protocol on bare zmq sockets, one thread, no asyncio wrapper."""
    session = km.session
    msg = session.msg(
        "execute_request",
        {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
        },
    )
    msg_id = msg["header"]["msg_id"]
    session.send(shell, msg)
    while True:
        _, m = session.recv(iopub, mode=0)
        if (
            m["parent_header"].get("msg_id") == msg_id
            and m["msg_type"] == "status"
            and m["content"]["execution_state"] == "idle"
        ):
            break
    while session.recv(shell, mode=0)[1]["parent_header"].get("msg_id") != msg_id:
        pass


def start_raw(session_dir: Path, config: Config) -> tuple[KernelManager, object]:
    spec = KernelSpec(argv=kernel_argv(config), display_name="raw", language="python")
    km = KernelManager(kernel_name="raw", kernel_spec_manager=_SpecManager(spec))
    km.start_kernel(env=kernel_env(session_dir, config))
    kc = km.blocking_client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--code", default="1+1")
    ap.add_argument("--block", type=int, default=25)
    args = ap.parse_args()
    config = Config()
    with tempfile.TemporaryDirectory() as tmp:
        raw_dir, rlm_dir = Path(tmp, "raw"), Path(tmp, "rlm")
        raw_dir.mkdir()
        km, kc = start_raw(raw_dir, config)
        sock_dir = Path(tmp, "sock")
        sock_dir.mkdir()
        km2, kc2 = start_raw(sock_dir, config)
        kc2.stop_channels()
        shell, iopub = km2.connect_shell(), km2.connect_iopub()
        time.sleep(0.5)  # let the SUB socket subscribe
        k = Kernel(rlm_dir, config)
        k.start()
        try:
            for _ in range(30):  # warm up both
                raw_round_trip(kc, args.code)
                k.execute(args.code)
                socket_round_trip(km2, shell, iopub, args.code)
            raw: list[float] = []
            sock: list[float] = []
            ours: list[float] = []
            while len(raw) < args.n:
                raw += timed(lambda: raw_round_trip(kc, args.code), args.block)
                sock += timed(lambda: socket_round_trip(km2, shell, iopub, args.code), args.block)
                ours += timed(lambda: k.execute(args.code), args.block)
        finally:
            k.stop()
            kc.stop_channels()
            km.shutdown_kernel(now=True)
            shell.close(linger=0)
            iopub.close(linger=0)
            km2.shutdown_kernel(now=True)
    r, s, o = statistics.median(raw), statistics.median(sock), statistics.median(ours)
    print(f"cell {args.code!r}, n={len(raw)} each, interleaved blocks of {args.block}")
    print(f"raw jupyter_client BlockingKernelClient  median {r * 1e3:7.3f} ms")
    print(f"raw zmq sockets + Session (one thread)   median {s * 1e3:7.3f} ms")
    print(f"rlm Kernel.execute                       median {o * 1e3:7.3f} ms")
    print(f"ratio rlm / BlockingKernelClient         {o / r:7.3f}x  (target <= 1.15x)")
    print(f"ratio rlm / bare sockets                 {o / s:7.3f}x")


if __name__ == "__main__":
    main()
