"""Rebuild by replay: names that cannot be pickled (a generator, a sqlite3 connection, a
value holding them; open files already come back through dill) come back by re-running the recorded cells that defined
them; a cell with an effect outside the kernel is reported and not re-run."""

from __future__ import annotations

import json

from kernel_ext import snapshot
from kernel_ext.lineage import cell_record, replay_plan
from tests.snapshot_shell import run  # the `shell` fixture comes from conftest


def test_cell_record_reads_binds_mutations_and_effects():
    r = cell_record("import os\nf = open(p)\nline = f.readline()\nd['k'] = 1\nfor x in it:\n    pass\n"
                    "df.to_csv('out.csv')\nos.remove('x')\ny = llm_query('hi')")
    assert {"p", "f", "d", "it", "df"} <= set(r["reads"]) and "open" not in r["reads"]
    assert {"f", "line", "x", "y", "os"} <= set(r["binds"])
    assert {"f", "d"} <= set(r["mutates"]) and r["iterates"] == ["it"]
    assert r["effects"] == ["imports os (not a pure data library)", "llm_query() calls a sub-model",
                            "to_csv() writes a file"]
    assert cell_record("s = t.replace('a', 'b')\nc = df.copy()\nxs.remove(3)\nv = df.to_csv()")["effects"] == []
    assert cell_record("log = open('x.log', 'a')")["effects"] == ["opens a file for writing (mode 'a')"]
    assert cell_record("c.execute('select 1')")["effects"] == []
    assert cell_record("c.execute('select 1')")["db_uses"] == ["c"]  # the planner checks what c is


def test_function_bodies_are_not_read_when_the_cell_runs():
    r = cell_record("def f(v, k=K):\n    return v * g + helper(v)\nh = lambda z: z + w")
    assert r["reads"] == ["K"] and r["binds"] == ["f", "h"]


def test_plan_takes_definitions_mutations_and_inputs_in_order():
    recs = [cell_record(c) for c in ("src = [1, 2]", "g = iter(src)", "n = 5", "next(g)",
                                     "total = n + 1", "g2 = g")]
    order, rebuilt, why = replay_plan(["g2"], recs, present={"src", "n", "total"})
    assert order == [1, 3, 5] and rebuilt == {"g2": [1, 3, 5]} and why == {}
    order, _, why = replay_plan(["g"], recs, present={"n", "total", "g2"})
    assert order == [0, 1, 3]
    recs.append(cell_record("src.append(3)\nh = iter(src)"))
    _, _, why = replay_plan(["h"], recs, present={"src", "n", "total", "g", "g2"})
    assert why == {"h": "cell 6 not replayed: it changes src, restored from the snapshot"}


def test_generator_file_and_connection_rebuilt_after_restart(shell, tmp_path):
    txt = tmp_path / "notes.txt"
    txt.write_text("header\nbody\n")
    out = tmp_path / "elsewhere.txt"
    run(shell, "import sqlite3\ndb = sqlite3.connect(':memory:')\ndb.execute('create table t (v int)')\n"
               "db.executemany('insert into t values (?)', [(1,), (2,), (3,)])\n"
               "rows = [r[0] for r in db.execute('select v from t')]")
    run(shell, "gen = (v * 2 for v in rows)\nfirst = next(gen)")
    run(shell, f"fh = open({str(txt)!r})\nheader = fh.readline()")
    run(shell, "both = [fh, gen]")
    run(shell, f"with open({str(out)!r}, 'w') as f:\n    f.write('x')\nletters = (c for c in 'ab')")
    snapshot.uninstall(shell)
    shell.reset(new_session=False)
    snapshot.install(shell)
    report = json.loads(snapshot.restore_report_json(shell))
    assert {"rows", "first", "header"} <= set(report["restored"])
    lost_before = {d["name"] for d in report["skipped"]}
    assert {"db", "gen", "both", "letters"} <= lost_before and "fh" in report["restored"]
    rebuilt = json.loads(snapshot.rebuild_json(shell))
    assert rebuilt["rebuilt"] == {"db": [0], "gen": [1], "both": [1, 3]}
    skipped = "cell 4 not replayed: opens a file for writing (mode 'w'); write() acts outside the kernel (writes, runs or sends)"
    assert rebuilt["lost"] == {"letters": skipped, "f": skipped}
    ns = shell.user_ns
    assert next(ns["gen"]) == 4 and ns["fh"].read() == "body\n" and ns["both"][0] is ns["fh"]
    assert ns["db"].execute("select count(*) from t").fetchone() == (3,)
    assert out.read_text() == "x"  # the effect was not repeated, the file not truncated
    assert "closed file" in {d["name"]: d["reason"] for d in report["skipped"]}["f"]
    ns["fh"].close()
