"""Entry points x features: every entry point is assembled by rlm.app and gets every
feature, or refuses it visibly (rlm.app.GAPS). Real kernels, scripted models.

No case sets the context window, the reserve or keep-recent: every script declares its
model's window (`{"window": 4000, "replies": [...]}`), as a real model reports its own,
so each case proves that compaction is sized to the model's window on that entry point
(reserve and keep-recent scale to 1,000 tokens each on 4,000).

One scripted scenario per entry point exercises every feature in a single run:
  turn 0  a cell prints ~1,100 tokens (what the requested summary shrinks: a summary that
          would not make the context smaller is rejected, issue 27)
  turn 1  a cell reads x (41) from the task's data file x.txt, prints ~1,100 tokens and
          asks `compact.run()` -> a "requested" compaction after the turn (summaries come from their own scripted compaction model)
  turn 2  a cell adds a one-shot job, already due -> fired into this run once; the reply
          reports 5,000 input tokens on the script's 4,000-token window -> a "threshold"
          compaction
  turn 3  a cell kills the kernel                 -> restarted, `x` restored from the snapshot
  turn 4  print(x + 1) -> 42; final(...)          -> with a goal set, the goal continues
          (42 is verified: it depends on the data x was read from):
  turn 5  goal.complete(...), turn 6 a reply      -> the run ends
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rlm import app
from rlm.config import load_config
from tests import rlmcli

pytestmark = pytest.mark.timeout(240)

WINDOW = 4000  # the window every script declares

# a one-shot job added from outside the kernel mid-run (the sandboxed kernel cannot write
# its session dir): the cell asks through a marker file in the test's dir, the test's
# `outside` thread adds the job (already due, on a clock an hour back) and answers
ADD_JOB = (
    "import glob, os, pathlib, time\n"
    "ask = pathlib.Path({dir!r})\n"
    "d = os.environ.get('RLM_SESSION_DIR') or sorted(glob.glob(os.environ['RLM_HOME'] + "
    "'/sessions/*'), key=os.path.getmtime)[-1]\n"  # %%rlm: the user's own kernel
    "(ask / 'add-job.tmp').write_text(d)\n"
    "os.replace(ask / 'add-job.tmp', ask / 'add-job')\n"
    "deadline = time.monotonic() + 60\n"
    "while not (ask / 'job-added').exists() and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
    "print('job added' if (ask / 'job-added').exists() else 'no job added')"
)


@pytest.fixture(autouse=True)
def outside(tmp_path):
    """Adds the job a cell asks for (see ADD_JOB) to the session it names."""
    import threading
    import time

    from rlm.longrun.clock import FakeClock
    from rlm.longrun.schedule import Scheduler

    stop = threading.Event()

    def serve() -> None:
        while not stop.wait(0.05):  # polling a marker file
            ask = tmp_path / "add-job"
            if ask.exists():
                session_dir = ask.read_text()
                ask.unlink()
                Scheduler(os.path.join(session_dir, "scheduled-jobs.json"),
                          FakeClock(time.time() - 3600)).add("in 1m", "tick-once")
                (tmp_path / "job-added").write_text("")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


TRY_REFUSED = (
    "for f in (lambda: cron.add('in 1m', 'x'), lambda: goal.get()):\n"
    "    try:\n        f()\n    except Exception as e:\n        print('refused:', e)\n"
)


def call(code: str, **extra) -> dict:
    return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}],
            **extra}


# ~1,100 tokens of output (3,700 characters: within the 4,000-character output budget a
# 4,000-token window gets), just over the scaled keep-recent (1,000): a compaction after
# this cell has an older part to summarise
ROWS = "\nprint(' '.join(f'row{i}' for i in range(550)))"


def scenario(tmp_path: Path, *, goal: bool, crash: bool = True, refused: bool = False,
             read_x: str | None = None) -> list:
    big = {"usage": {"input_tokens": 5000, "output_tokens": 10}}
    # x comes from the task's data (a file the cell reads), so the 42 the run answers and
    # the goal's completion claim rest on data, not on a literal computation
    data = tmp_path / "x.txt"
    data.write_text("41")
    replies: list = [
        call(ROWS.strip()),
        call((read_x or f"x = int(open({str(data)!r}).read())") + ROWS + "\nprint(compact.run('keep x'))"),
        call((TRY_REFUSED if refused else ADD_JOB.format(dir=str(tmp_path))) + ROWS, **big),
    ]
    if crash:
        replies.append(call("import os\nos._exit(1)"))
    replies.append(call("print(x + 1)\nfinal(str(x + 1))"))
    if goal:
        replies += [call("print(goal.complete('x + 1 is 42')['goal']['status'])"), "all done"]
    return replies


# the compaction model's replies (its own script: a split turn takes two calls)
SUMMARIES = [f"## Goal\nx holds 41 (summary {i})" for i in range(6)]


def summaries(tmp_path: Path) -> str:
    # no window of its own: compaction is sized to the session's model, never to this one
    return script(tmp_path, "summaries.json", SUMMARIES, window=None)


def entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def check(path: Path, *, goal: bool, crash: bool = True, schedule: bool = True) -> list[dict]:
    es = entries(path)
    triggers = [e["trigger"] for e in es if e["type"] == "compaction"]
    assert triggers == ["requested", "threshold"], triggers
    outputs = [str(e["message"].get("content")).strip() for e in es
               if e["type"] == "message" and e["message"]["role"] == "tool"]
    assert "42" in outputs, outputs  # x came back after the crash (or never left)
    ticks = [e for e in es if e.get("custom_type") in ("cron_prompt", "heartbeat_prompt")
             or (e["type"] == "message" and "tick-once" in str(e["message"].get("content")))]
    if schedule:
        assert len([t for t in ticks if "tick-once" in json.dumps(t)]) == 1, ticks
        jobs = json.loads((path.parent / "scheduled-jobs.json").read_text())
        assert [d["delivered"] for d in jobs["dispatches"]] == [True]
    if crash:
        restarts = [e for e in es if e["type"] == "message" and (e.get("cell") or {}).get("restart")]
        assert len(restarts) == 1
    if goal:
        assert any("<goal_context>" in str(e["message"].get("content")) for e in es
                   if e["type"] == "message" and e["message"]["role"] == "user")
        states = [e["data"]["goal"] for e in es if e.get("custom_type") == "thread_goal_state"]
        assert states[-1]["status"] == "complete"
    return es


def script(tmp_path: Path, name: str, replies: list, window: int | None = WINDOW) -> str:
    """A script that declares its model's window (None: the scripted default, 128,000)."""
    p = tmp_path / name
    p.write_text(json.dumps(replies if window is None else {"window": window, "replies": replies}))
    return f"script:{p}"


def rlm(*args: str, cwd: Path, stdin: str | None = None, check_rc: bool = True,
        home: Path | None = None, process: bool = False) -> subprocess.CompletedProcess:
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if home is not None:
        env["RLM_HOME"] = str(home)
    return rlmcli.rlm(*args, cwd=cwd, stdin=stdin, env=env, check=check_rc, process=process,
                      timeout=180)


def only_session(home: Path) -> Path:
    paths = sorted(home.glob("sessions/*/session.jsonl"))
    assert len(paths) == 1, paths
    return paths[0]


# ------------------------------------------------------------------------ CLI entries
def test_run(tmp_path, _isolated_home):
    s = script(tmp_path, "s.json", scenario(tmp_path, goal=True))
    out = rlm("run", "go", "--model", s, "--compaction-model", summaries(tmp_path),
              "--goal", "answer the question", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.splitlines()[-1])
    assert res["final"] == "all done"
    assert res["compaction"]["window"] == WINDOW  # the model's own, not a flag's
    check(only_session(_isolated_home), goal=True)


def test_chat_stdin_driven(tmp_path, _isolated_home):
    s = script(tmp_path, "s.json", scenario(tmp_path, goal=True))
    rlm("chat", "--model", s, "--compaction-model", summaries(tmp_path), cwd=tmp_path,
        stdin="/goal answer the question\ngo\n/exit\n")
    check(only_session(_isolated_home), goal=True)


def test_resume_uses_the_recorded_options(tmp_path, _isolated_home):
    s = script(tmp_path, "s.json", scenario(tmp_path, goal=True))
    options = app.RunOptions(overrides={"model": s, "compaction_model": summaries(tmp_path)},
                             goal="answer the question")
    session = created(options)
    rlm("resume", session.id, "go", cwd=tmp_path)  # no flags: the recorded models apply
    check(session.path, goal=True)


def created(options: app.RunOptions, task: str = "earlier task"):
    """A session created (options recorded, goal set) as `rlm run` creates it."""
    with app.SessionRun.new("run", task, options, build=False) as run:
        assert run.session is not None
        return run.session


def test_detach_runs_in_a_real_worker(tmp_path, _isolated_home):
    """`rlm run --detach`: a worker process assembles the recorded run (no flag but the
    models and the goal), on the model's own window."""
    s = script(tmp_path, "s.json", scenario(tmp_path, goal=True) + ["tick handled"])
    out = rlm("run", "go", "--detach", "--model", s, "--compaction-model", summaries(tmp_path),
              "--goal", "answer the question", "--json", cwd=tmp_path,
              process=True)  # --detach: its own process, as a user's shell starts it
    res = json.loads(out.stdout.splitlines()[-1])
    try:
        rlm("attach", res["session_id"], cwd=tmp_path)  # returns when the worker's run ends
        check(Path(res["session_path"]), goal=True, schedule=False)  # ticks: the worker test
    finally:
        rlm("stop", res["session_id"], cwd=tmp_path, check_rc=False)


def test_compact_uses_the_recorded_models_and_the_models_window(tmp_path, _isolated_home):
    """`rlm compact SESSION` with no flag: the summary comes from the compaction model the
    run recorded, sized to the session model's window (4,000: keep-recent 1,000), not to
    the summary model's (128,000: nothing would be old enough to summarise)."""
    big = "print(' '.join(f'row{i}' for i in range(300)))"
    s = script(tmp_path, "s.json", [call(big), call(big), call("print('done')\nfinal('done')")])
    out = rlm("run", "go", "--model", s, "--compaction-model", summaries(tmp_path), "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.splitlines()[-1])
    assert not [e for e in entries(Path(res["session_path"])) if e["type"] == "compaction"]
    done = rlm("compact", res["session_id"], "--json", cwd=tmp_path)
    summary = json.loads(done.stdout)["summary"]
    assert SUMMARIES[0] in summary, summary  # the recorded compaction model wrote it
    [entry] = [e for e in entries(Path(res["session_path"])) if e["type"] == "compaction"]
    assert entry["trigger"] == "manual"


# --------------------------------------------------------------- in-process entries
def test_worker_assembles_the_recorded_run(tmp_path, _isolated_home):
    from rlm.longrun.worker import Worker, send_prompt

    # the worker delivers a follow-up tick as a run of its own, after the prompt's run
    s = script(tmp_path, "s.json", scenario(tmp_path, goal=True) + ["tick handled"])
    session = created(app.RunOptions(overrides={"model": s, "compaction_model": summaries(tmp_path)},
                                     goal="answer the question"), "t")
    send_prompt(session.id, "go", _isolated_home)
    w = Worker(session.id, load_config(), runner_factory=app.agent_runner, home=_isolated_home)
    w.start()
    try:
        w.step()  # the prompt: one run, the goal continued inside it
        w.step()  # the one-shot job that fell due meanwhile
    finally:
        w.close()
    check(session.path, goal=True)


def test_run_task_continues_its_goal(tmp_path, _isolated_home):
    s = script(tmp_path, "s.json", scenario(tmp_path, goal=True))
    cfg = load_config(model=s, compaction_model=summaries(tmp_path))
    res = app.run_task("go", config=cfg, options=app.RunOptions(goal="answer the question"))
    assert res.final == "all done"  # the goal continued the run past its first answer
    check(Path(res.session_path), goal=True)


def test_rlm_query_child_gets_compaction_and_refuses_goals_and_schedules(tmp_path, _isolated_home):
    parent = script(tmp_path, "p.json", [call("print(rlm_query('child task'))"),
                                         call("final('parent done')")])
    child = script(tmp_path, "c.json", scenario(tmp_path, goal=False, refused=True))
    cfg = load_config(model=parent, sub_model=child, compaction_model=summaries(tmp_path))
    res = app.run_task("go", config=cfg)
    assert res.final == "parent done"
    kids = list(Path(res.session_path).parent.glob("children/*/session.jsonl"))
    assert len(kids) == 1
    es = check(kids[0], goal=False, schedule=False)
    out = "\n".join(str(e["message"].get("content")) for e in es if e["type"] == "message")
    assert app.GAPS["child"]["schedules"].message in out
    assert app.GAPS["child"]["goals"].message in out
    # the parent's cell got the child's answer
    assert "42" in "\n".join(str(e["message"].get("content")) for e in entries(
        Path(res.session_path)) if e["type"] == "message" and e["message"]["role"] == "tool")


def test_notebook_magic(tmp_path):
    from frontend import run
    from jupyter_client.manager import start_new_kernel

    # the user's own kernel runs cells without the kernel's line record (no file read is
    # seen there), so x comes from the other kind of task data: a sub-call's answer
    s = script(tmp_path, "s.json", scenario(tmp_path, goal=True, crash=False,
                                            read_x="x = int(llm_query('what is x?'))"))
    sub = script(tmp_path, "sub.json", ["41"], window=None)
    toml = tmp_path / "rlm.toml"
    toml.write_text(f"compaction_model = {summaries(tmp_path)!r}\nsub_model = {sub!r}\n")
    from rlm import trust

    trust.allow_file(toml)  # `rlm goal` below reads it as ./rlm.toml: a script: model path
    home = tmp_path / "home"
    env = {**os.environ, "RLM_HOME": str(home), "RLM_CONFIG": str(toml),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tmp_path))
    try:
        run(kc, "%load_ext rlm")
        # --verbose: the notes every %%rlm session has (its gaps) are said on request
        msgs = run(kc, f"%%rlm --model {s} --max-turns 10 --verbose "
                   "--goal 'answer the question'\ngo", timeout=120)
        # the kernel holds the session: a second writer is refused, naming it
        sid = only_session(home).parent.name
        refused = rlm("goal", sid, "set", "other", cwd=tmp_path, check_rc=False,
                      home=home)
        assert refused.returncode == 4 and "a notebook kernel (%%rlm)" in refused.stderr
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    shown = "\n".join(c["data"].get("text/markdown", "") for t, c in msgs
                      if t == "display_data")
    # the gap is told, not skipped: this kernel has no snapshot to restore
    assert app.GAPS["notebook"]["snapshot"].message in shown
    assert "**Final answer:**\n\nall done" in shown
    check(only_session(home), goal=True, crash=False)


def test_every_entry_point_and_feature_is_in_the_table():
    table = app.feature_table()
    assert set(table) == set(app.ENTRY_POINTS)
    for row in table.values():
        assert set(row) == set(app.FEATURES)
    assert table["notebook"]["snapshot"].startswith("no: ")
    assert table["child"]["goals"].startswith("no: ")
    assert table["run"] == dict.fromkeys(app.FEATURES, "yes")
