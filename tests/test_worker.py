"""Resident worker with fake runners: ticks, goals, lock, restart, SIGKILL at-most-once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlm.events import ModelReply, RunEnded, TurnStarted
from rlm.longrun.clock import FakeClock
from rlm.longrun.goals import GoalManager
from rlm.longrun.lock import SessionLock, WorkerRunning, lock_holder
from rlm.longrun.schedule import INTERRUPTED, Scheduler
from rlm.longrun.worker import (
    Worker,
    list_workers,
    send_prompt,
    send_request,
    start_detached,
    stop_worker,
    tail_events,
)
from rlm.paths import session_dir
from rlm.session.store import SessionStore

REPO = Path(__file__).resolve().parents[1]


class FakeRunner:
    """Records prompts; each run optionally takes `busy_s` on the fake clock."""

    def __init__(self, clock=None, busy_s=0.0, session=None, reason="final"):
        self.clock, self.busy_s, self.session, self.reason = clock, busy_s, session, reason
        self.prompts: list[str] = []

    def __call__(self, prompt):
        self.prompts.append(prompt)
        yield TurnStarted(1)
        if self.clock is not None:
            self.clock.advance(self.busy_s)
        yield ModelReply("ok", [], {"input_tokens": 10, "output_tokens": 5})
        yield RunEnded(reason=self.reason, turns=1)


@pytest.fixture(autouse=True)
def _session_s1(_isolated_home):
    """The worker only serves existing sessions: give the tests a real one named s1."""
    SessionStore.create(session_dir=_isolated_home / "sessions" / "s1").close()


def events(home, sid="s1"):
    return [e["event"] for e in tail_events(sid, home, follow=False)]


def test_ticks_delivered_on_time_and_coalesced_while_busy(_isolated_home):
    clock = FakeClock()
    runner = FakeRunner(clock, busy_s=35 * 60)
    w = Worker("s1", clock=clock, runner=runner, home=_isolated_home)
    w.start()
    w.scheduler.set_user_heartbeat("every 10m", "check in")
    assert w.step() == 600
    clock.advance(600)
    w.step()  # fires at 10m; the run takes 35 minutes
    clock.advance(1)
    w.step()
    assert runner.prompts[0].endswith("check in")
    assert "(3 heartbeat ticks coalesced while you were busy)" in runner.prompts[1]
    assert all(d["delivered"] for d in w.scheduler.dispatches())
    w.close()
    names = events(_isolated_home)
    assert names[0] == "WorkerStarted" and names[-1] == "WorkerStopped"
    assert names.count("TickDelivering") == 2 and "ModelReply" in names


def test_user_prompt_queue_and_goal_continuation(_isolated_home):
    session = SessionStore.in_memory()
    clock = FakeClock()
    runner = FakeRunner(clock, session=session)
    w = Worker("s1", clock=clock, runner=runner, home=_isolated_home)
    w.start()
    send_prompt("s1", "hello", _isolated_home)
    send_request("s1", {"kind": "goal", "action": "set", "objective": "do <it>"}, _isolated_home)
    w.step()
    assert runner.prompts == ["hello"]
    w.step()  # the goal request
    w.step()  # ... and a continuation while the goal is active
    assert "<objective>do &lt;it&gt;</objective>" in runner.prompts[1]
    GoalManager(session).handle("goal.complete", {})
    w.step()
    assert len(runner.prompts) == 2
    w.close()


def test_goal_parked_after_a_failed_run(_isolated_home):
    session = SessionStore.in_memory()
    runner = FakeRunner(session=session, reason="limit:turns")
    w = Worker("s1", clock=FakeClock(), runner=runner, home=_isolated_home)
    w.start()
    GoalManager(session).set("never ends")
    w.step()
    w.step()
    assert len(runner.prompts) == 1  # not retried in a loop
    send_prompt("s1", "still failing", _isolated_home)
    w.step()
    w.step()
    assert runner.prompts[1:] == ["still failing"]  # a failed user run parks it again
    runner.reason = "final"
    send_prompt("s1", "try again", _isolated_home)
    w.step()
    w.step()
    del runner.prompts[1]
    assert runner.prompts[1:] == ["try again", runner.prompts[0].replace(
        "<continuation>1</continuation>", "<continuation>2</continuation>")]  # fmt: skip
    w.close()


def test_steer_ticks_reach_a_busy_run(_isolated_home):
    clock = FakeClock()

    class Steerable(FakeRunner):
        steered: list[str] = []

        def steer(self, text, custom_type="steer", on_delivered=None):
            self.steered.append(text)
            on_delivered()  # the agent wrote it into the session

        def __call__(self, prompt):
            self.prompts.append(prompt)
            for _ in range(3):
                clock.advance(600)
                yield TurnStarted(1)
            yield RunEnded("final", 3)

    runner = Steerable()
    w = Worker("s1", clock=clock, runner=runner, home=_isolated_home)
    w.start()
    w.scheduler.set_user_heartbeat("every 10m", "beat", delivery="steer")
    send_prompt("s1", "long job", _isolated_home)
    w.step()
    assert len(runner.steered) == 3 and runner.prompts == ["long job"]
    w.close()


def test_lock_prevents_a_second_worker(_isolated_home):
    a = Worker("s1", clock=FakeClock(), runner=FakeRunner(), home=_isolated_home)
    a.start()
    b = Worker("s1", clock=FakeClock(), runner=FakeRunner(), home=_isolated_home)
    with pytest.raises(WorkerRunning, match=f"pid {os.getpid()}"):
        b.start()
    a.close()
    b.start()
    b.close()


def test_sigkilled_worker_does_not_leave_the_lock_stuck(_isolated_home):
    lock = session_dir("s1", _isolated_home) / "worker.lock"
    code = f"""
import sys, time
from rlm.longrun.lock import SessionLock
SessionLock({str(lock)!r}).acquire(); print("locked", flush=True); time.sleep(60)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdout.readline().strip() == b"locked"
    assert lock_holder(lock) == proc.pid
    with pytest.raises(WorkerRunning):
        SessionLock(lock).acquire()
    proc.kill()
    proc.wait()
    proc.stdout.close()
    assert lock_holder(lock) is None
    with SessionLock(lock):
        assert lock_holder(lock) == os.getpid()


def test_schedules_resume_from_disk_after_restart(_isolated_home):
    clock = FakeClock()
    first = Worker("s1", clock=clock, runner=FakeRunner(), home=_isolated_home)
    first.start()
    first.scheduler.add("every 1h", "hourly", heartbeat=True)
    first.scheduler.add("in 90m", "once")
    first.close()
    clock.advance(5 * 3600)  # down for five hours
    runner = FakeRunner()
    second = Worker("s1", clock=clock, runner=runner, home=_isolated_home)
    second.start()
    second.step()
    assert sorted(p.split("] ")[1].split("\n")[0] for p in runner.prompts) == ["hourly", "once"]
    assert any("(5 heartbeat ticks coalesced while the worker was down)" in p
               for p in runner.prompts)  # fmt: skip
    second.step()
    assert len(runner.prompts) == 2
    second.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    from rlm.events import TurnStarted
    from rlm.longrun.clock import FakeClock
    from rlm.longrun.worker import Worker

    home, now, out, pause = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])

    current = {}

    def runner(prompt):  # delivery = the tick id appended to the file, fsynced
        with open(out, "a") as f:
            f.write(current["tick"] + "\\n")
            f.flush()
            import os; os.fsync(f.fileno())
        yield TurnStarted(1)

    w = Worker("s1", clock=FakeClock(now), runner=runner, home=__import__("pathlib").Path(home))
    claim = w.scheduler.claim

    def claim_then_pause(tick):
        got = claim(tick)
        print("claimed", flush=True)
        time.sleep(pause)  # the kill window between claim and delivery
        return got

    w.scheduler.claim = claim_then_pause
    deliver = w.deliver

    def deliver_and_note(tick):
        current["tick"] = tick.tick_id
        deliver(tick)

    w.deliver = deliver_and_note
    w.start()
    print("started", flush=True)
    w.step()
    print("done", flush=True)
    w.close()
    """
)


def test_sigkill_between_claim_and_delivery_never_delivers_twice(_isolated_home, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = tmp_path / "delivered.txt"
    out.touch()
    start = 1_750_000_000.0
    jobs = Scheduler(session_dir("s1", _isolated_home) / "scheduled-jobs.json", FakeClock(start))
    hb = jobs.add("every 1m", "beat", heartbeat=True)
    rng = random.Random(1234)
    kills = 0
    for i in range(24):
        now = start + 60 * (i + 1) * 2  # each run finds a (coalesced) tick due
        proc = subprocess.Popen(
            [sys.executable, str(script), str(_isolated_home), str(now), str(out), "0.2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
        )  # fmt: skip
        mode = rng.choice(["before", "claimed", "claimed", "late"])
        if mode == "before":
            proc.stdout.readline()  # "started": killed before or during claim
            time.sleep(rng.uniform(0, 0.02))
        elif mode == "claimed":
            assert proc.stdout.readline() == b"started\n"
            assert proc.stdout.readline() == b"claimed\n"
            time.sleep(rng.uniform(0, 0.1))  # well inside the 0.2 s window
        else:
            proc.stdout.readline()
            proc.stdout.readline()
            proc.stdout.readline()  # "done" (or EOF): delivered, maybe confirmed
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        kills += mode == "claimed"
    lines = out.read_text().splitlines()
    dispatches = jobs.dispatches()
    assert kills >= 5
    assert len(lines) == sum(1 for d in dispatches if d["delivered"]) <= len(dispatches)
    interrupted = [d for d in dispatches if d["error"] == INTERRUPTED]
    assert len(interrupted) >= kills - 1  # the last run's claim is recovered by nobody yet
    tick_ids = [d["tick_id"] for d in dispatches]
    assert len(tick_ids) == len(set(tick_ids))  # never claimed twice
    assert len(lines) == len(set(lines))  # no tick delivered twice
    assert set(lines) == {d["tick_id"] for d in dispatches if d["delivered"]}
    assert jobs.get(hb.id).run_count == len(dispatches)


RUNNER_MODULE = """
import time
from rlm.events import ModelReply, RunEnded, TurnStarted

def factory(session_id, config):
    def run(prompt):
        yield TurnStarted(1)
        time.sleep(0.05)
        yield ModelReply("echo: " + prompt, [], {"input_tokens": 1, "output_tokens": 1})
        yield RunEnded("final", 1, final=prompt)
    return run
"""


def test_detached_worker_attach_and_stop(_isolated_home, tmp_path, monkeypatch):
    (tmp_path / "fake_runner_mod.py").write_text(RUNNER_MODULE)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{REPO}")
    pid = start_detached("s1", _isolated_home, runner="fake_runner_mod:factory", poll_s=0.05)
    try:
        with pytest.raises(WorkerRunning):
            start_detached("s1", _isolated_home, runner="fake_runner_mod:factory")
        (info,) = list_workers(_isolated_home)
        assert info["alive"] and info["pid"] == pid
        send_prompt("s1", "hello there", _isolated_home)
        seen = []
        for ev in tail_events("s1", _isolated_home, follow=True, poll_s=0.05):
            seen.append(ev)
            if ev["event"] == "RunEnded":
                break
        reply = next(e for e in seen if e["event"] == "ModelReply")
        assert reply["content"] == "echo: hello there"
    finally:
        assert stop_worker("s1", _isolated_home, timeout_s=10)
    (info,) = list_workers(_isolated_home)
    assert not info["alive"] and info["state"] == "stopped"
    assert json.loads((session_dir("s1", _isolated_home) / "worker.json").read_text())["pid"] == pid
    assert stop_worker("s1", _isolated_home) is False
