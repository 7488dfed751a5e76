"""Ctrl-C in `rlm run`: once interrupts the running cell, twice ends the turn; the session
stays consistent (every tool call has its result) either way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.rlmcli import call


def start(tmp_path: Path, replies: list) -> subprocess.Popen:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    return subprocess.Popen([sys.executable, "-m", "rlm", "run", "t", "--model", f"script:{script}",
                             "--json"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until the running cell has written `marker` (so it is running in the kernel now)."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{marker.name} never appeared"
        time.sleep(0.02)


def session_log(home: Path) -> Path:
    (path,) = home.glob("sessions/*/session.jsonl")
    return path


def consistent(path: Path) -> list[dict]:
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    calls = [tc["id"] for e in entries if e["type"] == "message"
             for tc in e["message"].get("tool_calls") or []]
    results = [e["message"]["tool_call_id"] for e in entries
               if e["type"] == "message" and e["message"]["role"] == "tool"]
    assert sorted(calls) == sorted(results), "a tool call without its result"
    return entries


def signal_a_sleeping_cell(tmp_path: Path, home: Path, then: str, sig: int
                           ) -> tuple[subprocess.Popen, Path, str, str]:
    """Run a cell that sleeps (then the cell `then`), send `sig` once it is running;
    (process, session log, stdout, stderr) once the run has ended."""
    running = tmp_path / "running"
    proc = start(tmp_path, [call(f"import time\nopen({str(running)!r}, 'w').close()\n"
                                 "time.sleep(120)"),
                            call(then)])
    wait_for(running, proc)
    path = session_log(home)
    os.kill(proc.pid, sig)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # the cell was never interrupted: say what the host did
        proc.kill()
        logs = "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in path.parent.glob("host/kernel.log"))
        raise AssertionError(f"the run did not end after {sig!r}; kernel.log:\n{logs}") from None
    return proc, path, out, err


def test_one_ctrl_c_interrupts_the_cell_and_the_run_goes_on(tmp_path, _isolated_home):
    (tmp_path / "status.txt").write_text("went on")  # the task's data: the answer rests on it
    proc, path, out, err = signal_a_sleeping_cell(
        tmp_path, _isolated_home, "print(open('status.txt').read())\nfinal('went on')",
        signal.SIGINT)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["final"] == "went on"
    entries = consistent(path)
    tool = [e for e in entries if e["type"] == "message" and e["message"]["role"] == "tool"][0]
    assert "KeyboardInterrupt" in tool["message"]["content"]


def test_two_ctrl_c_end_the_turn(tmp_path, _isolated_home):
    running, caught = tmp_path / "running", tmp_path / "caught"
    proc = start(tmp_path, [call(f"import time\nopen({str(running)!r}, 'w').close()\n"
                                 "while True:\n    try:\n        time.sleep(1)  # stubborn\n"
                                 "    except KeyboardInterrupt:\n"
                                 f"        open({str(caught)!r}, 'w').close()"),
                            call("final('should not run')")])
    wait_for(running, proc)
    path = session_log(_isolated_home)
    os.kill(proc.pid, signal.SIGINT)
    wait_for(caught, proc)  # the first Ctrl-C reached the cell, which ignored it
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["reason"] == "interrupted" and result["final"] is None, (out, err)
    consistent(path)


def test_sigterm_ends_the_run_and_a_json_run_still_prints_its_object(tmp_path, _isolated_home):
    """`timeout`, a CI runner or a stopped pod sends SIGTERM: the run ends `interrupted`
    as with the stop button (the cell interrupted, the log consistent), the --json object
    is printed, the exit is 3. Before, the default action killed rlm with nothing printed."""
    proc, path, out, err = signal_a_sleeping_cell(
        tmp_path, _isolated_home, "final('should not run')", signal.SIGTERM)
    assert proc.returncode == 3, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["reason"] == "interrupted" and result["final"] is None, (out, err)
    entries = consistent(path)
    ends = [e["data"] for e in entries if e.get("custom_type") == "run_end"]
    assert ends and ends[-1]["reason"] == "interrupted"
