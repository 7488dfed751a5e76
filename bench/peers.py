"""The two peers' published step loops, timed beside rlm by bench_loop.py (issue 32).

Each peer runs in a subprocess (its checkout first on sys.path, with an interpreter
that has its dependencies) through its own loop class as published; only the model
client is replaced, by a scripted one returning the same cells as bench_loop
(`cells(n)`) and then a final answer in the form that peer accepts.

- nano-rlm (PrimeIntellect-ai): `RLMEngine(client=...)`, the OpenAI-shaped client
  replaced by one whose `chat.completions.create` returns prebuilt
  `openai.types.chat.ChatCompletion`s: an `ipython` tool call per cell, then a
  reply without tool calls (its end of a run).
- alexzhang13/rlm: `RLM(environment="ipython", kernel_mode="subprocess")`, its
  `get_client` patched to return a scripted `BaseLM` whose replies are ```repl
  blocks, the last one setting `answer["ready"] = True` (its end of a run).

The seconds per step are read from the scripted model's call times: the span from the
first model call to the last one covers n whole steps (model call, parse, cell
executed in the kernel, bookkeeping, next prompt built), without the kernel's start
and the teardown. The subprocess prints one JSON line.

    python bench/peers.py --system nano-rlm --path CHECKOUT --cells 40

Nothing here imports the project's `rlm` (both peers' packages are also named `rlm`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SYSTEMS = ("nano-rlm", "alexzhang13/rlm")


def cells(n: int) -> list[str]:
    """The scripted cells every system runs (bench_loop uses the same list)."""
    return [f"x{i} = {i} * 2\nprint(x{i})" for i in range(n)]


def peer_step(system: str, checkout: Path, n: int, python: str) -> float:
    """Seconds per step of `system`'s loop over n cells, run by `python` in a subprocess."""
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            [python, str(Path(__file__).resolve()), "--system", system,
             "--path", str(checkout), "--cells", str(n)],
            cwd=d, capture_output=True, text=True, timeout=600,
        )
    if out.returncode != 0:
        raise RuntimeError(f"{system} run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["s_per_step"])


def _check(ok: bool, what: str) -> None:
    """A run that did not go through every scripted cell measures nothing."""
    if not ok:
        raise RuntimeError(what)


def _nano_rlm(n: int, work: Path) -> list[float]:
    """Model call times of one nano-rlm run over `cells(n)`."""
    from openai.types.chat import ChatCompletion
    from rlm.engine import RLMEngine

    from rlm.session import Session

    def completion(i: int, code: str | None) -> ChatCompletion:
        if code is None:
            message: dict[str, Any] = {"role": "assistant", "content": "done"}
        else:
            args = json.dumps({"code": code})
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{i}", "type": "function",
                                "function": {"name": "ipython", "arguments": args}}],
            }
        return ChatCompletion.model_validate({
            "id": f"chatcmpl-{i}", "object": "chat.completion", "created": 0, "model": "script",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "stop" if code is None else "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })

    replies = [completion(i, c) for i, c in enumerate(cells(n))] + [completion(n, None)]
    calls: list[float] = []

    class Completions:
        async def create(self, **kwargs: Any) -> ChatCompletion:
            calls.append(time.perf_counter())
            return replies[len(calls) - 1]

    class Client:
        class chat:  # noqa: N801 (the OpenAI client's attribute path)
            completions = Completions()

    engine = RLMEngine(model="script", cwd=str(work), session=Session(work / "session"),
                       client=Client())  # type: ignore[arg-type]
    result = asyncio.run(engine.run("bench"))
    tool = [m["content"] for m in engine._messages or [] if m.get("role") == "tool"]
    _check(result.answer == "done" and len(calls) == n + 1, f"nano-rlm: {result!r}")
    _check(len(tool) == n and tool[-1].strip() == str((n - 1) * 2), f"nano-rlm: {tool[-1:]}")
    return calls


def _alexzhang_rlm(n: int, work: Path) -> list[float]:
    """Model call times of one alexzhang13/rlm run over `cells(n)` (subprocess IPython kernel)."""
    import rlm.core.rlm as core
    from rlm.clients.base_lm import BaseLM
    from rlm.core.types import ModelUsageSummary, UsageSummary

    final = 'answer["content"] = "done"\nanswer["ready"] = True'
    replies = [f"```repl\n{c}\n```" for c in [*cells(n), final]]
    calls: list[float] = []
    prompts: list[Any] = []

    class ScriptedLM(BaseLM):
        def completion(self, prompt: str | dict[str, Any]) -> str:
            calls.append(time.perf_counter())
            prompts.append(prompt)
            return replies[len(calls) - 1]

        async def acompletion(self, prompt: str | dict[str, Any]) -> str:
            return self.completion(prompt)

        def get_usage_summary(self) -> UsageSummary:
            return UsageSummary(model_usage_summaries={self.model_name: self.get_last_usage()})

        def get_last_usage(self) -> ModelUsageSummary:
            return ModelUsageSummary(total_calls=len(calls), total_input_tokens=0,
                                     total_output_tokens=0)

    lm = ScriptedLM(model_name="script")
    core.get_client = lambda backend, kwargs: lm  # type: ignore[assignment]  # the model only
    agent = core.RLM(backend="openai", backend_kwargs={"model_name": "script"},
                     environment="ipython", environment_kwargs={"kernel_mode": "subprocess"},
                     max_iterations=n + 5)
    result = agent.completion("bench")
    outputs = [m["content"] for m in prompts[-1] if m["content"].startswith("REPL output")]
    last = outputs[-1] if outputs else ""
    _check(result.response == "done" and len(calls) == n + 1, f"alexzhang13/rlm: {result!r}")
    _check(last.strip().endswith(str((n - 1) * 2)), f"alexzhang13/rlm: {last!r}")
    return calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", choices=SYSTEMS, required=True)
    ap.add_argument("--path", type=Path, required=True, help="the peer's checkout")
    ap.add_argument("--cells", type=int, default=40)
    a = ap.parse_args()
    src = a.path / "src" if (a.path / "src" / "rlm").is_dir() else a.path  # nano-rlm: src layout
    sys.path.insert(0, str(src.resolve()))
    run = _nano_rlm if a.system == "nano-rlm" else _alexzhang_rlm
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "warm").mkdir()
        (Path(d) / "run").mkdir()
        run(3, Path(d) / "warm")  # first use loads the peer's modules and the kernel's
        calls = run(a.cells, Path(d) / "run")
    step = (calls[-1] - calls[0]) / a.cells
    print(json.dumps({"system": a.system, "cells": a.cells, "s_per_step": step}))


if __name__ == "__main__":
    main()
