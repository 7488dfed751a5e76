"""After the host refuses an answer whose fix is work, the next reply runs a cell
(rlm.agent.policy `AnswerPolicy.tool_choice`): the call requires the tool
(`tool_choice="required"`), which a hosted model receives as is and the embedded model
reads as the reply grammar's `cell` form (rlm.llm.reply_grammar).

The 1.5B model answered a failing gate, a wrong header or an unsupported claim with the
same FINAL until the stuck watch ended the run (the long-run suite). These tests run the
whole path: `rlm run` through the composition root, a real kernel, and the local provider
with its sampling replaced by a script (the form each call asked for is recorded, and a
script that breaks the form fails), or a real OpenAI-compatible endpoint on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fake_openai import serving, tool_reply
from rlm.agent.codeparse import fenced_blocks, text_final
from rlm.agent.policy import AnswerPolicy
from rlm.config import Config
from tests.rlmcli import rlm
from tests.test_file_shape import FARES, QUESTION, WRITE
from tests.test_stuck import block, entries, user_texts

REPO = Path(__file__).resolve().parents[1]
MEAN = ("trips.groupby('city', as_index=False)['fare'].mean()"
        ".rename(columns={'fare': 'mean_fare'})")
GOAL = "fares.csv gives every city's mean fare, highest first"
GATE = "head -1 fares.csv | grep -q '^city,mean_fare'"


@pytest.fixture
def scripted_local(tmp_path):
    """`local:PATH` for a stub GGUF whose sampling is replaced by `replies`, in order; the
    form each call asked for (None: free text) lands in the returned list. A reply that
    the asked form forbids fails the call, as the grammar would never sample it."""
    from rlm.llm import get_llm, inproc, local

    path = tmp_path / "stub.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 16)

    def build(replies: list[str]) -> tuple[str, list[str | None]]:
        llm = get_llm(f"local:{path}", Config(home=tmp_path))
        model = llm._handler.model
        forms: list[str | None] = []
        queue = list(replies)

        def prepare(messages, max_tokens, stop=None):
            return local.Prepared("p", list(stop or []), 1, 16)

        def generate(prep, *, temperature, seed, prefixes=None, form=None):
            forms.append(form)
            text = queue.pop(0) if form is not None else "a summary"
            if form == "cell":
                assert len(fenced_blocks(text)) == 1, f"the cell form forbids {text!r}"
            elif form == "cell_or_answer":
                assert len(fenced_blocks(text)) == 1 or text_final(text) is not None, text
            yield inproc.chunk(text)
            yield inproc.chunk(finished=True, finish_reason="stop",
                               usage={"prompt_tokens": 1, "completion_tokens": 3,
                                      "total_tokens": 4})

        model.prepare, model.generate = prepare, generate
        return f"local:{path}", forms

    yield build
    local._MODELS.pop(next((k for k, m in local._MODELS.items() if m.path == path), ""), None)


def _fares_run(tmp_path: Path, spec: str) -> tuple[dict, str, str]:
    (tmp_path / "trips.csv").write_text("city,fare\n" + "".join(f"{c},{f}\n" for c, f in FARES))
    out = rlm("run", QUESTION, "--model", spec, "--goal", GOAL, "--autonomous", "--gate", GATE,
              "--max-turns", "8", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    es = entries(res["session_path"])
    states = [e["data"]["goal"] for e in es if e.get("custom_type") == "thread_goal_state"]
    return res, "\n".join(user_texts(es)), states[-1]["status"]


WRONG = block(WRITE.format(make=f"m = {MEAN}\ntable = m.head(1).assign(top=m.mean_fare)"))
RIGHT = block(WRITE.format(make=f"table = {MEAN}.sort_values('mean_fare', ascending=False)"))
CLAIM = "FINAL(fares.csv is correct)"


@pytest.mark.timeout(180)
def test_a_refused_claim_is_followed_by_a_cell_and_a_shown_file_by_a_free_reply(
        tmp_path, scripted_local):
    """The shape refusal asks for work: the next call requires a cell. Once a cell ran the
    form is free again; the judge showing the file ("if every line is right, finish
    again") asks for no work, so the claim after it may be an answer."""
    spec, forms = scripted_local([WRONG, CLAIM, RIGHT, CLAIM, "FINAL(Oslo: 31.5)"])
    res, said, status = _fares_run(tmp_path, spec)
    assert "but its header is city,mean_fare,top" in said
    assert "Before the goal can be complete, check fares.csv against it" in said
    assert status == "complete", (res, said[-2000:])
    turns = [f for f in forms if f is not None]
    assert turns == ["cell_or_answer", "cell_or_answer", "cell", "cell_or_answer",
                     "cell_or_answer"]


@pytest.mark.timeout(180)
def test_a_failing_gate_asks_for_a_cell_but_not_on_the_last_turn(tmp_path, scripted_local):
    """A gate that fails asks for work; the last turn a limit allows asks for FINAL alone
    (rlm.agent.nudge.last_turn_note), so it is not required to be a cell."""
    spec, forms = scripted_local([block("print(len(trips))"), "FINAL(6 trips)",
                                  block("print(6)"), "FINAL(6 trips)", "FINAL(6 trips)"])
    (tmp_path / "trips.csv").write_text("city,fare\n" + "".join(f"{c},{f}\n" for c, f in FARES))
    out = rlm("run", "How many trips are in trips.csv?", "--model", spec, "--autonomous",
              "--gate", "test -s answer.txt", "--max-turns", "5", "--json", cwd=tmp_path)
    said = user_texts(entries(json.loads(out.stdout.strip().splitlines()[-1])["session_path"]))
    assert sum("The quality gate `test -s answer.txt` failed" in s for s in said) == 2
    # turn 5 follows a failing gate too, but it is the last a limit allows
    assert [f for f in forms if f is not None] == [
        "cell_or_answer", "cell_or_answer", "cell", "cell_or_answer", "cell_or_answer"]


@pytest.mark.timeout(180)
def test_without_the_policy_the_refused_claim_is_sampled_as_freely(
        tmp_path, scripted_local, monkeypatch):
    """The guard switched off: every call may answer, so the model's repeated claim
    (what the 1.5B model sent four times) is what the next turn may be."""
    monkeypatch.setattr(AnswerPolicy, "tool_choice", lambda self, turn: None)
    spec, forms = scripted_local([WRONG, CLAIM, CLAIM, CLAIM, CLAIM, CLAIM, CLAIM, CLAIM])
    res, said, status = _fares_run(tmp_path, spec)
    assert status != "complete"
    assert set(f for f in forms if f is not None) == {"cell_or_answer"}


def test_a_hosted_model_receives_tool_choice_required_after_a_failing_gate(tmp_path,
                                                                        _isolated_home):
    """The same decision for a hosted model through its real endpoint: the request after
    the refused answer carries `tool_choice: "required"`; the one after the cell does not."""
    replies = [{"content": "answer.txt is written."},
               tool_reply("open('answer.txt', 'w').write('42')\nprint(open('answer.txt').read())"),
               {"content": "42"}]
    with serving(replies) as server:
        env = {**os.environ, "OPENAI_API_KEY": "sk-test-" + "0" * 32,
               "OPENAI_API_BASE": server.base, "PYTHONPATH": str(REPO)}
        proc = subprocess.run([sys.executable, "-m", "rlm", "run", "write 42 to answer.txt",
                               "--model", "openai/gpt-4o-mini", "--autonomous", "--gate",
                               "test -s answer.txt", "--json"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r.get("tool_choice") for r in server.requests] == [None, "required", None]
    assert (tmp_path / "answer.txt").read_text() == "42"


@pytest.mark.timeout(180)
def test_a_cell_the_host_refuses_to_run_meets_the_requirement(tmp_path, scripted_local):
    """Required to write a cell, the 1.5B model typed its input into a literal, which the
    host stops (the input-literal stream rule) or does not run; required again, it typed
    it again until the time limit (task suite needle, farapart: 240 s). A cell sent is
    what was asked: the retry is free to answer."""
    (tmp_path / "notes.txt").write_text("".join(f"line {i}: nothing\n" for i in range(50))
                                        + "the badge of Ilse is K-4347\n")
    spec, forms = scripted_local(["FINAL(K-1)", block('notes = "line 0: nothing\\nline 1"'),
                                  block("print(notes[notes.find('Ilse'):][:40])"),
                                  "FINAL(K-4347)"])
    out = rlm("run", "In notes.txt, what badge did Ilse get?", "--model", spec, "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    said = "\n".join(user_texts(entries(res["session_path"])))
    assert "You have not looked at the data yet" in said
    assert res["final"] == "K-4347", (res, said[-1500:])
    assert [f for f in forms if f is not None] == [
        "cell_or_answer", "cell", "cell_or_answer", "cell_or_answer"]
