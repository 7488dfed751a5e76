"""A hosted model's whole path, offline: `rlm run --model openai/gpt-4o-mini` through
litellm to a real OpenAI-compatible endpoint on 127.0.0.1 (bench/fake_openai.py). The
model is built from litellm's bundled map while litellm imports beside the kernel's start
(rlm.llm.modelmap, `warm_litellm`); what reached the endpoint and what is on disk are
checked."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from bench.fake_openai import serving, tool_reply

REPO = Path(__file__).resolve().parents[1]


def test_a_hosted_run_reaches_its_endpoint_and_its_key_lands_on_no_disk(tmp_path, _isolated_home):
    key = f"sk-test-{secrets.token_hex(16)}"
    (tmp_path / "six.txt").write_text("6")  # the task's data: a verified answer reads it
    replies = [tool_reply("x = int(open('six.txt').read()) * 7\nprint(x)"),
               tool_reply("final(str(x))")]
    with serving(replies) as server:
        env = {**os.environ, "OPENAI_API_KEY": key, "OPENAI_API_BASE": server.base,
               "PYTHONPATH": str(REPO)}
        proc = subprocess.run([sys.executable, "-m", "rlm", "run", "what is 6*7?", "--model",
                               "openai/gpt-4o-mini", "--json"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["final"], out["turns"], out["verified"]) == ("42", 2, True)
    assert out["compaction"]["window"] == 128_000  # the map's window reached the run
    first, second = server.requests
    assert first["model"] == "gpt-4o-mini" and first["stream"] is True
    # native tool calling, as litellm's map says for this model
    assert [t["function"]["name"] for t in first["tools"]] == ["python"]
    assert first["messages"][-1] == {"role": "user", "content": "what is 6*7?"}
    tool_results = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 1 and "42" in tool_results[0]["content"]
    assert key not in proc.stdout + proc.stderr
    for path in _isolated_home.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
