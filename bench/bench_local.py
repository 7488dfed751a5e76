"""Offline model figures: load time, prompt tok/s, generation tok/s, KV reuse, demo time.

    .venv/bin/python bench/bench_local.py                 # load + throughput
    .venv/bin/python bench/bench_local.py --reuse         # per-turn latency, KV reuse vs none
    .venv/bin/python bench/bench_local.py --demo          # also time the demo task end to end

Runs llama.cpp directly through rlm.llm.local (no litellm overhead) with the same settings
the agent uses (n_threads = cpu count, temperature 0). Throughput calls reset the model
first; `--reuse` runs one growing agent-style conversation on two instances of the model in
the same process, one keeping its KV cache across turns (what the agent does) and one reset
before every call (what it did before), interleaved so both see the same machine load.
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
    parts: list[str] = []
    for chunk in model.generate(prep, temperature=0.0, seed=0):
        if chunk["text"] and first is None:
            first = time.perf_counter()
        parts.append(chunk["text"])
        if chunk["is_finished"]:
            usage = dict(chunk["usage"] or {})
    end = time.perf_counter()
    first = first or end
    n_out = usage.get("completion_tokens", 0)
    stats = model.last_call
    return {
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": n_out,
        "evaluated": stats.evaluated if stats else None,
        "restored": bool(stats and stats.restored),
        "text": "".join(parts),
        "total_s": end - t0,
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
    model.reuse = False  # throughput: every call processes its whole prompt
    r = _timed_call(model, long_prompt, 8)
    print(f"prompt: {r['prompt_tokens']} tokens in {r['ttft_s']:.2f} s = "
          f"{r['prompt_tok_s']:.1f} tok/s (time to first token)")
    gen_prompt = [{"role": "user", "content": "Write a Python function that parses a CSV line "
                   "with quoted fields, with a docstring and comments."}]
    r = _timed_call(model, gen_prompt, gen_tokens)
    print(f"generation: {r['completion_tokens']} tokens at {r['gen_tok_s']:.1f} tok/s "
          f"(prompt {r['prompt_tokens']} tokens, ttft {r['ttft_s']:.2f} s)")
    model.reuse = True


def _cell_output(k: int, tokens: int) -> str:
    """A plausible cell output of about `tokens` tokens (a small table)."""
    lines = [f"Output of cell [{k}]:", "   region  store  product              units  revenue"]
    i = 0
    while len(lines) * 14 < tokens:
        lines.append(f"{i:>4}  North  NOR-0{i % 3 + 1}  Espresso Beans 1kg  {i % 9 + 1:>5}  "
                     f"{(i * 37.31) % 900:8.2f}")
        i += 1
    return "\n".join(lines)


def kv_reuse(home: Path | None, sizes: list[int], gen_tokens: int) -> None:
    """Per-turn latency of a growing conversation: KV reuse vs reset, same run."""
    from importlib import resources

    handler = local.make_handler(None, Config(home=home or rlm_home()))
    warm = handler.model
    cold = local.LocalModel(warm.path, n_ctx=warm.n_ctx)
    cold.reuse = False
    warm.load()
    cold.load()
    system = resources.files("rlm.prompts").joinpath("system_small.md").read_text()
    system = system.replace("{output_budget}", "4000")
    msgs: list[dict] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "The DataFrame `sales` is loaded. Which region had the "
         "largest total revenue, and by how much did it lead the runner-up?"},
    ]
    print("turn | prompt tok | new tok (reuse) | ttft reuse s | ttft reset s | ttft ratio | "
          "turn reuse s | turn reset s | turn ratio | restored", flush=True)
    rows = []
    for k, size in enumerate(sizes, 1):
        if k == len(sizes) // 2 + 1:  # an llm_query sub-call between two turns
            sub = [{"role": "user", "content": FILLER * 12 + "\nName one region."}]
            r = _timed_call(warm, sub, 8)
            print(f"  (sub-call: {r['prompt_tokens']} tok prompt, {r['total_s']:.2f} s, "
                  f"saved the conversation: {warm.last_call and warm.last_call.saved})", flush=True)
        a = _timed_call(warm, msgs, gen_tokens)
        b = _timed_call(cold, msgs, gen_tokens)
        ratio = a["total_s"] / b["total_s"]
        rows.append((a["prompt_tokens"], a["evaluated"], a["total_s"], b["total_s"], ratio,
                     a["ttft_s"], b["ttft_s"]))
        print(f"{k:>4} | {a['prompt_tokens']:>10} | {a['evaluated']:>15} | {a['ttft_s']:12.2f} | "
              f"{b['ttft_s']:12.2f} | {a['ttft_s'] / b['ttft_s']:10.2f} | {a['total_s']:12.2f} | "
              f"{b['total_s']:12.2f} | {ratio:10.2f} | {a['restored']}", flush=True)
        msgs.append({"role": "assistant", "content": a["text"]})
        msgs.append({"role": "user", "content": _cell_output(k, size)})
    t_warm, t_cold = sum(r[2] for r in rows), sum(r[3] for r in rows)
    f_warm, f_cold = sum(r[5] for r in rows), sum(r[6] for r in rows)
    print(f"all turns: reuse {t_warm:.1f} s, reset {t_cold:.1f} s, ratio {t_warm / t_cold:.2f}; "
          f"prompt (ttft) reuse {f_warm:.1f} s, reset {f_cold:.1f} s, ratio {f_warm / f_cold:.2f}; "
          f"load average {os.getloadavg()[0]:.2f}")
    cold.close()


def demo_time(home: Path | None) -> None:
    from rlm.app import run_task
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
    ap.add_argument("--reuse", action="store_true",
                    help="only the KV-reuse comparison (skips throughput)")
    ap.add_argument("--sizes", default="40,150,400,80,800,40,200",
                    help="tokens of cell output appended before each --reuse turn")
    ap.add_argument("--turn-tokens", type=int, default=48, help="max reply tokens per turn")
    args = ap.parse_args()
    if args.reuse:
        kv_reuse(args.home, [int(x) for x in args.sizes.split(",")], args.turn_tokens)
        return
    throughput(args.home, args.prompt_tokens, args.gen_tokens)
    if args.demo:
        demo_time(args.home)


if __name__ == "__main__":
    main()
