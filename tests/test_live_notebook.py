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
