"""Is `rlm demo` right, seed after seed? Runs the real command a user runs, one at a time.

    .venv/bin/python bench/demo_seeds.py                    # seeds 1..10, local model
    .venv/bin/python bench/demo_seeds.py --seeds 1,2 --rows 3000 --out bench/out/demo.json

Each run is `python -m rlm demo --json --seed N` in an empty directory; its final answer is
checked with `rlm.demo.answer_is_right` against `rlm.demo.demo_answer(N, rows)` (leader
named first, lead within 1%). Prints one line per seed (wall time, turns, cells, the 1-minute
load average before the run) and a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlm.demo import DEFAULT_ROWS, answer_is_right, demo_answer


def run_seed(seed: int, rows: int, model: str | None, timeout: float) -> dict:
    truth = demo_answer(seed, rows)
    load = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "rlm", "demo", "--json", "--seed", str(seed), "--rows", str(rows)]
    if model:
        cmd += ["--model", model]
    with tempfile.TemporaryDirectory() as cwd:
        t0 = time.perf_counter()
        try:
            out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
            wall = time.perf_counter() - t0
            lines = out.stdout.strip().splitlines()
            result = json.loads(lines[-1]) if out.returncode in (0, 3) and lines else {}
            error = "" if result else (out.stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            wall, result, error = time.perf_counter() - t0, {}, f"timeout after {timeout:.0f} s"
        left = sorted(p.name for p in Path(cwd).iterdir())
    final = result.get("final")
    return {
        "seed": seed, "rows": rows, "right": answer_is_right(final, truth), "final": final,
        "truth": f"{truth.leader} by {truth.lead:.2f} over {truth.runner_up}",
        "turns": result.get("turns"), "cells": result.get("cells"),
        "reason": result.get("reason"), "wall_s": round(wall, 1), "load_before": load,
        "error": error, "files_left_in_cwd": left,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3,4,5,6,7,8,9,10")
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    ap.add_argument("--model", default=None, help="default: the demo's default (local)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    results = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        r = run_seed(seed, args.rows, args.model, args.timeout)
        results.append(r)
        print(f"seed {seed}: {'RIGHT' if r['right'] else 'wrong'} {r['wall_s']:.0f} s "
              f"turns={r['turns']} cells={r['cells']} load={r['load_before']:.2f} "
              f"final={r['final']!r} truth={r['truth']} {r['error']}", flush=True)
    right = sum(r["right"] for r in results)
    walls = sorted(r["wall_s"] for r in results)
    print(f"\n{right}/{len(results)} right; wall median {walls[len(walls) // 2]:.0f} s, "
          f"max {walls[-1]:.0f} s\n")
    print("| seed | right | wall s | turns | cells | load | answer | truth |")
    print("|---:|:---:|---:|---:|---:|---:|---|---|")
    for r in results:
        answer = str(r["final"] or r["error"]).replace("|", "/").replace("\n", " ")[:90]
        print(f"| {r['seed']} | {'yes' if r['right'] else 'no'} | {r['wall_s']:.0f} | "
              f"{r['turns']} | {r['cells']} | {r['load_before']:.1f} | {answer} | {r['truth']} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
