"""The one run lifecycle (rlm.app.SessionRun): what each entry point promises around it.

- `rlm run --detach` checks everything it can in the parent: an impossible setting exits
  non-zero there with the one refusal line, and no session is left; a worker that dies
  while it builds its agent is reported by `rlm run --detach` itself;
- a failed start releases the lock and removes the session it created;
- `rlm resume --no-autonomous / --no-gate` turn recorded options off;
- `rlm chat --json` prints one JSON object per prompt; on a terminal, a job that falls due
  while chat waits at its prompt runs then;
- `%%rlm`'s executor shapes output at the budget the prompt states.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli import call, rlm, script

from rlm import app
from rlm.cli.common import options_from_args
from rlm.cli.main import build_parser
from rlm.longrun.lock import holder

pytestmark = pytest.mark.timeout(300)


def sessions(home: Path) -> list[Path]:
    return sorted(home.glob("sessions/*/session.jsonl"))


# ---------------------------------------------------------------------------- --detach
def test_detach_refuses_an_impossible_setting_in_the_parent(tmp_path, _isolated_home):
    s = script(tmp_path / "s.json", ["never asked"])
    out = rlm("run", "t", "--detach", "--model", s, "--keep-recent-tokens", "999999",
              cwd=tmp_path, check=False)
    assert out.returncode != 0
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "keep_recent_tokens (999999)" in lines[0], out.stderr
    assert sessions(_isolated_home) == []  # refused before a session (or a worker) existed


def test_detach_reports_a_worker_that_dies_while_it_builds(tmp_path, _isolated_home):
    """An input that only the worker's kernel can find unreadable: the parent waits for
    the worker to build its agent, reports its error line, and removes the session."""
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not a parquet file at all")
    s = script(tmp_path / "s.json", ["never asked"])
    out = rlm("run", "t", "--detach", "--model", s, "--context", str(bad), cwd=tmp_path,
              check=False)
    assert out.returncode != 0, out.stdout
    assert "bad.parquet" in out.stderr and "running in worker" not in out.stdout, out.stderr
    assert sessions(_isolated_home) == []


# ----------------------------------------------------------------- failed starts
def test_a_failed_start_releases_the_lock_and_removes_the_new_session(tmp_path, _isolated_home):
    s = script(tmp_path / "s.json", ["never asked"])
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"garbage")
    run = app.SessionRun.new("run", "t", app.RunOptions(overrides={"model": s},
                                                        context=[str(bad)]))
    with pytest.raises(Exception), run:  # noqa: B017 - the loader's own error type
        run.prepare("t")
    assert run.session is not None and run.session.dir is not None
    assert not run.session.dir.exists()  # the kernel stopped first, then the dir removed
    assert run.writer is not None and not run.writer.held


def test_a_resume_whose_model_cannot_run_leaves_the_session_unlocked(tmp_path, _isolated_home):
    s = script(tmp_path / "s.json", [call("final('ok')")])
    first = json.loads(rlm("run", "t", "--model", s, "--json", cwd=tmp_path).stdout)
    out = rlm("resume", first["session_id"], "again", "--model", "script:/nowhere.json",
              cwd=tmp_path, check=False)
    assert out.returncode != 0 and "/nowhere.json" in out.stderr
    assert holder(Path(first["session_path"]).parent / "worker.lock") is None
    assert Path(first["session_path"]).exists()  # an existing session is never removed


# ---------------------------------------------------------- options turned off on resume
def test_resume_turns_recorded_autonomous_and_gates_off():
    parse = build_parser().parse_args
    recorded = options_from_args(parse(["run", "t", "--autonomous", "--gate", "test -f x"]))
    kept = options_from_args(parse(["resume", "S"])).over(recorded)
    assert kept.autonomous is True and kept.gate == ["test -f x"]
    off = options_from_args(parse(["resume", "S", "--no-autonomous", "--no-gate"])).over(recorded)
    assert off.autonomous is False and off.gate == []
    assert off.to_dict()["autonomous"] is False and "no_gate" not in off.to_dict()


# ------------------------------------------------------------------------------- chat
def test_chat_json_prints_one_object_per_prompt(tmp_path, _isolated_home):
    (tmp_path / "n.txt").write_text("7")  # the task's data: a verified answer reads it
    s = script(tmp_path / "s.json", [call("n = int(open('n.txt').read())\nprint(6 * n)\n"
                                          "final('42')"),
                                     call("print(n * n)\nfinal('49')")])
    proc = subprocess.run([sys.executable, "-P", "-m", "rlm", "chat", "--model", s, "--json"],
                          cwd=tmp_path, input="first\nsecond\n/exit\n", capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    objects = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [o["final"] for o in objects] == ["42", "49"]
    assert all(o["verified"] is True and o["session_id"] for o in objects)


def _read_until(fd: int, marker: str, seen: list[str], deadline: float) -> str:
    """Read the pty until `marker` appears in what it printed since `seen` was last cut."""
    while time.monotonic() < deadline:
        text = "".join(seen)
        if marker in text:
            return text
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            try:
                seen.append(os.read(fd, 65536).decode(errors="replace"))
            except OSError:  # the child closed the terminal
                break
    raise AssertionError(f"{marker!r} never appeared:\n{''.join(seen)[-3000:]}")


def test_chat_fires_a_job_that_falls_due_while_it_waits_at_its_prompt(tmp_path, _isolated_home):
    """On a terminal chat does not sit in input() while a job falls due: the job added
    from outside (as `rlm schedule SESSION add` would) runs while chat waits."""
    from rlm.longrun.clock import FakeClock
    from rlm.longrun.schedule import Scheduler

    s = script(tmp_path / "s.json", [call("print('first answer')\nfinal('first')"),
                                     "tick handled by the model"])
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-P", "-m", "rlm", "chat", "--model", s],
                            cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave,
                            env={**os.environ, "COLUMNS": "100"}, close_fds=True)
    os.close(slave)
    seen: list[str] = []
    deadline = time.monotonic() + 240
    try:
        _read_until(master, "rlm> ", seen, deadline)
        seen.clear()
        os.write(master, b"go\n")
        _read_until(master, "rlm> ", seen, deadline)  # the prompt's run ended; chat waits
        [path] = sessions(_isolated_home)
        Scheduler(path.parent / "scheduled-jobs.json", FakeClock(time.time() - 3600)).add(
            "in 1m", "tick-from-outside")  # due at once
        _read_until(master, "tick handled by the model", seen, deadline)
        os.write(master, b"/exit\n")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    log = path.read_text()
    assert "tick-from-outside" in log and "tick handled by the model" in log


# ----------------------------------------------------------------------------- %%rlm
def test_the_notebook_executor_shapes_at_the_budget_the_prompt_states(tmp_path, _isolated_home):
    """`%%rlm` used to reset the executor's config after the output budget was scaled to
    the model's window: the prompt said one budget, the executor shaped at 20,000."""
    from rlm.notebook.inprocess import InProcessExecutor

    s = tmp_path / "s.json"
    s.write_text(json.dumps({"window": 4000, "replies": ["one", "two"]}))
    made: list[InProcessExecutor] = []

    def executor(session, config):
        made.append(InProcessExecutor(None, session.dir, config))
        return made[0]

    run = app.SessionRun.new("notebook", "t", app.RunOptions(overrides={"model": f"script:{s}"}),
                             executor_factory=executor)
    with run:
        assert run.agent is not None
        stated = run.agent.config.output_budget_chars
        assert stated == 4000 and made[0].config.output_budget_chars == stated
        agent = run.rebuild(app.RunOptions(overrides={"model": f"script:{s}", "max_turns": 3}))
        assert agent.executor is made[0] and len(made) == 1  # one executor per kernel
        assert made[0].config.output_budget_chars == agent.config.output_budget_chars == 4000
        assert made[0].config.max_turns == 3  # the cell's flags reach the executor too


def test_compact_is_in_the_feature_table_and_runs_nothing():
    table = app.feature_table()
    assert table["compact"]["compaction"] == "yes"
    assert all(table["compact"][f].startswith("no: rlm compact only summarises")
               for f in ("goals", "schedules", "autonomous", "snapshot"))
