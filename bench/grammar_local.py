"""The reply grammar's cost on the offline model: generation tokens/s with and without it.

Each prompt is a real first turn of the task suite (the fenced-code system prompt and a
question from bench/tasks). Per prompt the model generates once to fill the KV cache, then
free and under the grammar (rlm.llm.reply_grammar), alternately, `--rounds` times: the
prompt is cached, so the time from the first token to the last is sampling and decoding.
Prints each reply's start and the median milliseconds per generated token.

    flock /tmp/rlm-local-model.lock python -m bench.grammar_local
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.tasks.families import make  # noqa: E402
from rlm.agent.prompts import system_prompt  # noqa: E402
from rlm.config import Config  # noqa: E402
from rlm.llm import local  # noqa: E402


def _call(model: local.LocalModel, messages: list[dict], grammar: bool, max_tokens: int
          ) -> tuple[str, int, float]:
    """(text, generated tokens, seconds from the first token to the last)."""
    prep = model.prepare(messages, max_tokens)
    first = end = None
    parts: list[str] = []
    n = 0
    for chunk in model.generate(prep, temperature=0.0, seed=0, form="cell_or_answer" if grammar else None):
        if chunk["text"]:
            first = first or time.perf_counter()
            parts.append(chunk["text"])
        if chunk["is_finished"]:
            n = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    return "".join(parts), n, end - (first or end)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="count,needle,dedupe,groupby")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    a = ap.parse_args()
    config = Config()
    model = local.make_handler(None, config).model
    system = system_prompt(config, native_tools=False)
    per_token: dict[bool, list[float]] = {False: [], True: []}
    for family in a.families.split(","):
        task = make(family, 11, 10_000)
        names = ", ".join(f"`{n.split('.')[0]}`" for n in task.files)
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": f"{task.question}\n\nLoaded: {names}."}]
        _call(model, messages, False, 8)  # the prompt into the KV cache
        for _ in range(a.rounds):
            for grammar in (False, True):
                text, n, secs = _call(model, messages, grammar, a.max_tokens)
                if n > 1:
                    per_token[grammar].append(1000 * secs / (n - 1))
                print(f"{family:9s} grammar={'on ' if grammar else 'off'} {n:4d} tokens "
                      f"{1000 * secs / max(n - 1, 1):6.1f} ms/token  {text[:60]!r}", flush=True)
    off, on = statistics.median(per_token[False]), statistics.median(per_token[True])
    print(f"median ms/token: off {off:.1f} ({1000 / off:.1f} tok/s), on {on:.1f} "
          f"({1000 / on:.1f} tok/s): {100 * (on - off) / off:+.0f}%")


if __name__ == "__main__":
    main()
