"""Context relief on the default model (issue 27): the ladder against summaries only.

    python -m bench.context_ladder                          # every task, three variants
    python -m bench.context_ladder --variants tiers,checkpoint --tasks orders
    python -m bench.context_ladder --transcripts bench/transcripts/ladder-stopN.jsonl

Each task is one `rlm chat --json` session on the default model (`local`), fed six prompts
on stdin, one step each, about data generated with a fixed seed. The later steps need
numbers printed by earlier ones (step 5 and 6 combine them), so a context relief that
loses them shows up as a wrong answer, unless the model finds them again (its kernel
variables, `history.*`, or by recomputing). The window is set small (`--context-window`,
4096 by default) so a session crosses it several times. The tasks were written before
any run and not tuned after.

Variants, each a user config file (RLM_CONFIG):
  summary     context_tiers = false: summaries only
  tiers       nothing set: today's default (prune, shake, then a summary; no checkpoint
              for `local`)
  checkpoint  checkpoint_rungs = [0.4, 0.6, 0.75]: tiers, the checkpoint written as the
              context fills, and the rebuild from it before any summary

Per run: steps answered right (of six) and the last two (which need early numbers),
turns, the model calls spent on the context (summary calls; checkpoint writings with
their attempts, refused ones included), rebuilds (and how many wrote their checkpoint on
the main path), tier records, and seconds. The figures come from the session log. Each
chat takes the local-model lock (`flock /tmp/rlm-local-model.lock`) for itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parent / "out"
LOCK = "/tmp/rlm-local-model.lock"
SEED = 27
VARIANTS = {
    "summary": "context_tiers = false\n",
    "tiers": "",
    "checkpoint": "checkpoint_rungs = [0.4, 0.6, 0.75]\n",
}

Needle = str | float  # a word the answer must hold, or a number it must hold (1% off at most)


@dataclass
class LadderTask:
    name: str
    steps: list[str]
    make: Callable[[Path], list[list[Needle]]]  # writes the data; the needles of each step


def _rng(k: int) -> np.random.Generator:
    return np.random.default_rng(SEED * 100 + k)


# ------------------------------------------------------------------------- the tasks
ORDERS = [
    "orders.csv holds one order per row. What is the total revenue (units * price) over "
    "the whole file? Answer with the number, rounded to 2 decimals.",
    "Which region has the highest revenue, and what is that revenue (2 decimals)?",
    "In that region, which month (YYYY-MM) had the most units sold, and how many units?",
    "Across all regions, what is the mean price of the product 'lamp' (2 decimals)?",
    "What share of the total revenue from the first question does the region you found "
    "hold, in percent with 1 decimal?",
    "Multiply the units of the month you found by the mean lamp price you found; give the "
    "result with 2 decimals.",
]


def make_orders(d: Path) -> list[list[Needle]]:
    r = _rng(1)
    n = 12_000
    df = pd.DataFrame({
        "order_id": np.arange(n),
        "date": pd.Timestamp("2024-01-01") + pd.to_timedelta(r.integers(0, 366, n), unit="D"),
        "region": r.choice(["north", "south", "east", "west"], n, p=[0.2, 0.3, 0.24, 0.26]),
        "product": r.choice(["lamp", "desk", "chair", "shelf", "rug", "sofa"], n),
        "units": r.integers(1, 12, n),
        "price": r.gamma(3.0, 15.0, n).round(2),
    })
    df.to_csv(d / "orders.csv", index=False)
    df["revenue"] = df["units"] * df["price"]
    total = df["revenue"].sum()
    by_region = df.groupby("region")["revenue"].sum()
    region = by_region.idxmax()
    sub = df[df["region"] == region]
    months = sub.groupby(sub["date"].dt.strftime("%Y-%m"))["units"].sum()
    month, units = months.idxmax(), int(months.max())
    lamp = df.loc[df["product"] == "lamp", "price"].mean()
    return [[round(total, 2)], [region, round(by_region.max(), 2)], [month, units],
            [round(lamp, 2)], [round(100 * by_region.max() / total, 1)],
            [round(units * lamp, 2)]]


SENSORS = [
    "readings.csv holds sensor readings. How many distinct sensors are there, and how many "
    "readings in all?",
    "Which sensor has the highest mean temperature, and what is that mean (2 decimals)?",
    "How many readings have a humidity above 80?",
    "For the sensor you found, what is its highest temperature (2 decimals)?",
    "What is that highest temperature minus the sensor's mean temperature you found "
    "before (2 decimals)?",
    "What percent of all readings are the ones with humidity above 80 (2 decimals)?",
]


def make_sensors(d: Path) -> list[list[Needle]]:
    r = _rng(2)
    n = 9_000
    sensors = [f"T{i:02d}" for i in range(1, 19)]
    sensor = r.choice(sensors, n)
    warm = np.where(sensor == "T11", 2.5, 0.0)
    df = pd.DataFrame({
        "sensor": sensor,
        "time": pd.Timestamp("2024-06-01") + pd.to_timedelta(r.integers(0, 30 * 24 * 60, n),
                                                              unit="min"),
        "temp": (r.normal(21.0, 3.0, n) + warm).round(2),
        "humidity": r.uniform(30, 95, n).round(1),
    })
    df.to_csv(d / "readings.csv", index=False)
    means = df.groupby("sensor")["temp"].mean()
    best = means.idxmax()
    high = df.loc[df["sensor"] == best, "temp"].max()
    humid = int((df["humidity"] > 80).sum())
    return [[float(df["sensor"].nunique()), float(n)], [best, round(means.max(), 2)],
            [float(humid)], [round(high, 2)], [round(high - means.max(), 2)],
            [round(100 * humid / n, 2)]]


PAYROLL = [
    "staff.csv lists employees (id, dept, salary, start_year) and bonus.csv their bonuses "
    "(id, bonus). What is the total salary of all employees?",
    "Which department has the most employees, and how many?",
    "What is the mean bonus in that department (2 decimals)?",
    "How many employees started before 2015?",
    "Divide the total salary from the first question by the headcount of the department "
    "you found (2 decimals).",
    "Multiply the number of employees who started before 2015 by the mean bonus you found "
    "(2 decimals).",
]


def make_payroll(d: Path) -> list[list[Needle]]:
    r = _rng(3)
    n = 2_400
    staff = pd.DataFrame({
        "id": np.arange(1000, 1000 + n),
        "dept": r.choice(["sales", "ops", "it", "hr", "finance"], n, p=[.3, .25, .2, .1, .15]),
        "salary": r.integers(28_000, 95_000, n),
        "start_year": r.integers(2005, 2025, n),
    })
    bonus = pd.DataFrame({"id": staff["id"].sample(frac=1.0, random_state=3).to_numpy(),
                          "bonus": r.gamma(2.0, 900.0, n).round(2)})
    staff.to_csv(d / "staff.csv", index=False)
    bonus.to_csv(d / "bonus.csv", index=False)
    total = int(staff["salary"].sum())
    counts = staff["dept"].value_counts()
    dept, heads = counts.idxmax(), int(counts.max())
    merged = staff.merge(bonus, on="id")
    mean_bonus = merged.loc[merged["dept"] == dept, "bonus"].mean()
    early = int((staff["start_year"] < 2015).sum())
    return [[float(total)], [dept, float(heads)], [round(mean_bonus, 2)], [float(early)],
            [round(total / heads, 2)], [round(early * mean_bonus, 2)]]


TASKS = [LadderTask("orders", ORDERS, make_orders), LadderTask("sensors", SENSORS, make_sensors),
         LadderTask("payroll", PAYROLL, make_payroll)]


# ------------------------------------------------------------------------ the checks
def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*\.?\d*", text)
            if x.replace(",", "").strip("-.")]


def right(answer: str, needles: list[Needle]) -> bool:
    """Every word in the answer, and every number within 1% (or 0.01) of one in it."""
    low, nums = answer.lower(), _numbers(answer)
    for n in needles:
        if isinstance(n, str):
            if n.lower() not in low:
                return False
        elif not any(abs(x - n) <= max(0.01, 0.01 * abs(n)) for x in nums):
            return False
    return True


def log_figures(session: Path) -> dict:
    """Context management, from the session log."""
    out = {"summary_calls": 0, "rebuilds": 0, "rebuilds_written_now": 0,
           "checkpoint_calls": 0, "checkpoints": 0, "checkpoint_failures": 0,
           "tier_records": 0, "skipped": 0}
    for line in session.read_text().splitlines()[1:]:
        e = json.loads(line)
        data = e.get("data") if isinstance(e.get("data"), dict) else {}
        if e.get("type") == "compaction":
            details = e.get("details") or {}
            if details.get("kind") == "rebuild":
                out["rebuilds"] += 1
                out["rebuilds_written_now"] += bool(details.get("written_now"))
            else:
                out["summary_calls"] += 1
        kind = e.get("custom_type")
        if kind == "checkpoint":
            out["checkpoints"] += 1
            out["checkpoint_calls"] += int(data.get("attempts") or 1)
        elif kind == "checkpoint_outcome":
            out["checkpoint_failures"] += 1
            m = re.match(r"(\d+) replies were refused", str(data.get("reason", "")))
            out["checkpoint_calls"] += int(m.group(1)) if m else 1
        elif kind == "context_relief":
            out["tier_records"] += 1
        elif kind == "compaction_outcome":
            out["skipped"] += 1
    out["context_calls"] = out["summary_calls"] + out["checkpoint_calls"]
    return out


# ------------------------------------------------------------------------- one run
def run(task: LadderTask, variant: str, root: Path, window: int, max_turns: int,
        timeout: float) -> dict:
    work = root / f"{task.name}-{variant}"
    work.mkdir(parents=True)
    truth = task.make(work)
    config = work.parent / f"{task.name}-{variant}.toml"
    config.write_text(VARIANTS[variant])
    env = {**os.environ, "RLM_CONFIG": str(config)}
    env.pop("RLM_MODEL", None)  # the default model, as a new user has it
    stamp = work / ".started"
    argv = ["flock", LOCK, "sh", "-c", f"date +%s.%N > {stamp}; exec \"$@\"", "sh",
            "timeout", str(int(timeout)), sys.executable, "-m", "rlm", "chat",
            "--context-window", str(window), "--max-turns", str(max_turns), "--json"]
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                          input="\n".join(task.steps) + "\n/exit\n")
    seconds = time.time() - float(stamp.read_text()) if stamp.is_file() else 0.0
    results = []
    for line in proc.stdout.splitlines():
        try:
            results.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    finals = [str(r.get("final") or "") for r in results]
    finals += [""] * (len(task.steps) - len(finals))
    marks = [right(f, t) for f, t in zip(finals, truth, strict=True)]
    session = next((Path(r["session_path"]) for r in results if r.get("session_path")), None)
    figures = log_figures(session) if session and session.is_file() else {}
    return {"task": task.name, "variant": variant, "window": window,
            "steps_right": sum(marks), "late_right": sum(marks[4:]), "marks": marks,
            "turns": sum(int(r.get("turns") or 0) for r in results),
            "reasons": [r.get("reason") for r in results], "seconds": round(seconds),
            **figures, "finals": [f[:200] for f in finals], "truth": truth,
            "session": str(session) if session else None,
            "stderr": proc.stderr[-400:] if proc.returncode else ""}


def transcript(session: str | None, cap: int = 1500) -> list[dict]:
    if not session or not Path(session).is_file():
        return []
    out = []
    for line in Path(session).read_text().splitlines()[1:]:
        e = json.loads(line)
        if e.get("type") == "message":
            text = str(e["message"].get("content") or "")
            calls = e["message"].get("tool_calls") or []
            text += "".join(f"\n[call] {c['function']['arguments']}" for c in calls)
            if len(text) > cap:
                text = text[:cap // 2] + " [...] " + text[-(cap // 2 - 100):]
            out.append({"role": e["message"]["role"], "content": text})
        elif e.get("type") == "compaction":
            out.append({"role": "compaction", "content": str(e.get("summary", ""))[:cap]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", help="comma-separated task names (default: all)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--max-turns", type=int, default=8, help="per step")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per session")
    ap.add_argument("--workdir")
    ap.add_argument("--transcripts", help="append each row with its transcript here")
    args = ap.parse_args(argv)
    tasks = [t for t in TASKS if not args.tasks or t.name in args.tasks.split(",")]
    root = Path(args.workdir or tempfile.mkdtemp(prefix="rlm-ladder-"))
    OUT.mkdir(exist_ok=True)
    out = OUT / f"ladder-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.jsonl"
    rows = []
    for task in tasks:  # variants of one task side by side, so a slow machine hits all
        for variant in args.variants.split(","):
            row = run(task, variant, root, args.window, args.max_turns, args.timeout)
            rows.append(row)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
            if args.transcripts:
                with open(args.transcripts, "a") as f:
                    f.write(json.dumps({**row, "transcript": transcript(row["session"])}) + "\n")
    print(f"\n{out}\n")
    print("| task | variant | steps right | last two right | turns | context calls (summary + "
          "checkpoint) | rebuilds (written now) | tier records | s |")
    print("|---|---|---:|---:|---:|---|---|---:|---:|")
    for r in rows:
        print(f"| {r['task']} | {r['variant']} | {r['steps_right']}/6 | {r['late_right']}/2 | "
              f"{r['turns']} | {r.get('context_calls', '?')} ({r.get('summary_calls', '?')} + "
              f"{r.get('checkpoint_calls', '?')}) | {r.get('rebuilds', '?')} "
              f"({r.get('rebuilds_written_now', '?')}) | {r.get('tier_records', '?')} | "
              f"{r['seconds']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
