"""Offline model figures: load time, prompt tok/s, generation tok/s, time per demo task.

    .venv/bin/python bench/bench_local.py                 # load + throughput
    .venv/bin/python bench/bench_local.py --demo          # also time the demo task end to end

Runs llama.cpp directly through rlm.llm.local (no litellm overhead) with the same settings
the agent uses (n_threads = cpu count, reset per call, temperature 0).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from rlm.config import Config  # noqa: E402
from rlm.llm import local  # noqa: E402
from rlm.paths import rlm_home  # noqa: E402

FILLER = (
    "The quarterly report lists revenue by region, units sold per product and the discount "
    "applied to each order, along with notes from the regional managers. "
)


def _timed_call(model: local.LocalModel, messages: list[dict], max_tokens: int) -> dict:
    prep = model.prepare(messages, max_tokens)
    t0 = time.perf_counter()
    first = None
    usage: dict = {}
    for chunk in model.generate(prep, temperature=0.0, seed=0):
        if chunk["text"] and first is None:
            first = time.perf_counter()
        if chunk["is_finished"]:
            usage = dict(chunk["usage"] or {})
    end = time.perf_counter()
    first = first or end
    n_out = usage.get("completion_tokens", 0)
    return {
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": n_out,
        "ttft_s": first - t0,
        "prompt_tok_s": usage.get("prompt_tokens", 0) / max(first - t0, 1e-9),
        "gen_tok_s": (n_out - 1) / (end - first) if n_out > 1 and end > first else 0.0,
    }


def throughput(home: Path | None, prompt_tokens: int, gen_tokens: int) -> None:
    t0 = time.perf_counter()
    handler = local.make_handler(None, Config(home=home or rlm_home()))
    t_verify = time.perf_counter() - t0
    model = handler.model
    model.load()
    print(f"model file: {model.path}")
    print(f"verify (sidecar or hash): {t_verify:.2f} s   load: {model.load_seconds:.2f} s   "
          f"n_threads={model.n_threads} n_ctx={model.n_ctx}")
    words = max(1, prompt_tokens // 27)  # ~27 tokens per FILLER sentence
    long_prompt = [{"role": "user", "content": FILLER * words + "\nSummarise in one line."}]
    r = _timed_call(model, long_prompt, 8)
    print(f"prompt: {r['prompt_tokens']} tokens in {r['ttft_s']:.2f} s = "
          f"{r['prompt_tok_s']:.1f} tok/s (time to first token)")
    gen_prompt = [{"role": "user", "content": "Write a Python function that parses a CSV line "
                   "with quoted fields, with a docstring and comments."}]
    r = _timed_call(model, gen_prompt, gen_tokens)
    print(f"generation: {r['completion_tokens']} tokens at {r['gen_tok_s']:.1f} tok/s "
          f"(prompt {r['prompt_tokens']} tokens, ttft {r['ttft_s']:.2f} s)")


def demo_time(home: Path | None) -> None:
    from rlm.agent import run_task
    from rlm.demo import DEMO_FILE, DEMO_TASK, file_answer, make_sales_dataset

    with tempfile.TemporaryDirectory() as d:
        path = make_sales_dataset(Path(d) / DEMO_FILE)
        cfg = Config(home=home or rlm_home(), temperature=0.0, max_turns=8)
        t0 = time.perf_counter()
        res = run_task(DEMO_TASK, model="local", config=cfg, context_files=[path])
        took = time.perf_counter() - t0
        truth = file_answer(path)
        print(f"demo task: {took:.1f} s, {res.turns} turns, {len(res.cells)} cells")
        print(f"  answer: {res.final!r}")
        print(f"  truth:  {truth.leader} leads {truth.runner_up} by {truth.lead:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=None, help="RLM_HOME holding models/")
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--demo", action="store_true", help="also time the demo task")
    args = ap.parse_args()
    throughput(args.home, args.prompt_tokens, args.gen_tokens)
    if args.demo:
        demo_time(args.home)


if __name__ == "__main__":
    main()
