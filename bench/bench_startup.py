"""Wall time of a one-turn `rlm run` (issue 39: no run imports what it does not use, and a
hosted model's import runs beside the kernel's start).

Two runs, each in two variants alternated round by round, same machine state:
  scripted  a one-turn `script:` run: the time from the process start to its first reply
            (the assistant entry's timestamp in the session log; a scripted model answers
            at once, so this is the first request), and the whole run
  hosted    `openai/gpt-4o-mini` against a real local OpenAI-compatible endpoint
            (bench/fake_openai.py): the time from the process start to the first request
            reaching the endpoint, and the whole run; a third variant, `litellm`, is the
            run with every request through litellm (`RLM_OPENAI_CLIENT=litellm`: what
            every hosted run did before rlm.llm.direct)
Variants:
  baseline  litellm imported first, then the run: for `scripted`, what every `script:` and
            `local` run paid while they were litellm providers; for `hosted`, the import
            and the kernel's start one after the other
  rlm       `python -m rlm run ...` as a user runs it
Prints each figure's median and the ratio rlm / baseline. Runs write bytecode (an
inherited PYTHONDONTWRITEBYTECODE is dropped): an installed rlm has its .pyc files, and
compiling every module again would add ~0.3 s to each start.

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
from datetime import datetime
from pathlib import Path

from bench.fake_openai import serving, tool_reply

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


def variants(run: list[str]) -> dict[str, list[str]]:
    return {"baseline": [sys.executable, "-c", BASELINE, *run],
            "rlm": [sys.executable, "-m", "rlm", *run]}


def first_reply(home: Path, after: float) -> float:
    """The timestamp of the first assistant entry of the session started after `after`."""
    newest = max((home / "sessions").glob("*/session.jsonl"), key=lambda p: p.stat().st_mtime)
    for line in newest.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("type") == "message" and entry["message"].get("role") == "assistant":
            took = datetime.fromisoformat(entry["timestamp"]).timestamp() - after
            if took < 0:
                raise SystemExit(f"{newest} is not the run's session")
            return took
    raise SystemExit(f"{newest} has no reply")


def scripted(rounds: int, tmp: Path, env: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    script = tmp / "replies.json"
    script.write_text(json.dumps(REPLIES))
    argv = variants(["run", "what is 6*7?", "--model", f"script:{script}", "--json"])
    timed(argv["rlm"], env, str(tmp))  # warm the page cache and the kernel's first start
    times: dict[str, dict[str, list[float]]] = {k: {"to request": [], "wall": []} for k in argv}
    for i in range(rounds):
        for name in (list(argv) if i % 2 == 0 else list(reversed(argv))):
            t0 = time.time()
            times[name]["wall"].append(timed(argv[name], env, str(tmp)))
            times[name]["to request"].append(first_reply(Path(env["RLM_HOME"]), t0))
    return times


def hosted(rounds: int, tmp: Path, env: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    argv = variants(["run", "what is 6*7?", "--model", "openai/gpt-4o-mini", "--json"])
    argv["litellm"] = argv["rlm"]
    times: dict[str, dict[str, list[float]]] = {k: {"to request": [], "wall": []} for k in argv}
    for i in range(rounds + 1):  # round 0 warms the page cache; not counted
        for name in (list(argv) if i % 2 == 0 else list(reversed(argv))):
            with serving([tool_reply("final(str(6 * 7))")]) as server:
                run_env = {**env, "OPENAI_API_KEY": "sk-bench-not-a-key",
                           "OPENAI_API_BASE": server.base}
                if name == "litellm":
                    run_env["RLM_OPENAI_CLIENT"] = "litellm"
                t0 = time.time()
                wall = timed(argv[name], run_env, str(tmp))
                if i:
                    times[name]["to request"].append(server.arrivals[0] - t0)
                    times[name]["wall"].append(wall)
    return times


def report(kind: str, times: dict[str, dict[str, list[float]]]) -> None:
    for figure in times["rlm"]:
        for name, figures in times.items():
            ts = figures[figure]
            print(f"{kind:8s} {figure:10s} {name:9s} median {statistics.median(ts):6.2f} s  "
                  f"min {min(ts):6.2f}  max {max(ts):6.2f}  ({len(ts)} runs)")
        for other in (n for n in times if n != "rlm"):
            ratio = statistics.median(times["rlm"][figure]) / statistics.median(
                times[other][figure])
            print(f"{kind:8s} {figure:10s} ratio rlm / {other}: {ratio:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=["scripted", "hosted"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        # this checkout's rlm, whatever is installed: the runs start in a temporary cwd,
        # where a relative PYTHONPATH (`PYTHONPATH=.`) would find the installed one
        path = [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "RLM_HOME": str(tmp / "home"),
               "PYTHONPATH": os.pathsep.join(p for p in path if p)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for kind, fn in (("scripted", scripted), ("hosted", hosted)):
            if a.only in (None, kind):
                report(kind, fn(a.rounds, tmp, env))


if __name__ == "__main__":
    main()
