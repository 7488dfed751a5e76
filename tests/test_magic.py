"""`%%rlm` in a REAL kernel driven through jupyter_client, with a scripted model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from frontend import run
from jupyter_client.manager import start_new_kernel
from nbclient import NotebookClient

from rlm.notebook.export import export_session

pytestmark = pytest.mark.timeout(180)

FIRST = [
    "I'll read the user's data.\n```python\nprint('sum is', sum(user_data))\n"
    "agent_total = sum(user_data) * 10\n```",
    {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": "final(agent_total)"}}]},
]
SECOND = [
    {"content": "", "tool_calls": [{"name": "python", "arguments": {
        "code": "agent_total += 1\nfinal(agent_total)"}}]},
]




def _texts(msgs) -> tuple[str, str]:
    stream = "".join(c["text"] for t, c in msgs if t == "stream")
    rich = "\n".join(c["data"].get("text/markdown", c["data"].get("text/plain", ""))
                     for t, c in msgs if t in ("display_data", "execute_result"))
    return stream, rich


@pytest.fixture
def kernel(tmp_path):
    env = {**os.environ, "RLM_HOME": str(tmp_path / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    yield kc
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def test_rlm_magic_works_on_the_users_namespace(kernel, tmp_path):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps(FIRST))
    second.write_text(json.dumps(SECOND))
    run(kernel, "user_data = [1, 2, 3]\n%load_ext rlm")

    msgs = run(kernel, f"%%rlm --model script:{first} --max-turns 5\nSum user_data times ten.",
               timeout=120)
    stream, rich = _texts(msgs)
    assert "sum is 6\n" in stream  # the agent read the user's variable; output shown live
    assert "```python\nprint('sum is', sum(user_data))" in rich  # its code shown as it ran
    assert "**Final answer:**\n\n60" in rich
    assert not [c for t, c in msgs if t == "error"]

    after, _ = _texts(run(kernel, "print(agent_total)"))
    assert after == "60\n"  # the agent's variable stays for the user

    msgs = run(kernel, f"%%rlm --model script:{second}\nAdd one.", timeout=120)
    assert "**Final answer:**\n\n61" in _texts(msgs)[1]
    sessions = list((tmp_path / "home" / "sessions").iterdir())
    assert len(sessions) == 1  # one session per kernel, reused
    # the model was told what the notebook holds before it started (not as a visible cell)
    log = (sessions[0] / "session.jsonl").read_text()
    described = [json.loads(line) for line in log.splitlines()
                 if '"custom_type":"context_vars"' in line]
    assert described and "Input: these kernel variables already hold your input" in described[0]["content"]
    assert "- user_data: list, 3 items" in described[0]["content"]
    # the user's variables are the task's data: answers computed from them are verified,
    # as the line record of the agent's cells in the user's own kernel shows (issue 58)
    finals = [json.loads(line)["data"] for line in log.splitlines()
              if '"custom_type":"final"' in line]
    assert [f["verified"] for f in finals] == [True, True], finals

    _, state = _texts(run(kernel, "%rlm_state"))
    assert f"Session `{sessions[0].name}`" in state

    nb = nbformat.read(export_session(sessions[0], tmp_path / "magic.ipynb"), as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert "agent_total += 1\nfinal(agent_total)" in code
    assert any(o.get("text") == "sum is 6\n" for c in nb.cells for o in c.get("outputs", []))


def test_load_and_unload_extension(kernel):
    msgs = run(kernel, "%load_ext rlm\nip = get_ipython()\n"
                       "print('rlm' in ip.magics_manager.magics['cell'], "
                       "'rlm_state' in ip.magics_manager.magics['line'], 'final' in ip.user_ns)\n"
                       "%unload_ext rlm\nprint('rlm' in ip.magics_manager.magics['cell'], 'final' in ip.user_ns)")
    # the kernel API is not left in the notebook's globals (%%rlm lends it for its run)
    assert _texts(msgs)[0] == "True True False\nFalse False\n"


def test_rlm_magic_leaves_the_notebook_tidy(kernel, tmp_path):
    """Issue 31: no API names left in the globals (a user's own `final` is back after the
    run), no boilerplate notes unless --verbose, no `[rlm: sys.stdout was rebound]` line."""
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([
        {"content": "", "tool_calls": [{"name": "python", "arguments": {
            "code": "print('rows', len(user_data))\nfinal(str(len(user_data)))"}}]}]))
    run(kernel, "user_data = [1, 2, 3]\nfinal = 'my own final'\n%load_ext rlm")
    msgs = run(kernel, f"%%rlm --model script:{replies}\nHow many rows?", timeout=120)
    stream, rich = _texts(msgs)
    assert "rows 3\n" in stream and "**Final answer:**\n\n3" in rich
    assert "rebound" not in stream, stream
    assert "snapshot" not in rich and "heartbeats" not in rich, rich  # no boilerplate
    after, _ = _texts(run(kernel, "print(final, sorted(n for n in ('goal', 'cron', 'final_var', "
                                  "'llm_query', 'rlm_query', 'compact', 'heartbeat') "
                                  "if n in globals()))"))
    assert after == "my own final []\n"
    replies.write_text(json.dumps(["Three."]))
    _, rich = _texts(run(kernel, f"%%rlm --verbose --model script:{replies}\nAgain?", timeout=120))
    assert "does not snapshot it" in rich  # the notes, when asked for


def test_state_without_session(kernel):
    _, rich = _texts(run(kernel, "%load_ext rlm\n%rlm_state"))
    assert "No %%rlm session yet" in rich


NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_example_notebooks_execute(path):
    """CI runs every example notebook top to bottom (scripted models; RLM_HOME is tmp)."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
