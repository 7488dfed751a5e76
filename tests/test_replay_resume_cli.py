"""`rlm resume` tells the user which recorded cells it re-runs before it runs them, and
`--no-replay` turns replay off (issue 26: the user is told before a resume replays
anything); the model's restore notice says what was rebuilt and what was not, and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_cli import call, rlm, script  # noqa: E402

pytestmark = pytest.mark.timeout(300)

# rows come from the task's data (rows.txt, written by each test), so the answer next(gen)
# gives rests on data
LOAD = "rows = [int(v) for v in open('rows.txt').read().split()]"  # cell 0: restored, not replayed
SETUP = "gen = (v * 10 for v in rows)\nfirst = next(gen)"  # cell 1: what replay rebuilds
FIRST = SETUP.splitlines()[0]  # how the replay names the cell
DESTRUCTIVE = "import os\nos.makedirs('made', exist_ok=True)\nstamp = (i for i in range(2))\nfinal('ok')"
CHECK = "final(str(next(gen)))"
PEEK = "final(str('gen' in dir()))"


def _restored(path: Path) -> dict:
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return [e for e in entries if e.get("custom_type") == "kernel_restored"][-1]


def test_resume_announces_the_replay_and_no_replay_turns_it_off(tmp_path):
    (tmp_path / "rows.txt").write_text("1 2 3")
    out = rlm("run", "set up", "--model", script(tmp_path / "one.json", [call(LOAD), call(SETUP), call(DESTRUCTIVE)]), "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    sid, path = res["session_id"], Path(res["session_path"])

    off = rlm("resume", sid, "peek", "--no-replay", "--model",
              script(tmp_path / "two.json", [call(PEEK)]), "--json", cwd=tmp_path)
    assert json.loads(off.stdout.strip().splitlines()[-1])["final"] == "False"
    assert "rlm: replay is off (--no-replay): not re-running 1 recorded cell(s) that would " \
           f"rebuild gen: [1] {FIRST} …" in off.stderr
    rep = _restored(path)
    assert rep["data"]["replay_off"] is True and rep["data"]["rebuilt"] == {}
    assert "Replay was off for this run (--no-replay): no recorded cell was re-run." in rep["content"]

    on = rlm("resume", sid, "check", "--replay", "--model",
             script(tmp_path / "three.json", [call(CHECK)]), "--json", cwd=tmp_path)
    assert json.loads(on.stdout.strip().splitlines()[-1])["final"] == "20"
    line = [ln for ln in on.stderr.splitlines() if ln.startswith("rlm: ") and "re-running" in ln]
    assert line == ["rlm: rebuilding gen by re-running 1 recorded cell(s) (only cells known to stay "
                    "in the kernel, under a read-only filesystem; --no-replay turns this off): "
                    f"[1] {FIRST} …"], on.stderr
    rep = _restored(path)
    assert rep["data"]["rebuilt"] == {"gen": [1]}
    assert f"Cells re-run: [1] {FIRST} …." in rep["content"]
    assert "Not rebuilt by replay (only cells known to stay in the kernel are re-run; a cell that " \
           "writes files, runs commands or uses the network never is): stamp: cell 2 not replayed: " \
           in rep["content"]
    assert "imports os (not a pure data library)" in rep["data"]["not_replayed"]["stamp"]


WRITES = ("open('victim.txt', 'w').write('written by the cell')\n"
          "__import__('subprocess').run(['sh', '-c', 'echo sh > victim2.txt'])\n"
          "gen = (x for x in range(3))\nprint('ok')")


def test_a_replayed_cell_cannot_write_even_when_the_planner_lets_it_through(tmp_path):
    """The planner is only a first filter; the guarantee is the mount (issue 57). Its
    verdict is forced here: the writing cell's record is stripped of its effects, as a
    planner gap (or a spelling nobody listed) would leave it. The resume re-runs it under
    a read-only filesystem: every write fails, from Python or from a shell it starts, the
    files are unchanged, and the name is reported lost with the reason. Without the
    sandbox the cell is not re-run at all, and the user is told why."""
    from rlm.kernel.runtime import sandbox_problem

    if sandbox_problem() is not None:
        pytest.skip(f"no sandbox here: {sandbox_problem()}")
    out = rlm("run", "set up", "--model", script(tmp_path / "one.json", [call(WRITES), {"content": "FINAL(ok)"}]),
              "--json", cwd=tmp_path)
    path = Path(json.loads(out.stdout.strip().splitlines()[-1])["session_path"])
    records = path.parent / "snapshot" / "cells.jsonl"
    forced = [{**json.loads(ln), "effects": [], "mutates": []}
              for ln in records.read_text().splitlines()]
    records.write_text("".join(json.dumps(r) + "\n" for r in forced))
    (tmp_path / "victim.txt").write_text("original")
    (tmp_path / "victim2.txt").write_text("original")

    on = rlm("resume", path.parent.name, "check", "--model",
             script(tmp_path / "two.json", [{"content": "FINAL(checked)"}]), cwd=tmp_path,
             check=False)  # exit 5: an answer no cell checked
    assert "rebuilding gen by re-running 1 recorded cell(s)" in on.stderr + on.stdout, on.stdout
    assert (tmp_path / "victim.txt").read_text() == "original"
    assert (tmp_path / "victim2.txt").read_text() == "original"
    rep = _restored(path)
    assert "gen" not in rep["data"]["rebuilt"]
    assert "Read-only file system" in rep["data"]["not_replayed"]["gen"], rep["data"]
    # after the replay the files are the kernel's again: the next cell writes
    after = rlm("resume", path.parent.name, "write", "--no-replay", "--model",
                script(tmp_path / "three.json", [call("open('after.txt', 'w').write('x')"),
                                                 {"content": "FINAL(done)"}]), cwd=tmp_path,
                check=False)
    assert (tmp_path / "after.txt").read_text() == "x", after.stderr[-2000:]

    off = rlm("resume", path.parent.name, "check", "--no-sandbox", "--replay", "--model",
              script(tmp_path / "four.json", [{"content": "FINAL(checked)"}]), cwd=tmp_path,
              check=False)
    assert "not re-running 1 recorded cell(s) that would rebuild gen: the kernel runs without " \
           "the sandbox" in off.stderr + off.stdout, off.stdout[-2000:]
    assert (tmp_path / "victim.txt").read_text() == "original"
