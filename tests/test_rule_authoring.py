"""A rule from a complaint: the model's rule is validated against the session's outputs
(retried with the failure fed back, narrowed when too broad), only a valid one is saved,
and `rlm rule add` saves one that fires in a new session (the CLI, in subprocesses)."""

from __future__ import annotations

import json

import pytest

from rlm.agent.steer.author import RuleAuthoringError, author_rule
from rlm.llm import ScriptedLLM
from rlm.session.entries import MessageEntry
from rlm.session.store import SessionStore
from tests.test_cli import call, rlm, script


def rule_reply(condition: str, name: str = "no_read_csv") -> str:
    return (f"```markdown\n---\nname: {name}\ncondition: '{condition}'\nscope: code\n---\n"
            "The data is Parquet: use pd.read_parquet, never read_csv.\n```")


def branch() -> list:
    def cell(code: str) -> MessageEntry:
        return MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function",
             "function": {"name": "python", "arguments": json.dumps({"code": code})}}]})
    return [MessageEntry(message={"role": "user", "content": "total revenue?"}),
            cell("import pandas as pd\nprint(1)"), cell("df = pd.read_csv('sales.csv')"),
            cell("print(df.shape)"), cell("print(df.revenue.sum())")]


def test_a_rule_that_misses_the_bad_example_is_retried_and_a_broad_one_narrowed(tmp_path):
    llm = ScriptedLLM([rule_reply(r"read_json\("), rule_reply(r"print|pd\."),
                       rule_reply(r"read_csv\(")])
    got = author_rule(llm, branch(), "it used read_csv; the data is Parquet", tmp_path)
    assert got.attempts == 3 and got.rule.name == "no_read_csv"
    assert "matches none of the session's outputs" in llm.calls[1][-1]["content"]
    assert "narrow the condition" in llm.calls[2][-1]["content"]
    assert got.path == tmp_path / ".rlm" / "rules" / "no_read_csv.md"
    assert "condition: 'read_csv\\('" in got.path.read_text()


def test_no_valid_rule_saves_nothing(tmp_path):
    llm = ScriptedLLM([rule_reply(r"read_json\(")] * 2 + ["no front matter at all"])
    with pytest.raises(RuleAuthoringError, match="no valid rule after 3 attempts"):
        author_rule(llm, branch(), "it used read_csv", tmp_path)
    assert not (tmp_path / ".rlm").exists()


def test_rlm_rule_add_saves_a_rule_that_fires_in_a_new_session(tmp_path, _isolated_home):
    bad = call("import pandas as pd\ndf = pd.read_csv('x.csv')")
    session = SessionStore.create(_isolated_home, model="script:x", task="load the data")
    for entry in branch():
        session.append(entry)
    out = rlm("rule", "add", "last", "it used read_csv; the data is Parquet", "--json",
              "--model", script(tmp_path / "rules.json", [rule_reply(r"read_csv\(")]),
              cwd=tmp_path)
    saved = json.loads(out.stdout)
    assert saved["rule"] == "no_read_csv" and saved["matched"] == 1
    assert (tmp_path / ".rlm" / "rules" / "no_read_csv.md").is_file()
    done = rlm("run", "load the data", "--json", "--model", script(tmp_path / "two.json", [
        bad, call("final('used parquet')")]), cwd=tmp_path, check=False)
    assert done.returncode in (0, 5), done.stderr[-2000:]  # 5: the answer is unverified
    result = json.loads(done.stdout)
    assert result["final"] == "used parquet"
    kinds = [e.custom_type for e in SessionStore.open(result["session_id"]).branch()
             if e.type == "custom"]
    assert kinds.count("rule_injection") == 1


def test_slash_rule_in_chat_saves_a_rule_that_watches_the_rest_of_the_session(
        tmp_path, _isolated_home):
    """`/rule <complaint>` in `rlm chat`: the session's own model writes the rule from the
    session's outputs; it is saved, and the next prompt's reply that breaks it is stopped
    and retried with the reminder (the rules are reloaded for this session)."""
    bad = call("import pandas as pd\ndf = pd.read_csv('x.csv')")
    model = script(tmp_path / "chat.json", [
        bad, "I could not read x.csv.",  # the first prompt's run
        rule_reply(r"read_csv\("),  # /rule: the rule file
        bad, call("final('used parquet')"),  # the next prompt: stopped, then retried
    ])
    out = rlm("chat", "--model", model, cwd=tmp_path, check=True,
              stdin="load x.csv\n/rule it used read_csv; the data is Parquet\nload it again\n"
                    "/exit\n")
    assert "saved rule 'no_read_csv'" in out.stdout, out.stdout + out.stderr
    assert (tmp_path / ".rlm" / "rules" / "no_read_csv.md").is_file()
    [path] = sorted(_isolated_home.glob("sessions/*/session.jsonl"))
    entries = SessionStore.open(path.parent.name).branch()
    stops = [e for e in entries if e.type == "custom" and e.custom_type == "rule_injection"]
    assert len(stops) == 1 and stops[0].data["found"] == "read_csv("
    finals = [e.data["answer"] for e in entries if e.type == "custom" and e.custom_type == "final"]
    assert finals[-1] == "used parquet"


def test_the_rule_must_match_the_output_named_as_the_bad_example(tmp_path):
    """The model names the offending output (`example: N`); a rule that matches other
    outputs but not that one is sent back; the saved file does not keep the number."""
    def named(condition: str) -> str:
        return (f"```markdown\n---\nname: no_read_csv\nexample: 2\ncondition: '{condition}'\n"
                "scope: code\n---\nThe data is Parquet: use pd.read_parquet.\n```")

    llm = ScriptedLLM([named("import pandas"), named(r"read_csv\(")])
    done = author_rule(llm, branch(), "it used read_csv", tmp_path)
    assert done.attempts == 2 and [o.text for o in done.matched] == [
        "df = pd.read_csv('sales.csv')"]
    assert "does not match output [2], the bad example you named" in llm.calls[1][-1]["content"]
    assert "example:" in llm.calls[0][0]["content"]
    saved = done.path.read_text()
    assert "example" not in saved and "condition: 'read_csv\\('" in saved
