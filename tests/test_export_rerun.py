"""Issue 14.7: an exported `rlm run --context FILE` session re-runs top to bottom.

Before: no cell loaded the `--context` files (NameError on their first use), and the loop's
own nudges were exported as `**User:**` cells. The session is made by the real `rlm run`
entry point with a scripted model, exported by `rlm export`, and re-executed by nbclient
from another folder."""

from __future__ import annotations

import json

import nbformat
import pytest
from nbclient import NotebookClient

from rlm.app import build_agent
from rlm.cli.main import main
from rlm.config import Config
from rlm.llm import ScriptedLLM
from rlm.notebook.export import export_session
from rlm.session.entries import MessageEntry
from rlm.session.store import SessionStore

CELLS = [
    "print(data.shape)\nprint(data.columns.tolist())",
    "total = data['amount'].sum()\nprint(f'total {total}')",
    "final(str(total))",
]


def _call(code: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}


@pytest.fixture
def context_session(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.csv").write_text("region,amount\nEast,10\nWest,32\nEast,5\n")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([_call(c) for c in CELLS]))
    import os

    os.chdir(work)  # conftest's monkeypatch.chdir restores the folder after the test
    assert main(["run", "what is the total amount?", "--context", "data.csv",
                 "--model", f"script:{script}", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["final"] == "47"
    return result["session_id"], work / "data.csv"


def _streams(cell) -> str:
    """The cell's printed text, without the prelude's "[rlm] final() is a no-op" lines."""
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o["output_type"] == "stream")
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("[rlm] "))


def test_exported_context_session_reruns_with_the_same_outputs(context_session, tmp_path):
    sid, csv = context_session
    out = tmp_path / "out" / "analysis.ipynb"
    out.parent.mkdir()
    assert main(["export", sid, "-o", str(out)]) == 0
    nb = nbformat.read(out, as_version=4)
    loaders = [c for c in nb.cells if c.cell_type == "code" and str(csv) in c.source]
    assert len(loaders) == 1 and "data = " in loaders[0].source  # by absolute path
    task = next(i for i, c in enumerate(nb.cells) if c.source.startswith("**Task:**"))
    assert nb.cells.index(loaders[0]) < task  # the inputs come first, as in the run
    recorded = {c.id: _streams(c) for c in nb.cells if c.cell_type == "code"
                and c.metadata.get("rlm", {}).get("status") == "ok"}
    assert "total 47" in "".join(recorded.values())

    rerun = nbformat.read(out, as_version=4)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    NotebookClient(rerun, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(elsewhere)}}).execute()  # raises on NameError
    again = {c.id: _streams(c) for c in rerun.cells if c.id in recorded}
    assert again == recorded


def test_missing_input_gets_a_clear_note(context_session, tmp_path):
    sid, csv = context_session
    csv.unlink()
    out = tmp_path / "gone.ipynb"
    assert main(["export", sid, "-o", str(out)]) == 0
    nb = nbformat.read(out, as_version=4)
    notes = [c.source for c in nb.cells if c.cell_type == "markdown" and "does not exist now" in c.source]
    assert len(notes) == 1 and str(csv) in notes[0] and "`data`" in notes[0]
    loader = next(c for c in nb.cells if c.cell_type == "code" and str(csv) in c.source)
    assert loader.metadata["tags"] == ["raises-exception"]


class _Fenced(ScriptedLLM):
    native_tools = False  # like the small local model: fenced code, so it gets nudged


def test_the_loops_nudges_are_notes_not_user_words(_isolated_home, tmp_path):
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60)
    llm = _Fenced(["```python\nprint(1 / 0)\n```", "I cannot divide, sorry.",
                   "```python\nprint(2)\n```", "FINAL(2)"])
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    with build_agent(session, config, llm=llm) as agent:
        list(agent.run("what is 2?"))
    nudges = [e for e in session.branch() if isinstance(e, MessageEntry) and e.origin == "nudge"]
    assert len(nudges) == 1 and nudges[0].role == "user"  # marked in the log
    reopened = SessionStore.open(session.id, _isolated_home)
    assert [e.origin for e in reopened.branch() if isinstance(e, MessageEntry)].count("nudge") == 1
    nb = nbformat.read(export_session(reopened, tmp_path / "n.ipynb"), as_version=4)
    md = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert [s for s in md if s.startswith("**User:**")] == []
    assert any(s.startswith("*rlm nudged the model:*") for s in md)
    assert md[0] == "**Task:** what is 2?"


def test_old_logs_without_origin_still_read_and_old_nudges_are_recognised(tmp_path):
    from rlm.agent.nudge import NUDGE_FAILED
    from rlm.notebook.export import build_notebook
    from rlm.session.entries import entry_from_dict

    old = entry_from_dict({"type": "message", "id": "a1", "parent_id": None,
                           "timestamp": "2026-01-01T00:00:00", "message":
                           {"role": "user", "content": NUDGE_FAILED}})
    assert isinstance(old, MessageEntry) and old.origin is None
    assert "origin" not in old.to_dict()  # unmarked entries are written as before
    task = MessageEntry(message={"role": "user", "content": "the task"})
    nb = build_notebook([task, old], None, tmp_path)
    assert [c.source for c in nb.cells] == ["**Task:** the task",
                                            f"*rlm nudged the model:* {NUDGE_FAILED}"]
