"""End to end with a real kernel, built by build_agent with the default tiers: pruning
alone keeps a run under its threshold without a summary call; after several compactions
the kernel's `history` still returns what was printed before the first one."""

from __future__ import annotations

import json

import pytest

from rlm.config import Config
from rlm.llm.types import Completion
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore
from tests.test_compaction_e2e import QueueModel, cell

BIG = "print(' '.join(str(i * 7919) for i in range(250)))"  # ~500 tokens


def _relief(branch, tier=None):
    return [e for e in branch if isinstance(e, CustomEntry) and e.custom_type == "context_relief"
            and (tier is None or e.data["tier"] == tier)]


@pytest.mark.timeout(180)
def test_pruning_alone_keeps_the_run_under_the_threshold_without_a_summary_call(tmp_path):
    from rlm.app import build_agent

    steps = []
    for k in range(6):  # each step: a big result binding `data`, then `data` rebound
        steps.append(cell(2 * k, f"data = {k}\n{BIG}"))
        steps.append(cell(2 * k + 1, "data = None"))
    steps.append(Completion(content="Done."))
    agent_llm = QueueModel("script:agent", steps)
    summarizer = QueueModel("script:summary", ["## Goal\nsummary"] * 10)
    window = 3400  # ~700 tokens of prompt, then each pair adds a big result (~880 tokens)
    cfg = Config(model="script:agent", compaction_model="script:summary", context_window=window,
                 reserve_tokens=1000, keep_recent_tokens=600, max_turns=20, home=tmp_path)
    session = SessionStore.create(tmp_path, model="script:agent", task="prune")
    agent = build_agent(session, cfg, llm=agent_llm, llm_factory=lambda spec: summarizer)
    with agent:
        list(agent.run("Print the numbers six times."))
    branch = session.branch()
    pruned = _relief(branch, "prune")
    assert pruned, [e.custom_type for e in branch if isinstance(e, CustomEntry)]
    assert summarizer.calls == []  # the summary tier was never needed
    assert not any(isinstance(e, CompactionEntry) for e in branch)
    reasons = {r["reason"] for e in pruned for r in e.data["replaced"]}
    assert reasons == {"superseded"}
    # what reached the model: the pruned results as one-line notices
    last = agent_llm.calls[-1]
    notices = [m["content"] for m in last if m.get("role") == "tool"
               and str(m.get("content")).startswith("[superseded by cell")]
    assert notices
    assert all(sum(len(str(m.get("content"))) for m in call) < window * 4 for call in agent_llm.calls)


@pytest.mark.timeout(180)
def test_history_returns_what_three_compactions_took_out_of_the_context(tmp_path):
    from rlm.app import build_agent

    steps = [cell(0, "marker = 'first'\nprint('the answer is', 6 * 70707)")]
    for k in range(1, 9):  # three summaries asked for from the kernel, the tiers otherwise
        steps.append(cell(k, f"v{k} = {k}\n{BIG}" + ("\ncompact.run()" if k in (3, 5, 7) else "")))
    steps.append(cell(9, "h = history.cell(1)\nprint('CELL1', h['code'][:30], h['output'])\n"
                         "hits = history.search(r'answer is \\d+')\n"
                         "print('HITS', [h.get('cell') for h in hits if h['role'] == 'tool'])\n"
                         "print('USER', history.messages(role='user')[0]['content'])"))
    steps.append(Completion(content="Done."))
    agent_llm = QueueModel("script:agent", steps)
    summarizer = QueueModel("script:summary", [f"## Goal\nsummary {i}" for i in range(20)])
    cfg = Config(model="script:agent", compaction_model="script:summary", context_window=3000,
                 reserve_tokens=1000, keep_recent_tokens=600, max_turns=20, home=tmp_path)
    session = SessionStore.create(tmp_path, model="script:agent", task="history")
    agent = build_agent(session, cfg, llm=agent_llm, llm_factory=lambda spec: summarizer)
    with agent:
        list(agent.run("Print numbers, then look back."))
    branch = session.branch()
    assert len([e for e in branch if isinstance(e, CompactionEntry)]) >= 3
    # cell 1's output is no longer in what the model is sent ...
    sent = " ".join(str(m.get("content")) for m in agent_llm.calls[-2])  # before cell 9 ran
    assert "the answer is 424242" not in sent
    # ... but the kernel's history returns it
    result = [e for e in branch if isinstance(e, MessageEntry) and e.role == "tool"][-1]
    out = result.message["content"]
    assert "CELL1 marker = 'first'" in out and "the answer is 424242" in out, out
    assert "HITS [1]" in out  # search found the value cell 1 printed
    assert "USER Print numbers, then look back." in out


@pytest.mark.timeout(180)
def test_compact_shake_from_a_cell_shakes_at_the_turn_end_and_rlm_log_shows_it(tmp_path, capsys):
    from rlm.app import build_agent
    from rlm.cli.main import main

    steps = [cell(k, f"v{k} = {k}\n{BIG}") for k in range(4)]
    steps.append(cell(4, "print(compact.shake())"))
    steps.append(Completion(content="Done."))
    agent_llm = QueueModel("script:agent", steps)
    cfg = Config(model="script:agent", context_window=100_000, max_turns=10, home=tmp_path)
    session = SessionStore.create(tmp_path, model="script:agent", task="shake")
    agent = build_agent(session, cfg, llm=agent_llm)
    with agent:
        list(agent.run("Print, then shake."))
    shaken = _relief(session.branch(), "shake")
    assert len(shaken) == 1 and shaken[0].data["trigger"] == "requested"
    cells = sorted(r["cell"] for r in shaken[0].data["replaced"])
    assert cells and set(cells) <= {1, 2, 3, 4}
    # the next model call saw placeholders naming history.cell(N)
    tool_msgs = [m["content"] for m in agent_llm.calls[-1] if m.get("role") == "tool"]
    assert any("history.cell(" in t and "shaken out" in t for t in tool_msgs)
    assert main(["log", str(session.path)]) == 0
    out = capsys.readouterr().out
    assert "context shake (requested):" in out and "shaken out of the context" in out
    # the exported notebook keeps every output whole and says what the model saw instead
    from rlm.notebook.export import export_session

    nb = json.loads(export_session(session.path, tmp_path / "out.ipynb").read_text())
    md = [("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
          for c in nb["cells"] if c["cell_type"] == "markdown"]
    assert any(m.startswith("### Context shake (requested") and "shaken" in m for m in md)
    outputs = json.dumps([c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"])
    assert str(249 * 7919) in outputs


@pytest.mark.timeout(120)
def test_the_kernel_records_each_cells_reads_with_its_result(tmp_path):
    from rlm.app import build_agent

    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    steps = [cell(0, f"print(open({str(tmp_path / 'data.csv')!r}).read())"),
             cell(1, "x = 1"), Completion(content="Done.")]
    cfg = Config(model="script:agent", context_window=100_000, max_turns=5, home=tmp_path)
    session = SessionStore.create(tmp_path, model="script:agent", task="reads")
    with build_agent(session, cfg, llm=QueueModel("script:agent", steps)) as agent:
        list(agent.run("Read it."))
    results = [e for e in session.branch() if isinstance(e, MessageEntry) and e.role == "tool"]
    assert results[0].cell["files_read"] == [str(tmp_path / "data.csv")]
    assert results[1].cell["files_read"] == []


@pytest.mark.timeout(300)
def test_slash_shake_in_chat_shakes_between_prompts(tmp_path, _isolated_home):
    import subprocess
    import sys

    from test_cli import call, script

    big = f"v = 1\n{BIG}"
    s = script(tmp_path / "s.json", [call(big), call(big), call(big), call(big),
                                     call("final('ok')")])
    proc = subprocess.run([sys.executable, "-P", "-m", "rlm", "chat", "--model", s],
                          cwd=tmp_path, input="print things\n/shake\n/exit\n",
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the four results all bind `v`: the manual pass prunes the three older ones
    assert "context prune (manual): 3 superseded" in proc.stdout, proc.stdout[-2000:]
    log = next(_isolated_home.glob("sessions/*/session.jsonl")).read_text()
    records = [json.loads(line) for line in log.splitlines()
               if '"context_relief"' in line]
    assert records and {r["data"]["trigger"] for r in records} == {"manual"}


@pytest.mark.timeout(300)
def test_fenced_code_in_old_replies_is_shaken_out_and_history_returns_it(tmp_path,
                                                                         _isolated_home):
    """A model that writes its cells in its text (`local`): `/shake` replaces the long code
    blocks of older replies by placeholders, keeps their prose and the newest reply whole,
    and `history.cell(N)` returns the code."""
    from rlm.session.context import build_messages
    from tests import rlmcli

    def long_cell(k: int) -> str:
        rows = "\n".join(f"row_{k}_{i} = sum(range({i * 97}, {i * 97 + 50}))" for i in range(12))
        return f"Step {k}: the sums.\n```python\n{rows}\nprint(row_{k}_11)\n```"

    model = tmp_path / "s.json"
    model.write_text(json.dumps({"window": 32000, "fenced": True, "replies": [
        long_cell(1), long_cell(2), long_cell(3), long_cell(4),
        "```python\nprint(history.cell(1)['code'].splitlines()[0])\n```", "FINAL(done)"]}))
    out = rlmcli.rlm("chat", "--model", f"script:{model}", cwd=tmp_path, check=True,
                     stdin="add things up\n/shake\n/exit\n")
    assert "code shaken" in out.stdout, out.stdout[-2000:]
    path = next(_isolated_home.glob("sessions/*/session.jsonl"))
    s = SessionStore.open(path.parent.name)
    [record] = _relief(s.branch(), "shake")
    shaken = [r for r in record.data["replaced"] if r["reason"] == "code shaken"]
    assert [r["cell"] for r in shaken] == [1, 2]  # the newest (~640 tokens) stay whole
    sent = build_messages(s.branch(), system_prompt="", native_tools=False)
    replies = [m["content"] for m in sent if m["role"] == "assistant"]
    assert replies[0].startswith("Step 1: the sums.\n[code of cell 1 shaken out")
    assert "history.cell(1) returns it" in replies[0] and "row_1_0" not in replies[0]
    assert "row_4_0 = sum" in replies[3]
    # a model with native tools is shown its replies as stored: its code is in its calls
    native = build_messages(s.branch(), system_prompt="", native_tools=True)
    assert "row_1_0 = sum" in json.dumps(native)
    # the kernel's history has the code the context no longer shows (printed before /shake)
    results = [m["content"] for m in sent if m["role"] == "user" and "Output of cell" in m["content"]]
    assert any("row_1_0 = sum(range(0, 50))" in r for r in results)
