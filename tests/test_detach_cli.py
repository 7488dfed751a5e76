"""`rlm run --detach`: the worker outlives the client (a process of its own, like a user's);
`rlm attach` shows its progress."""

from __future__ import annotations

import json
import time
from pathlib import Path

from test_cli import call, rlm, script


def test_detached_run_attach_ps_stop(tmp_path, _isolated_home):
    s = script(tmp_path / "a.json", [call("import time\nlabel = 'from the worker'\nprint(label)"),
                                     call("final(label)")])
    quiet = script(tmp_path / "advisor.json", ["", "", ""])  # an advisor that never advises
    out = rlm("run", "detached task", "--detach", "--model", s, "--advisor", quiet, "--json",
              cwd=tmp_path, process=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])  # the client has exited already
    sid, path = res["session_id"], Path(res["session_path"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and '"custom_type":"final"' not in path.read_text():
        time.sleep(0.3)
    assert '"custom_type":"final"' in path.read_text(), "the worker did not finish the task"

    shown = rlm("attach", sid, "--no-follow", cwd=tmp_path).stdout
    assert "from the worker" in shown and "label = 'from the worker'" in shown

    workers = json.loads(rlm("ps", "--json", cwd=tmp_path).stdout)
    mine = [w for w in workers if w.get("session_id") == sid]
    assert mine and mine[0]["alive"] is True
    assert mine[0]["advisor"]["health"].startswith("silent for")  # never "healthy"
    assert f"advisor of {sid}: silent for" in rlm("ps", cwd=tmp_path).stdout
    rlm("stop", sid, cwd=tmp_path)
    workers = json.loads(rlm("ps", "--json", cwd=tmp_path).stdout)
    assert not [w for w in workers if w.get("session_id") == sid and w.get("alive")]


def test_detached_run_with_a_goal_continues_until_it_is_complete(tmp_path, _isolated_home):
    """`--goal` reaches the worker: the goal is set before the first prompt, so the run
    goes on after its first answer until the model completes the goal."""
    said = tmp_path / "said.txt"  # the task's data: the answer and the goal's claim rest on it
    said.write_text("answered once")
    s = script(tmp_path / "g.json", [call(f"print(open({str(said)!r}).read())\n"
                                          "final('answered once')"),
                                     call("print(goal.complete('answered once')['goal']['status'])"),
                                     "all done"])
    out = rlm("run", "detached task", "--detach", "--goal", "answer twice", "--model", s,
              "--json", cwd=tmp_path, process=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    path = Path(res["session_path"])

    def goal_states() -> list[str]:
        return [json.loads(line)["data"]["goal"]["status"] for line in
                path.read_text().splitlines()[1:] if '"thread_goal_state"' in line]

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "complete" not in goal_states():
        time.sleep(0.3)
    assert goal_states()[0] == "active" and goal_states()[-1] == "complete"
    assert "<goal_context>" in path.read_text()  # the continuation told the model the goal
    rlm("stop", res["session_id"], cwd=tmp_path)


def test_a_worker_whose_session_directory_is_removed_exits_and_recreates_nothing(
        tmp_path, _isolated_home):
    """Issue 15.11 in the worker: an unsandboxed cell removes the session dir; the worker ends
    (it used to stay, and its status, events and jobs lock brought the directory back
    holding no session.jsonl)."""
    import os
    import select

    s = script(tmp_path / "d.json", [call("import os, shutil\nshutil.rmtree(os.environ['RLM_SESSION_DIR'])"),
                                     call("final('unreachable')")])
    # unsandboxed: the sandbox's kernel cannot remove its session (test_cli_disk)
    out = rlm("run", "t", "--detach", "--no-sandbox", "--model", s, "--json", cwd=tmp_path,
              process=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    try:
        fd = os.pidfd_open(res["worker_pid"])
    except ProcessLookupError:
        fd = None  # already gone
    if fd is not None:
        ready, _, _ = select.select([fd], [], [], 120)  # readable when the process exits
        os.close(fd)
        assert ready, "the worker is still running"
    assert not Path(res["session_path"]).parent.exists()
    workers = json.loads(rlm("ps", "--json", cwd=tmp_path).stdout)
    assert not [w for w in workers if w.get("session_id") == res["session_id"]]


def test_a_detached_run_works_from_a_directory_holding_an_rlm_folder(tmp_path, _isolated_home):
    """`python -m rlm worker` put the cwd first on sys.path: a folder named `rlm` in the
    user's working directory shadowed the package and the worker died at import. The
    worker is started with `-P` (no cwd on sys.path)."""
    (tmp_path / "rlm").mkdir()
    six = tmp_path / "six.txt"  # the task's data: the answer 42 rests on it
    six.write_text("6")
    s = script(tmp_path / "a.json", [call(f"print(int(open({str(six)!r}).read()) * 7)"),
                                     call("final('42')")])
    out = rlm("run", "t", "--detach", "--model", s, "--json", cwd=tmp_path, process=True)
    path = Path(json.loads(out.stdout.strip().splitlines()[-1])["session_path"])
    rlm("attach", path.parent.name, cwd=tmp_path)  # returns when the worker's run has ended
    assert '"custom_type":"final"' in path.read_text(), (path.parent / "worker.log").read_text()
    rlm("stop", path.parent.name, cwd=tmp_path)
