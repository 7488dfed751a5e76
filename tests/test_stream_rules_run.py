"""Stream rules end to end: a project's rule file, agents built by the composition root
(build_agent), a scripted model streamed, a real kernel, the session on
disk. Assertions are on what reached the model, what ran in the kernel and the log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm.app import build_agent
from rlm.app.build import compact_now
from rlm.app.options import RunOptions
from rlm.config import Config
from rlm.events import Notice, RunEnded
from rlm.llm import ScriptedLLM
from rlm.session.entries import CustomEntry, MessageEntry
from rlm.session.store import SessionStore

RULE = (Path(__file__).parent / "fixtures" / "rules" / "no_read_csv.md").read_text()
REMINDER = "Do not use pandas.read_csv on this project"


def fenced(code: str, prose: str = "Next step.") -> str:
    return f"{prose}\n\n```python\n{code}\n```\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A working directory with the project's rule file."""
    proj = tmp_path / "proj"
    (proj / ".rlm" / "rules").mkdir(parents=True)
    (proj / ".rlm" / "rules" / "no_read_csv.md").write_text(RULE)
    monkeypatch.chdir(proj)
    return proj


def agent_with(home: Path, replies: list, *, options: RunOptions | None = None, **cfg):
    config = Config(home=home, model="script:inline", cell_timeout=60, **cfg)
    llm = ScriptedLLM(replies, stream=True)
    session = SessionStore.create(home, model="script:inline", task="t")
    return build_agent(session, config, llm=llm, options=options), session, llm


def injections(session) -> list[CustomEntry]:
    return [e for e in session.branch()
            if isinstance(e, CustomEntry) and e.custom_type == "rule_injection"]


def test_a_matching_reply_is_dropped_and_the_turn_retried_with_the_reminder(
        _isolated_home, project):
    bad = fenced("open('ran.txt', 'w').write('1')\nimport pandas as pd\n"
                 "df = pd.read_csv('sales.csv')")
    agent, session, llm = agent_with(_isolated_home, [
        bad,
        fenced("x = 6 * 7\nprint(x)"),
        fenced("final(str(x))"),
        "a summary of the work",  # the compaction's calls: the history, the split turn
        "the turn so far",
    ], context_window=100_000, keep_recent_tokens=20)
    with agent:
        events = list(agent.run("What is six times seven?"))
        assert not (project / "ran.txt").exists()  # no cell of the dropped reply ran
        end = events[-1]
        assert isinstance(end, RunEnded) and end.reason == "final" and end.final == "42"
        assert any(isinstance(e, Notice) and "rule 'no_read_csv' matched" in e.text
                   for e in events)
        # the retried call saw the reminder, and never the dropped reply
        retried = "\n".join(str(m.get("content")) for m in llm.calls[1])
        assert REMINDER in retried and "read_csv('sales.csv')" not in retried
        (inj,) = injections(session)
        assert inj.data["rule"] == "no_read_csv" and inj.data["found"] == "read_csv("
        replies = [e.message["content"] for e in session.branch()
                   if isinstance(e, MessageEntry) and e.role == "assistant"]
        assert len(replies) == 2 and not any("read_csv" in r for r in replies)
        # a compaction keeps the injection in the context, not in the summary
        assert compact_now(agent) is not None, [e.data for e in session.branch() if isinstance(
            e, CustomEntry) and e.custom_type == "compaction_outcome"]
    summary_request = "\n".join(str(m.get("content")) for c in llm.calls[-2:] for m in c)
    assert REMINDER not in summary_request
    # resumed from disk: still projected, once
    reopened = SessionStore.open(session.path)
    msgs = reopened.messages(system_prompt="s", native_tools=False)
    assert sum(REMINDER in str(m["content"]) for m in msgs) == 1
    assert "a summary of the work" in str(msgs[1]["content"])
    # and exported: the notebook says which rule stopped a reply, and what the model read
    from rlm.notebook.export import export_session

    nb = export_session(reopened, project / "run.ipynb").read_text()
    assert "Rule `no_read_csv` stopped a reply" in nb and REMINDER.splitlines()[0] in nb


def test_a_native_tool_calls_code_is_stopped_as_its_arguments_stream(_isolated_home, project):
    """A hosted model writes its cell as a tool call whose JSON arguments stream in pieces:
    the rule reads the code as it grows and stops the stream at the offending line, long
    before the call is whole; no cell of it runs and the turn is retried."""
    body = "\n".join(f"total_{i} = {i} * 2" for i in range(60))
    bad = {"content": "", "tool_calls": [{"name": "python", "arguments": {
        "code": "import pandas as pd\ndf = pd.read_csv('sales.csv')\n" + body}}]}
    good = {"content": "", "tool_calls": [{"name": "python", "arguments": {
        "code": "final(str(6 * 7))"}}]}
    agent, session, llm = agent_with(_isolated_home, [bad, good])
    real, pieces = llm._handler.streaming, []  # chunks read, per call

    def counted(*a, **kw):
        pieces.append(0)
        for chunk in real(*a, **kw):
            pieces[-1] += 1
            yield chunk

    llm._handler.streaming = counted
    with agent:
        events = list(agent.run("six times seven?"))
    assert events[-1].final == "42"
    (inj,) = injections(session)
    assert inj.data["found"] == "read_csv(" and inj.data["where"] == "code"
    whole = len(json.dumps(bad["tool_calls"][0]["arguments"])) // 16  # its pieces
    assert len(pieces) == 2 and pieces[0] < whole // 4, (pieces, whole)  # stopped early
    assert not any("total_59" in str(m.get("content")) for m in llm.calls[1])
    cells = [e for e in session.branch() if isinstance(e, MessageEntry) and e.role == "tool"]
    assert len(cells) == 1  # the good call's only


def test_a_string_literal_does_not_abort_and_a_once_rule_fires_once(_isolated_home, project):
    (project / ".rlm" / "rules" / "no_read_csv.md").write_text(
        RULE.replace("scope: code", "scope: code\nrepeat: once"))
    agent, session, llm = agent_with(_isolated_home, [
        fenced("note = 'read_csv( is not used here'  # nor read_csv( here\nprint(note)"),
        fenced("import pandas as pd\npd.read_csv"),  # no call: no match
        fenced("import io\ndf = pd.read_csv(io.StringIO('a\\n1'))\nprint(len(df))"),  # stopped
        fenced("import io\ndf = pd.read_csv(io.StringIO('a\\n1\\n2'))\nprint(len(df))"),  # once: runs
        fenced("final(str(len(df)))"),
    ])
    with agent:
        events = list(agent.run("How many rows?"))
    assert events[-1].final == "2"
    assert len(injections(session)) == 1


def test_an_aborted_turn_does_not_stop_an_autonomous_run(_isolated_home, project):
    agent, session, llm = agent_with(_isolated_home, [
        fenced("import pandas as pd\npd.read_csv('x.csv')"),
        fenced("open('done.txt', 'w').write('ok')\nfinal('done')"),
    ], options=RunOptions(autonomous=True, gate=["test -f done.txt"]))
    with agent:
        events = list(agent.run("Write done.txt"))
    end = events[-1]
    assert isinstance(end, RunEnded) and end.reason == "final" and end.final == "done"
    assert len(injections(session)) == 1 and (project / "done.txt").exists()


def test_interrupts_of_one_rule_do_not_silence_another(_isolated_home, project):
    (project / ".rlm" / "rules" / "no_eval.md").write_text(
        "---\ncondition: '\\beval\\('\n---\nNever call eval.")
    read = fenced("import pandas as pd\npd.read_csv('a.csv')")
    agent, session, llm = agent_with(_isolated_home, [
        read, read,  # no_read_csv twice in the turn: silenced for the rest of it
        fenced("x = eval('1 + 1')"),  # no_eval still watches
        fenced("x = 2\nfinal(str(x))"),
    ])
    with agent:
        events = list(agent.run("Two?"))
    assert events[-1].final == "2"
    assert [e.data["rule"] for e in injections(session)] == ["no_read_csv", "no_read_csv",
                                                             "no_eval"]


def test_a_goal_with_a_failing_gate_is_not_complete_and_an_unchanged_workspace_is_not_rechecked(
        _isolated_home, project):
    from rlm.longrun.goals import GoalManager

    runs = project / "gate-runs.log"
    gate = f"echo checked >> {runs}; test -f done.txt || (echo 'done.txt is missing'; exit 1)"
    done = "r = goal.complete('the marker is written')"  # a claim its output shows
    agent, session, llm = agent_with(_isolated_home, [
        fenced("print('the marker is written')"),
        fenced(done),  # the gate fails: not complete
        fenced(done),  # nothing changed: the failure is told again, not rerun
        fenced(f"open('done.txt', 'w').write('ok')\n{done}"),  # passes
        fenced("final(r['goal']['status'])"),
    ], options=RunOptions(gate=[gate]))
    GoalManager(session).set("write the marker")
    with agent:
        events = list(agent.run("Work on the goal."))
    tools = [str(m["content"]) for m in llm.calls[2] if m["role"] in ("tool", "user")]
    assert any("done.txt is missing" in t and "the goal is not complete" in t for t in tools)
    assert "was not rerun: nothing changed" in str(llm.calls[3])
    # the first failure, after the fix, and the answer's own check (every run's answer
    # waits for its gates, and a cell ran since they passed)
    assert runs.read_text().count("checked") == 3
    assert events[-1].final == "complete" and events[-1].result.status == "answered"


def test_a_cell_starting_to_type_a_literal_over_the_input_is_stopped_as_it_streams(
        _isolated_home, tmp_path):
    """The host's own rule, on the default path (no rule file): the task suite's needle
    item spent 240 s typing the log into `audit = "..."`. The reply is stopped at its first
    quote, never logged or run, and the turn is retried with the reminder naming the
    input; the next reply searches the variable."""
    from rlm.agent.context_files import load_context_files

    log = tmp_path / "audit.log"
    log.write_text("".join(f"2025-01-01 INFO line {i}\n" for i in range(3000))
                   + "2025-01-02 INFO badge R-4623 issued to Ilse Tanaka\n")
    typed = fenced('audit = "2025-01-01 INFO line 0\\n' + "2025-01-01 INFO line 1\\n" * 400 + '"')
    search = fenced("i = audit.find('Ilse Tanaka')\nprint(audit[max(0, i - 60):i + 20])")

    class Fenced(ScriptedLLM):
        native_tools = False

    llm = Fenced([typed, search, "FINAL(R-4623)"], stream=True)
    config = Config(home=_isolated_home, model="script:inline", cell_timeout=60)
    session = SessionStore.create(_isolated_home, model="script:inline", task="t")
    agent = build_agent(session, config, llm=llm)
    with agent:
        load_context_files(agent, [log])
        end = [e for e in agent.run("In the audit log, what badge did Ilse Tanaka get?")
               if isinstance(e, RunEnded)][-1]
    assert end.final == "R-4623"
    (hit,) = injections(session)
    assert hit.data["rule"] == "input-literal" and hit.data["found"].startswith('audit = "')
    assert "`audit` already holds your input" in str(hit.content)
    assert "`audit` already holds your input" in str(llm.calls[1][-1]["content"])
    ran = [e.message["content"] for e in session.branch()
           if isinstance(e, MessageEntry) and e.message.get("role") == "tool"]
    assert len(ran) == 1 and "badge R-4623 issued to Ilse Tanaka" in ran[0]
    assert not any('audit = "' in str(e.message.get("content")) for e in session.branch()
                   if isinstance(e, MessageEntry))  # the stopped reply is not logged
