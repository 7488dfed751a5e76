"""`rlm run TASK --live NB.ipynb` (issue 61, part 1: the notebook file, no server).

The run is the user's: `python -m rlm run ... --live NB` in a subprocess, a script: model
whose first cell waits for a file the test creates once it has seen what it checks
mid-run (the running cell, its first output), so nothing here waits on a clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from rlm.notebook.live import LIVE, RUNNING_TAG, Op, fingerprint, plan
from tests.rlmcli import ANSWERED, call, rlm, script

SECRET = "sk-live-test-0123456789abcdef0123456789"
WAIT = ("import os, time\nprint('started', flush=True)\n"
        "while not os.path.exists('go'):\n    time.sleep(0.02)\nprint('done')")
REPLIES = [call(WAIT, "First I wait for the data."),
           call("x = 6 * 7\nprint(x)"),
           {"content": "FINAL(42)"}]
DEADLINE_S = 120  # how long a mid-run state may take to appear before the test fails


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and k not in ("RLM_JUPYTER_URL", "JUPYTER_TOKEN")}
    env["RLM_HOME"] = str(home)
    # no Jupyter server of the user's is found: the file, always (tests/test_live_collab.py)
    env["JUPYTER_RUNTIME_DIR"] = str(home / "jupyter-runtime")
    return env


def _start(tmp_path: Path, nb: str, replies: list, env: dict | None = None
           ) -> subprocess.Popen:
    model = script(tmp_path / "replies.json", replies)
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "rlm", "run", "compute it", "--live", nb, "--model", model],
        cwd=tmp_path, env={**_env(tmp_path / "home"), **(env or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _cells(path: Path) -> list:
    try:
        return nbformat.read(path, as_version=4).cells
    except (OSError, ValueError):  # not written yet
        return []


def _until(what: str, check, proc: subprocess.Popen):
    """Poll the notebook's state until `check()` holds (the run's own progress is the
    event); fail with the run's stderr if it ends first or never gets there."""
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {what}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no {what} within {DEADLINE_S} s")


def _running(path: Path):
    cells = [c for c in _cells(path) if c.metadata.get(LIVE, {}).get("status") == "running"]
    return cells[0] if cells and cells[0].outputs else None


def _finish(proc: subprocess.Popen, tmp_path: Path) -> tuple[int, str, str]:
    (tmp_path / "go").touch()
    out, err = proc.communicate(timeout=DEADLINE_S)
    return proc.returncode, out, err


def test_cells_appear_as_they_run_the_user_cells_stay_and_it_reruns(tmp_path):
    nb_path = tmp_path / "analysis.ipynb"
    mine = [new_markdown_cell("# My analysis", id="mine-1"),
            new_code_cell("y = 1  # my own cell", id="mine-2")]
    nbformat.write(new_notebook(cells=mine), nb_path)
    proc = _start(tmp_path, "analysis.ipynb", REPLIES)
    running = _until("a running cell with its first output", lambda: _running(nb_path), proc)
    assert running.source == WAIT and RUNNING_TAG in running.metadata["tags"]
    assert running.outputs[0].text == "started\n"  # printed so far, before the cell ends
    cells = _cells(nb_path)
    assert [c.id for c in cells[:2]] == ["mine-1", "mine-2"]  # the user's, first, unchanged
    assert cells[1].source == "y = 1  # my own cell"

    # a second live run on the same notebook is refused, in one line, before it starts
    second = rlm("run", "again", "--live", "analysis.ipynb", "--model",
                 script(tmp_path / "other.json", [{"content": "FINAL(1)"}]),
                 cwd=tmp_path, env={"RLM_HOME": str(tmp_path / "home2")})
    assert second.returncode == 1
    assert "already live for another run" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1

    code, _, err = _finish(proc, tmp_path)
    assert code in ANSWERED, err
    cells = _cells(nb_path)
    assert [c.id for c in cells[:2]] == ["mine-1", "mine-2"]
    assert cells[1].source == "y = 1  # my own cell" and LIVE not in cells[1].metadata
    ours = cells[2:]
    assert all(c.metadata[LIVE]["session"] for c in ours)
    assert not any(RUNNING_TAG in c.metadata.get("tags", []) for c in cells)
    code_cells = [c for c in ours if c.cell_type == "code"]
    assert [c.source for c in code_cells] == [WAIT, "x = 6 * 7\nprint(x)"]
    assert "".join(o.text for o in code_cells[0].outputs) == "started\ndone\n"
    assert ours[0].source == "**Task:** compute it"
    assert ours[-1].source.startswith("**Final answer:** 42")
    # the record re-runs like an export, offline
    nb = nbformat.read(nb_path, as_version=4)
    NotebookClient(nb, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    rerun = [c for c in nb.cells if c.cell_type == "code"]
    assert rerun[-1].outputs[0].text == "42\n"


def test_a_change_made_outside_rlm_is_not_overwritten(tmp_path):
    nb_path = tmp_path / "watched.ipynb"  # created by the run
    proc = _start(tmp_path, "watched.ipynb", REPLIES)
    _until("a running cell", lambda: _running(nb_path), proc)
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells.append(new_markdown_cell("my note, typed while it ran", id="typed"))
    nbformat.write(nb, nb_path)
    mine = nb_path.read_bytes()
    code, _, err = _finish(proc, tmp_path)
    assert code in ANSWERED, err
    assert nb_path.read_bytes() == mine  # nothing rlm would have written replaced it
    assert "changed outside rlm since rlm last wrote it" in err
    assert "rlm export" in err  # and how to get the whole record


def test_secrets_never_reach_the_notebook(tmp_path):
    nb_path = tmp_path / "s.ipynb"
    replies = [call(f"key = {SECRET!r}\n" + WAIT.replace("'started'", "key"),
                    f"The key is {SECRET}."),
               {"content": f"FINAL({SECRET})"}]
    proc = _start(tmp_path, "s.ipynb", replies, env={"OPENAI_API_KEY": SECRET})
    running = _until("a running cell with its output", lambda: _running(nb_path), proc)
    assert SECRET not in nb_path.read_text()
    assert "sk-live" not in json.dumps(running)
    code, _, err = _finish(proc, tmp_path)
    assert code in (*ANSWERED, 3), err
    text = nb_path.read_text()
    assert SECRET not in text and "The key is" in text


def test_refusals_are_one_line_and_touch_nothing(tmp_path):
    model = script(tmp_path / "r.json", [{"content": "FINAL(1)"}])
    env = {"RLM_HOME": str(tmp_path / "home")}
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{ not a notebook")
    r = rlm("run", "t", "--live", "bad.ipynb", "--model", model, cwd=tmp_path, env=env)
    assert r.returncode == 1 and "is not a notebook nbformat can read" in r.stderr
    assert bad.read_text() == "{ not a notebook"
    (tmp_path / "link.ipynb").symlink_to(tmp_path / "elsewhere.ipynb")
    r = rlm("run", "t", "--live", "link.ipynb", "--model", model, cwd=tmp_path, env=env)
    assert r.returncode == 1 and "is a symbolic link" in r.stderr
    assert not (tmp_path / "elsewhere.ipynb").exists()
    r = rlm("run", "t", "--live", "nb.ipynb", "--detach", "--model", model, cwd=tmp_path,
            env=env)
    assert r.returncode == 1 and "--live" in r.stderr and not (tmp_path / "nb.ipynb").exists()


# ---------------------------------------------------------------- plan, on its own
def _ours(key: str, source: str = "x", session: str = "S") -> dict:
    cell = new_code_cell(source, id=key)
    cell.metadata[LIVE] = {"session": session, "id": key}
    return cell


def _apply(cells: list, ops: list[Op]) -> list:
    from rlm.notebook.live import apply

    cells = list(cells)
    apply(cells, ops)
    return cells


def test_plan_keeps_the_users_cells_edits_and_deletions():
    user = new_markdown_cell("mine", id="u")
    a, b = _ours("a", "1"), _ours("b", "2")
    current = [a, user, b]  # the user put a cell between two of rlm's
    written = {"a": fingerprint(a), "b": fingerprint(b), "gone": fingerprint(_ours("gone"))}
    ours = [_ours("a", "1"), _ours("gone"), _ours("b", "2 changed"), _ours("c", "3")]
    out = _apply(current, plan(current, ours, "S", written))
    assert [c.id for c in out] == ["a", "u", "b", "c"]  # "gone" the user deleted: not back
    assert out[2].source == "2 changed"  # rlm's own, unedited: updated in place
    edited = _ours("b", "the user's edit")
    current = [a, user, edited]
    out = _apply(current, plan(current, ours, "S", written))
    assert out[2].source == "the user's edit"  # edited by the user: theirs now
    assert [c.id for c in out] == ["a", "u", "b", "c"]


def test_plan_places_a_new_cell_after_the_one_before_it_and_drops_its_stale_ones():
    user = new_markdown_cell("mine", id="u")
    other = _ours("a", "another session's", session="T")
    current = [user, _ours("task"), other]
    written = {"task": fingerprint(_ours("task"))}
    ours = [_ours("prelude", "p"), _ours("a", "1"), _ours("b", "2")]
    out = _apply(current, plan(current, ours, "S", written))
    # the stale task line is gone; the prelude goes before rlm's first cell (none left:
    # the end); the other session's cell is the user's, untouched
    assert [(c.metadata.get(LIVE, {}).get("id"), c.metadata.get(LIVE, {}).get("session"))
            for c in out] == [(None, None), ("a", "T"), ("prelude", "S"), ("a", "S"),
                              ("b", "S")]
    assert len({c.id for c in out}) == len(out)  # this run's "a" got an id of its own
    assert plan(out, ours, "S", {}) == []  # applied: nothing left to do


# ---------------------------------------------------------------- rlm attach --live
def _attach(tmp_path: Path, sid: str, nb: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "rlm", "attach", sid, "--live", nb, *flags],
        cwd=tmp_path, env=_env(tmp_path / "home"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _detach(tmp_path: Path, replies: list, *flags: str) -> str:
    out = rlm("run", "compute it", "--detach", "--json", "--model",
              script(tmp_path / "replies.json", replies), *flags, cwd=tmp_path,
              env={"RLM_HOME": str(tmp_path / "home")}, process=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["session_id"]


def test_attach_live_shows_a_detached_workers_run_as_it_goes(tmp_path):
    sid = _detach(tmp_path, REPLIES)
    nb_path = tmp_path / "worker.ipynb"
    proc = _attach(tmp_path, sid, "worker.ipynb")
    running = _until("the worker's running cell", lambda: _running(nb_path), proc)
    assert running.source == WAIT and running.outputs[0].text == "started\n"
    code, _, err = _finish(proc, tmp_path)  # attach returns when the worker's run ends
    assert code == 0, err
    cells = _cells(nb_path)
    assert [c.source for c in cells if c.cell_type == "code"] == [WAIT, "x = 6 * 7\nprint(x)"]
    assert cells[-1].source.startswith("**Final answer:** 42")
    assert not any(RUNNING_TAG in c.metadata.get("tags", []) for c in cells)
    assert not (tmp_path / ".worker.ipynb.rlm-live").exists()  # the lock went with it
    rlm("stop", sid, cwd=tmp_path, env={"RLM_HOME": str(tmp_path / "home")})


def test_attach_follow_live_adds_the_runs_a_heartbeat_fires(tmp_path):
    """An autonomous detached run, then a heartbeat: the run it fires lands in the same
    notebook, after the first run's cells, while `rlm attach --follow --live` follows."""
    replies = [call("x = 6 * 7\nprint(x)"), {"content": "FINAL(42)"},
               call("print('the heartbeat looked again', x)"), {"content": "FINAL(still 42)"}]
    sid = _detach(tmp_path, replies, "--autonomous")
    env = {"RLM_HOME": str(tmp_path / "home")}
    rlm("heartbeat", sid, "every", "10s", "look again", cwd=tmp_path, env=env, check=True)
    nb_path = tmp_path / "beats.ipynb"
    proc = _attach(tmp_path, sid, "beats.ipynb", "--follow")

    def beat_done():
        cells = _cells(nb_path)
        return cells if any("still 42" in c.source for c in cells) else None

    cells = _until("the heartbeat's run", beat_done, proc)
    rlm("stop", sid, cwd=tmp_path, env=env)
    proc.communicate(timeout=DEADLINE_S)
    code = [c for c in cells if c.cell_type == "code"
            and "rlm-prelude" not in c.metadata.get("tags", [])]
    assert [c.source for c in code] == ["x = 6 * 7\nprint(x)",
                                        "print('the heartbeat looked again', x)"]
    beat = code[1]
    assert beat.outputs[0].text == "the heartbeat looked again 42\n"


# ---------------------------------------------------------------- the view, on its own
def _view(tmp_path: Path, branch, said: list[str]):
    from rlm.notebook.live import LiveView
    from rlm.session.store import SessionStore

    store = SessionStore.in_memory(model="m", task="the task")
    return store, LiveView(tmp_path / "v.ipynb", store.header, tmp_path,
                           branch or store.branch, said.append)


def test_a_cell_printing_without_end_holds_a_bounded_view(tmp_path):
    from rlm.events import CellOutput, CellStarted
    from rlm.notebook.live import STREAM_CAP
    from rlm.session.entries import MessageEntry

    said: list[str] = []
    store, view = _view(tmp_path, None, said)
    store.append(MessageEntry(message={"role": "user", "content": "the task"}))
    store.append(MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "python", "arguments": json.dumps({"code": "spam()"})}}]}))
    view(CellStarted("spam()", 0))
    chunk = "x" * 1_000_000
    for _ in range(100):  # 100 MB printed
        view(CellOutput(chunk))
    assert view.cells._printed_chars <= STREAM_CAP + 1
    view.flush()
    running = [c for c in _cells(tmp_path / "v.ipynb") if RUNNING_TAG in c.metadata.get("tags", [])]
    text = running[0].outputs[0].text
    assert len(text) < STREAM_CAP + 200 and text.endswith("appears when the cell ends]\n")
    view.close()
    assert said == []


def test_a_view_that_fails_says_so_once_and_never_stops_the_run(tmp_path):
    from rlm.events import CellFinished, CellStarted

    calls = {"n": 0}

    def broken():
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError("the disk is gone")
        return []

    said: list[str] = []
    _, view = _view(tmp_path, broken, said)
    view(CellStarted("1 + 1", 0))  # raises inside: the view stops, the event returns
    view(CellFinished("1 + 1", "ok", "2", 0.1))
    view.close()
    assert len(said) == 1 and "stopped updating: the disk is gone" in said[0]


def test_chat_live_shows_each_prompts_run(tmp_path):
    replies = [call("x = 6 * 7\nprint(x)"), {"content": "FINAL(42)"},
               call("print(x + 1)"), {"content": "FINAL(43)"}]
    r = rlm("chat", "--live", "chat.ipynb", "--model", script(tmp_path / "c.json", replies),
            cwd=tmp_path, env={"RLM_HOME": str(tmp_path / "home")},
            stdin="compute it\nand one more\n/exit\n")
    assert r.returncode == 0, r.stderr
    cells = _cells(tmp_path / "chat.ipynb")
    assert [c.source for c in cells if c.cell_type == "code"] == ["x = 6 * 7\nprint(x)",
                                                                  "print(x + 1)"]
    md = [c.source for c in cells if c.cell_type == "markdown"]
    assert md[0] == "**Task:** compute it" and "**User:** and one more" in md
    assert md[-1].startswith("**Final answer:** 43")
    assert not (tmp_path / ".chat.ipynb.rlm-live").exists()


def test_resume_live_continues_the_same_notebook(tmp_path):
    replies = [call("x = 6 * 7\nprint(x)"), {"content": "FINAL(42)"},
               call("print(x + 1)"), {"content": "FINAL(43)"}]
    env = {"RLM_HOME": str(tmp_path / "home")}
    model = script(tmp_path / "c.json", replies[:2])
    first = rlm("run", "compute it", "--live", "r.ipynb", "--model", model, "--json",
                cwd=tmp_path, env=env, check=True)
    sid = json.loads(first.stdout.strip().splitlines()[-1])["session_id"]
    before = _cells(tmp_path / "r.ipynb")
    nb = nbformat.read(tmp_path / "r.ipynb", as_version=4)  # the user adds a cell between runs
    nb.cells.append(new_markdown_cell("checked: 42 is right", id="between"))
    nbformat.write(nb, tmp_path / "r.ipynb")
    rlm("resume", sid, "and one more", "--live", "r.ipynb", "--model",
        script(tmp_path / "d.json", replies[2:]), cwd=tmp_path, env=env, check=True)
    after = _cells(tmp_path / "r.ipynb")
    assert [c.id for c in after[:len(before)]] == [c.id for c in before]  # nothing moved
    assert after[len(before)].id == "between"
    assert [c.source for c in after if c.cell_type == "code"] == ["x = 6 * 7\nprint(x)",
                                                                  "print(x + 1)"]
    assert after[-1].source.startswith("**Final answer:** 43")
