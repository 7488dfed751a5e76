"""Data dependence, the ground of "verified" (issue 58 item 3): the kernel's line record
(kernel_ext.provenance) through a real run, and the flow of data through names
(rlm.agent.policy.dataflow) on its own."""

from __future__ import annotations

import json
from pathlib import Path

from rlmcli import call, rlm, script

from rlm.agent.policy.dataflow import DataFlow

CELL = """import pandas as pd
open('d.csv', 'w').write('a,b\\n1,2\\n3,4\\n')
df = pd.read_csv('d.csv')
print(df.a.sum())
print(999 + 1)
def f():
    print('inside', 77)
f()
exec("print('exec', 55)")
df.b.max()"""


def test_the_kernel_says_which_line_read_and_what_each_line_said(tmp_path, _isolated_home):
    s = script(tmp_path / "s.json", [call(CELL), {"content": "FINAL(4)"}])
    out = rlm("run", "sum of a?", "--model", s, "--json", cwd=tmp_path)
    path = Path(json.loads(out.stdout.strip().splitlines()[-1])["session_path"])
    cells = [json.loads(line).get("cell") for line in path.read_text().splitlines()[1:]]
    record = next(c["provenance"] for c in cells if c)
    assert record["read"] == [3]  # the write on line 2 is not a read
    said = record["said"]
    assert said["4"] == ["4"] and said["5"] == ["1000"]
    assert said["8"] == ["77", "inside"]  # a function's print is its caller's line
    assert said["9"] == ["55", "exec"]  # so is exec()'s
    assert "4" in said["10"]  # the cell's value, displayed
    assert record["partial"] == []


def test_data_flows_through_names_and_literals_do_not():
    record = {"read": [1], "said": {"1": [], "2": ["6"], "3": ["1000"], "4": ["12"]},
              "partial": []}
    flow = DataFlow({"orders"})
    cell = flow.cell("rows = open('f').read()\nprint(len(rows))\nprint(999 + 1)\n"
                     "print(len(orders) * 2)", record)
    assert cell.depends and cell.evidence is not None
    assert "1000" not in cell.evidence.split() and {"6", "12"} <= set(cell.evidence.split())
    assert "rows" in flow.derived
    # a literal rebinding takes data away; += keeps it; a function over data holds data
    flow.cell("rows = 5", None)
    assert "rows" not in flow.derived
    flow.cell("n = len(orders)\nn += 1\ndef g():\n    return orders\nm = 3\nm += 1", None)
    assert {"n", "g"} <= flow.derived and "m" not in flow.derived
    # no line record (an older kernel): the cell counts whole when it depends on data
    whole = flow.cell("print(n, 999 + 1)", None)
    assert whole.depends and whole.evidence is None
    assert not flow.cell("print(999 + 1)", None).depends
    # a sub-call's answer is data; final() on data, final_var of a data name
    assert flow.cell("a = llm_query('how many?')\nfinal(a)", None).final_depends
    assert flow.cell("final_var('n')", None).final_depends
    assert not flow.cell("final(1000)", None).final_depends
