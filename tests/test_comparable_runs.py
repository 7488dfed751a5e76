"""Issue 60, "runs that can be compared": the same inputs give the model the same bytes.

A cell's spooled output and its artifacts were named with the time and a random id
(`cell-20261206-153215-1a2b3c4d-1.txt`), and the name reaches the model (a traceback's
"full traceback: artifacts/..."), so two runs of one task diverged from the first spooled
output on and no A/B comparison meant anything. Names are numbered per session now
(rlm.kernel.execution.CellTags). Real kernels, the CLI, scripted models.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlm.session.store import SessionStore
from tests.rlmcli import call, rlm, script

CELLS = [
    call("rows = open('sales.csv').read().splitlines()\n"
         "print('\\n'.join(r * 40 for r in rows * 200))"),  # long: spooled to artifacts/
    call("import pandas as pd\ndf = pd.read_csv('sales.csv')\ndf['nope'].sum()"),  # traceback
    call("final(str(df.units.sum()))"),
]


def _sent(tmp: Path, name: str) -> tuple[list[dict], Path]:
    """What the model is sent after a run of the task in its own folder and home."""
    work = tmp / name
    work.mkdir()
    (work / "sales.csv").write_text("region,units\neast,3\nwest,5\n")
    model = script(tmp / f"{name}.json", CELLS)
    out = rlm("run", "total units?", "--model", model, "--json", cwd=work,
              env={"RLM_HOME": str(work / "home")}, check=True)
    path = Path(json.loads(out.stdout.strip().splitlines()[-1])["session_path"])
    return SessionStore.open(path).messages(system_prompt="S", native_tools=True), path


def test_two_runs_of_one_task_send_the_model_the_same_bytes(tmp_path):
    first, path = _sent(tmp_path, "a")
    second, _ = _sent(tmp_path, "b")
    assert json.dumps(first) == json.dumps(second)
    said = json.dumps(first)
    assert "artifacts/cell-00002-1.txt" in said  # the name the model reads, numbered
    assert sorted(p.name for p in (path.parent / "artifacts").iterdir()) == \
        ["cell-00001.txt", "cell-00002-1.txt"]


def test_a_resumed_session_numbers_on_and_overwrites_nothing(tmp_path):
    _, path = _sent(tmp_path, "a")
    artifacts = path.parent / "artifacts"
    before = {p.name: p.read_bytes() for p in artifacts.iterdir()}
    again = script(tmp_path / "again.json", [call("df['nope2'].sum()"), call("final('x')")])
    rlm("resume", path.parent.name, "again", "--model", again, cwd=tmp_path / "a",
        env={"RLM_HOME": str(tmp_path / "a" / "home")}, check=True)
    after = {p.name: p.read_bytes() for p in artifacts.iterdir()}
    assert {k: after[k] for k in before} == before  # nothing overwritten
    assert sorted(set(after) - set(before)) == ["cell-00003-1.txt"]
