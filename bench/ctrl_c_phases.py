"""How soon Ctrl-C acts on each phase of `rlm run` (issue 58 item 11: "Ctrl-C does nothing
during a gate or a compaction").

One scripted run per phase and round, through the user's path (`python -m rlm run`, a real
kernel, SIGINT to the process as a terminal sends it):
  cell        the baseline: a cell that sleeps (Ctrl-C interrupts it; a second press,
              sent once the first one's notice is printed, ends the run)
  gate        a `--gate` that sleeps (one press stops the gate and the run)
  compaction  `compact.run()` with a compaction model that sends nothing (a real
              OpenAI-compatible endpoint on 127.0.0.1 holding its reply: bench/fake_openai)
Prints the seconds from the first SIGINT to the process's exit, and each phase's ratio to
the cell's, measured in the same rounds.

    python -m bench.ctrl_c_phases --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.fake_openai import serving

READ = "total = int(open('six.txt').read()) * 7\nprint(total)\n"


def _reply(code: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}


PHASES = {  # replies, extra args, the line that says the phase runs
    "cell": ([_reply("import time\nprint('napping', flush=True)\ntime.sleep(60)"),
              _reply("import time\nprint('napping again', flush=True)\ntime.sleep(60)")],
             [], "napping"),
    "gate": ([_reply(READ + "final(str(total))")], ["--gate", "sleep 60"], "running the gate"),
    "compaction": ([_reply(READ + "compact.run()"), _reply(READ + "final(str(total))")],
                   ["--keep-recent-tokens", "10"], "compacting the context"),
}


def one(phase: str, env: dict[str, str]) -> float:
    """Seconds from the first Ctrl-C during `phase` to the process's exit."""
    replies, extra, marker = PHASES[phase]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "six.txt").write_text("6")
        (Path(tmp) / "s.json").write_text(json.dumps(replies))
        argv = [sys.executable, "-m", "rlm", "run", "the task", "--model", "script:s.json",
                *extra]
        proc = subprocess.Popen(argv, cwd=tmp, env={**env, "RLM_HOME": f"{tmp}/home"},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        pressed = None
        for line in proc.stdout:
            if pressed is None and marker in line:
                pressed = time.monotonic()
                proc.send_signal(signal.SIGINT)
            elif pressed is not None and phase == "cell" and "Press Ctrl-C again" in line:
                proc.send_signal(signal.SIGINT)  # the cell's run ends on the second press
        proc.wait(120)
        assert pressed is not None, f"{phase}: {marker!r} never shown"
        return time.monotonic() - pressed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    times: dict[str, list[float]] = {p: [] for p in PHASES}
    with serving([{"content": "a summary", "hold_first": True}]) as server:
        env = {**os.environ, "OPENAI_API_KEY": "sk-bench-not-a-key",
               "OPENAI_API_BASE": server.base, "RLM_COMPACTION_MODEL": "openai/gpt-4o-mini"}
        for _ in range(a.rounds):
            for phase in PHASES:
                times[phase].append(one(phase, env))
        server.release.set()
    base = statistics.median(times["cell"])
    for phase, got in times.items():
        med = statistics.median(got)
        print(f"{phase:10s} Ctrl-C to exit: median {med:.2f} s "
              f"({', '.join(f'{t:.2f}' for t in got)}); ratio to the cell {med / base:.2f}")


if __name__ == "__main__":
    main()
