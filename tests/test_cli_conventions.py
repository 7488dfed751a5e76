"""Issue 14 (4, 5, 8): sessions you can name, the README's commands, CLI conventions, chat,
attach and schedule, through the real `python -m rlm` entry point.

The `--help` snapshot lives in tests/fixtures/cli_help.txt; after a deliberate change to
the CLI, regenerate it with `python -m tests.test_cli_conventions` and review the diff.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

from tests import rlmcli
from tests.rlmcli import call

FIXTURE = Path(__file__).parent / "fixtures" / "cli_help.txt"


def rlm(*args: str, home: Path, cwd: Path, stdin: str | None = None,
        process: bool = False) -> subprocess.CompletedProcess:
    return rlmcli.rlm(*args, cwd=cwd, stdin=stdin, process=process,
                      env={"RLM_HOME": str(home), "COLUMNS": "100", "RLM_MODEL": None})


# ------------------------------------------------------------------- conventions
def help_snapshot() -> str:
    """`rlm --help` and `rlm COMMAND --help` for every command, at 100 columns."""
    from rlm.cli.main import build_parser

    os.environ["COLUMNS"] = "100"
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = [("rlm", parser.format_help())]
    parts += [(f"rlm {name}", p.format_help()) for name, p in sub.choices.items()]
    return "".join(f"==== {title} --help\n{text}\n" for title, text in parts)


def test_help_of_every_command_matches_the_snapshot_and_helps_every_option():
    from rlm.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    unhelped = [f"rlm {name} {a.option_strings or a.dest}" for name, p in sub.choices.items()
                for a in p._actions if not a.help]
    assert unhelped == []
    assert all("example:\n  rlm " in p.format_help() for p in sub.choices.values())
    assert help_snapshot() == FIXTURE.read_text(), (
        "the CLI's --help changed: regenerate with `python -m tests.test_cli_conventions`")


def test_rlm_alone_prints_help_and_unknown_commands_suggest(tmp_path):
    alone = rlm(home=tmp_path / "h", cwd=tmp_path)
    assert alone.returncode in (0, 2) and "Traceback" not in alone.stderr
    assert "usage: rlm" in alone.stdout and "sessions" in alone.stdout
    typo = rlm("sesions", home=tmp_path / "h", cwd=tmp_path)
    assert typo.returncode == 2 and "did you mean: sessions" in typo.stderr
    assert typo.stderr.count("\n") == 1


def test_goal_takes_session_first_and_the_old_order_with_a_note(tmp_path):
    home = tmp_path / "h"
    s = _session(home)
    s.close()
    new = rlm("goal", s.id, "set", "refresh", "the", "data", home=home, cwd=tmp_path)
    assert new.returncode == 0 and "goal [active] refresh the data" in new.stdout, new.stderr
    old = rlm("goal", "status", s.id, home=home, cwd=tmp_path)
    assert old.returncode == 0 and "refresh the data" in old.stdout
    assert "deprecated" in old.stderr and "rlm goal SESSION status" in old.stderr


def test_unknown_sessions_exit_non_zero_with_one_line_everywhere(tmp_path):
    home = tmp_path / "h"
    for argv in (["log", "nope"], ["state", "nope"], ["tree", "nope"], ["export", "nope"],
                 ["attach", "nope"], ["stop", "nope"], ["compact", "nope"],
                 ["goal", "nope", "status"], ["heartbeat", "nope", "off"],
                 ["schedule", "nope", "list"],
                 # the README's form: the task after --from (was "unrecognized arguments")
                 ["resume", "nope", "--from", "abc123", "top product instead?"]):
        proc = rlm(*argv, home=home, cwd=tmp_path)
        assert proc.returncode == 1, (argv, proc.stderr)
        assert "no session 'nope'" in proc.stderr and proc.stderr.count("\n") == 1, argv


# ---------------------------------------------------------------- naming sessions
def test_sessions_last_and_the_listing(tmp_path):
    home, work, elsewhere = tmp_path / "h", tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    script = work / "s.json"
    (work / "x.txt").write_text("41")  # the task's data (a verified answer reads it)
    script.write_text(json.dumps([call("x = int(open('x.txt').read())"),
                                  call("final(str(x + 1) + '\\nmore')")]))
    res = rlm("run", "add one", "--model", f"script:{script}", "--json", home=home, cwd=work)
    assert res.returncode == 0, res.stderr
    sid = json.loads(res.stdout.splitlines()[-1])["session_id"]

    table = rlm("sessions", home=home, cwd=work).stdout.splitlines()  # 80 columns: a pipe
    assert table[0].split() == ["ID", "STATUS", "TURNS", "TASK"]
    row = table[1].split()
    assert row[0] == sid and row[1:3] == ["answered", "2"] and row[3:] == ["add", "one"]
    rows = json.loads(rlm("sessions", "--json", "-n", "1", home=home, cwd=work).stdout)
    assert [(r["id"], r["status"], r["turns"], r["answer"], r["cwd"], r["verified"])
            for r in rows] == [(sid, "answered", 2, "42", str(work), True)]
    assert json.loads(rlm("sessions", "--here", "--json", home=home, cwd=elsewhere).stdout) == []
    assert [r["id"] for r in json.loads(
        rlm("sessions", "--here", "--json", home=home, cwd=work).stdout)] == [sid]

    # no argument = last; `last` and a unique suffix name it too
    log = rlm("log", home=home, cwd=elsewhere)
    assert log.returncode == 0 and "add one" in log.stdout
    assert json.loads(rlm("state", "last", "--json", home=home, cwd=work).stdout)["names"]
    assert rlm("tree", sid[-6:], home=home, cwd=work).stdout == rlm("tree", home=home, cwd=work).stdout
    out = rlm("export", "-o", str(tmp_path / "nb.ipynb"), "--json", home=home, cwd=work)
    assert json.loads(out.stdout)["session_id"] == sid and (tmp_path / "nb.ipynb").is_file()


# ---------------------------------------------------------------- attach, schedule
def _session(home: Path):
    from rlm.session.store import SessionStore

    return SessionStore.create(home, model="script:x", task="watched")


def _records(sid: str) -> list[dict]:
    from rlm import events as ev

    loop = [ev.TurnStarted(1), ev.CellStarted("total = 17", 0),
            ev.CellFinished(code="total = 17", status="ok", shaped="done 17", duration_s=0.1),
            ev.FinalAnswer("seventeen", "final"), ev.RunEnded("final", 1, final="seventeen")]
    return [{"ts": 1.0, "event": "WorkerStarted", "pid": 4242, "interrupted": False},
            {"ts": 1.1, "event": "RunStarted", "source": "prompt", "prompt": "watched"},
            *[{"ts": 2.0, **e.to_dict()} for e in loop]]


def test_attach_renders_like_run_and_exits_when_the_run_ends(tmp_path):
    from rlm.longrun.lock import SessionLock

    home = tmp_path / "h"
    s = _session(home)
    assert s.dir is not None
    (s.dir / "worker-events.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in _records(s.id)))
    lock = SessionLock.for_session(s.dir, "worker")
    lock.acquire()  # a live worker holds the session: attach must still end with the run
    try:
        proc = rlm("attach", home=home, cwd=tmp_path)
    finally:
        lock.release()
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "turn 1" in out and "total = 17" in out and "seventeen" in out
    assert "run ended (final)" in out
    assert "worker started" in out and "WorkerStarted" not in out and "{" not in out


def test_schedule_add_prints_the_next_run_and_warns_without_a_worker(tmp_path):
    home = tmp_path / "h"
    s = _session(home)
    proc = rlm("schedule", s.id, "add", "in 1h", "--", "refresh", home=home, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job_id, _, when = proc.stdout.strip().partition("  next run ")
    assert job_id and when[:4].isdigit() and "T" in when
    assert "warning" in proc.stderr and f"rlm worker {s.id}" in proc.stderr


# ----------------------------------------------------------------------------- chat
def test_chat_help_goal_set_and_load(tmp_path):
    home = tmp_path / "h"
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["unused"]))
    (tmp_path / "orders.csv").write_text("id,total\n1,5\n2,7\n")
    lines = ["/help", "/goal set finish the report", "/goal status", "/load orders.csv",
             "/state", "/exit"]
    proc = rlm("chat", "--model", f"script:{script}", home=home, cwd=tmp_path,
               stdin="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "/compact [instructions]" in out and "/load FILE" in out  # verbatim, no markup
    assert "goal [active] finish the report" in out and "set finish" not in out
    assert "loaded orders" in out
    assert any("orders" in line.split() and "DataFrame" in line  # in the kernel
               for line in out.splitlines())



def test_chat_prints_the_run_header_once_model_session_and_inputs(tmp_path):
    home = tmp_path / "h"
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["unused"]))
    (tmp_path / "orders.csv").write_text("id,total\n1,5\n2,7\n")
    model = f"script:{script}"
    proc = rlm("chat", "--model", model, "--context", "orders.csv", home=home, cwd=tmp_path,
               stdin="/exit\n", process=True)  # the header a user's terminal gets
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count(f"rlm · model {model} · session ") == 1, out
    assert "inputs: orders: DataFrame 2×2" in out

def test_goal_continuation_notice_shows_no_internal_tags():
    from rich.console import Console

    from rlm.agent.loop import _plain_first_line
    from rlm.cli.render import Renderer
    from rlm.events import Notice
    from rlm.longrun.goals import GoalManager
    from rlm.session.store import SessionStore

    goals = GoalManager(SessionStore.in_memory())
    goals.set("refresh the dashboard & <totals>")
    follow = goals.continuation_message()
    assert follow is not None and follow.startswith("<goal_context>")
    console = Console(file=io.StringIO(), width=100)
    Renderer(console=console)(Notice("continuing: " + _plain_first_line(follow)))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "continuing: refresh the dashboard & <totals>" in shown, shown  # as typed
    assert "<goal" not in shown and "&amp;" not in shown


if __name__ == "__main__":  # regenerate the --help snapshot
    with contextlib.redirect_stdout(io.StringIO()):
        text = help_snapshot()
    FIXTURE.write_text(text)
    print(f"wrote {FIXTURE} ({len(text.splitlines())} lines)")
