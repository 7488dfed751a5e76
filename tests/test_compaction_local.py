"""The default path, end to end: `rlm run` with the real `local` model and no settings at
all (no --model, no --context-window, no reserve / keep-recent). A cell prints enough to
push the context past the threshold of the model's own 8,192-token window: the run must
compact (a compaction entry and an `<ipython_state>` notice in the log) instead of
overflowing. Before issue 12 the local model reported no window and the defaults (reserve
16,384, keep-recent 20,000) exceeded it, so this run overflowed with "nothing to summarize".

`slow`: loads the 1.1 GB model (joined from its wheels on first use) and generates on the
CPU; one run of a few minutes on 2 cores.
"""

from __future__ import annotations

import json

import pytest

from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

# 16,199 characters of letter-only pseudo-words: 5,921 tokens for tiktoken's o200k_base
# (what rlm counts) and 6,594 for the model's own tokenizer (no digits: Qwen splits digits
# one by one). With the system prompt and the task, the context is past the scaled
# threshold (6,144) after the first cell, and after compaction it still fits 8,192.
CODE = (
    "import random\n"
    "random.seed(7)\n"
    "words = [''.join(random.choice('bcdfghjklmnpqrstvwxz') + random.choice('aeiou')"
    " for _ in range(4)) for _ in range(1800)]\n"
    "print(' '.join(words))"
)
TASK = (
    "Run exactly this code, once:\n\n```python\n" + CODE + "\n```\n\n"
    "After you have seen its output, reply with FINAL(done)."
)


@pytest.fixture
def model_home(local_model, _isolated_home):
    """This test's RLM_HOME; the model comes from the test session's shared cache."""
    return _isolated_home


def test_local_model_with_no_settings_compacts_instead_of_overflowing(
    model_home, monkeypatch, capsys
):
    from rlm.cli.main import main
    from rlm.config import load_config
    from rlm.llm import get_llm

    monkeypatch.setenv("RLM_HOME", str(model_home))
    monkeypatch.delenv("RLM_LOCAL_N_CTX", raising=False)
    assert get_llm("local", load_config()).context_window() == 8192  # its n_ctx, reported

    code = main(["run", TASK, "--max-turns", "4", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    session = SessionStore.open(out["session_path"])
    branch = session.branch()
    compactions = [e for e in branch if isinstance(e, CompactionEntry)]
    states = [e for e in branch if isinstance(e, CustomEntry) and e.custom_type == "ipython_state"]
    errors = [e.error for e in branch if isinstance(e, MessageEntry) and e.error]
    assert compactions, f"no compaction (reason {out['reason']}, errors {errors})"
    assert compactions[0].trigger == "threshold", compactions[0].trigger
    assert states and "words" in states[-1].content and "<ipython_state>" in states[-1].content
    assert not any("overflow" in e for e in errors), errors
    assert code in (0, 3), out
