"""Ctrl-C reaches `rlm` even when it was started with SIGINT ignored (a background job in a
shell script, some CI runners): the CLI installs its own handler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_ctrl_c_interrupts_a_cell_when_started_with_sigint_ignored(tmp_path, _isolated_home):
    marker = tmp_path / "cell-started"
    cell = (f"open({str(marker)!r}, 'w').close()\n"
            "import time\ntime.sleep(600)  # interrupted, never finishes")
    replies = [
        {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": cell}}]},
        {"content": "", "tool_calls": [{"name": "python",
                                        "arguments": {"code": "went = open('went.txt').read()\n"
                                                                  "print(went)\nfinal(went)"}}]},
    ]
    script = tmp_path / "replies.json"
    (tmp_path / "went.txt").write_text("went on")  # the task's data (issue 58)
    script.write_text(json.dumps(replies))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlm", "run", "t", "--model", f"script:{script}", "--json"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_ignore_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():  # the cell itself says it is running
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the cell never started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=90)  # without the handler: the cell sleeps 600 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["final"] == "went on", (out, err)


def test_main_installs_the_default_handler(monkeypatch):
    from rlm.cli import main as cli_main

    monkeypatch.setattr(cli_main, "_dispatch", lambda args: 0)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert cli_main.main(["sessions"]) == 0
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
