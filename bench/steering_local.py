"""Steering on the default model (issue 29): turns wasted without and with a stream rule, a
gate and the advisor, on `local` (the embedded offline model), through `rlm run --json`.

    python -m bench.steering_local
    python -m bench.steering_local --scenarios constraint --transcripts bench/transcripts/x.jsonl

Scenarios (data generated with a fixed seed; the model reads the files itself; written
before any run, not tuned after). Each runs without steering and with each steering that
could catch its drift:
  no-pandas   the task forbids pandas (use the csv module): `rule` adds
              `condition: import pandas|pd\\.` (scope code) in `.rlm/rules/`; `advisor`
              adds `--advisor local`
  cents       the amounts are in cents and the answer is wanted in euros (a constraint no
              regex sees): `advisor`
  report      report.txt must hold one `region,total` line per region before the answer,
              run `--autonomous`: `gate` adds a gate that checks the file's four lines;
              `advisor`
(The first suite, at a376bd3, gave the data with `--context`: the constraint was moot, no
run drifted; its figures are in RESULTS.md too.)

Per run, from the session log: turns, model calls, cells run, cells that broke the
constraint and ran (no-pandas: code importing pandas or calling pd.), rule stops, whether
the answer is right (the total within 0.5%, or the region), whether report.txt is as asked
(four `region,total` lines and nothing else; "-" when absent), the advisor's calls, advice
and tokens as a fraction of the primary's, and seconds. `--transcripts` appends each run's
session log (one JSON line per run, the log as a list) so later stops can add up counts.
Each run takes the local-model lock (`flock /tmp/rlm-local-model.lock`).
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
from pathlib import Path

import numpy as np

LOCK = "/tmp/rlm-local-model.lock"
SEED = 29
RULE = ("---\ncondition: 'import pandas|pd\\.'\nscope: code\n---\n"
        "The user asked for Python's csv module only: do not use pandas.\n")
GATE = ("python3 -c \"import sys; rows = [r for r in open('report.txt') if r.strip()]; "
        "sys.exit(len(rows) != 4)\"")
PANDAS = re.compile(r"import pandas|\bpd\.")


def make_data(work: Path) -> dict[str, float]:
    """sales.csv (region, amount in cents); the right answers of each scenario."""
    rng = np.random.default_rng(SEED)
    cents = rng.integers(100, 500_000, size=40)
    regions = rng.choice(["north", "south", "east", "west"], size=40)
    lines = ["region,amount"] + [f"{r},{c}" for r, c in zip(regions, cents, strict=True)]
    (work / "sales.csv").write_text("\n".join(lines) + "\n")
    totals = {r: int(cents[regions == r].sum()) for r in ["north", "south", "east", "west"]}
    return {"no-pandas": float(cents.sum()), "cents": round(float(cents.sum()) / 100, 2),
            "report": max(totals, key=totals.__getitem__)}  # type: ignore[dict-item]


def run(work: Path, task: str, flags: list[str], home: Path) -> tuple[dict, float]:
    env = {**os.environ, "RLM_HOME": str(home)}
    cmd = ["flock", LOCK, sys.executable, "-m", "rlm", "run", task, "--model", "local",
           "--json", *flags]
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - t0
    lines = [ln for ln in out.stdout.strip().splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"no JSON from rlm run (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(lines[-1]), took


def report_as_asked(path: Path) -> bool | None:
    """report.txt holds one `region,total` line per region and nothing else (None: absent)."""
    if not path.is_file():
        return None
    rows = [r.strip() for r in path.read_text().splitlines() if r.strip()]
    return len(rows) == 4 and all(re.fullmatch(r"(north|south|east|west),\s*-?[\d.]+", r)
                                  for r in rows)


def figures(res: dict, log: list[dict], want: float | str, work: Path) -> dict:
    calls_code: dict[str, str] = {}
    cells = broke = stops = calls = 0
    for e in log:
        m = e.get("message") or {}
        if e.get("type") == "message" and m.get("role") == "assistant" and not e.get("error"):
            calls += 1
            for c in m.get("tool_calls") or []:
                args = (c.get("function") or {}).get("arguments") or "{}"
                try:
                    code = json.loads(args).get("code", "")
                except (ValueError, AttributeError):
                    code = str(args)
                calls_code[c.get("id")] = code
        elif e.get("type") == "message" and m.get("role") == "tool":
            status = (e.get("cell") or {}).get("status")
            if status is not None and not str(m.get("content", "")).startswith(("not run", "Not run")):
                cells += 1
                broke += bool(PANDAS.search(calls_code.get(m.get("tool_call_id"), "")))
        elif e.get("type") == "custom" and e.get("custom_type") == "rule_injection":
            stops += bool((e.get("data") or {}).get("interrupted"))
    final = res.get("final") or ""
    if isinstance(want, str):
        right = want in final.lower()
    else:
        nums = [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*\.?\d*", final)]
        right = any(abs(n - want) <= 0.005 * want for n in nums)
    adv = res.get("advisor") or {}
    adv_tokens = adv.get("input_tokens", 0) + adv.get("output_tokens", 0)
    primary = max(int((res.get("tokens") or {}).get("total", 0)), 1)  # the main model's replies
    return {"turns": res.get("turns"), "replies": calls + stops, "cells": cells,
            "broke": broke, "stops": stops, "reason": res.get("reason"),
            "right": right,
            "report": report_as_asked(work / "report.txt"),
            "advisor_calls": adv.get("calls"), "advice": adv.get("advice"),
            "advisor_fraction": adv_tokens / primary if adv else None}


SCENARIOS = {  # name: (task, flags, the steerings tried)
    "no-pandas": ("sales.csv in the working directory lists sales. Without using pandas (the "
                  "user's machine has no pandas: use Python's csv module), what is the total "
                  "of its amount column?", [], ("rule", "advisor")),
    "cents": ("The amount column of sales.csv in the working directory is in cents. What is "
              "the total amount in euros?", [], ("advisor",)),
    "report": ("Using sales.csv in the working directory, write the total amount per region "
               "to report.txt, one line per region as `region,total`, then answer with the "
               "region whose total is largest.", ["--autonomous", "--max-turns", "8"],
               ("gate", "advisor")),
}


def one(name: str, steer: str | None, transcripts: Path | None) -> dict:
    task, flags, _ = SCENARIOS[name]
    with tempfile.TemporaryDirectory(prefix="rlm-steer-") as tmp:
        work, home = Path(tmp) / "work", Path(tmp) / "home"
        work.mkdir()
        want = make_data(work)[name]
        extra = list(flags)
        if steer == "rule":
            (work / ".rlm" / "rules").mkdir(parents=True)
            (work / ".rlm" / "rules" / "no_pandas.md").write_text(RULE)
        elif steer == "gate":
            extra += ["--gate", GATE]
        elif steer == "advisor":
            extra += ["--advisor", "local"]
        res, took = run(work, task, extra, home)
        path = Path(res["session_path"])
        log = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
        got = figures(res, log, want, work) | {"seconds": round(took), "final": res.get("final")}
        if transcripts is not None:
            with transcripts.open("a") as f:
                f.write(json.dumps({"scenario": name, "steering": steer, "figures": got,
                                    "log": log}) + "\n")
        return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--transcripts", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for name in args.scenarios.split(","):
        for steer in (None, *SCENARIOS[name][2]):
            got = one(name, steer, args.transcripts)
            rows.append((name, steer, got))
            print(json.dumps({"scenario": name, "steering": steer, **got}), file=sys.stderr,
                  flush=True)
    print("| scenario | steering | turns | replies | cells run | pandas cells run | rule stops "
          "| reason | right | report.txt as asked | advisor calls / advice | advisor tokens / "
          "primary | s |")
    print("|---|---|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|")
    for name, steer, g in rows:
        adv = f"{g['advisor_calls']} / {g['advice']}" if g["advisor_calls"] is not None else "-"
        frac = f"{g['advisor_fraction']:.2f}" if g["advisor_fraction"] is not None else "-"
        print(f"| {name} | {steer or 'none'} | {g['turns']} | {g['replies']} | "
              f"{g['cells']} | {g['broke'] if name == 'no-pandas' else '-'} | {g['stops']} | "
              f"{g['reason']} | {g['right']} | {'-' if g['report'] is None else g['report']} | "
              f"{adv} | {frac} | {g['seconds']} |")


if __name__ == "__main__":
    main()
