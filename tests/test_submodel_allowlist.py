"""Issue 26 item 4: a cell may name only the configured models in a sub-call. Through a
real kernel and a scripted model built by the root: `model="script:/a/host/file"` does not
make the host read that file, a provider model is not attempted, `local:/any.gguf` is not
parsed; each is an exception in the cell listing the allowed models. A configured one
works, by name or by default."""

from __future__ import annotations

import json

import pytest

from rlm.app import build_agent
from rlm.config import Config
from rlm.events import CellFinished, RunEnded
from rlm.session.store import SessionStore

pytestmark = pytest.mark.timeout(180)


def _call(code: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}


def test_a_cell_cannot_name_an_unconfigured_model(tmp_path, _isolated_home):
    secret = tmp_path / "host-only.json"
    secret.write_text(json.dumps(["HOST-FILE-CONTENT"]))  # a valid script: it would answer
    gguf = tmp_path / "any.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    sub = tmp_path / "sub.json"
    sub.write_text(json.dumps(["pong", "pong again"]))
    probe = ("out = []\nfor m in {models!r}:\n    try:\n        out.append(llm_query('hi', model=m))\n"
             "    except Exception as e:\n        out.append(f'{{type(e).__name__}}: {{e}}')\n"
             "for line in out:\n    print(line)")
    models = [f"script:{secret}", "anthropic/claude-3-5-sonnet-20241022", f"local:{gguf}", f"script:{sub}"]
    main = tmp_path / "main.json"
    main.write_text(json.dumps([
        _call(probe.format(models=models)),
        _call("print(llm_query('again'))\ntry:\n    llm_query_batched(['a'], model='gpt-4o')\n"
              "except Exception as e:\n    print('batched:', e)"),
        _call("final('done')"),
    ]))
    config = Config(home=_isolated_home, model=f"script:{main}", sub_model=f"script:{sub}")
    session = SessionStore.create(_isolated_home, model=config.model or "", task="t")
    agent = build_agent(session, config, entry="run")
    with agent:
        events = list(agent.run("probe the sub-call models"))
    assert isinstance(events[-1], RunEnded) and events[-1].final == "done"
    first, second = [e for e in events if isinstance(e, CellFinished)][:2]
    lines = first.result.shaped.strip().splitlines()
    allowed = f"a cell may name only 'script:{main}', 'script:{sub}'"
    for line, m in zip(lines[:3], models, strict=False):
        assert f"llm_query(model={m!r}) is not a configured model; {allowed}" in line, line
    assert lines[3] == "pong"  # the configured sub-model, by name
    assert "HOST-FILE-CONTENT" not in json.dumps([e.result.shaped for e in (first, second)])
    text = second.result.shaped
    assert "pong again" in text  # the default sub-model
    assert "batched: llm_query(model='gpt-4o') is not a configured model" in text
