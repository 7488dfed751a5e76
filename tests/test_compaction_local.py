"""The default path, end to end: `rlm resume` of a long session with the real `local`
model and no settings at all (no --model, no --context-window, no reserve / keep-recent).
The session's history is past the threshold of the model's own 8,192-token window: the
run must compact before its first model call (a compaction entry and an `<ipython_state>`
listing of the restored kernel in the log) instead of overflowing, and the model then
works on from the summary and the live variables.

Before issue 12 the local model reported no window and the defaults (reserve 16,384,
keep-recent 20,000) exceeded it, so such a run overflowed with "nothing to summarize";
later the threshold was only checked after a turn, so the first call carried the whole
history (minutes of prompt processing on 2 cores), and a single entry larger than
keep-recent (a notebook import) was kept whole, so compaction freed nothing.

The history is written by a scripted model through the same agent (a real kernel, real
snapshots), so the test does not depend on what the 1.5B model chooses to print.

`slow`: loads the 1.1 GB model (joined from its wheels on first use) and generates on the
CPU; one run of a few minutes on 2 cores.
"""

from __future__ import annotations

import json

import pytest

from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

# Letter-only pseudo-words (Qwen splits digits one by one): three cells print 600 words
# each, ~5,200 characters and ~2,000 tokens per output.
MAKE = (
    "import random\n"
    "random.seed(7)\n"
    "words = [''.join(random.choice('bcdfghjklmnpqrstvwxz') + random.choice('aeiou')"
    " for _ in range(4)) for _ in range(1800)]\n"
    "print(' '.join(words[:600]))"
)
SHOW = ["print(' '.join(words[600:1200]))", "print(' '.join(words[1200:]))"]
TASK = "How many words does `words` hold? Answer with the number."


def _seed(home) -> SessionStore:
    """A finished run whose three cells printed ~6,000 tokens: past the 6,144 threshold
    of the local window with the system prompt and the new task."""
    from rlm.app import build_agent
    from rlm.config import Config
    from rlm.llm import ScriptedLLM

    def cell(code: str) -> dict:
        return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}

    replies = [cell(MAKE), *(cell(c) for c in SHOW), cell("final('shown')")]
    config = Config(home=home, model="script:seed", cell_timeout=120)
    session = SessionStore.create(home, model="local", task="Show the words")
    with build_agent(session, config, entry="run", llm=ScriptedLLM(replies, config)) as agent:
        list(agent.run("Show me the words, a third at a time."))
    return session


@pytest.fixture
def model_home(local_model, _isolated_home):
    """This test's RLM_HOME; the model comes from the test session's shared cache."""
    return _isolated_home


def test_local_model_with_no_settings_compacts_instead_of_overflowing(
    model_home, monkeypatch, capsys
):
    from rlm.cli.main import main
    from rlm.compaction.plan import context_tokens
    from rlm.config import load_config
    from rlm.llm import get_llm

    monkeypatch.setenv("RLM_HOME", str(model_home))
    monkeypatch.delenv("RLM_LOCAL_N_CTX", raising=False)
    assert get_llm("local", load_config()).context_window() == 8192  # its n_ctx, reported
    seeded = _seed(model_home)
    assert context_tokens(seeded.branch()) > 6144 - 200  # the task pushes it past 6,144

    code = main(["resume", seeded.id, TASK, "--max-turns", "3", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["model"] == "local" and out["compaction"]["window"] == 8192, out
    branch = SessionStore.open(out["session_path"]).branch()
    # relieved by the cheapest tier that suffices (issue 27: prune, shake, then a summary)
    reliefs = [e for e in branch if isinstance(e, CompactionEntry) or (
        isinstance(e, CustomEntry) and e.custom_type == "context_relief")]
    states = [e for e in branch if isinstance(e, CustomEntry) and e.custom_type == "ipython_state"]
    errors = [e.error for e in branch if isinstance(e, MessageEntry) and e.error]
    assert reliefs, f"no compaction (reason {out['reason']}, errors {errors})"
    first_relief = reliefs[0]
    trigger = (first_relief.trigger if isinstance(first_relief, CompactionEntry)
               else first_relief.data["trigger"])
    assert trigger == "threshold", trigger
    # relieved before the resumed run's first model call, not after it
    first = branch.index(first_relief)
    assert not any(isinstance(e, MessageEntry) and e.role == "assistant" and e.model == "local"
                   for e in branch[:first])
    if any(isinstance(e, CompactionEntry) for e in reliefs):  # a summary: the names listed
        assert states and "words" in states[-1].content and "<ipython_state>" in states[-1].content
    assert not any("overflow" in e for e in errors), errors
    assert code in (0, 3, 5), out
