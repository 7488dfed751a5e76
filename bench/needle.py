"""Needle in a haystack: the RLM claim measured on our own offline model.

A unique key-value line ("The access code for <key> is <6 digits>.") is hidden at a random
position in N characters of generated filler (seeded). Two ways to answer:

  (a) direct: the local model is prompted with as much of the text as fits its window
      (the head of the text, cut to the token budget), then the question;
  (b) rlm:    `run_task` with the text in a kernel variable (`haystack`), model `local`.

    .venv/bin/python bench/needle.py --modes a --sizes 2000 --items 1        # smoke
    .venv/bin/python bench/needle.py --items 10 --sizes 100000,1000000,4000000 --n-ctx 4096

Prints accuracy and mean seconds per item for every (mode, size). Expected shape: (a)
collapses once the text exceeds the window, (b) stays high. Slow on 2 cores: an (a) item
with --n-ctx 4096 takes ~110 s, a (b) item ~30-40 s; the full run above took 1 h 12 min.
Figures: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from rlm.config import Config  # noqa: E402
from rlm.paths import rlm_home  # noqa: E402

_SUBJECTS = ["The committee", "Our supplier", "The river", "A quiet engineer", "The library",
             "Every spring the valley", "The old ferry", "A delivery van", "The orchestra"]
_VERBS = ["reviewed", "described", "carried", "painted", "measured", "ignored", "repaired",
          "announced", "collected", "followed"]
_OBJECTS = ["the weekly schedule", "a box of letters", "the northern bridge", "seven lanterns",
            "the harvest figures", "an unusual map", "the station clock", "a row of chairs"]
_TAILS = ["before noon.", "without any fuss.", "as it had for years.", "in the rain.",
          "for the third time.", "while the town slept.", "with great care."]


@dataclass
class Item:
    size: int
    key: str
    value: str
    position: int
    text: str

    @property
    def question(self) -> str:
        return f"What is the access code for {self.key}? Answer with the number only."


def make_item(size: int, rng: random.Random) -> Item:
    """`size` characters of filler with one needle line at a random position."""
    key = "project-" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
    value = str(rng.randint(100000, 999999))
    needle = f"The access code for {key} is {value}.\n"
    parts: list[str] = []
    n = 0
    while n < size:
        s = (f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
             f"{rng.choice(_TAILS)}\n")
        parts.append(s)
        n += len(s)
    filler = "".join(parts)[: max(0, size - len(needle))]
    cut = filler.rfind("\n", 0, rng.randrange(len(filler) + 1)) + 1  # a line boundary
    return Item(size, key, value, cut, filler[:cut] + needle + filler[cut:])


def _correct(item: Item, answer: str | None) -> bool:
    return bool(answer) and item.value in re.findall(r"\d{6}", answer or "")


# -- mode (a): the model reads the text directly -------------------------------------------


def direct(items: list[Item], home: Path | None, n_ctx: int, answer_tokens: int = 16) -> list[dict]:
    from rlm.llm import local

    model = local.make_handler(None, Config(home=home or rlm_home(), context_window=n_ctx)).model
    llm = model.load()
    results = []
    for item in items:
        t0 = time.perf_counter()
        frame = [{"role": "user", "content": "Text:\n\n" + "\n\n" + item.question}]
        overhead = model.prepare(frame, answer_tokens).n_prompt
        budget = n_ctx - overhead - answer_tokens - 8
        head = item.text[: budget * 6]  # tokenize only a prefix that surely covers the budget
        toks = llm.tokenize(head.encode(), add_bos=False, special=False)[:budget]
        shown = llm.detokenize(toks).decode("utf-8", errors="ignore")
        msgs = [{"role": "user", "content": f"Text:\n{shown}\n\n{item.question}"}]
        prep = model.prepare(msgs, answer_tokens)
        answer = "".join(c["text"] for c in model.generate(prep, temperature=0.0, seed=0))
        results.append({
            "mode": "a", "size": item.size, "ok": _correct(item, answer),
            "needle_visible": item.position + 60 < len(shown), "answer": answer.strip()[:80],
            "prompt_tokens": prep.n_prompt, "seconds": time.perf_counter() - t0,
        })
        _print_row(results[-1])
    return results


# -- mode (b): rlm with the text in a kernel variable --------------------------------------


def via_rlm(items: list[Item], home: Path | None, max_turns: int,
            model: str = "local") -> list[dict]:
    from rlm.app import run_task

    results = []
    with tempfile.TemporaryDirectory() as d:
        for i, item in enumerate(items):
            path = Path(d) / "haystack.txt"
            path.write_text(item.text)
            cfg = Config(home=home or rlm_home(), temperature=0.0, max_turns=max_turns)
            task = (f"The string variable `haystack` holds a long text. Find the line that "
                    f"mentions {item.key}: it gives that project's access code. "
                    f"{item.question}")
            t0 = time.perf_counter()
            try:
                res = run_task(task, model=model, config=cfg, context_files=[path])
                answer, cells = res.final, len(res.cells)
            except Exception as e:  # noqa: BLE001 - a failed item counts as wrong, run goes on
                answer, cells = f"error: {e}", 0
            results.append({
                "mode": "b", "size": item.size, "ok": _correct(item, answer),
                "answer": (answer or "").strip()[:80], "cells": cells,
                "seconds": time.perf_counter() - t0, "item": i,
            })
            _print_row(results[-1])
    return results


# -- report ---------------------------------------------------------------------------------


def _print_row(r: dict) -> None:
    print(f"  [{r['mode']}] size={r['size']:>9,} ok={str(r['ok']):5} {r['seconds']:7.1f} s "
          f"answer={r['answer']!r}", flush=True)


def summarize(results: list[dict]) -> None:
    print("\nmode  size          items  accuracy  s/item")
    keys = sorted({(r["mode"], r["size"]) for r in results})
    for mode, size in keys:
        rows = [r for r in results if r["mode"] == mode and r["size"] == size]
        acc = sum(r["ok"] for r in rows) / len(rows)
        secs = sum(r["seconds"] for r in rows) / len(rows)
        print(f"{mode:<5} {size:>12,}  {len(rows):>5}  {acc:8.0%}  {secs:6.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description="needle-in-a-haystack: direct vs rlm")
    ap.add_argument("--sizes", default="100000,1000000,4000000", help="comma-separated chars")
    ap.add_argument("--items", type=int, default=10, help="items per size")
    ap.add_argument("--modes", default="a,b", help="a (direct), b (rlm), or a,b")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--n-ctx", type=int, default=8192, help="window for mode (a)")
    ap.add_argument("--max-turns", type=int, default=8, help="turn limit for mode (b)")
    ap.add_argument("--home", type=Path, default=None, help="RLM_HOME holding models/")
    ap.add_argument("--model", default="local",
                    help="model for mode (b) (mode (a) always prompts the local model directly)")
    ap.add_argument("--json", type=Path, default=None, help="write all rows here")
    args = ap.parse_args()

    sizes = [int(s) for s in args.sizes.split(",") if s]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results: list[dict] = []
    for size in sizes:
        rng = random.Random(f"{args.seed}:{size}")
        items = [make_item(size, rng) for _ in range(args.items)]
        print(f"size {size:,}: {len(items)} items", flush=True)
        if "a" in modes:
            results += direct(items, args.home, args.n_ctx)
        if "b" in modes:
            results += via_rlm(items, args.home, args.max_turns, args.model)
    summarize(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

