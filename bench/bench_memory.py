"""Project memory on vs off with the real `local` model, over two-session tasks.

    flock /tmp/rlm-local-model.lock python bench/bench_memory.py [--variants a,b,c] [--max-turns 5]

Each variant: a fresh directory with a small dataset; session 1 (`rlm run`) states a
convention and asks for a partial result; session 2, a NEW `rlm run` in the same
directory (not a resume), asks the follow-up without repeating the convention. Correct
continuation = session 2's answer is the number the convention gives (within 1%). Run once
with the memory on (the default) and once with `--no-memory`, same tasks, same machine
run; tokens are what the two sessions spent together (the runs' --json). The tasks were
written before any run and not changed after (not tuned to the model).

`previous` (issue 58 item 10, written before its first run): session 2 asks what session
1 found, which the memory's `run` line in history.log carries (rlm.memory.runs); without
memory the model can only compute it again from the file.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sales(d: Path) -> dict[str, float]:
    rng = random.Random(1)
    rows = [{"region": rng.choice(["North", "South", "East"]), "amount": rng.randint(10, 500),
             "refund": rng.random() < 0.25} for _ in range(300)]
    with open(d / "sales.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["region", "amount", "refund"])
        w.writeheader()
        w.writerows(rows)
    return {r: float(sum(x["amount"] for x in rows if x["region"] == r and not x["refund"]))
            for r in ("North", "South")}


def temps(d: Path) -> dict[str, float]:
    rng = random.Random(2)
    rows = [{"month": m, "day": k, "temp_f": round(rng.uniform(20, 90), 1)}
            for m in ("Jan", "Feb") for k in range(1, 29)]
    with open(d / "temps.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["month", "day", "temp_f"])
        w.writeheader()
        w.writerows(rows)

    def mean_c(m: str) -> float:
        v = [r["temp_f"] for r in rows if r["month"] == m]
        return round((sum(v) / len(v) - 32) * 5 / 9, 1)
    return {"Jan": mean_c("Jan"), "Feb": mean_c("Feb")}


def orders(d: Path) -> dict[str, float]:
    rng = random.Random(3)
    rows = [{"order_id": k, "amount_cents": rng.randint(500, 90000)} for k in range(1, 200)]
    with open(d / "orders.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["order_id", "amount_cents"])
        w.writeheader()
        w.writerows(rows)
    a = [r["amount_cents"] for r in rows]
    return {"max": max(a) / 100, "min": min(a) / 100}


def sales_all(d: Path) -> dict[str, float]:
    sales(d)
    with open(d / "sales.csv", newline="") as f:
        east = sum(float(r["amount"]) for r in csv.DictReader(f) if r["region"] == "East")
    return {"east": east}


VARIANTS = {
    "refunds": (sales, "Revenue excludes refunds (rows where refund is True). What is the total "
                       "revenue of region North in sales.csv?", "North",
                "Now the total revenue of region South in sales.csv?", "South"),
    "celsius": (temps, "Always report temperatures in Celsius, rounded to 1 decimal. What is the "
                       "mean temperature in Jan in temps.csv?", "Jan",
                "And the mean temperature in Feb in temps.csv?", "Feb"),
    "dollars": (orders, "Always report money in dollars: amount_cents is in cents. What is the "
                        "largest order amount in orders.csv?", "max",
                "What is the smallest order amount in orders.csv?", "min"),
    "previous": (sales_all, "Always give totals as plain numbers. What is the total amount of "
                            "region East in sales.csv, all rows?", "east",
                 "What total did the previous session find for region East? Reply with that "
                 "number.", "east"),
}


def run(d: Path, prompt: str, memory: bool, max_turns: int) -> dict:
    cmd = [sys.executable, "-m", "rlm", "run", prompt, "--model", "local", "--json",
           "--max-turns", str(max_turns)] + ([] if memory else ["--no-memory"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        p = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return {"final": None, "error": "timed out after 900 s", "tokens": {}}
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"final": None, "error": p.stderr[-500:], "tokens": {}}


def correct(answer: str | None, want: float) -> bool:
    nums = [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*\.?\d*", answer or "")]
    return any(abs(n - want) <= max(0.01 * abs(want), 0.051) for n in nums)


def tokens(r: dict) -> int:
    return int((r.get("tokens") or {}).get("total", 0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--max-turns", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for name in args.variants.split(","):
        make, p1, k1, p2, k2 = VARIANTS[name]
        for memory in (True, False):
            d = Path(tempfile.mkdtemp(prefix=f"mem-{name}-"))
            want = make(d)
            t0 = time.monotonic()
            r1 = run(d, p1, memory, args.max_turns)
            r2 = run(d, p2, memory, args.max_turns)
            row = {"variant": name, "memory": memory, "s1_ok": correct(r1.get("final"), want[k1]),
                   "s2_ok": correct(r2.get("final"), want[k2]), "want2": want[k2],
                   "s2_answer": (r2.get("final") or r2.get("error") or "")[:120],
                   "tokens": tokens(r1) + tokens(r2), "wall_s": round(time.monotonic() - t0)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| variant | memory | session 1 correct | session 2 correct | tokens (both) | wall s |")
    print("|---|---|---|---|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | {'on' if r['memory'] else 'off'} | {r['s1_ok']} | {r['s2_ok']} "
              f"| {r['tokens']:,} | {r['wall_s']} |")


if __name__ == "__main__":
    main()
