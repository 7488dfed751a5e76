"""Host cost per iteration of the whole agent loop vs raw jupyter_client (DESIGN.md peers).

A scripted N-cell run through `Agent.run` (scripted model, session log
with fsync per entry, per-cell snapshots, output shaping, projection) against the same N
cells sent with a raw BlockingKernelClient round trip, same kernel argv, same run.
Given the peers' checkouts (nothing is downloaded), each round also runs nano-rlm's and
alexzhang13/rlm's published loops over the same cells with a scripted model (bench/peers.py,
in a subprocess with --peer-python) and a raw round trip on the plain ipykernel they start,
so one command prints every ratio from one run. Peers measured earlier on these machines
(DESIGN.md): nano-rlm 1.27-1.29x, alexzhang13/rlm 2.16-2.34x.

The median of a run's own steps is reported beside the means (what a step costs when the
machine leaves it alone: on a noisy VM a burst moves a whole round's mean by 2x), and a
paired run: each step's cell also goes to a raw kernel during that step's model call, so
rlm's steps and raw round trips are measured in turn, under the same noise; and the CPU
seconds a step took, in this process and in the kernel's processes (Linux /proc), which
the VM's bursts move much less than wall time.

    python bench/bench_loop.py [--cells 40[,200]] [--rounds 3]
        [--nano-rlm CHECKOUT] [--alexzhang-rlm CHECKOUT] [--peer-python PYTHON] [--key] [--cli]

--cli adds the user's path: whole `rlm run` processes, the CLI and its rendering included
(the rows above drive `Agent.run` in this process).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from jupyter_client import BlockingKernelClient, KernelManager

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.peers import cells, peer_step  # noqa: E402
from rlm.app import build_agent  # noqa: E402
from rlm.config import Config  # noqa: E402
from rlm.events import TurnStarted  # noqa: E402
from rlm.llm import ScriptedLLM  # noqa: E402
from rlm.session.store import SessionStore  # noqa: E402

# the durations of the last run's steps (rlm: TurnStarted to the next; raw: one round trip):
# their median is what a step costs when the machine left it alone, which a noisy VM's
# mean hides (its bursts move whole rounds by 2x)
STEPS: list[float] = []
# CPU seconds per step of the last run, (this process, the kernel's): what a step costs in
# work, which a noisy VM moves much less than wall time (its bursts stall both alike)
CPU: list[float] = [0.0, 0.0]


def _proc_cpu(pid: int | None) -> float:
    """User + system CPU seconds so far of process `pid` and its descendants (rlm's kernel
    runs under a launcher, in a PID namespace of its own): Linux /proc, 0.0 elsewhere."""
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, CPU seconds)
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            stats[int(entry)] = (int(fields[1]), cpu)
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += stats.get(p, (0, 0.0))[1] if p is not None else 0.0
        todo += [c for c, (parent, _) in stats.items() if parent == p]
    return total


@contextlib.contextmanager
def cpu_of(kernel_pid: int | None, steps: int) -> Iterator[None]:
    """Sets CPU to the CPU seconds per step the block took, here and in the kernel."""
    h0, k0 = time.process_time(), _proc_cpu(kernel_pid)
    yield
    CPU[:] = [(time.process_time() - h0) / steps, (_proc_cpu(kernel_pid) - k0) / steps]


def call(code: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}


BENCH_KEY = "BENCH_FAKE_API_KEY"  # a name rlm.secrets treats as a secret


def rlm_run(n: int, key: bool = False) -> tuple[float, float]:
    """(seconds per iteration, of which inside the model call); the steps' own durations
    go to STEPS. `key`: a provider key in the environment, as a hosted model has one:
    after each cell the host then scrubs what the kernel wrote for it
    (rlm.secrets.scrub_session)."""
    if key:
        os.environ[BENCH_KEY] = "sk-bench-" + "k3y" * 12
    try:
        return _rlm_run(n)
    finally:
        os.environ.pop(BENCH_KEY, None)


def _rlm_run(n: int, before_reply: Callable[[], None] | None = None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        home = Path(d)
        cfg = Config(home=home, model="script:bench", max_turns=n + 5)
        replies = [call(c) for c in cells(n)] + [call("final('done')")]
        session = SessionStore.create(home, model="script:bench", task="bench")
        llm = ScriptedLLM(replies)
        in_model = [0.0]
        complete = llm.complete

        def timed(*a, **kw):  # type: ignore[no-untyped-def]
            if before_reply is not None:
                before_reply()
            t = time.perf_counter()
            try:
                return complete(*a, **kw)
            finally:
                in_model[0] += time.perf_counter() - t

        llm.complete = timed  # type: ignore[method-assign]
        with build_agent(session, cfg, llm=llm) as agent:
            agent.executor.execute("0")  # warm
            with cpu_of(getattr(agent.executor, "pid", None), n + 1):
                t0 = time.perf_counter()
                starts = [time.perf_counter() for ev in agent.run("bench")
                          if isinstance(ev, TurnStarted)]
                end = time.perf_counter()
            STEPS[:] = [b - a for a, b in zip(starts, starts[1:] + [end], strict=True)]
            return (end - t0) / (n + 1), in_model[0] / (n + 1)


def cli_run(n: int, tries: int = 3) -> float:
    """Seconds per step on the user's path: whole `rlm run` processes (the CLI, its event
    rendering to a console without colour, the worker-events log), (min T(n+1 steps) -
    min T(1 step)) / n over `tries` of each, alternated, so the process start, the kernel's
    start and its stop cancel out."""
    with tempfile.TemporaryDirectory() as d:
        home = Path(d)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(RLM_HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        took: dict[int, list[float]] = {n: [], 0: []}
        for _ in range(tries):
            for k in took:
                script = home / f"replies-{k}.json"
                script.write_text(json.dumps([call(c) for c in cells(k)] +
                                             [call("final('done')")]))
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "rlm", "run", "bench", "--model",
                                f"script:{script}", "--max-turns", str(n + 5)], env=env,
                               cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               check=True)
                took[k].append(time.perf_counter() - t)
        return (min(took[n]) - min(took[0])) / n


@contextlib.contextmanager
def raw_kernel(argv: list[str] | None = None) -> Iterator[BlockingKernelClient]:
    """A kernel started as rlm starts its own (rlm's argv, kernel_ext loaded) unless `argv`
    is given, with a blocking client, warmed by one cell. Its pid: `RAW_PID[0]`."""
    from rlm.kernel.runtime import kernel_argv

    with tempfile.TemporaryDirectory() as d:
        km = KernelManager()
        km.kernel_cmd = argv or kernel_argv(Config(home=Path(d)))
        km.start_kernel()
        RAW_PID[0] = getattr(km.provisioner, "pid", None)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        try:
            kc.execute_interactive("0", timeout=60, output_hook=lambda m: None)
            yield kc
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def raw_run(n: int, argv: list[str] | None = None, store_history: bool = True) -> float:
    """Seconds per cell of a raw round trip; rlm's kernel argv unless `argv` is given.
    store_history=False is what alexzhang13/rlm sends: it skips a per-cell kernel cost of
    several ms here, so its loop is compared with a raw round trip that skips it too."""
    with raw_kernel(argv) as kc, cpu_of(RAW_PID[0], n + 1):
        t0 = time.perf_counter()
        STEPS.clear()
        for code in cells(n) + ["'done'"]:
            t = time.perf_counter()
            kc.execute_interactive(code, timeout=60, output_hook=lambda m: None,
                                   store_history=store_history)
            STEPS.append(time.perf_counter() - t)
        return (time.perf_counter() - t0) / (n + 1)


RAW_PID: list[int | None] = [None]


def paired_run(n: int) -> tuple[float, float]:
    """(median rlm step, median raw round trip), measured in turn: during each model call
    the step's cell goes to a raw kernel first, and that round trip is taken out of the
    step. A noisy VM then slows both alike; runs measured apart differed by up to 2x. The
    raw client runs in a process of its own (`--raw-helper`), apart from rlm's threads.
    A round trip interleaved with other work this way costs ~10% more than back-to-back
    ones (in rlm's process or in its own alike), so this ratio reads lower than raw_run's."""
    raw: list[float] = []
    codes = iter(cells(n) + ["'done'"])
    helper = subprocess.Popen([sys.executable, __file__, "--raw-helper"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert helper.stdin is not None and helper.stdout is not None
    stdin, stdout = helper.stdin, helper.stdout

    def before_reply() -> None:
        code = next(codes, None)
        if code is not None:
            stdin.write(json.dumps(code) + "\n")
            stdin.flush()
            raw.append(float(stdout.readline()))

    try:
        if stdout.readline().strip() != "ready":
            raise RuntimeError("the raw helper did not start")
        _rlm_run(n, before_reply)
    finally:
        stdin.close()
        helper.wait(timeout=60)
    steps = [s - r for s, r in zip(STEPS, raw, strict=True)]
    return statistics.median(steps), statistics.median(raw)


def raw_helper() -> None:
    """`--raw-helper`: a raw kernel; each line of stdin is a cell (JSON), each line of
    stdout the seconds its round trip took."""
    with raw_kernel() as kc:
        print("ready", flush=True)
        for line in sys.stdin:
            t = time.perf_counter()
            kc.execute_interactive(json.loads(line), timeout=60, output_hook=lambda m: None)
            print(time.perf_counter() - t, flush=True)


# The raw round trip each system is compared with: the same kernel command and the same
# execute request (store_history) as the system sends.
RAW = "raw, rlm's kernel"
PLAIN = "raw, plain ipykernel"
PLAIN_NO_HISTORY = "raw, plain, store_history=False"
KEYED = "rlm, whole loop, a key set"
CLI = "rlm, whole `rlm run` processes"
MEDIAN_RAW, MEDIAN_RLM = "raw, median round trip", "rlm, median step"
PAIRED_RAW, PAIRED_RLM = "raw, paired with rlm's steps", "rlm, median step, paired"
CPU_RAW, CPU_RLM = "raw, CPU (client + kernel)", "rlm, CPU (host + kernel)"
OWN_RAW = {"rlm, whole loop": RAW, "rlm, outside the model": RAW, KEYED: RAW, CLI: RAW,
           "nano-rlm": PLAIN,
           "alexzhang13/rlm": PLAIN_NO_HISTORY, MEDIAN_RLM: MEDIAN_RAW, PAIRED_RLM: PAIRED_RAW,
           CPU_RLM: CPU_RAW}


def report(n: int, rounds: dict[str, list[float]]) -> None:
    """One table: ms per step, the ratio to raw on rlm's kernel and to the system's own raw."""
    med = {k: statistics.median(v) for k, v in rounds.items()}
    print(f"\n{n} steps, median of {len(rounds[RAW])} round(s)")
    print(f"{'system':<32}{'ms/step':>8}{'/ raw rlm kernel':>18}{'/ own raw':>11}  own raw, rounds (ms)")
    for name, v in rounds.items():
        own = OWN_RAW.get(name)
        vs_own = f"{med[name] / med[own]:>10.2f}x  {own}, " if own else f"{'':>11}  "
        print(f"{name:<32}{med[name] * 1000:>8.1f}{med[name] / med[RAW]:>17.2f}x"
              f"{vs_own}{[round(x * 1000, 1) for x in v]}")


def main() -> None:
    if sys.argv[1:] == ["--raw-helper"]:
        return raw_helper()
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default="40", help="steps per run, comma-separated: 40,200")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nano-rlm", type=Path, help="checkout of PrimeIntellect-ai/nano-rlm")
    ap.add_argument("--alexzhang-rlm", type=Path, help="checkout of alexzhang13/rlm")
    ap.add_argument("--peer-python", default=sys.executable,
                    help="interpreter with the peers' dependencies (a venv)")
    ap.add_argument("--key", action="store_true",
                    help="also run rlm with a provider key set (the per-cell secret scrub)")
    ap.add_argument("--cli", action="store_true",
                    help="also time whole `rlm run` processes (the user's path: the CLI too)")
    a = ap.parse_args()
    peers = {k: p for k, p in (("nano-rlm", a.nano_rlm), ("alexzhang13/rlm", a.alexzhang_rlm)) if p}
    plain = [a.peer_python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]  # theirs
    rlm_run(3)  # first use in a process loads tiktoken encodings and litellm's models
    for n in [int(c) for c in a.cells.split(",")]:
        rounds: dict[str, list[float]] = {RAW: [], "rlm, whole loop": [],
                                          "rlm, outside the model": []}
        for _ in range(a.rounds):
            total, model = rlm_run(n)
            rounds["rlm, whole loop"].append(total)
            rounds["rlm, outside the model"].append(total - model)
            rounds.setdefault(MEDIAN_RLM, []).append(statistics.median(STEPS))
            rounds.setdefault(CPU_RLM, []).append(sum(CPU))
            rounds[RAW].append(raw_run(n))
            rounds.setdefault(MEDIAN_RAW, []).append(statistics.median(STEPS))
            rounds.setdefault(CPU_RAW, []).append(sum(CPU))
            step, raw = paired_run(n)
            rounds.setdefault(PAIRED_RLM, []).append(step)
            rounds.setdefault(PAIRED_RAW, []).append(raw)
            if a.key:
                rounds.setdefault(KEYED, []).append(rlm_run(n, key=True)[0])
            if a.cli:
                rounds.setdefault(CLI, []).append(cli_run(n))
            if peers:
                rounds.setdefault(PLAIN, []).append(raw_run(n, plain))
            if "alexzhang13/rlm" in peers:
                rounds.setdefault(PLAIN_NO_HISTORY, []).append(raw_run(n, plain, False))
            for name, path in peers.items():
                rounds.setdefault(name, []).append(peer_step(name, path, n, a.peer_python))
        report(n, rounds)
    if not peers:
        print("(peers here, DESIGN.md: nano-rlm 1.27-1.29x, alexzhang13/rlm 2.16-2.34x)")


if __name__ == "__main__":
    main()
