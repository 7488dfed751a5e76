"""The worker sees what it should (issue 15.10): the lock is not lost to a probe, a job
added while it idles wakes it, `rlm stop` interrupts a running cell, an idle worker exits."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import pytest
from test_cli import call, rlm, script

from rlm.config import Config
from rlm.longrun import lock as lockmod
from rlm.longrun.clock import FakeClock
from rlm.longrun.lock import SessionBusy, SessionLock, lock_holder
from rlm.longrun.schedule import Scheduler
from rlm.longrun.worker import Worker, list_workers, start_detached, stop_worker
from rlm.session.store import SessionStore


def test_acquire_is_not_refused_by_a_holder_probe(tmp_path, monkeypatch):
    """`holder()` (rlm ps, attach, start_detached's wait) probes with a shared flock; a
    writer starting during that probe must still get the lock, not 'in use by another
    process' (the start-up flake of test_detached_worker_attach_and_stop)."""
    path = tmp_path / "worker.lock"
    probe = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a probe in progress
    ended = []

    def probe_ends(_seconds):
        fcntl.flock(probe, fcntl.LOCK_UN)
        ended.append(True)

    monkeypatch.setattr(lockmod.time, "sleep", probe_ends)
    lock = SessionLock(path, "worker")
    lock.acquire()
    try:
        assert ended and lockmod.lock_holder(path) == os.getpid()
    finally:
        lock.release()
        os.close(probe)


def test_a_named_holder_is_still_refused_at_once(tmp_path, monkeypatch):
    path = tmp_path / "worker.lock"
    monkeypatch.setattr(lockmod.time, "sleep", lambda s: pytest.fail("retried a real holder"))
    with SessionLock(path, "run"), pytest.raises(SessionBusy, match=f"pid {os.getpid()}"):
        SessionLock(path, "worker").acquire()


# -- real worker processes ------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
RUNNER_MODULE = """
from rlm.events import ModelReply, RunEnded, TurnStarted

def factory(session_id, config):
    def run(prompt):
        yield TurnStarted(1)
        yield ModelReply("echo: " + prompt, [], {"input_tokens": 1, "output_tokens": 1})
        yield RunEnded("final", 1, final=prompt)
    return run
"""


def _wait_for(check, bound_s: float, what: str):
    """Poll a marker (a file, an event line) up to a generous bound: never a sleep-as-sync."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not seen within {bound_s:g} s: {what}")


def _events(sdir: Path) -> list[dict]:
    path = sdir / "worker-events.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _status(sdir: Path) -> dict:
    try:
        return json.loads((sdir / "worker.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


@pytest.fixture
def fake_worker_env(_isolated_home, tmp_path, monkeypatch):
    sdir = _isolated_home / "sessions" / "s1"
    SessionStore.create(session_dir=sdir).close()
    (tmp_path / "fake_wake_runner.py").write_text(RUNNER_MODULE)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{REPO}")
    return sdir


def test_a_job_added_while_the_worker_idles_is_delivered(fake_worker_env, _isolated_home):
    sdir = fake_worker_env
    start_detached("s1", _isolated_home, runner="fake_wake_runner:factory", poll_s=0.05)
    try:
        # idle with nothing due: before the fix it sleeps an hour here
        _wait_for(lambda: _status(sdir).get("activity", "").startswith("idle"), 60,
                  "the worker idle")
        (info,) = list_workers(_isolated_home)  # what `rlm ps` shows
        assert info["alive"] and info["activity"].startswith("idle, exits at")
        assert info["exits_at"] > info["updated_at"]
        job = Scheduler(sdir / "scheduled-jobs.json").add("in 2s", "wake up")  # the CLI's path
        ev = _wait_for(lambda: [e for e in _events(sdir) if e["event"] == "TickDelivering"],
                       30, "the job delivered")
        assert ev[0]["label"] == "wake up" or job.id in json.dumps(ev[0])
        _wait_for(lambda: [e for e in _events(sdir) if e["event"] == "RunEnded"], 30,
                  "its run ended")
    finally:
        assert stop_worker("s1", _isolated_home, timeout_s=30)


def test_an_idle_worker_exits_and_says_when(fake_worker_env, _isolated_home):
    sdir = fake_worker_env
    (_isolated_home / "config.toml").write_text("worker_idle_exit_s = 1\n")
    pid = start_detached("s1", _isolated_home, runner="fake_wake_runner:factory", poll_s=0.05)
    try:
        _wait_for(lambda: [e for e in _events(sdir) if e["event"] == "WorkerIdleExit"], 60,
                  "the idle worker exiting")
        _wait_for(lambda: lock_holder(sdir / "worker.lock") is None, 30, "the lock freed")
    finally:
        if lock_holder(sdir / "worker.lock") == pid:
            stop_worker("s1", _isolated_home, timeout_s=30)
    (info,) = list_workers(_isolated_home)
    assert info["state"] == "stopped" and not info["alive"]
    names = [e["event"] for e in _events(sdir)]
    assert names[-2:] == ["WorkerIdleExit", "WorkerStopped"]


def test_why_an_idle_worker_stays(_isolated_home):
    sdir = _isolated_home / "sessions" / "s1"
    SessionStore.create(session_dir=sdir).close()
    clock = FakeClock()
    w = Worker("s1", Config(worker_idle_exit_s=60), clock, runner=lambda p: iter(()),
               home=_isolated_home)
    w.start()
    try:
        why, exits_at = w.why()
        assert why.startswith("idle, exits at") and exits_at == clock.now() + 60
        w.scheduler.add("in 2h", "later")
        why, exits_at = w.why()
        assert why.startswith("next job at") and exits_at is None
    finally:
        w.close()


def test_idle_exit_setting_is_validated():
    from rlm.errors import ConfigError

    for bad in (0, -5, float("nan"), float("inf"), True, "60"):
        with pytest.raises(ConfigError, match="worker_idle_exit_s"):
            Config(worker_idle_exit_s=bad)
    assert Config(worker_idle_exit_s=None).worker_idle_exit_s is None


def test_rlm_stop_interrupts_a_running_cell(tmp_path, _isolated_home):
    marker = tmp_path / "cell-started"
    s = script(tmp_path / "a.json", [
        call(f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(60)"),
        call("final('never reached')"),
    ])
    out = rlm("run", "a long cell", "--detach", "--model", s, "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    sid, path = res["session_id"], Path(res["session_path"])
    try:
        _wait_for(marker.exists, 120, "the 60 s cell running")
        stopped = rlm("stop", sid, cwd=tmp_path, check=False)
        assert stopped.returncode == 0, stopped.stderr
    finally:
        if lock_holder(path.parent / "worker.lock"):
            stop_worker(sid, _isolated_home, timeout_s=90)
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    calls = [tc["id"] for e in entries if e.get("type") == "message"
             for tc in e["message"].get("tool_calls") or []]
    results = [e["message"].get("tool_call_id") for e in entries if e.get("type") == "message"
               and e["message"].get("role") == "tool"]
    assert calls and sorted(calls) == sorted(results)  # every tool call has its result
    cell = next(e["cell"] for e in entries if e.get("type") == "message" and e.get("cell"))
    assert cell["status"] == "interrupted"
    names = [e["event"] for e in _events(path.parent)]
    assert "RunEnded" in names and names[-1] == "WorkerStopped"


class _Recording:
    session = None

    def __init__(self):
        self.prompts = []

    def __call__(self, prompt):
        self.prompts.append(prompt)
        return iter(())

    def steer(self, text, custom_type="steer", on_delivered=None):
        pass

    def close(self):
        pass


def test_a_worker_is_routed_by_directory_and_takes_prefixes(_isolated_home, tmp_path):
    """`rlm worker|stop|attach PREFIX` name one directory; a copied session directory has a
    worker, inbox and runner session of its own (never the original's)."""
    from rlm.longrun.worker import send_prompt, tail_events

    orig = _isolated_home / "sessions" / "20261201-040000-abcdef"
    SessionStore.create(session_dir=orig).close()
    copy = tmp_path / "copy"
    copy.mkdir(mode=0o700)
    (copy / "session.jsonl").write_bytes((orig / "session.jsonl").read_bytes())
    (copy / "session.jsonl").chmod(0o600)
    opened: list[str] = []

    def factory(where, config):
        opened.append(where)
        return _Recording()

    w = Worker("20261201-0400", home=_isolated_home, runner_factory=factory)  # a prefix
    w.start()
    try:
        assert opened == [str(orig)] and w.session_id == orig.name
        assert _status(orig)["session_id"] == orig.name  # what `rlm ps` shows
        (info,) = list_workers(_isolated_home)
        assert info["alive"] and info["session_id"] == orig.name
        send_prompt(str(copy), "for the copy", _isolated_home)
        assert w._take_inbox() is None  # the copy's request is not the original's
        assert list((copy / "worker-inbox").glob("*.json"))
        send_prompt("20261201-04", "for the original", _isolated_home)
        assert w.step() == 0.0 and w.runner.prompts == ["for the original"]
        assert [e["event"] for e in tail_events("20261201", _isolated_home, follow=False)][:1] \
            == ["WorkerStarted"]
    finally:
        w.close()
    cw = Worker(str(copy), home=_isolated_home, runner_factory=factory)
    cw.start()
    try:
        assert opened[-1] == str(copy) and cw.step() == 0.0
        assert cw.runner.prompts == ["for the copy"]
    finally:
        cw.close()
