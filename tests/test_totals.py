"""Every total is every token spent on the user's behalf, split by role (issue 58, item 6).

Through the CLI, with scripted models whose replies carry their usage: a run with a
resampled reply, a reply a stream rule stopped, an llm_query, a child (rlm_query) and a
compaction; `--json`, the footer, `rlm sessions --json` and `rlm log` show one total, the sum of
what every call cost, and a `limit:tokens` detail agrees with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm.ledger import ROLES, Ledger, Totals
from rlm.llm.types import Usage
from tests.rlmcli import rlm, script

pytestmark = pytest.mark.timeout(240)

RULE = (Path(__file__).parent / "fixtures" / "rules" / "no_read_csv.md").read_text()


def fenced(code: str, tokens: tuple[int, int], prose: str = "Next.") -> dict:
    """A fenced-code reply that ends with its block (its usage is the provider's)."""
    return {"content": f"{prose}\n\n```python\n{code}\n```",
            "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}


def reply(text: str, tokens: tuple[int, int]) -> dict:
    return {"content": text, "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}


def log(session_path: str) -> list[dict]:
    return [json.loads(line) for line in Path(session_path).read_text().splitlines()]


def customs(entries: list[dict], kind: str) -> list[dict]:
    return [e["data"] for e in entries if e.get("custom_type") == kind]


@pytest.fixture
def project(tmp_path):
    proj = tmp_path / "proj"
    (proj / ".rlm" / "rules").mkdir(parents=True)
    (proj / ".rlm" / "rules" / "no_read_csv.md").write_text(RULE)
    (proj / "six.txt").write_text("6")  # the task's data: a verified answer reads it
    return proj


def scripts(tmp_path: Path) -> tuple[str, str]:
    parent = script(tmp_path / "parent.json", {"fenced": True, "window": 128_000, "replies": [
        fenced("1/0", (100, 10)),  # turn 1: the cell fails
        fenced("1/0", (200, 20)),  # turn 2: repeats it: resampled
        fenced("import pandas as pd\ndf = pd.read_csv('x.csv')", (300, 30)),  # stopped
        fenced("print(llm_query('say seven'))\nprint(rlm_query('add', context=[1, 2]))",
               (400, 40)),
        fenced("print(int(open('six.txt').read()) * 7)\ncompact.run()\nfinal('42')", (500, 50)),
        reply("a summary of the work", (600, 60)),  # compaction's calls (one or two)
        reply("the turn so far", (700, 70)),
    ]})
    # the llm_query and the child each have their own instance: each gets this reply
    child = script(tmp_path / "child.json", [reply("seven", (1000, 100))])
    return parent, child


def expected(session_path: str) -> dict[str, int]:
    """What each role cost, from the scripted usages (and the stopped reply's estimate,
    which its log entry records), for the run the script drove."""
    entries = log(session_path)
    (stopped,) = [d for d in customs(entries, "rule_injection") if d.get("interrupted")]
    (compaction,) = [e for e in entries if e.get("type") == "compaction"]
    summary = compaction["summary"]
    spent = {"turns": 110 + 440 + 550, "resampled": 220,
             "stopped": stopped["usage"]["input_tokens"] + stopped["usage"]["output_tokens"],
             "subcalls": 1100, "children": 1100,
             "compaction": (660 if "a summary of the work" in summary else 0)
             + (770 if "the turn so far" in summary else 0)}
    return spent


def test_every_surface_shows_every_token_by_role(tmp_path, project, _isolated_home):
    parent, child = scripts(tmp_path)
    args = ("run", "add things", "--model", parent, "--sub-model", child,
            "--keep-recent-tokens", "20")
    proc = rlm(*args, "--json", cwd=project)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["final"] == "42", proc.stderr
    want = expected(out["session_path"])
    assert want["compaction"] > 0 and want["stopped"] > 0
    t = out["tokens"]
    assert {r: t["by_role"][r]["total"] for r in ROLES if t["by_role"][r]["total"]} == want
    total = sum(want.values())
    assert t["total"] == total == t["prompt"] + t["completion"]
    # the child's own split: its one turn
    assert t["by_role"]["children"]["by_role"]["turns"]["total"] == 1100
    # the run's end entry records the same totals
    (end,) = customs(log(out["session_path"]), "final")
    assert end["tokens"] == t

    listed = json.loads(rlm("sessions", "--json", cwd=project, check=True).stdout)
    (row,) = [r for r in listed if r["id"] == out["session_id"]]
    assert row["tokens"]["total"] == total and row["tokens"]["by_role"] == t["by_role"]

    logged = rlm("log", out["session_id"], cwd=project, check=True).stdout
    assert f"final: 42\n(✓ verified)\nspent: {total:,} tokens (" in logged, logged

    shown = rlm(*args, cwd=project).stdout  # the same run again, on the terminal
    footer = " ".join(shown[shown.index(" turn(s) · "):].split())  # as wrapped, joined
    assert f"{total:,} tokens (1,100 in turns + 220 on resampled replies + " in footer, footer
    assert "1,100 by llm_query + 1,100 by children + " in footer and "by compaction" in footer


def test_a_token_limit_says_what_the_shown_total_says(tmp_path, _isolated_home):
    model = script(tmp_path / "s.json", {"fenced": True, "window": 128_000, "replies": [
        fenced("1/0", (1000, 0)),
        fenced("1/0", (4000, 0)),  # resampled: the old footer left it out
        fenced("print(2)", (100, 0)),
    ]})
    proc = rlm("run", "t", "--model", model, "--max-tokens", "3000", "--json", cwd=tmp_path)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["reason"] == "limit:tokens"
    assert out["limit"] == ("5100 of 3000 tokens used in this run (2100 over: a model call's "
                            "tokens are known only when it returns)")
    assert out["tokens"]["total"] == 5100
    assert out["tokens"]["by_role"]["resampled"]["total"] == 4000


# ---------------------------------------------------------------------- the ledger
def test_a_childs_ledger_is_added_split_and_totals_round_trip():
    child, parent = Ledger(), Ledger()
    child.charge("turns", Usage(10, 1))
    child.charge("compaction", Usage(5, 0))
    parent.charge("turns", Usage(100, 10))
    parent.add_child(child.totals())
    before = Totals()
    spent = parent.totals().minus(before)
    assert spent.total == 126 and spent.of("children") == 16
    # the child's own compaction is no more budgeted than the parent's: what the tree's
    # budget was charged (rlm.agent.budget) and what --max-tokens counts agree (issue 58)
    assert spent.budgeted == 121
    d = spent.to_dict()
    assert d["by_role"]["children"]["by_role"]["compaction"]["total"] == 5
    assert Totals.from_dict(json.loads(json.dumps(d))) == spent
    assert spent.line() == "126 tokens (110 in turns + 16 by children; 115 prompt + 11 generated)"
    own = Ledger()
    own.charge("compaction", Usage(7, 0))
    assert own.totals().budgeted == 0  # the limits count what they counted before
    with pytest.raises(ValueError):
        own.charge("elsewhere", Usage(1, 1))
    assert Totals.from_dict({"by_role": {"turns": {"prompt": -3, "completion": "x"}}}) == Totals()
    assert Totals.from_dict({"total": 3}) is None


def test_what_is_spent_outside_any_run_is_in_the_sessions_total(tmp_path, project,
                                                                 _isolated_home):
    """`rlm compact SESSION` (and a chat's /compact) spends tokens in no run: the session's
    total in `rlm sessions` left them out. They are logged as their own `spent` entry
    now, by role, never sent to the model."""
    big = "print(' '.join(f'row{i}' for i in range(300)))"
    cells = [big, big, "print(int(open('six.txt').read()) * 7)\nfinal('42')"]
    model = script(tmp_path / "run.json", {"window": 4_000, "replies": [
        {"content": "", "usage": {"input_tokens": 100, "output_tokens": 10},
         "tool_calls": [{"name": "python", "arguments": {"code": code}}]} for code in cells]})
    out = json.loads(rlm("run", "go", "--model", model, "--json", cwd=project,
                         check=True).stdout.strip().splitlines()[-1])
    assert out["tokens"]["total"] == 330 and not customs(log(out["session_path"]), "spent")
    summary = script(tmp_path / "sum.json", [reply("what was done so far", (600, 60))])
    rlm("compact", out["session_id"], "--model", summary, cwd=project, check=True)
    (spent,) = customs(log(out["session_path"]), "spent")
    assert spent["tokens"]["by_role"]["compaction"]["total"] == 660
    listed = json.loads(rlm("sessions", "--json", cwd=project, check=True).stdout)
    (row,) = [r for r in listed if r["id"] == out["session_id"]]
    assert row["tokens"]["total"] == 330 + 660
    assert row["tokens"]["by_role"]["compaction"]["total"] == 660
