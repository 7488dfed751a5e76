"""One outcome per run (rlm.outcome), decided from evidence and shown alike everywhere.

Through the CLI with scripted models and no other flags than the feature's own: a gate on
a plain run is run and keeps a refused answer from reading as answered; a goal completes
only on a claim the host checks (a bare `goal.complete()` and a claim with its named file
missing are refused, whatever the goal's state); a run whose goal ends blocked is not
answered: not `✓ verified`, not `answered` in `rlm sessions`, not exit 0, in `--json`,
`rlm log` and the export alike.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlmcli import call, rlm, script

from rlm.outcome import EXIT_NO_ANSWER, Unmet, decide


def _run(tmp_path: Path, replies: list, *args: str) -> tuple[int, str, dict]:
    """`rlm run` twice over the same script: the terminal's words, then --json's object."""
    s = script(tmp_path / "s.json", replies)
    (tmp_path / "six.txt").write_text("6")  # the task's data: what a verified answer reads
    shown = rlm("run", "the task", "--model", s, *args, cwd=tmp_path)
    out = rlm("run", "the task", "--model", s, *args, "--json", cwd=tmp_path)
    assert shown.returncode == out.returncode, (shown.stderr, out.stderr)
    return shown.returncode, shown.stdout, json.loads(out.stdout.strip().splitlines()[-1])


def _entries(session_path: str) -> list[dict]:
    return [json.loads(line) for line in Path(session_path).read_text().splitlines()[1:]]


def _cell_outputs(session_path: str) -> str:
    """What the model read after its replies: its cells' results and the host's notes."""
    return "\n".join(str(e["message"].get("content")) for e in _entries(session_path)
                     if e.get("type") == "message" and e["message"].get("role") != "assistant")


ANSWER = call("total = int(open('six.txt').read()) * 7\nprint(total)\nfinal(str(total))")


def test_a_gate_on_a_plain_run_is_run_and_an_answer_it_refuses_is_not_answered(tmp_path,
                                                                                 _isolated_home):
    gate = "echo gate-ran >> gate.log; test -f out.txt || (echo 'out.txt is missing'; exit 1)"
    code, shown, out = _run(tmp_path, [ANSWER] * 4, "--gate", gate)
    assert (tmp_path / "gate.log").read_text().count("gate-ran") >= 2  # it ran, in the cwd
    assert code == EXIT_NO_ANSWER == out["exit_code"] and out["status"] == "limit"
    assert out["verified"] is None and "gate" in out["not_answered"]
    assert "✓ verified" not in shown and "not answered" in shown
    assert "out.txt is missing" in _cell_outputs(out["session_path"])  # the model was told
    rows = {r["id"]: r for r in json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)}
    assert rows[out["session_id"]]["status"] == "limit"


def test_a_gate_that_passes_lets_the_answer_through(tmp_path, _isolated_home):
    write = call("open('out.txt', 'w').write('42')\ntotal = int(open('six.txt').read()) * 7\n"
                 "print(total)\nfinal(str(total))")
    code, shown, out = _run(tmp_path, [write], "--gate", "test -f out.txt")
    assert code == 0 and out["status"] == "answered" and out["verified"] is True
    assert "✓ verified" in shown


def test_goal_complete_needs_a_claim_the_host_checks_in_every_state(tmp_path, _isolated_home):
    """A bare complete() is refused; a claim whose named file is missing is refused; a
    blocked goal is judged the same; the run that leaves it blocked is not answered."""
    replies = [
        call("print(goal.complete())"),  # bare: refused
        call("print(6 * 7)\nprint(goal.complete('report.md holds the total, 42'))"),
        call("goal.block('the data is not there')"),
        call("print(goal.complete())"),  # blocked, bare: refused all the same
        call("print(goal.complete('the total is 42'))"),  # blocked: report.md still missing
        ANSWER,
    ]
    code, shown, out = _run(tmp_path, replies, "--goal", "write report.md with the total")
    said = _cell_outputs(out["session_path"])
    assert said.count("needs a summary") == 2
    assert said.count("report.md, which does not exist") == 2
    goals = [e["data"]["goal"]["status"] for e in _entries(out["session_path"])
             if e.get("custom_type") == "thread_goal_state" and e["data"].get("goal")]
    assert "complete" not in goals and goals[-1] == "blocked"
    assert code == EXIT_NO_ANSWER and out["status"] == "unmet" and out["verified"] is None
    assert "the goal is blocked: the data is not there" in out["not_answered"]
    assert "✓ verified" not in shown
    assert "not answered: the goal is blocked: the data is not there" in shown


def test_a_goal_left_blocked_reads_the_same_in_every_surface(tmp_path, _isolated_home):
    """`--goal --gate` without --autonomous: the goal is blocked, the gate passes, the
    answer is verified by its output; the run is still not answered."""
    replies = [call("goal.block('the source is gone')"), ANSWER]
    code, shown, out = _run(tmp_path, replies, "--goal", "compute the total", "--gate", "true")
    assert code == EXIT_NO_ANSWER and out["status"] == "unmet" and out["verified"] is None
    assert "✓ verified" not in shown
    sid = out["session_id"]
    row = {r["id"]: r for r in json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)}[sid]
    assert row["status"] == "unmet" and row["verified"] is None
    assert "the goal is blocked: the source is gone" in row["reason"]
    log = rlm("log", sid, cwd=tmp_path).stdout
    assert "not answered: the goal is blocked: the source is gone" in log
    assert "✓ verified" not in log
    nb = tmp_path / "run.ipynb"
    rlm("export", sid, "-o", str(nb), cwd=tmp_path, check=True)
    text = nb.read_text()
    assert "not answered: the goal is blocked" in text and "✓ verified" not in text


def test_no_answer_outweighs_a_limit_or_an_unmet_promise():
    """The decision itself, for the reasons no CLI test above reaches."""
    for reason in ("limit:stalled", "limit:turns", "stuck", "interrupted", "error"):
        o = decide(reason, "d", True, None, [])
        assert not o.answered and o.exit_code == EXIT_NO_ANSWER and o.verified is None
    o = decide("final", None, True, None, [Unmet("goal", "the goal is paused")])
    assert o.status == "unmet" and o.exit_code == EXIT_NO_ANSWER
    assert decide("final", None, None, None, []).status == "unverified"  # never judged
    assert decide("no_code", None, True, None, []).headline == "✓ verified"
