"""Long-running work from one terminal (issue 31): `rlm resume --detach`, `--worker` on
schedule, `rlm worker` saying what it does, `stop --json` naming the session, `ps`
marking and pruning dead workers, attach durations on the records' own clock, goal text
as typed and goal replies on one line."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from test_cli import call, rlm, script

from rlm import events as ev
from rlm.cli.render import Renderer

# the task's data, in each test's working directory (an answer is verified only when code
# reading it showed it: rlm.agent.policy.dataflow)
D = "import json\nD = json.load(open('data.json'))\n"


@pytest.fixture(autouse=True)
def _data(tmp_path):
    (tmp_path / "data.json").write_text(json.dumps({"round": "round", "ok": "ok",
                                                    "worker": "worker"}))

pytestmark = pytest.mark.timeout(600)


def wait_until(check, what: str, timeout: float = 240.0) -> None:
    """Poll `check` (a file the worker writes) until it holds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.2)


def finals(path: Path) -> int:
    return path.read_text().count('"custom_type":"final"')


def test_resume_detach_continues_in_a_worker_then_stop_ps_and_prune(tmp_path, _isolated_home):
    s = script(tmp_path / "s.json", [call(D + "word = D['round']\nprint(word)\nfinal(word)")])
    first = json.loads(rlm("run", "first question", "--model", s, "--json",
                           cwd=tmp_path).stdout.strip().splitlines()[-1])
    sid, path = first["session_id"], Path(first["session_path"])
    out = json.loads(rlm("resume", "last", "next question", "--detach", "--json",
                         cwd=tmp_path).stdout)
    assert out["session_id"] == sid and out["worker_pid"]
    wait_until(lambda: finals(path) == 2, "the detached resume's answer")
    assert '"content":"next question"' in path.read_text()
    stopped = json.loads(rlm("stop", "last", "--json", cwd=tmp_path).stdout)
    assert stopped == {"session_id": sid, "stopped": True}  # the id, not "last"
    listed = rlm("ps", cwd=tmp_path).stdout
    assert f"1 stopped or dead worker record(s): {sid}" in listed and "--prune" in listed
    rlm("ps", "--prune", cwd=tmp_path)
    assert json.loads(rlm("ps", "--json", cwd=tmp_path).stdout) == []
    bad = rlm("resume", sid, "--detach", "--model", "other", cwd=tmp_path, check=False)
    assert bad.returncode != 0 and "recorded options" in bad.stderr


def test_schedule_with_worker_starts_one_and_worker_says_what_it_does(tmp_path, _isolated_home):
    s = script(tmp_path / "s.json", [call(D + "word = D['ok']\nprint(word)\nfinal(word)")])
    sid = json.loads(rlm("run", "t", "--model", s, "--json",
                         cwd=tmp_path).stdout.strip().splitlines()[-1])["session_id"]
    plain = rlm("schedule", sid, "add", "every 1h", "--", "tick", cwd=tmp_path)
    assert "nothing fires these jobs now" in plain.stderr and "`--worker` starts" in plain.stderr
    try:
        added = rlm("schedule", "--worker", sid, "add", "every 2h", "--", "tock", cwd=tmp_path)
        assert f"started for session {sid}: it fires the jobs" in added.stderr
        alive = [w for w in json.loads(rlm("ps", "--json", cwd=tmp_path).stdout) if w["alive"]]
        assert len(alive) == 1
        listed = rlm("schedule", sid, "list", cwd=tmp_path)
        assert "due jobs fire in" in listed.stderr
    finally:
        rlm("stop", sid, cwd=tmp_path, check=False)
    worker = subprocess.Popen([sys.executable, "-P", "-m", "rlm", "worker", sid], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = worker.stderr.readline()  # type: ignore[union-attr]
        assert banner.startswith(f"rlm worker for session {sid}: runs prompts sent to it")
        wait_until(lambda: [w for w in json.loads(rlm("ps", "--json", cwd=tmp_path).stdout)
                            if w["alive"]], "the foreground worker holding the session")
        rlm("stop", sid, cwd=tmp_path)
        # a stop that lands before the worker's SIGTERM handler is set ends it by the
        # signal (-15, seen under load): the banner is what this test is about
        assert worker.wait(timeout=120) in (0, -15)
    finally:
        if worker.poll() is None:
            worker.kill()


def test_heartbeat_on_a_terminal_offers_a_worker_and_goal_starts_one_with_the_flag(
        tmp_path, _isolated_home):
    """On a terminal, `rlm heartbeat` on a session no process holds asks whether to start
    a background worker; `y` starts one. `--no-worker` never asks; `rlm goal ... --worker`
    starts one without asking."""
    from terminal_screen import Screen

    s = script(tmp_path / "s.json", [call(D + "word = D['ok']\nprint(word)\nfinal(word)")])
    sid = json.loads(rlm("run", "t", "--model", s, "--json",
                         cwd=tmp_path).stdout.strip().splitlines()[-1])["session_id"]
    with Screen(["heartbeat", sid, "--no-worker", "every", "2h", "look again"],
                cwd=tmp_path) as scr:
        status, screen = scr.wait_exit()
    assert status == 0 and "[y/N]" not in screen, screen
    assert "`--worker` starts a background worker" in screen, screen
    try:
        with Screen(["heartbeat", sid, "every", "2h", "look again"], cwd=tmp_path) as scr:
            scr.wait_for(f"no worker holds session {sid}: start one in the background (it "
                         "fires the heartbeat)? [y/N]")
            scr.type("y")
            status, screen = scr.wait_exit()
        assert status == 0, screen
        assert f"started for session {sid}: it fires the heartbeat" in screen, screen
        assert len([w for w in json.loads(rlm("ps", "--json", cwd=tmp_path).stdout)
                    if w["alive"]]) == 1
    finally:
        rlm("stop", sid, cwd=tmp_path, check=False)
    rlm("ps", "--prune", cwd=tmp_path)
    try:
        out = rlm("goal", sid, "set", "keep the totals reconciled", "--worker", cwd=tmp_path)
        assert f"started for session {sid}: it works on the goal" in out.stderr, out.stderr
        assert "[y/N]" not in out.stderr
        assert len([w for w in json.loads(rlm("ps", "--json", cwd=tmp_path).stdout)
                    if w["alive"]]) == 1
    finally:
        rlm("stop", sid, cwd=tmp_path, check=False)


def test_attach_measures_durations_on_the_records_clock():
    """A worker's 60 s model call replayed by `rlm attach --no-follow` in a blink still
    reads 60 s: the renderer measures on the records' timestamps."""
    from rlm.cli.longrun_cli import _record_shower

    buf = io.StringIO()
    show = _record_shower(Renderer(console=Console(file=buf, width=80, color_system=None)),
                          as_json=False)
    for ts, e in ((1000.0, ev.TurnStarted(1)), (1000.0, ev.ModelCallStarted("local", 500)),
                  (1060.0, ev.ModelReply("", ["x = 1"], {"input_tokens": 500,
                                                         "output_tokens": 9})),
                  (1060.0, ev.RunEnded("final", 1, final="1", verified=True))):
        show({"ts": ts, **e.to_dict()})  # as `rlm attach` reads worker-events.jsonl
    out = buf.getvalue()
    assert "model 60.0s" in out and "· 60.0s" in out, out


def test_goal_text_is_shown_as_typed_and_goal_replies_are_one_line():
    from kernel_ext.api import GoalReply
    from rlm.longrun.goals import GoalState, render_goal_context

    g = GoalState(goal_id="g1", objective="every region's totals reconcile & <match>")
    text = render_goal_context(g)
    assert "every region's totals reconcile &amp; &lt;match&gt;" in text
    reply = GoalReply({"goal": {"objective": "every region's totals reconcile",
                                "status": "complete"}, "remaining_tokens": 1200})
    assert repr(reply) == "<goal complete: \"every region's totals reconcile\", 1,200 tokens left>"
    assert reply["goal"]["status"] == "complete" and "'remaining_tokens': 1200" in str(reply)


def test_a_foreground_worker_shows_its_runs_as_rlm_run_does(tmp_path, _isolated_home):
    """`rlm worker SESSION` in a terminal renders each run it makes (the cell's box, its
    output, the answer), not only its banner: no second terminal with `rlm attach`."""
    from rlm.longrun.worker import send_prompt

    # each process replays the script from its start: the run's and the worker's reply
    s = script(tmp_path / "s.json", [call(D + "shown = D['worker'] + 'side'\n"
                                          "print(shown)\nfinal(shown)")])
    sid = json.loads(rlm("run", "t", "--model", s, "--json",
                         cwd=tmp_path).stdout.strip().splitlines()[-1])["session_id"]
    send_prompt(sid, "the next question", _isolated_home)
    worker = subprocess.Popen([sys.executable, "-P", "-m", "rlm", "worker", sid], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 240
        while not any("workerside" in line and "final" not in line for line in seen):
            assert time.monotonic() < deadline and worker.poll() is None, "".join(seen)
            seen.append(worker.stdout.readline())  # type: ignore[union-attr]
        rlm("stop", sid, cwd=tmp_path)
        seen += worker.communicate(timeout=120)[0].splitlines(keepends=True)
    finally:
        if worker.poll() is None:
            worker.kill()
    screen = "".join(seen)
    assert "shown = D['worker'] + 'side'" in screen  # the cell's box
    assert "· run started" in screen and "source=user" in screen  # the worker's own record
    assert screen.count("workerside") >= 2, screen  # its output, then its answer


def test_a_scheduled_run_that_fails_is_said_in_schedule_list(tmp_path, _isolated_home):
    """A tick delivered to its run, which then ends without an answer (here: out of
    turns): `schedule list` says the job's last run failed and why."""
    s = script(tmp_path / "s.json", [call("print('not yet')")])
    sid = json.loads(rlm("run", "t", "--model", s, "--max-turns", "1", "--json", cwd=tmp_path,
                         check=False).stdout.strip().splitlines()[-1])["session_id"]
    rlm("schedule", sid, "add", "in 1s", "--", "check again", cwd=tmp_path)
    worker = subprocess.Popen([sys.executable, "-P", "-m", "rlm", "worker", sid], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: "last run failed" in rlm("schedule", sid, "list",
                                                     cwd=tmp_path).stdout,
                   "the failed scheduled run in schedule list")
    finally:
        rlm("stop", sid, cwd=tmp_path, check=False)
        worker.wait(timeout=120)
    listed = rlm("schedule", sid, "list", cwd=tmp_path).stdout
    assert "completed" in listed and "check again" in listed, listed
    assert "last run failed: the run ended: limit:turns (1 of 1 turns used)" in listed, listed
