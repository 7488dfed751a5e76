"""Issue 12's loop- and CLI-level defects, each with the observable it fixes. No kernel:
the loop runs against a small in-test executor (the Executor protocol) where it can."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from rlm.agent import Agent
from rlm.app import build_agent
from rlm.cli.main import main
from rlm.compaction.controller import CompactionController
from rlm.config import Config
from rlm.events import Compacted, RunEnded
from rlm.kernel.types import CellResult, RestoreReport
from rlm.llm import ScriptedLLM
from rlm.llm.types import Completion, Usage
from rlm.longrun.clock import FakeClock
from rlm.longrun.goals import GoalManager
from rlm.longrun.schedule import Scheduler
from rlm.longrun.worker import Worker, send_prompt
from rlm.protocols import Executor, SessionLog
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore


class NoKernel:
    """An Executor that runs nothing (the loop tests below never send a cell)."""

    pid = None

    def execute(self, code, timeout=None, on_output=None):
        return CellResult(status="ok", shaped="")

    def interrupt(self): ...

    def restart(self, cause="restart requested"):
        return RestoreReport()

    def is_alive(self):
        return True

    def list_namespace(self, timeout=5.0):
        return {"names": []}

    def describe(self, names=None, timeout=30.0):
        return []

    def set_bridge_handler(self, fn): ...

    def stop(self): ...


def test_executor_and_session_protocols_are_implemented():
    from rlm.kernel import Kernel
    from rlm.notebook.inprocess import InProcessExecutor

    for cls in (Kernel, InProcessExecutor, NoKernel):
        missing = [m for m in ("execute", "interrupt", "restart", "is_alive", "list_namespace",
                               "describe", "set_bridge_handler", "stop", "pid")
                   if not hasattr(cls, m)]
        assert not missing, f"{cls.__name__} lacks {missing}"
    assert isinstance(NoKernel(), Executor)
    assert isinstance(SessionStore.in_memory(), SessionLog)
    import inspect

    for cls in (Kernel, InProcessExecutor):  # the drifted signatures, aligned
        assert list(inspect.signature(cls.execute).parameters) == ["self", "code", "timeout",
                                                                   "on_output"]
        assert inspect.signature(cls.restart).parameters["cause"].default == "restart requested"


def agent_with(home, replies, **cfg) -> tuple[Agent, SessionStore, ScriptedLLM]:
    config = Config(home=home, model="script:inline", **cfg)
    llm = ScriptedLLM(list(replies))
    session = SessionStore.create(home, model="script:inline", task="t")
    return build_agent(session, config, llm=llm, executor=NoKernel()), session, llm


# ------------------------------------------------------------------------------ goals
def test_the_turn_that_exhausts_a_goal_budget_ends_the_continuation(_isolated_home):
    agent, session, llm = agent_with(_isolated_home, [
        {"content": "worked on it", "usage": {"input_tokens": 80, "output_tokens": 40}},
        "a second turn that must not be asked for",
    ])
    GoalManager(session).set("finish the report", token_budget=100)
    with agent:
        events = list(agent.run("go"))
    end = events[-1]
    assert isinstance(end, RunEnded)
    assert (end.reason, end.turns, end.final) == ("no_code", 1, "worked on it")
    assert len(llm.calls) == 1  # no goal continuation after the budget ran out
    goal = GoalManager(session).get()
    assert goal is not None and goal.status == "budget_limited"
    told = [e for e in session.branch()
            if isinstance(e, CustomEntry) and e.custom_type == "goal_budget_reached"]
    assert len(told) == 1 and "token budget of 100 is used up" in (told[0].content or "")
    # the model sees it in its next context
    agent2 = build_agent(session, agent.config, llm=ScriptedLLM(["ok"]), executor=NoKernel())
    list(agent2.run("next"))
    assert any("goal_budget_reached" in str(m.get("content")) for m in agent2.llm.calls[0])


# ------------------------------------------------------------------------ threads
def test_charge_is_thread_safe_under_concurrent_bridge_handlers(_isolated_home):
    agent, _, _ = agent_with(_isolated_home, [])
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        def spend() -> None:
            for _ in range(20_000):
                agent.charge(Usage(input_tokens=1, output_tokens=0))

        threads = [threading.Thread(target=spend) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert agent.tokens_used == 8 * 20_000
    assert agent.budget.spent == 8 * 20_000


# -------------------------------------------------------------------- Ctrl-C twice
class InterruptingLLM:
    """Presses Ctrl-C twice while the model call runs, then answers anyway."""

    spec = "fake"
    native_tools = True

    def __init__(self):
        self.agent: Agent | None = None

    def context_window(self):
        return 100_000

    def complete(self, messages, **kw):
        assert self.agent is not None
        # a compact.run() is pending for the end of this turn (the turn is active now)
        assert self.agent.parts.get(CompactionController).request("compact at the end")["scheduled"] is True
        self.agent.interrupt()
        self.agent.interrupt()
        return Completion(content="late reply", usage=Usage(10, 5))


def test_no_compaction_after_a_double_ctrl_c(_isolated_home):
    llm = InterruptingLLM()
    summaries = ScriptedLLM(["## a summary"])
    session = SessionStore.create(_isolated_home, model="fake", task="t")
    for i in range(6):  # history worth summarising
        session.append(MessageEntry(message={"role": "user", "content": f"question {i} " * 30}))
        session.append(MessageEntry(message={"role": "assistant", "content": f"answer {i} " * 30},
                                    usage={"input_tokens": 100 * (i + 1), "output_tokens": 20}))
    agent = build_agent(session, Config(home=_isolated_home, model="fake", compaction_model="sum",
                                        keep_recent_tokens=10),
                        llm=llm, llm_factory=lambda spec: summaries,  # type: ignore[arg-type]
                        executor=NoKernel())
    llm.agent = agent
    with agent:
        events = list(agent.run("go"))
    assert isinstance(events[-1], RunEnded)
    assert not [e for e in events if isinstance(e, Compacted)]
    assert not [e for e in session.branch() if isinstance(e, CompactionEntry)]
    assert summaries.calls == []  # the summarizer was never asked


# ------------------------------------------------------------------ steered ticks
def test_a_steered_message_is_confirmed_when_it_reaches_the_log(_isolated_home):
    agent, session, _ = agent_with(_isolated_home, ["first", "second"])
    delivered = []
    with agent:
        list(agent.run("one"))
        agent.steer("[heartbeat hb] check in", "heartbeat_prompt",
                    on_delivered=lambda: delivered.append(1))  # after the run ended
        assert delivered == [] and agent.pending_steered()
        list(agent.run("two"))
    assert delivered == [1]
    texts = [e.content for e in session.branch() if isinstance(e, CustomEntry)
             and e.custom_type == "heartbeat_prompt"]
    assert texts == ["[heartbeat hb] check in"]


def test_worker_never_marks_a_steered_tick_delivered_before_the_agent_takes_it(_isolated_home):
    clock = FakeClock()

    class HoldsSteers:
        session = None

        def __init__(self):
            self.queued = []

        def steer(self, text, custom_type="steer", on_delivered=None):
            self.queued.append((text, on_delivered))  # the run ended: nobody drains it

        def close(self): ...

        def __call__(self, prompt):
            clock.advance(700)
            yield RunEnded("final", 1)

    runner = HoldsSteers()
    SessionStore.create(session_dir=_isolated_home / "sessions" / "s1").close()  # workers serve real sessions
    w = Worker("s1", clock=clock, runner=runner, home=_isolated_home)
    w.start()
    w.scheduler.set_user_heartbeat("every 10m", "beat", delivery="steer")
    send_prompt("s1", "long job", _isolated_home)
    w.step()
    assert len(runner.queued) == 1
    dispatch = w.scheduler.dispatches()[0]
    assert dispatch["delivered"] is False  # claimed, queued, not yet in any session
    runner.queued[0][1]()  # the next run writes it into the log
    assert w.scheduler.dispatches()[0]["delivered"] is True
    w.close()


# ----------------------------------------------------------------------- CLI defects
def long_session(home: Path, n: int) -> SessionStore:
    model = home.parent / "long-session-model.json"  # `rlm compact` builds the session's
    model.write_text("[]")  # model for its window: it must exist
    s = SessionStore.create(home, model=f"script:{model}", task="long")
    for i in range(n):
        s.append(MessageEntry(message={"role": "user" if i % 2 else "assistant",
                                       "content": f"m{i}"}))
    s.close()
    return s


def test_tree_of_a_long_session_prints_without_recursion_error(_isolated_home, capsys):
    s = long_session(_isolated_home, 1500)  # deeper than Python's recursion limit
    assert main(["tree", s.id]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1500 and "m1499" in out[-1]


def chat_agent(home):
    from rlm.cli.render import Renderer

    agent, session, _ = agent_with(home, [])
    return agent, session, Renderer()


def test_chat_goal_with_a_quote_and_set_keyword(_isolated_home, capsys):
    from rlm.cli.chat import _slash

    agent, session, render = chat_agent(_isolated_home)
    assert _slash(agent, "/goal don't stop", render) is True
    assert GoalManager(session).get().objective == "don't stop"
    assert _slash(agent, "/goal set tidy the data", render) is True
    assert GoalManager(session).get().objective == "tidy the data"


@pytest.mark.parametrize("line", ["/goal --budget lots fix it", "/goal budget many",
                                  "/goal --budget", "/heartbeat every"])
def test_a_bad_slash_command_is_one_line_and_chat_goes_on(_isolated_home, capsys, line):
    from rlm.cli.chat import _slash

    agent, session, render = chat_agent(_isolated_home)
    if "budget many" in line:
        GoalManager(session).set("x", token_budget=10)
    assert _slash(agent, line, render) is True
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("/"), out


def test_export_compact_heartbeat_stop_attach_take_json(_isolated_home, tmp_path, capsys):
    s = long_session(_isolated_home, 6)
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(["## Goal\nsummarised"]))
    assert main(["export", s.id, "--json", "-o", str(tmp_path / "x.ipynb")]) == 0
    assert json.loads(capsys.readouterr().out)["notebook"].endswith("x.ipynb")
    assert main(["heartbeat", s.id, "every", "10m", "look", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["message"].startswith("heartbeat ")
    assert main(["stop", s.id, "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"session_id": s.id, "stopped": False}
    assert main(["attach", s.id, "--no-follow", "--json"]) == 0
    capsys.readouterr()
    assert main(["compact", s.id, "--model", f"script:{summary}", "--json"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    assert out is None or out["session_id"] == s.id


def test_schedule_takes_session_first_and_the_old_order_with_a_note(_isolated_home, capsys):
    s = long_session(_isolated_home, 2)
    assert main(["schedule", s.id, "add", "in 1h", "--", "new order"]) == 0
    new_id = capsys.readouterr().out.split()[0]  # "ID  next run TIME"
    assert main(["schedule", "add", s.id, "in 2h", "--", "old order"]) == 0
    captured = capsys.readouterr()
    assert "deprecated" in captured.err and "rlm schedule SESSION add" in captured.err
    assert main(["schedule", s.id, "list", "--json"]) == 0
    captured = capsys.readouterr()
    jobs = json.loads(captured.out)
    assert {j["prompt"] for j in jobs} == {"new order", "old order"} and new_id
    # nobody holds the session: the list says a worker is needed and how
    assert f"rlm worker {s.id}" in captured.err
    assert Scheduler(s.dir / "scheduled-jobs.json").get(new_id).prompt == "new order"


# ------------------------------------------------------------------------ events
def test_events_round_trip_through_json():
    from rlm import events as ev

    samples = [ev.TurnStarted(3), ev.ModelText("de"), ev.ModelReply("c", ["x=1"], {"input_tokens": 1}),
               ev.CellStarted("x=1", 0), ev.KernelRestarted("died", ["x"], ["y"]),
               ev.Compacted("threshold", 10, "s"), ev.Notice("n", "warning"),
               ev.FinalAnswer("42", "final"), ev.RunEnded("final", 2, "42", None)]
    for e in samples:
        assert ev.Event.from_dict(json.loads(json.dumps(e.to_dict()))) == e
    cell = ev.CellFinished("x=1", "ok", "out", 0.1, result=CellResult(status="ok"))
    d = cell.to_dict()
    assert "result" not in d and ev.Event.from_dict(d) == ev.CellFinished("x=1", "ok", "out", 0.1)
    assert ev.Event.from_dict({"event": "WorkerStarted", "pid": 1}) is None  # not a loop event


# ------------------------------------------------------------- schedules told
def test_end_of_run_note_says_a_worker_is_needed_unless_one_holds_the_session(_isolated_home):
    from rlm import app
    from rlm.longrun.lock import SessionLock

    s = long_session(_isolated_home, 2)
    assert app.schedules_note(s) is None  # no jobs: nothing to say
    Scheduler(s.dir / "scheduled-jobs.json").add("every 10m", "check in")
    note = app.schedules_note(s)
    assert note is not None and f"rlm worker {s.id}" in note and "--detach" in note
    with SessionLock.for_session(s.dir, "worker"):
        assert app.schedules_note(s) is None  # a worker fires them
    with SessionLock.for_session(s.dir, "run"):
        assert app.schedules_note(s) is not None  # a foreground run ends; its jobs do not


# ---------------------------------------------------------- overflow, per run
def test_the_overflow_guard_is_reset_when_a_run_starts(_isolated_home):
    """A run that once ended in an overflow ("reported") must try to compact on the next
    overflow, not report "even after compaction" straight away without trying."""
    agent, session, llm = agent_with(_isolated_home, [
        {"error": "overflow", "message": "prompt is too long"},
    ])
    agent.parts.get(CompactionController).overflow_state = "reported"  # how the previous run ended
    with agent:
        events = list(agent.run("one more"))
    notices = [e.text for e in events if type(e).__name__ == "Notice"]
    assert len(notices) == 1 and "could not shorten it" in notices[0], notices
    assert "even after compaction" not in notices[0]
