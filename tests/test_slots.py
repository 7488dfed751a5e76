"""The session tree's slots (rlm.agent.slots.TreeSlots): FIFO grants, waiters that leave
the queue without shrinking the pool (oh-my-pi #3464), resizing at run time."""

from __future__ import annotations

import threading
import time

from rlm.agent.slots import Ticket, TreeSlots


def until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        threading.Event().wait(0.005)


def waiter(slots: TreeSlots, ticket: Ticket, got: list) -> threading.Thread:
    t = threading.Thread(target=lambda: got.append(slots.acquire(ticket)))
    t.start()
    return t


def test_a_cancelled_waiter_does_not_shrink_the_pool():
    slots = TreeSlots(2)
    a, b = Ticket(), Ticket()
    assert slots.acquire(a) and slots.acquire(b)
    c, got_c = Ticket(), []
    tc = waiter(slots, c, got_c)
    until(lambda: slots.waiting == 1)
    slots.withdraw(c)  # the waiter gives up (its child was cancelled)
    tc.join(5)
    assert got_c == [False] and slots.waiting == 0
    slots.withdraw(a)
    slots.withdraw(b)
    # the whole pool is there again: two grants at once, no wait
    assert slots.acquire(Ticket(), timeout=0) and slots.acquire(Ticket(), timeout=0)
    assert not slots.acquire(Ticket(), timeout=0)
    assert slots.in_use == 2 and slots.waiting == 0


def test_a_slot_granted_as_the_waiter_gives_up_goes_back():
    slots = TreeSlots(1)
    holder, late = Ticket(), Ticket()
    assert slots.acquire(holder)
    got: list = []
    t = waiter(slots, late, got)
    until(lambda: slots.waiting == 1)
    slots.withdraw(holder)  # the slot passes to `late` ...
    slots.withdraw(late)  # ... which gave up in the same instant: it goes back
    t.join(5)
    assert slots.in_use == 0
    assert slots.acquire(Ticket(), timeout=0)


def test_grants_are_first_come_first_served_and_withdraw_is_idempotent():
    slots = TreeSlots(1)
    first = Ticket()
    assert slots.acquire(first)
    order: list = []
    tickets = [Ticket() for _ in range(3)]
    threads = []
    for i, tk in enumerate(tickets):
        threads.append(threading.Thread(target=lambda i=i, tk=tk: (slots.acquire(tk),
                                                                   order.append(i))))
        threads[-1].start()
        until(lambda n=i + 1: slots.waiting == n)
    slots.withdraw(first)
    slots.withdraw(first)  # twice: no extra slot appears
    for i, tk in enumerate(tickets):
        until(lambda i=i: len(order) == i + 1)
        assert slots.in_use == 1
        slots.withdraw(tk)
    assert order == [0, 1, 2] and slots.peak == 1


def test_resize_grants_more_room_at_once_and_never_exceeds_a_smaller_limit():
    slots = TreeSlots(1)
    held = [Ticket()]
    assert slots.acquire(held[0])
    waiting = [Ticket() for _ in range(3)]
    got: list = []
    threads = [waiter(slots, tk, got) for tk in waiting]
    until(lambda: slots.waiting == 3)
    slots.allow(3)  # the user's: two more at once
    until(lambda: len(got) == 2)
    assert slots.in_use == 3 and slots.waiting == 1
    slots.resize(1)  # held slots are not taken back; nothing new until below 1
    slots.withdraw(held[0])
    assert slots.waiting == 1 and slots.in_use == 2
    for tk in [tk for tk in waiting if tk.granted]:
        slots.withdraw(tk)
    until(lambda: len(got) == 3)
    assert slots.in_use == 1
    slots.allow(0)  # unlimited
    assert all(slots.acquire(Ticket(), timeout=0) for _ in range(10))
    for t in threads:
        t.join(5)


def test_the_users_ceiling_bounds_every_resize_and_zero_is_unlimited():
    import pytest

    from rlm.errors import RlmError

    slots = TreeSlots(8)  # --max-children 8
    slots.allow(2)  # /max-children 2: the ceiling and the limit
    assert (slots.ceiling, slots.limit) == (2, 2)
    with pytest.raises(RlmError, match="at most 2 children at once"):
        slots.resize(5)
    with pytest.raises(RlmError, match="at most 2 children at once"):
        slots.resize(0)  # unlimited is past any ceiling
    assert slots.limit == 2
    slots.resize(1)  # lowered, then restored up to the ceiling
    slots.resize(2)
    assert (slots.ceiling, slots.limit) == (2, 2)
    slots.allow(0)  # /max-children 0: unlimited, as --max-children 0
    slots.resize(50)
    slots.resize(0)
    assert (slots.ceiling, slots.limit) == (0, 0)


def test_llm_query_batched_takes_its_slots_from_the_session_tree(tmp_path):
    """A batch's prompts wait while the tree's slots are all held (by children), and run
    as slots come back: `--max-children` bounds both."""
    from rlm.app import build_agent
    from rlm.config import Config
    from rlm.llm import ScriptedLLM
    from rlm.session.store import SessionStore

    cfg = Config(home=tmp_path, model="script:main", max_children=2)
    session = SessionStore.create(tmp_path, model="script:main", task="t")
    sub = ScriptedLLM(["r"] * 4)
    agent = build_agent(session, cfg, llm=ScriptedLLM([]), llm_factory=lambda spec: sub)
    held = [Ticket(), Ticket()]
    assert all(agent.slots.acquire(t, timeout=0) for t in held)  # two children run
    got: list = []
    t = threading.Thread(target=lambda: got.append(
        agent.recursion.llm_query_batched({"prompts": ["a", "b", "c", "d"]})))
    t.start()
    until(lambda: agent.slots.waiting >= 1)
    assert got == [] and sub.calls == []  # nothing was sent while the slots were held
    agent.slots.withdraw(held[0])  # one child ends: the batch runs on one slot
    t.join(30)
    assert got == [["r", "r", "r", "r"]]
    assert agent.slots.peak == 2 and agent.slots.in_use == 1


def _batch_agent(tmp_path, replies=(), **cfg):
    from rlm.app import build_agent
    from rlm.config import Config
    from rlm.llm import ScriptedLLM
    from rlm.session.store import SessionStore

    config = Config(home=tmp_path, model="script:main", max_children=2, **cfg)
    session = SessionStore.create(tmp_path, model="script:main", task="t")
    sub = ScriptedLLM(["r"] * 4)
    agent = build_agent(session, config, llm=ScriptedLLM(list(replies)),
                        llm_factory=lambda spec: sub)
    return agent, sub


def _pool_is_whole(slots: TreeSlots, held: list[Ticket]) -> None:
    assert slots.waiting == 0 and slots.in_use == len(held)
    for t in held:
        slots.withdraw(t)
    assert slots.acquire(Ticket(), timeout=0) and slots.acquire(Ticket(), timeout=0)


def test_an_interrupted_parents_batched_prompts_leave_the_queue(tmp_path):
    """Ctrl-C while a batch waits for slots: its waiting prompts leave the queue (the
    #3464 scenario for batches), none is sent, and the pool keeps its size."""
    agent, sub = _batch_agent(tmp_path)
    held = [Ticket(), Ticket()]
    assert all(agent.slots.acquire(t, timeout=0) for t in held)
    got: list = []

    def batch() -> None:
        try:
            got.append(agent.recursion.llm_query_batched({"prompts": ["a", "b", "c"]}))
        except Exception as e:  # noqa: BLE001 - the test reads it
            got.append(e)

    t = threading.Thread(target=batch)
    t.start()
    until(lambda: agent.slots.waiting >= 1)
    agent.interrupt()
    t.join(30)
    assert len(got) == 1 and "not sent, the cell was interrupted" in str(got[0])
    assert sub.calls == []
    _pool_is_whole(agent.slots, held)


def test_a_cell_that_times_out_in_a_batch_gives_its_waiting_slots_back(tmp_path):
    """The real path: a cell's llm_query_batched waits for slots the tree's children hold,
    the cell times out (the kernel is interrupted), and the waiting prompts leave."""
    from tests.rlmcli import call

    agent, sub = _batch_agent(tmp_path, [
        call("out = llm_query_batched(['a', 'b', 'c'])"), call("final('gave up')")],
        cell_timeout=3)
    held = [Ticket(), Ticket()]
    assert all(agent.slots.acquire(t, timeout=0) for t in held)
    with agent:
        events = list(agent.run("summarise"))
    assert events[-1].final == "gave up"
    assert sub.calls == []
    _pool_is_whole(agent.slots, held)
