"""Candidate programs chosen by what they compute (rlm.app.candidates, the decisions in
rlm.agent.policy.candidates): a scripted fenced-code model like the local one, a real
kernel whose trials are real forks, the agent built by the composition root with config
`candidates`; the assertions are on what ran in the kernel, what reached the model, what
the log and the ledger hold."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rlm.agent.context_files import load_context_files
from rlm.agent.policy import candidates as policy
from rlm.agent.policy.candidates import Outcome, key_of, vote
from rlm.agent.policy.decisions import Facts
from rlm.app import build_agent
from rlm.config import Config
from rlm.events import Notice, RunEnded
from rlm.session.entries import CustomEntry, MessageEntry
from rlm.session.store import SessionStore
from tests.fenced import Fenced, cell


@pytest.fixture
def sales(tmp_path):
    path = tmp_path / "sales.csv"
    pd.DataFrame({"region": ["north", "south", "east", "west"],
                  "units": [10, 20, 30, 40]}).to_csv(path, index=False)
    return path


def _run(home, path, replies, question="How many units were sold in all?", **settings):
    llm = Fenced(replies)
    session = SessionStore.create(home, model="script:small", task="t")
    config = Config(home=home, model="script:small", cell_timeout=60, **settings)
    agent = build_agent(session, config, llm=llm)
    with agent:
        load_context_files(agent, [path])
        events = list(agent.run(question))
        ran = [json.loads(c["function"]["arguments"])["code"].strip() for e in session.branch()
               if isinstance(e, MessageEntry) for c in e.message.get("tool_calls") or ()]
        votes = [e.data for e in session.branch()
                 if isinstance(e, CustomEntry) and e.custom_type == "candidates"]
        spent = agent.ledger.totals()
        after = agent.executor.execute("print(sorted(k for k in globals() if k.startswith('cand')))")
    end = [e for e in events if isinstance(e, RunEnded)][-1]
    return end, ran, votes, llm, events, spent, after.shaped


def _voted(home, path, replies, **settings):
    return _run(home, path, replies, candidates=3, **settings)


def test_two_candidates_that_agree_outvote_the_turns_own_reply(_isolated_home, sales):
    wrong = "cand_wrong = sales['units'].sum() + 1\nprint(cand_wrong)"
    right_a = "cand_a = sales['units'].sum()\nprint(cand_a)"
    right_b = "cand_b = int(sales.units.values.sum())\nprint('total', cand_b)"
    end, ran, votes, llm, events, spent, after = _voted(_isolated_home, sales, [
        cell(wrong), cell(right_a), cell(right_b),          # the first cell: three candidates
        "FINAL(100)", "FINAL(100)", "FINAL(100)"])          # the answer: three candidates
    assert ran == [right_a]                      # the winner ran for real, alone
    assert votes[0]["point"] == "first" and votes[0]["winner"] == 1
    assert [c["key"] for c in votes[0]["candidates"]] == ["101", "100", "100"]
    assert "100" in llm.calls[3][-1]["content"]  # the model read the winner's output
    assert end.final == "100"
    # nothing a trial bound reached the kernel: only the winner's names, from its real run
    assert "'cand_a'" in str(after) and "cand_wrong" not in str(after) \
        and "cand_b" not in str(after)
    assert spent.of("candidates") > 0
    assert any(isinstance(e, Notice) and "candidate 2 runs" in e.text for e in events)
    # the draws are hot, the turn's own reply is not
    temps = [r["temperature"] for r in llm.requests]
    assert temps[1] == temps[2] == policy.CANDIDATE_TEMPERATURE and temps[0] != temps[1]


def test_the_turns_own_reply_stands_when_one_other_agrees_with_it(_isolated_home, sales):
    own = "print(sales['units'].sum())"
    end, ran, votes, *_ = _voted(_isolated_home, sales, [
        cell(own), cell("print(sales['units'].max())"), cell("print(sales.units.sum())"),
        "FINAL(100)", "FINAL(40)", "FINAL(100)"])
    assert ran == [own] and votes[0]["winner"] == 0 and end.final == "100"
    assert votes[1]["point"] == "final" and votes[1]["winner"] == 0


def test_a_failed_own_reply_gives_way_to_a_candidate_that_ran(_isolated_home, sales):
    broken = "print(sales['unit'].sum())"   # KeyError in the trial: it never runs for real
    fixed = "print(sales['units'].sum())"
    end, ran, votes, *_ = _voted(_isolated_home, sales, [
        cell(broken), cell(fixed),       # one that ran: no other could beat it (k = 3)
        "FINAL(100)", "FINAL(100)"])
    assert ran == [fixed]
    assert [c["ran"] for c in votes[0]["candidates"]] == [False, True]


def test_text_answers_are_voted_by_their_numbers(_isolated_home, sales):
    end, ran, votes, *_ = _voted(_isolated_home, sales, [
        cell("print(sales['units'].sum())"), cell("print(sales['units'].sum())"),
        "FINAL(1,000)", "FINAL(100)", "FINAL(100.0 units)"])
    assert end.final == "100"
    assert votes[-1]["winner"] == 1 and [c["key"] for c in votes[-1]["candidates"]] == \
        ["1000", "100", "100"]


def test_by_default_nothing_is_drawn(_isolated_home, sales):
    """k = 1 (the default, not set here): one model call a turn, no trial, no entry."""
    end, ran, votes, llm, events, spent, _ = _run(_isolated_home, sales, [
        cell("print(sales['units'].sum())"), "FINAL(100)"])
    assert len(llm.calls) == 2 and votes == [] and spent.of("candidates") == 0
    assert end.final == "100"


def test_a_cell_in_the_middle_of_a_run_is_not_voted_on(_isolated_home, sales):
    first, middle = "print(sales.shape)", "print(sales['units'].sum())"
    end, ran, votes, llm, *_ = _voted(_isolated_home, sales, [
        cell(first), cell(first),                   # first: two agree, own stands
        cell(middle),                               # after a cell that ran: no draw
        "FINAL(100)", "FINAL(100)"])
    assert ran == [first, middle] and [v["point"] for v in votes] == ["first", "final"]


# -- the decisions, on their own ------------------------------------------------------------

@pytest.mark.parametrize("text, key", [
    ("The total is 1,000 units", "1000"), ("1000.0", "1000"), ("0.333333333", "0.3333"),
    ("Adelie", "adelie"), ("  Gentoo\n", "gentoo"), ("mean 3.14159 over 12 rows", "3.142 12"),
    ("", ""), ("x1 y_2", "x1 y 2"),
])
def test_results_agree_by_their_numbers_else_their_words(text, key):
    assert key_of(text) == key


def test_the_vote_keeps_the_own_reply_on_a_tie_and_without_output():
    ran = lambda k: Outcome(True, k)  # noqa: E731
    assert vote([ran("1"), ran("2"), ran("3")]).winner == 0
    assert vote([ran("1"), ran("2"), ran("2")]).winner == 1
    assert vote([ran("1"), ran("1"), ran("2"), ran("2")]).winner == 0
    assert vote([ran(""), ran("2"), ran("2")]).winner == 0       # no output: no evidence
    assert vote([Outcome(False), ran(""), ran("2")]).winner == 2  # a result beats none
    assert vote([Outcome(False), ran(""), Outcome(False)]).winner == 1
    assert vote([Outcome(False), Outcome(False)]).winner == 0


def test_the_steps_that_are_voted_on():
    fresh, failed, ok = Facts(), Facts(cells=2, last_cell_ok=False), Facts(cells=2,
                                                                          last_cell_ok=True)
    assert policy.point(fresh, ["x = 1"], False) == "first"
    assert policy.point(failed, ["x = 1"], False) == "repair"
    assert policy.point(ok, ["x = 1"], False) is None
    assert policy.point(ok, ["final(x)"], False) == "final"
    assert policy.point(ok, [], True) == "final"
    assert policy.point(ok, [], False) is None


def test_every_reply_entry_the_model_reads_is_one_that_ran(_isolated_home, sales):
    """The losing candidates never reach the model: its context holds the winner only."""
    wrong, right = "print(sales['units'].sum() + 1)", "print(sales['units'].sum())"
    end, ran, votes, llm, *_ = _voted(_isolated_home, sales, [
        cell(wrong), cell(right), cell(right), "FINAL(100)", "FINAL(100)", "FINAL(100)"])
    seen = "\n".join(str(m.get("content")) for m in llm.calls[-1])
    assert "+ 1" not in seen and right in seen


def test_no_draw_once_no_more_could_change_the_vote():
    """`settled`: drawing stops when the rest could not change the winner."""
    ran = lambda k: Outcome(True, k)  # noqa: E731
    assert policy.settled([ran("")], 5)            # ran without output: it stands
    assert policy.settled([ran("1")], 1)           # one more alone never outvotes it
    assert not policy.settled([ran("1")], 2)       # two that agree would
    assert policy.settled([ran("1"), ran("1")], 1)  # two agree: one more cannot
    assert not policy.settled([ran("1"), ran("2")], 1)  # one more for "2" would win
    assert not policy.settled([Outcome(False)], 1)  # a failed own reply: keep looking
    assert policy.settled([Outcome(False), ran("3")], 1)  # one ran: another cannot beat it
    assert policy.settled([ran("1")], 0)


def test_the_turns_own_reply_that_agrees_with_the_first_draw_ends_the_drawing(
        _isolated_home, sales):
    """k = 3, the first draw agrees with the turn's own reply: the third is never drawn
    (the script's next reply is the next turn's)."""
    own = "print(sales['units'].sum())"
    end, ran, votes, llm, *_ = _voted(_isolated_home, sales, [
        cell(own), cell("print(sales.units.sum())"),
        "FINAL(100)", "FINAL(100)"])
    assert ran == [own] and end.final == "100" and len(llm.calls) == 4
    assert [len(v["candidates"]) for v in votes] == [2, 2]


def test_a_cell_without_output_is_run_without_drawing(_isolated_home, sales):
    own = "total = sales['units'].sum()"
    end, ran, votes, llm, *_ = _voted(_isolated_home, sales, [
        cell(own), cell("print(total)"), "FINAL(100)", "FINAL(100)"])
    assert ran == [own, "print(total)"] and [v["point"] for v in votes] == ["final"]


def test_a_draw_that_fails_leaves_the_turns_own_reply_to_run(_isolated_home, sales):
    """The model fails while candidates are drawn (here: the script has no more replies):
    the turn's own reply runs, and the user is told the vote was skipped."""
    own = "print(sales['units'].sum())"
    end, ran, votes, llm, events, *_ = _voted(_isolated_home, sales, [cell(own)])
    assert ran == [own] and votes == []
    assert any(isinstance(e, Notice) and "candidate programs skipped at the first step" in e.text
               for e in events)


def test_only_a_kernel_of_its_own_is_forked_for_trials():
    """`%%rlm` runs in the user's own kernel: it is not forked (cells are not voted on, the
    run says so at its start); it still finds values for the notes. A session kernel does
    both."""
    from rlm.kernel import Kernel
    from rlm.notebook.inprocess import InProcessExecutor
    from rlm.protocols import Trials, ValueLookup

    mine = object.__new__(InProcessExecutor)
    assert not isinstance(mine, Trials) and isinstance(mine, ValueLookup)
    kernel = object.__new__(Kernel)
    assert isinstance(kernel, Trials) and isinstance(kernel, ValueLookup)
