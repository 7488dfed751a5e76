"""Host cost per iteration of the whole agent loop vs raw jupyter_client (DESIGN.md peers).

A scripted 40-cell run through `Agent.run` (scripted model, session log
with fsync per entry, per-cell snapshots, output shaping, projection) against the same 40
cells sent with a raw BlockingKernelClient round trip, same kernel argv, same run.
Peers measured on these machines (DESIGN.md): nano-rlm 1.27-1.29x, alexzhang13/rlm
2.16-2.34x.

    python bench/bench_loop.py [--cells 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from jupyter_client import KernelManager

from rlm.app import build_agent
from rlm.config import Config
from rlm.llm import ScriptedLLM
from rlm.session.store import SessionStore


def cells(n: int) -> list[str]:
    return [f"x{i} = {i} * 2\nprint(x{i})" for i in range(n)]


def call(code: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}


def rlm_run(n: int) -> tuple[float, float]:
    """(seconds per iteration, of which inside the model call)."""
    with tempfile.TemporaryDirectory() as d:
        home = Path(d)
        cfg = Config(home=home, model="script:bench", max_turns=n + 5)
        replies = [call(c) for c in cells(n)] + [call("final('done')")]
        session = SessionStore.create(home, model="script:bench", task="bench")
        llm = ScriptedLLM(replies)
        in_model = [0.0]
        complete = llm.complete

        def timed(*a, **kw):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return complete(*a, **kw)
            finally:
                in_model[0] += time.perf_counter() - t

        llm.complete = timed  # type: ignore[method-assign]
        with build_agent(session, cfg, llm=llm) as agent:
            agent.executor.execute("0")  # warm
            t0 = time.perf_counter()
            for _ in agent.run("bench"):
                pass
            return (time.perf_counter() - t0) / (n + 1), in_model[0] / (n + 1)


def raw_run(n: int) -> float:
    from rlm.kernel.runtime import kernel_argv

    with tempfile.TemporaryDirectory() as d:
        km = KernelManager()
        km.kernel_cmd = kernel_argv(Config(home=Path(d)))  # same argv (kernel_ext loaded)
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        try:
            kc.execute_interactive("0", timeout=60, output_hook=lambda m: None)
            t0 = time.perf_counter()
            for code in cells(n) + ["'done'"]:
                kc.execute_interactive(code, timeout=60, output_hook=lambda m: None)
            return (time.perf_counter() - t0) / (n + 1)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rlm_run(3)  # first use in a process loads tiktoken encodings and litellm's models
    r, m, b = [], [], []
    for _ in range(a.rounds):
        total, model = rlm_run(a.cells)
        r.append(total)
        m.append(total - model)
        b.append(raw_run(a.cells))
    mr, mm, mb = statistics.median(r), statistics.median(m), statistics.median(b)
    print(f"rlm agent loop per iteration:  {mr * 1000:.1f} ms  {[round(x * 1000, 1) for x in r]}")
    print(f"  of which outside the model:  {mm * 1000:.1f} ms  {[round(x * 1000, 1) for x in m]}")
    print(f"raw jupyter_client per cell:   {mb * 1000:.1f} ms  {[round(x * 1000, 1) for x in b]}")
    print(f"ratio, whole loop (litellm call included): {mr / mb:.2f}x")
    print(f"ratio, host work outside the model call:    {mm / mb:.2f}x")
    print("(peers here, DESIGN.md: nano-rlm 1.27-1.29x, alexzhang13/rlm 2.16-2.34x)")


if __name__ == "__main__":
    main()
