"""Fan-out of scripted children (issue 28): 40 text chunks, one child each.

One parent session per mode, all in the same run, agents built by the composition root
(`SessionRun`) with scripted models; each child runs one cell (count the words of its
chunk, `final(n)`), so what is measured is the host's and the kernels' cost per child:

  sequential   [rlm_query(task, context=c) for c in chunks]          (the blocking form)
  fan-out K    rlm_gather([rlm_spawn(task, context=c) ...]) at --max-children K

The parent's cell times itself (wall seconds, written to a file). Also measured in the
same run: a bare kernel start + stop (`rlm.kernel.Kernel`), the floor of a child's cost,
with the CPU seconds the kernel's processes used (getrusage of reaped children); and the
same number of bare kernels started K at a time with nothing else running: the part of a
fan-out a pool of pre-started kernels could move earlier, but not make cheaper.

    python bench/bench_children.py [--n 40] [--concurrency 1 4 8]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHUNK = "the quick brown fox jumps over the lazy dog " * 20


def call(code: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}


def fan_out(work: Path, n: int, mode: str, k: int) -> tuple[float, list[str]]:
    """(wall seconds of the parent's cell, the answers) for one mode."""
    from rlm import app

    child = work / "child.json"
    child.write_text(json.dumps([call("final(str(len(context.split())))")]))
    out = work / f"wall-{mode}-{k}.txt"
    chunks = [CHUNK * (1 + i % 3) for i in range(n)]
    if mode == "sequential":
        body = "res = [rlm_query('count the words', context=c) for c in chunks]\n"
    else:
        body = "res = list(rlm_gather([rlm_spawn('count the words', context=c) for c in chunks]))\n"
    parent = work / f"parent-{mode}-{k}.json"
    parent.write_text(json.dumps([
        call(f"import json, time\nchunks = json.load(open({str(work / 'chunks.json')!r}))\n"
             "t = time.perf_counter()\n" + body +
             f"open({str(out)!r}, 'w').write(str(time.perf_counter() - t))\nprint(res[:3])"),
        call("final(','.join(res))"),
    ]))
    (work / "chunks.json").write_text(json.dumps(chunks))
    options = app.RunOptions(overrides={"model": f"script:{parent}",
                                        "sub_model": f"script:{child}", "max_children": k})
    with app.SessionRun.new("run", "bench", options) as run:
        events = run.drive("bench")
    answers = (events[-1].final or "").split(",")
    return float(out.read_text()), answers


def one_kernel(folder: Path, home: Path) -> float:
    """Start a bare kernel, run one cell, stop it: wall seconds."""
    from rlm.config import Config
    from rlm.kernel import Kernel

    t = time.perf_counter()
    k = Kernel(folder, Config(home=home))
    k.start()
    k.execute("0")
    k.stop()
    return time.perf_counter() - t


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def kernel_start_s(home: Path, rounds: int) -> tuple[float, float]:
    """(median wall, mean CPU seconds of the kernel's processes) per kernel start."""
    cpu0 = children_cpu_s()
    times = [one_kernel(home / f"k{i}", home) for i in range(rounds)]
    return statistics.median(times), (children_cpu_s() - cpu0) / rounds


def kernels_at_once(home: Path, n: int, k: int) -> float:
    """Wall seconds to start (and stop) `n` bare kernels, `k` at a time."""
    t = time.perf_counter()
    with ThreadPoolExecutor(k) as pool:
        list(pool.map(lambda i: one_kernel(home / f"p{k}-{i}", home), range(n)))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--kernel-rounds", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        os.environ["RLM_HOME"] = str(work / "home")
        expected = [str(len((CHUNK * (1 + i % 3)).split())) for i in range(a.n)]
        start, cpu = kernel_start_s(work, a.kernel_rounds)
        seq, answers = fan_out(work, a.n, "sequential", 1)
        assert answers == expected, answers[:5]
        rows = [("sequential rlm_query", 1, seq, None)]
        for k in a.concurrency:
            wall, answers = fan_out(work, a.n, "fanout", k)
            assert answers == expected, answers[:5]  # every answer, in input order
            rows.append(("rlm_spawn + rlm_gather", k, wall, kernels_at_once(work, a.n, k)))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}; cores: {os.cpu_count()}")
    print(f"kernel start+stop (median of {a.kernel_rounds}): {start * 1000:.0f} ms wall, "
          f"{cpu * 1000:.0f} ms CPU of its processes")
    print(f"| mode | --max-children | wall for {a.n} children | per child | vs sequential "
          f"| {a.n} bare kernels alone, same K | kernels' share of the wall |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, k, wall, bare in rows:
        alone = "" if bare is None else f"{bare:.1f} s"
        share = "" if bare is None else f"{bare / wall:.0%}"
        print(f"| {name} | {k} | {wall:.1f} s | {wall / a.n * 1000:.0f} ms | "
              f"{seq / wall:.2f}x | {alone} | {share} |")
    per_child = seq / a.n
    print(f"host overhead per sequential child beyond a kernel start: "
          f"{(per_child - start) * 1000:.0f} ms ({per_child / start:.2f}x a kernel start)")


if __name__ == "__main__":
    main()
