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

SETUP = "rows = [1, 2, 3]\ngen = (v * 10 for v in rows)\nfirst = next(gen)"
DESTRUCTIVE = "import os\nos.makedirs('made', exist_ok=True)\nstamp = (i for i in range(2))\nfinal('ok')"
CHECK = "final(str(next(gen)))"
PEEK = "final(str('gen' in dir()))"


def _restored(path: Path) -> dict:
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return [e for e in entries if e.get("custom_type") == "kernel_restored"][-1]


def test_resume_announces_the_replay_and_no_replay_turns_it_off(tmp_path):
    out = rlm("run", "set up", "--model", script(tmp_path / "one.json", [call(SETUP), call(DESTRUCTIVE)]), "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    sid, path = res["session_id"], Path(res["session_path"])

    off = rlm("resume", sid, "peek", "--no-replay", "--model",
              script(tmp_path / "two.json", [call(PEEK)]), "--json", cwd=tmp_path)
    assert json.loads(off.stdout.strip().splitlines()[-1])["final"] == "False"
    assert "rlm: replay is off (--no-replay): not re-running 1 recorded cell(s) that would " \
           "rebuild gen: [0] rows = [1, 2, 3] …" in off.stderr
    rep = _restored(path)
    assert rep["data"]["replay_off"] is True and rep["data"]["rebuilt"] == {}
    assert "Replay was off for this run (--no-replay): no recorded cell was re-run." in rep["content"]

    on = rlm("resume", sid, "check", "--replay", "--model",
             script(tmp_path / "three.json", [call(CHECK)]), "--json", cwd=tmp_path)
    assert json.loads(on.stdout.strip().splitlines()[-1])["final"] == "20"
    line = [ln for ln in on.stderr.splitlines() if ln.startswith("rlm: ") and "re-running" in ln]
    assert line == ["rlm: rebuilding gen by re-running 1 recorded cell(s) (only cells known to stay "
                    "in the kernel; --no-replay turns this off): [0] rows = [1, 2, 3] …"], on.stderr
    rep = _restored(path)
    assert rep["data"]["rebuilt"] == {"gen": [0]}
    assert "Cells re-run: [0] rows = [1, 2, 3] …." in rep["content"]
    assert "Not rebuilt by replay (only cells known to stay in the kernel are re-run; a cell that " \
           "writes files, runs commands or uses the network never is): stamp: cell 1 not replayed: " \
           in rep["content"]
    assert "imports os (not a pure data library)" in rep["data"]["not_replayed"]["stamp"]
