"""One writer per session, and run options that travel with a detached run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlm import app
from rlm.longrun.lock import holder, lock_holder
from rlm.longrun.worker import send_prompt, start_detached, stop_worker, tail_events
from rlm.session.store import SessionStore
from tests import rlmcli
from tests.rlmcli import call, script

pytestmark = pytest.mark.timeout(240)


def env() -> dict[str, str]:  # read at call time: the fixture sets RLM_HOME per test
    return {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def rlm(*args: str, cwd: Path, check: bool = True,
        process: bool = False) -> subprocess.CompletedProcess:
    return rlmcli.rlm(*args, cwd=cwd, check=check, process=process,
                      env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"})


def wait_until(predicate, what: str, proc: subprocess.Popen | None = None, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def snapshot_files(d: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in (d / "snapshot").iterdir()}


def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path, _isolated_home):
    (tmp_path / "x.txt").write_text("41")  # the task's data: the answer rests on it
    s = script(tmp_path / "a.json", [call("x = int(open('x.txt').read())\nprint(x)"),
                                     call("final(str(x))")])
    out = rlm("run", "first", "--model", s, "--json", cwd=tmp_path)
    sid = json.loads(out.stdout.splitlines()[-1])["session_id"]
    d = _isolated_home / "sessions" / sid
    before_log = (d / "session.jsonl").read_bytes()
    before_snap = snapshot_files(d)
    assert before_snap, "the first run left a snapshot"

    chat_script = script(tmp_path / "b.json", ["hello"])
    chat = subprocess.Popen([sys.executable, "-m", "rlm", "chat", sid, "--model", chat_script],
                            cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env())
    try:
        wait_until(lambda: lock_holder(d / "worker.lock") == chat.pid, "chat holds the lock", chat)
        for cmd in (["resume", sid, "again"], ["compact", sid], ["goal", sid, "set", "x"],
                    ["chat", sid]):
            second = rlm(*cmd, cwd=tmp_path, check=False)
            assert second.returncode == 4, (cmd, second.stderr)
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1, lines
            assert f"pid {chat.pid}" in lines[0] and "`rlm chat`" in lines[0]
            assert f"rlm attach {sid}" in lines[0] and "since" in lines[0]
        # read-only commands keep working while the session runs
        assert "x = int(open('x.txt')" in rlm("log", sid, cwd=tmp_path).stdout
        rlm("tree", sid, cwd=tmp_path)
        rlm("state", sid, "--json", cwd=tmp_path)
        # nothing the second writers could touch was touched
        assert snapshot_files(d) == before_snap
        assert (d / "session.jsonl").read_bytes().startswith(before_log)
        chat.stdin.write("/exit\n")
        chat.stdin.flush()
        assert chat.wait(timeout=60) == 0
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
        chat.stdout.close()
        chat.stderr.close()
    SessionStore.open(sid, _isolated_home)  # the log is valid
    assert holder(d / "worker.lock") is None


def worker_runs(home: Path, sid: str) -> list[dict]:
    return [r for r in tail_events(sid, home, follow=False) if r.get("event") == "RunEnded"]


def test_detach_keeps_max_turns_and_a_restarted_worker_keeps_the_options(tmp_path, _isolated_home):
    never_final = [call("print(len(numbers))")] + [call(f"print({i})") for i in range(5)]
    s = script(tmp_path / "a.json", never_final)
    (tmp_path / "numbers.txt").write_text("one two three")
    out = rlm("run", "loop", "--detach", "--max-turns", "2", "--context", "numbers.txt",
              "--model", s, "--json", cwd=tmp_path, process=True)  # --detach: its own process
    sid = json.loads(out.stdout.strip().splitlines()[-1])["session_id"]
    try:
        wait_until(lambda: len(worker_runs(_isolated_home, sid)) == 1, "the detached run ended")
        first = worker_runs(_isolated_home, sid)[0]
        assert (first["reason"], first["turns"]) == ("limit:turns", 2)
        # --context reached the worker: the file is a kernel variable the first cell read
        log = (_isolated_home / "sessions" / sid / "session.jsonl").read_text()
        assert '"custom_type":"context_vars"' in log and '"content":"13\\n"' in log

        # restart the worker: it assembles the agent from the options recorded at `run`
        assert stop_worker(sid, _isolated_home)
        send_prompt(sid, "again", _isolated_home)
        start_detached(sid, _isolated_home)
        wait_until(lambda: len(worker_runs(_isolated_home, sid)) == 2, "the second run ended")
        second = worker_runs(_isolated_home, sid)[1]
        assert (second["reason"], second["turns"]) == ("limit:turns", 2)
        assert stop_worker(sid, _isolated_home)
    finally:
        stop_worker(sid, _isolated_home)  # never leave a worker behind, even on failure
    session = SessionStore.open(sid, _isolated_home)
    opts = app.recorded_options(session)
    assert opts is not None and opts.overrides["max_turns"] == 2


def test_logs_without_run_options_open_with_defaults(_isolated_home):
    session = SessionStore.create(_isolated_home, model="script:x", task="old")
    session.close()
    s = SessionStore.open(session.id, _isolated_home, readonly=True)
    assert app.recorded_options(s) is None
    assert app.RunOptions().over(app.recorded_options(s)) == app.RunOptions()
