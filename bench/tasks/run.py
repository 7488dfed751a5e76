"""Run the task suite: each family x size x seed through `rlm run` (the user's path) and,
as the baseline, direct prompting of the same model with as much of the input as fits
the same window. Scores every answer automatically.

    python -m bench.tasks.run --model local --sizes 100000 --seeds 1 --modes rlm     # smoke
    python -m bench.tasks.run --model local --sizes 100000,1000000 --seeds 1,2,3

Writes one JSON line per item to bench/out/tasks-<time>-<pid>.jsonl and prints accuracy and mean
seconds per (family, size, mode). The model sees the files only as `--context` inputs
(rlm) or as text in the prompt (direct); the question is the family's own wording.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.tasks.families import FAMILIES, Task, make

OUT = Path(__file__).resolve().parents[1] / "out"


def run_rlm(task: Task, model: str, max_turns: int, timeout: float, workdir: Path) -> dict:
    for name, text in task.files.items():
        (workdir / name).write_text(text)
    argv = [sys.executable, "-m", "rlm", "run", task.question, "--model", model, "--json",
            "--max-turns", str(max_turns)]
    for name in task.files:
        argv += ["--context", name]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=timeout)
        out = proc.stdout.strip().splitlines()
        result = json.loads(out[-1]) if out else {}
        answer, reason = result.get("final"), result.get("reason", f"exit {proc.returncode}")
        if not result:
            reason += ": " + " | ".join(proc.stderr.strip().splitlines()[-3:])[:300]
    except subprocess.TimeoutExpired:
        answer, reason = None, "timeout"
    except json.JSONDecodeError:
        answer, reason = None, "no json"
    return {"answer": answer, "reason": reason, "seconds": time.monotonic() - t0}


def run_direct(task: Task, model: str, window: int, timeout: float) -> dict:
    """The baseline: the inputs' head, cut to what fits the window, then the question."""
    from rlm.config import load_config
    from rlm.llm import get_llm
    from rlm.llm.tokens import count_tokens

    llm = get_llm(model, load_config(model=model))
    budget = window - 600  # room for the question and the answer
    body = "".join(f"--- {name} ---\n{text}\n" for name, text in task.files.items())
    lo, hi = 0, len(body)
    while lo < hi:  # the longest head that fits the budget
        mid = (lo + hi + 1) // 2
        if count_tokens([{"role": "user", "content": body[:mid]}]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    from rlm.errors import ContextOverflow

    t0 = time.monotonic()
    for _ in range(6):  # the model's own tokenizer may count more (Qwen splits digits): shrink
        prompt = f"{body[:lo]}\n\n{task.question}\nAnswer briefly."
        try:
            c = llm.complete([{"role": "user", "content": prompt}], temperature=0.0,
                             max_tokens=200)
            answer, reason = c.content, "final"
            break
        except ContextOverflow as e:
            answer, reason = None, f"error: ContextOverflow: {str(e)[:200]}"
            lo = int(lo * 0.8)
        except Exception as e:  # noqa: BLE001 - a failed item is scored wrong, with the reason
            answer, reason = None, f"error: {type(e).__name__}: {str(e)[:200]}"
            break
    return {"answer": answer, "reason": reason, "seconds": time.monotonic() - t0,
            "shown_chars": lo, "total_chars": len(body)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tasks.run")
    p.add_argument("--model", default="local")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--seeds", default="1")
    p.add_argument("--modes", default="rlm,direct")
    p.add_argument("--max-turns", type=int, default=10)
    p.add_argument("--window", type=int, default=8192, help="direct mode's prompt window")
    p.add_argument("--timeout", type=float, default=900)
    args = p.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from rlm.paths import rlm_home

    # one home for every item (the runs' cwd is a temp dir; the model file is joined once)
    os.environ["RLM_HOME"] = str(rlm_home().resolve())
    OUT.mkdir(exist_ok=True)
    # the pid too: two runs started in the same second wrote one file, lines interleaved
    out_path = OUT / f"tasks-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.jsonl"
    stats: dict[tuple[str, int, str], list[dict]] = defaultdict(list)
    with out_path.open("w") as out:
        for family in args.families.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                for seed in (int(s) for s in args.seeds.split(",")):
                    task = make(family, seed, size)
                    for mode in args.modes.split(","):
                        with tempfile.TemporaryDirectory() as d:
                            rec = (run_rlm(task, args.model, args.max_turns, args.timeout, Path(d))
                                   if mode == "rlm" else
                                   run_direct(task, args.model, args.window, args.timeout))
                        rec.update(family=family, size=size, seed=seed, mode=mode,
                                   question=task.question, truth=task.answer,
                                   correct=bool(rec["answer"]) and task.score(str(rec["answer"])))
                        out.write(json.dumps(rec) + "\n")
                        out.flush()
                        stats[(family, size, mode)].append(rec)
                        print(f"{family:<11} {size:>8} {mode:<6} seed {seed}: "
                              f"{'OK ' if rec['correct'] else 'BAD'} {rec['seconds']:6.1f}s "
                              f"truth={task.answer!r} answer={str(rec['answer'])[:60]!r} "
                              f"({rec['reason']})", flush=True)
    print(f"\n{'family':<11} {'size':>8} {'mode':<6} {'correct':>8} {'mean s':>7}")
    for (family, size, mode), recs in stats.items():
        ok = sum(r["correct"] for r in recs)
        mean = sum(r["seconds"] for r in recs) / len(recs)
        print(f"{family:<11} {size:>8} {mode:<6} {ok:>4}/{len(recs):<3} {mean:7.1f}")
    print(f"\nitems: {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
