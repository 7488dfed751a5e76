"""`rlm run` then `rlm state` and `rlm resume` in new processes: the listing carries each
name's summary and what it shares; the resumed kernel keeps identity and the model's
restore notice says what each name is."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_cli import call, rlm, script  # noqa: E402

pytestmark = pytest.mark.timeout(300)

# the task's data is sales.csv (an answer is verified only from it: issue 58)
SETUP = ("import pandas as pd\nsales = pd.read_csv('sales.csv')\n"
         "alias = sales\nby_name = {'sales': sales}\nrows = sales.units.tolist()\n"
         "holder = {'r': rows}\nfinal('ok')")
CHECK = ("rows.append(3)\n"
         "final(f\"{alias is sales} {by_name['sales'] is sales} {holder['r']}\")")


def test_state_and_resume_keep_identity_and_describe(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # `rlm state` fits 80 columns by default: room
    (tmp_path / "sales.csv").write_text("units,price\n3,1.5\n5,2.0\n")
    out = rlm("run", "set up", "--model", script(tmp_path / "one.json", [call(SETUP)]), "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    sid, path = res["session_id"], Path(res["session_path"])

    text = rlm("state", sid, cwd=tmp_path).stdout
    assert "DataFrame 2 rows x 2 cols: units int64, price float64" in text
    state = json.loads(rlm("state", sid, "--json", cwd=tmp_path).stdout)
    by = {n["name"]: n for n in state["names"]}
    assert by["sales"]["shares"] == ["alias", "by_name"] and by["rows"]["shares"] == ["holder"]

    out2 = rlm("resume", sid, "check", "--model", script(tmp_path / "two.json", [call(CHECK)]),
               "--json", cwd=tmp_path)
    assert json.loads(out2.stdout.strip().splitlines()[-1])["final"] == "True True [3, 5, 3]"
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    restored = [e for e in entries if e.get("custom_type") == "kernel_restored"][-1]
    assert "- sales: DataFrame 2 rows x 2 cols: units int64, price float64" in restored["content"]
