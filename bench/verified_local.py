"""How often "verified" is wrong on the default model's own sessions (issue 40 item 12).

The task suite (bench/tasks: 8 families, seeds, written for the suite, not for the rule)
is run through `rlm run --model local --json`, the user's path, each item in its own
working directory and RLM_HOME. Each session's transcript is kept (the question, every
cell's code and the output the model saw, the answer and the run's verdict) in
bench/transcripts/verified-local.jsonl, so the figures add up across runs and a later
rule can be measured on the same sessions without the model (`--rescore`).

Labels, per session, from the task's own scorer:
  right               the answer passes the scorer
  shown               some successful cell's output passes the scorer (the true value
                      was printed by code in this run)
Two error rates:
  wrong but verified          verified among wrong answers (read each: invented, or
                              computed from the data and wrong, which "verified" does not
                              claim to catch)
  right and shown, flagged    unverified among right answers whose value an output showed

    python -m bench.verified_local --seeds 1,2,3,4,5            # run, append, print
    python -m bench.verified_local --rescore                    # today's rule, same sessions

Each row also counts, from the session log, the model's replies (`replies`), those that
parsed to neither a cell nor a FINAL answer (`unparsed`: taken as a prose answer) and the
replies the policy resampled (`resampled` entries). `--grammar on|off` sets the local
reply grammar (config `local_grammar`, written to the run's RLM_HOME); `--out` writes the
transcripts to another file (A/B runs that are not the suite's record).

    python -m bench.verified_local --families count,needle,dedupe --seeds 11,12 \
        --grammar off --out /tmp/grammar-off.jsonl
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
from typing import Any

from bench.tasks.families import FAMILIES, make

ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ROOT / "bench" / "transcripts" / "verified-local.jsonl"


def _cells(session: Path) -> tuple[list[dict[str, Any]], list[str], dict[str, Any] | None]:
    """(cells with code and output, the user prompts, the final entry's data)."""
    entries = [json.loads(line) for line in session.read_text().splitlines()[1:]]
    code_of: dict[str, str] = {}
    cells: list[dict[str, Any]] = []
    prompts: list[str] = []
    final = None
    pending: list[str] = []
    def call_code(tc: dict[str, Any]) -> str:
        args = (tc.get("function") or {}).get("arguments", "")
        try:
            return str(json.loads(args)["code"]) if isinstance(args, str) else str(args["code"])
        except (ValueError, KeyError, TypeError):
            return str(args)

    for e in entries:
        if e.get("type") == "custom" and e.get("custom_type") == "final":
            final = e["data"]
        if e.get("type") != "message":
            continue
        m = e["message"]
        if m["role"] == "user" and isinstance(m.get("content"), str):
            prompts.append(m["content"])
        elif m["role"] == "assistant":
            pending = [call_code(tc) for tc in m.get("tool_calls") or []] or [str(m.get("content") or "")]
            for tc in m.get("tool_calls") or []:
                code_of[tc.get("id", "")] = call_code(tc)
        elif m["role"] == "tool" and e.get("cell"):
            code = code_of.get(m.get("tool_call_id", ""), pending[0] if pending else "")
            cells.append({"id": e["id"], "code": code, "status": e["cell"].get("status"),
                          "output": e["cell"].get("shaped", "")})
    return cells, prompts, final


def reply_counts(session: Path) -> dict[str, Any]:
    """The model's replies in a session log: all of them, those that parsed to neither a
    cell nor a text FINAL (codeparse, as the loop reads them), and the resampled ones;
    `texts`: each reply as the model wrote it; `votes`: each vote among candidates."""
    from rlm.agent.codeparse import fenced_blocks, text_final

    counts: dict[str, Any] = {"replies": 0, "unparsed": 0, "resampled": 0, "texts": [],
                              "votes": []}
    for line in session.read_text().splitlines()[1:]:
        e = json.loads(line)
        if e.get("type") == "custom" and e.get("custom_type") == "resampled":
            counts["resampled"] += 1
            continue
        if e.get("type") == "custom" and e.get("custom_type") == "candidates":
            d = e.get("data") or {}  # a vote among candidate programs (rlm.app.candidates)
            counts["votes"].append({"point": d.get("point"), "winner": d.get("winner"),
                                    "keys": [c.get("key") for c in d.get("candidates", [])]})
            continue
        m = e.get("message") or {}
        if e.get("type") != "message" or m.get("role") != "assistant" or e.get("error"):
            continue
        counts["replies"] += 1
        text = str(m.get("content") or "")
        counts["texts"].append(text)
        if not m.get("tool_calls") and not fenced_blocks(text) and text_final(text) is None:
            counts["unparsed"] += 1
    return counts


def run_session(argv: list[str], work: Path, timeout: float) -> tuple[
        dict[str, Any], float, list[dict[str, Any]], list[str], dict[str, Any] | None, dict[str, Any]]:
    """`rlm run ... --json` in `work` with its own RLM_HOME (`work/home`): the JSON result
    ({} when it timed out), the seconds, and from its session log the cells, the prompts,
    the final entry and the reply counts."""
    env = {**os.environ, "RLM_HOME": str(work / "home")}
    env.pop("RLM_CONFIG", None)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout)
        lines = proc.stdout.strip().splitlines()
        result = json.loads(lines[-1]) if lines else {}
    except (subprocess.TimeoutExpired, json.JSONDecodeError):
        result = {}
    seconds = time.monotonic() - t0
    logs = list((work / "home" / "sessions").glob("*/session.jsonl"))
    cells, prompts, final = _cells(logs[0]) if logs else ([], [], None)
    return result, seconds, cells, prompts, final, reply_counts(logs[0]) if logs else {}


def run_one(family: str, seed: int, size: int, max_turns: int, timeout: float,
            grammar: str | None = None) -> dict[str, Any]:
    task = make(family, seed, size)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, text in task.files.items():
            (work / name).write_text(text)
        argv = [sys.executable, "-m", "rlm", "run", task.question, "--model", "local",
                "--json", "--max-turns", str(max_turns)]
        for name in task.files:
            argv += ["--context", name]
        if grammar is not None:
            (work / "home").mkdir()
            (work / "home" / "config.toml").write_text(
                f"local_grammar = {'true' if grammar == 'on' else 'false'}\n")
        result, seconds, cells, prompts, final, counts = run_session(argv, work, timeout)
    answer = result.get("final")
    outputs = [c["output"] for c in cells if c["status"] == "ok"]
    return {
        "family": family, "seed": seed, "size": size, "question": task.question,
        "truth": task.answer, "answer": answer, "reason": result.get("reason"),
        "verified": result.get("verified"), "unverified_why": result.get("unverified_why"),
        "right": bool(answer is not None and task.score(str(answer))),
        "shown": any(task.score(o) for o in outputs), "seconds": round(seconds, 1),
        "cells": cells, "prompts": prompts, "final": final, "grammar": grammar, **counts,
    }


def rates(rows: list[dict[str, Any]]) -> str:
    answered = [r for r in rows if r["answer"] is not None and r["verified"] is not None]
    wrong = [r for r in answered if not r["right"]]
    wrong_verified = [r for r in wrong if r["verified"]]
    shown_right = [r for r in answered if r["right"] and r["shown"]]
    flagged = [r for r in shown_right if not r["verified"]]

    def pct(a: list[Any], b: list[Any]) -> str:
        return f"{len(a)}/{len(b)} ({100 * len(a) / len(b):.0f}%)" if b else "0/0"

    lines = [f"{len(rows)} sessions, {len(answered)} answered "
             f"({sum(r['right'] for r in answered)} right, {len(wrong)} wrong)",
             f"wrong but verified:        {pct(wrong_verified, wrong)}",
             f"right and shown, flagged:  {pct(flagged, shown_right)}"]
    for r in wrong_verified:
        lines.append(f"  wrong, verified: {r['family']} seed {r['seed']}: {str(r['answer'])[:80]!r}"
                     f" (truth {r['truth']!r})")
    for r in flagged:
        lines.append(f"  flagged: {r['family']} seed {r['seed']}: {str(r['answer'])[:80]!r}: "
                     f"{r['unverified_why']}")
    return "\n".join(lines)


def rescore(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Today's rule on the kept sessions (verify as AnswerPolicy.judge calls it)."""
    from rlm.agent.nudge import error_text
    from rlm.agent.policy.verify import Shown, verify

    out = []
    for r in rows:
        if r["answer"] is None:
            out.append(r)
            continue
        cells = r["cells"]
        ok = [c for c in cells if c["status"] == "ok"]
        last = cells[-1] if cells else None
        from_kernel = bool(last and last["status"] == "ok" and "final" in last["code"])
        v = verify(str(r["answer"]), source="final" if from_kernel else "text",
                   shown=[Shown(c["id"], c["output"]) for c in ok],
                   codes=[c["code"] for c in cells], prompts=r["prompts"],
                   cells_run=len(cells), last_cell_ok=(last["status"] == "ok") if last else None,
                   error_like=error_text(str(r["answer"])),
                   final_entry=last["id"] if from_kernel and last else None)
        out.append({**r, "verified": v.verified, "unverified_why": v.why})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--max-turns", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--rescore", action="store_true", help="no runs: today's rule on the kept sessions")
    ap.add_argument("--grammar", choices=("on", "off"),
                    help="the local reply grammar (config local_grammar); default: the default")
    ap.add_argument("--out", type=Path, default=TRANSCRIPTS, help="the transcripts file")
    a = ap.parse_args()
    out: Path = a.out
    new: list[dict[str, Any]] = []
    if not a.rescore:
        out.parent.mkdir(parents=True, exist_ok=True)
        for seed in (int(s) for s in a.seeds.split(",")):
            for family in a.families.split(","):
                row = run_one(family, seed, a.size, a.max_turns, a.timeout, a.grammar)
                new.append(row)
                with open(out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{family:10s} seed {seed}: right={row['right']} shown={row['shown']} "
                      f"verified={row['verified']} {row['seconds']} s replies={row.get('replies')}"
                      f" unparsed={row.get('unparsed')} resampled={row.get('resampled')}",
                      flush=True)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    print(rates(rescore(rows) if a.rescore else rows))
    if new:
        print(f"this run: {len(new)} tasks, {sum(r['right'] for r in new)} right, "
              f"{sum(r.get('unparsed', 0) for r in new)} unparsed of "
              f"{sum(r.get('replies', 0) for r in new)} replies, "
              f"{sum(r.get('resampled', 0) for r in new)} resampled, "
              f"{sum(r['seconds'] for r in new) / len(new):.1f} s per task")


if __name__ == "__main__":
    main()
