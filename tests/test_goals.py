"""Goals: persisted on the branch, accounted, budget-limited, and the model cannot raise it."""

from __future__ import annotations

import pytest

from rlm.longrun.clock import FakeClock
from rlm.longrun.goals import (
    GOAL_ENTRY,
    GoalError,
    GoalManager,
    current_goal,
)
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore


@pytest.fixture
def session():
    return SessionStore.in_memory()


@pytest.fixture
def goals(session):
    return GoalManager(session, FakeClock())


def test_set_persists_a_hidden_custom_entry(session, goals):
    goal = goals.set("  ship the <report> & chart  ", token_budget=1000)
    assert goal.objective == "ship the <report> & chart" and goal.status == "active"
    (entry,) = [e for e in session.branch() if isinstance(e, CustomEntry)]
    assert entry.custom_type == GOAL_ENTRY and entry.display is False and entry.content is None
    assert entry.data["goal"]["goal_id"] == goal.goal_id


@pytest.mark.parametrize("bad", ["", "   ", "x" * 4001, None])
def test_objective_checked(goals, bad):
    with pytest.raises(GoalError):
        goals.set(bad)


@pytest.mark.parametrize("budget", [0, -5, 1.5, True, "100"])
def test_budget_checked(goals, budget):
    with pytest.raises(GoalError, match="positive integer"):
        goals.set("x", token_budget=budget)


def test_continuation_message_is_escaped_and_counted(goals):
    goals.set("ship the <report> & chart", token_budget=1000)
    msg = goals.continuation_message()
    assert "<objective>ship the &lt;report&gt; &amp; chart</objective>" in msg
    assert "<budget>1000 of 1000 tokens remaining (0 used)</budget>" in msg
    assert "call goal.complete(summary) with one line" in msg and "goal.block(reason)" in msg
    goals.continuation_message()
    assert goals.get().continuations == 2
    goals.pause()
    assert goals.continuation_message() is None


def test_accounting_and_budget_limit_then_user_raises(goals):
    goals.set("analyse", token_budget=1000)
    goals.account({"input_tokens": 300, "output_tokens": 100, "cache_read_tokens": 999}, 2.5)
    g = goals.get()
    assert (g.tokens_used, g.time_used_s, g.status) == (400, 2.5, "active")
    g = goals.account({"input_tokens": 500, "output_tokens": 200}, 1.0)
    assert g.status == "budget_limited" and g.tokens_used == 1100
    assert "token budget of 1000 reached" in g.last_reason
    assert goals.continuation_message() is None
    goals.account({"input_tokens": 999, "output_tokens": 0})  # not active: not charged
    assert goals.get().tokens_used == 1100
    assert goals.resume().status == "budget_limited"  # resume cannot beat the budget
    with pytest.raises(GoalError, match="must exceed"):
        goals.raise_budget(1100)
    assert goals.raise_budget(5000).status == "active"
    assert "3900 of 5000 tokens remaining" in goals.continuation_message()


def test_model_cannot_raise_budget_or_pause(goals):
    goals.set("analyse", token_budget=100)
    with pytest.raises(GoalError, match="only the user can change the budget"):
        goals.handle("goal.complete", {"token_budget": 10**9})
    with pytest.raises(GoalError, match="does not accept token_budget"):
        goals.handle("goal.get", {"token_budget": 10**9})
    for method in ("goal.set_budget", "goal.raise_budget", "goal.pause", "goal.create"):
        with pytest.raises(GoalError, match="not available from the kernel"):
            goals.handle(method, {})
    assert goals.get().token_budget == 100
    reply = goals.handle("goal.get", {})
    assert reply["goal"]["objective"] == "analyse" and reply["remaining_tokens"] == 100


def test_model_blocks_and_completes(goals):
    with pytest.raises(GoalError, match="no goal"):
        goals.handle("goal.complete", {})
    goals.set("analyse")
    with pytest.raises(GoalError, match="non-empty reason"):
        goals.handle("goal.block", {})
    assert goals.handle("goal.block", {"reason": "no data"})["goal"]["status"] == "blocked"
    assert goals.continuation_message() is None
    assert goals.resume().status == "active"
    done = goals.handle("goal.complete", {"summary": "all done"})["goal"]
    assert done["status"] == "complete" and done["last_reason"] == "all done"
    with pytest.raises(GoalError, match="the goal is complete"):
        goals.handle("goal.complete", {})


def test_goal_survives_three_compactions_and_later_entries(session, goals):
    goals.set("long analysis", token_budget=10_000)
    for i in range(3):
        for _ in range(5):
            session.append(MessageEntry(message={"role": "user", "content": f"turn {i}"}))
            session.append(
                MessageEntry(
                    message={"role": "assistant", "content": "ok"},
                    usage={"input_tokens": 100, "output_tokens": 10},
                )
            )
            goals.account({"input_tokens": 100, "output_tokens": 10})
            assert goals.continuation_message() is not None
        keep = session.branch()[-2].id
        session.append(CompactionEntry(summary=f"summary {i}", first_kept_entry_id=keep))
        session.append(CustomEntry(custom_type="ipython_state", data={}, display=False))
    g = current_goal(session.branch())
    assert g.status == "active" and g.tokens_used == 1650 and g.continuations == 15
    assert goals.handle("goal.complete", {})["goal"]["status"] == "complete"
    assert goals.continuation_message() is None


def test_branching_needs_no_special_case(session, goals):
    goals.set("first")
    fork = session.branch()[-1].id
    goals.set("second")
    session.set_leaf(fork)
    assert goals.get().objective == "first"
    goals.clear()
    assert goals.get() is None


def test_attach_goals_to_an_agent(session, goals):
    from types import SimpleNamespace

    from rlm.chain import Chain
    from rlm.longrun.goals import attach_goals

    agent = SimpleNamespace(handlers={}, chain=Chain(would_end=[lambda a, r: "other"]))
    attach_goals(agent, goals)
    goals.set("analyse", token_budget=500)
    session.append(MessageEntry(message={"role": "user", "content": "go"}))
    session.append(
        MessageEntry(
            message={"role": "assistant", "content": "x"},
            usage={"input_tokens": 200, "output_tokens": 50},
        )
    )
    for hook in agent.chain.account:  # accounting runs before continuations
        hook(agent)
        hook(agent)  # the same message is charged once
    assert goals.get().tokens_used == 250
    assert "<goal_context>" in agent.chain.would_end[0](agent, "final").prompt
    agent.handlers["goal.complete"]({})
    assert agent.chain.would_end[0](agent, "final") is None
    assert agent.handlers["goal.get"]({})["goal"]["status"] == "complete"
