"""The real offline model (Qwen2.5-Coder-1.5B Q4_K_M via llama.cpp), through litellm.

All `slow`: they load a 1.1 GB model and generate on the CPU. CI runs them (it installs the
`[local]` extra); locally deselect with `-m 'not slow'`. Everything runs at temperature 0
and each call starts from a reset model state, so the replies are repeatable.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from rlm.config import Config

pytestmark = [
    pytest.mark.slow,
    # these tests call litellm directly (not through rlm.llm.seam, which filters this):
    # litellm 1.110's streaming builds a pydantic model over a TypedDict with ReadOnly items
    pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier:UserWarning"),
]



@pytest.fixture(scope="session")
def model_home(tmp_path_factory):
    """One RLM_HOME holding the joined model for the whole test session (removed after)."""
    from rlm.llm.modelfile import ensure_model

    home = tmp_path_factory.mktemp("local-model-home")
    ensure_model(home)
    yield home
    shutil.rmtree(home / "models", ignore_errors=True)


@pytest.fixture
def cfg(model_home) -> Config:
    return Config(home=model_home, temperature=0.0, max_turns=6, cell_timeout=60)


@pytest.fixture
def handler(cfg):
    import litellm

    from rlm.llm import local

    h = local.make_handler(None, cfg)
    saved = litellm.custom_provider_map
    litellm.custom_provider_map = [{"provider": local.PROVIDER, "custom_handler": h}]
    yield h
    litellm.custom_provider_map = saved


MSGS = [{"role": "user", "content": "Reply with one Python expression that adds 2 and 3."}]


def test_completion_returns_text_and_usage_and_repeats(handler):
    import litellm

    r1 = litellm.completion(model=handler.litellm_model, messages=MSGS, temperature=0, max_tokens=40)
    r2 = litellm.completion(model=handler.litellm_model, messages=MSGS, temperature=0, max_tokens=40)
    text = r1.choices[0].message.content
    assert "2" in text and "3" in text
    assert r1.usage.prompt_tokens > 10
    assert 0 < r1.usage.completion_tokens <= 40
    assert r1.usage.total_tokens == r1.usage.prompt_tokens + r1.usage.completion_tokens
    assert r2.choices[0].message.content == text  # reset between calls: repeatable


def test_streaming_yields_chunks_and_usage(handler):
    import litellm

    full = litellm.completion(model=handler.litellm_model, messages=MSGS, temperature=0, max_tokens=40)
    stream = litellm.completion(
        model=handler.litellm_model, messages=MSGS, temperature=0, max_tokens=40,
        stream=True, stream_options={"include_usage": True},
    )
    deltas, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            deltas.append(chunk.choices[0].delta.content)
        if getattr(chunk, "usage", None):
            usage = chunk.usage
    assert len(deltas) > 1
    assert "".join(deltas) == full.choices[0].message.content
    assert usage is not None
    assert usage.prompt_tokens == full.usage.prompt_tokens
    assert usage.completion_tokens == full.usage.completion_tokens


def test_prompt_larger_than_window_is_a_context_error(model_home, monkeypatch):
    import litellm

    from rlm.llm import local

    monkeypatch.setenv("RLM_LOCAL_N_CTX", "256")
    h = local.make_handler(None, Config(home=model_home))
    monkeypatch.setattr(litellm, "custom_provider_map",
                        [{"provider": local.PROVIDER, "custom_handler": h}])
    with pytest.raises(litellm.ContextWindowExceededError, match="256-token window"):
        litellm.completion(model=h.litellm_model, num_retries=0,
                           messages=[{"role": "user", "content": "word " * 400}])


def test_seam_local_spec_completes(cfg):
    from rlm.llm import get_llm

    llm = get_llm("local", cfg)
    assert llm.native_tools is False
    seen: list[str] = []
    c = llm.complete(MSGS, on_text=seen.append, temperature=0, max_tokens=40)
    assert c.content and "".join(seen) == c.content
    assert c.usage.input_tokens > 10 and c.usage.output_tokens > 0


# -- end to end: the agent loop with the real model ----------------------------------------


def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*\.?\d*", text)]


def _run(task: str, cfg: Config, files: list[Path]):
    from rlm.agent import run_task

    res = run_task(task, model="local", config=cfg, context_files=files)
    assert res.cells, f"answered without running code: {res.final!r}"
    assert res.final, f"no final answer (reason {res.reason})"
    return res


def test_e2e_count_even_numbers(cfg, tmp_path):
    nums = [3, 8, 15, 22, 7, 40, 11, 6, 9, 14, 31, 2, 5, 18, 27]
    (tmp_path / "nums.json").write_text(json.dumps(nums))
    want = sum(1 for n in nums if n % 2 == 0)
    res = _run("How many even numbers are in the list `nums`?", cfg, [tmp_path / "nums.json"])
    assert want in _numbers(res.final), res.final


def test_e2e_mean_of_column(cfg, tmp_path):
    rows = [("ann", 71.0), ("bob", 64.5), ("cy", 88.0), ("dee", 90.5), ("eve", 58.0), ("fay", 77.0)]
    lines = ["name,score"] + [f"{n},{s}" for n, s in rows]
    (tmp_path / "scores.csv").write_text("\n".join(lines) + "\n")
    want = sum(s for _, s in rows) / len(rows)
    res = _run("What is the mean of the `score` column of the DataFrame `scores`?",
               cfg, [tmp_path / "scores.csv"])
    assert any(abs(x - want) < 0.01 for x in _numbers(res.final)), res.final


def test_e2e_region_with_largest_total(cfg, tmp_path):
    from rlm.demo import file_answer, make_sales_dataset

    path = make_sales_dataset(tmp_path / "sales.csv", rows=600)
    want = file_answer(path)
    res = _run("Which region has the largest total revenue in the DataFrame `sales`?",
               cfg, [path])
    assert want.leader.lower() in res.final.lower(), res.final
    others = [r for r in want.totals if r != want.leader]
    assert not any(re.search(rf"\b{r}\b", res.final, re.I) for r in others[:1]), res.final


def test_no_noise_at_exit(model_home, tmp_path):
    """A process that used the model exits 0 and prints nothing from llama.cpp."""
    import subprocess
    import sys

    code = (
        "from pathlib import Path; from rlm.config import Config; from rlm.llm import local\n"
        f"h = local.make_handler(None, Config(home=Path({str(model_home)!r})))\n"
        "m = h.model; p = m.prepare([{'role': 'user', 'content': 'hi'}], 3)\n"
        "print(''.join(c['text'] for c in m.generate(p, temperature=0, seed=None)) != None)\n"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
    assert out.stderr.strip() == "", out.stderr
